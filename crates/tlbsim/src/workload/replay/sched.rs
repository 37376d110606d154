//! Waits and wakes between replayed tasks: the recorded CPU hand-overs
//! (a task does not resume before the one that left its CPU has reached
//! that point), runnable waits, and recorded sleeps and wakes (counted,
//! so that a wake that comes first is not lost).

use super::Shared;
use crate::kernel::hrtimer::schedule_hrtimeout;
use crate::kernel::sched::{block_until_woken, wake_up};
use crate::kernel::Ctx;
use crate::trace::{EventKind, Trace};
use std::collections::BTreeMap;

/// The recorded CPU hand-overs: for each `run` event of a task on CPU c
/// at time t, the event (`preempt`, `block` or `exit`) by which another
/// task left CPU c at the same t, if any (the two halves of one
/// `sched_switch`). Replaying them as waits (the task does not resume
/// before the other has reached that point) keeps the recorded order of
/// tasks sharing a CPU, without timers.
pub(super) fn handoffs(t: &Trace) -> BTreeMap<usize, usize> {
    let mut on_cpu: BTreeMap<u32, u32> = BTreeMap::new(); // tid → CPU
    let mut left: BTreeMap<u32, (u64, usize, u32)> = BTreeMap::new(); // CPU → (t, event, tid)
    let mut out = BTreeMap::new();
    for (i, e) in t.events.iter().enumerate() {
        match e.kind {
            EventKind::Run { cpu } => {
                if let Some(&(lt, j, ltid)) = left.get(&cpu) {
                    if lt == e.t_ns && ltid != e.tid {
                        out.insert(i, j);
                    }
                }
                on_cpu.insert(e.tid, cpu);
            }
            EventKind::Preempt | EventKind::Block { .. } | EventKind::Exit => {
                if let Some(cpu) = on_cpu.remove(&e.tid) {
                    left.insert(cpu, (e.t_ns, i, e.tid));
                }
            }
            _ => {}
        }
    }
    out
}

/// A preempted task whose next `run` took a CPU from nobody (a CPU the
/// host left idle, or one it was moved to): on the host it waited
/// runnable until then, so it does not run again before `until` (model
/// time: its preemption plus the recorded wait). Slept on a timer, so
/// that its CPU is free meanwhile; the time is reported as
/// `replay_runnable_wait_ns`.
pub(super) async fn runnable_wait(ctx: &Ctx, sh: &Shared, until: u64) {
    let now = ctx.now();
    if until > now {
        sh.runnable_wait_ns
            .set(sh.runnable_wait_ns.get().saturating_add(until - now));
        schedule_hrtimeout(ctx, until - now).await;
    }
}

/// Waits until event `j` (another task leaving the CPU) has been replayed.
pub(super) async fn wait_for_handoff(ctx: &Ctx, sh: &Shared, j: usize) {
    while !sh.handed.borrow().contains(&j) {
        sh.handoff_waiters.borrow_mut().insert(j, ctx.task);
        block_until_woken(ctx).await;
    }
}

/// Marks event `i` replayed, waking the task that waits for it.
pub(super) async fn handed_off(ctx: &Ctx, sh: &Shared, i: usize) {
    if !sh.awaited.contains(&i) {
        return;
    }
    sh.handed.borrow_mut().insert(i);
    let waiter = sh.handoff_waiters.borrow_mut().remove(&i);
    if let Some(t) = waiter {
        wake_up(ctx, t).await;
    }
}

/// Sleeps until a recorded wake for `tid` has arrived (or consumes one
/// that came first).
pub(super) async fn sleep_until_woken(ctx: &Ctx, sh: &Shared, tid: u32) {
    loop {
        {
            let mut t = sh.tokens.borrow_mut();
            let n = t.entry(tid).or_insert(0);
            if *n > 0 {
                *n -= 1;
                return;
            }
            sh.sleeping.borrow_mut().insert(tid, ctx.task);
        }
        block_until_woken(ctx).await;
    }
}

/// Gives `target` a wake, waking it if it sleeps in [`sleep_until_woken`].
pub(super) async fn wake(ctx: &Ctx, sh: &Shared, target: u32) {
    *sh.tokens.borrow_mut().entry(target).or_insert(0) += 1;
    let sleeper = sh.sleeping.borrow_mut().remove(&target);
    if let Some(t) = sleeper {
        wake_up(ctx, t).await;
    }
}
