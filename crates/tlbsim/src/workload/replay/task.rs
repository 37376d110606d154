//! One recorded task replayed: its events in order, the compute between
//! them, its scheduling events (`run`, `preempt`, `block`) and its life
//! (`clone`, `exec`, `exit`); memory events go to [`super::mm`], waits and
//! wakes to [`super::sched`].

use super::mm::{fault, memory_op, Space};
use super::sched::{handed_off, runnable_wait, sleep_until_woken, wait_for_handoff, wake};
use super::{program, Placement, Shared, UntracedSleeps};
use crate::engine::track::Tracked;
use crate::hw::CpuId;
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{sys_clone_thread, sys_fork_pinned, sys_vfork_replayed};
use crate::kernel::hrtimer::schedule_hrtimeout;
use crate::kernel::sched::set_cpus_allowed_replayed;
use crate::kernel::Ctx;
use crate::trace::{Event, EventKind, TaskKind};
use std::rc::Rc;

/// Where a replayed task is in its recorded events.
struct Cursor {
    /// On a CPU (not preempted nor asleep) since its last event.
    running: bool,
    /// Its last preemption: (host time, model time).
    preempted: Option<(u64, u64)>,
    /// When its last replayed event ended (host time).
    last_end: Option<u64>,
    /// The recorder's own time in the current gap (perf records, a
    /// fault's host handling), taken out of the compute.
    recorder_ns: u64,
}

/// Replays task `tid`'s events, then reaps its children.
pub(super) async fn run_task(ctx: &Ctx, sh: &Rc<Shared>, tid: u32, mut space: Rc<Tracked<Space>>) {
    let idx = sh.by_tid.get(&tid).cloned().unwrap_or_default();
    let overhead = sh.trace.header.overhead;
    let mut c = Cursor {
        running: true,
        preempted: None,
        last_end: None,
        recorder_ns: 0,
    };
    for (p, &i) in idx.iter().enumerate() {
        let e = sh.trace.events[i];
        if let (EventKind::Perf { records }, Some(o)) = (e.kind, overhead) {
            c.recorder_ns = c
                .recorder_ns
                .saturating_add(records.saturating_mul(o.record_ns));
            continue;
        }
        c.compute_gap(ctx, sh, e.t_ns).await;
        // The task has reached event i: one it hands its CPU over at
        // (before it sleeps there) releases the task waiting for it.
        handed_off(ctx, sh, i).await;
        match e.kind {
            EventKind::Run { .. } | EventKind::Preempt | EventKind::Block { .. } => {
                c.sched_event(ctx, sh, (i, e), &idx[p + 1..]).await;
            }
            EventKind::Migrate { .. }
            | EventKind::TlbFlush { .. }
            | EventKind::Perf { .. }
            | EventKind::Shootdown { .. } => {}
            EventKind::Wake { target } => wake(ctx, sh, target).await,
            EventKind::Clone { child } => clone(ctx, sh, child, &space).await,
            EventKind::Exec => {
                sys_exec(ctx).await;
                space = crate::workload::shared(Space::default());
            }
            EventKind::Exit => break,
            EventKind::Fault { addr, write } => {
                fault(ctx, &space, addr, write).await;
                // The host's handling of it is in the next gap; the model
                // has just charged its own.
                c.recorder_ns = overhead.map_or(0, |o| o.fault_ns);
            }
            _ => memory_op(ctx, &space, e.kind).await,
        }
        c.last_end = Some(e.end_ns());
    }
    while sys_wait(ctx).await.is_some() {}
    // Each task leaves the total so far: the last one's is the run's.
    let totals = [
        ("replay_recorder_removed_ns", sh.removed_ns.get()),
        ("replay_runnable_wait_ns", sh.runnable_wait_ns.get()),
    ];
    let mut st = ctx.w.stats.borrow_mut();
    for (name, ns) in totals {
        st.metrics.insert(ctx.w.metric(name), ns as f64);
    }
}

/// The CPU of the first `run` among the task's events `later`.
fn next_run(sh: &Shared, later: &[usize]) -> Option<CpuId> {
    later.iter().find_map(|&j| match sh.trace.events[j].kind {
        EventKind::Run { cpu } => Some(CpuId::new(cpu)),
        _ => None,
    })
}

impl Cursor {
    /// The time the task spent on its CPU since its last event, up to
    /// `t_ns`, less the recorder's own: user work.
    async fn compute_gap(&mut self, ctx: &Ctx, sh: &Shared, t_ns: u64) {
        if let (true, Some(le)) = (self.running, self.last_end) {
            let gap = t_ns.saturating_sub(le);
            let removed = self.recorder_ns.min(gap);
            sh.removed_ns.set(sh.removed_ns.get() + removed);
            if gap > removed {
                ctx.user_work(gap - removed).await;
            }
        }
        self.recorder_ns = 0;
    }

    /// A `run`, `preempt` or `block` event `e` (index `i`); `later` are
    /// the task's events after it (searched for its next `run` only when
    /// a sleep's wake-up is steered).
    async fn sched_event(
        &mut self,
        ctx: &Ctx,
        sh: &Shared,
        (i, e): (usize, Event),
        later: &[usize],
    ) {
        let recorded = sh.placement == Placement::Recorded;
        match e.kind {
            EventKind::Run { cpu } => {
                self.running = true;
                let was_preempted = self.preempted.take();
                if let Some(&j) = sh.handoff.get(&i) {
                    wait_for_handoff(ctx, sh, j).await;
                } else if let (true, Some((host_t, model_t))) = (recorded, was_preempted) {
                    runnable_wait(ctx, sh, model_t + (e.t_ns - host_t)).await;
                }
                if recorded {
                    set_cpus_allowed_replayed(ctx, CpuId::new(cpu), true).await;
                }
            }
            EventKind::Preempt => {
                self.running = false;
                self.preempted = Some((e.t_ns, ctx.now()));
            }
            EventKind::Block { waker, ns } => {
                self.running = false;
                let timed = sh.untraced_sleeps == UntracedSleeps::Timer;
                if waker.is_some() || timed {
                    if let Some(cpu) = recorded.then(|| next_run(sh, later)).flatten() {
                        // Steer the wake-up to where the host woke it.
                        set_cpus_allowed_replayed(ctx, cpu, false).await;
                    }
                }
                if waker.is_some() {
                    sleep_until_woken(ctx, sh, e.tid).await;
                } else if timed {
                    schedule_hrtimeout(ctx, ns).await;
                }
            }
            _ => {}
        }
    }
}

/// A recorded `clone` of `child`: a thread in this mm, a vfork child in
/// it until its exec (the parent's wait for that is in the trace), or a
/// process with a copy of the address space; pinned to its first recorded
/// CPU with the recorded placement.
async fn clone(ctx: &Ctx, sh: &Rc<Shared>, child: u32, space: &Rc<Tracked<Space>>) {
    let rec = sh.trace.task(child).expect("parsed").clone();
    let pin = (sh.placement == Placement::Recorded)
        .then(|| sh.first_run(child))
        .flatten();
    match rec.kind {
        TaskKind::Thread => {
            let p = program(Rc::clone(sh), child, Rc::clone(space));
            sys_clone_thread(ctx, &rec.comm, pin, p).await;
        }
        TaskKind::Vfork => {
            let p = program(Rc::clone(sh), child, Rc::clone(space));
            sys_vfork_replayed(ctx, &rec.comm, pin, p).await;
        }
        TaskKind::Process => {
            let copy = crate::workload::shared(space.borrow().clone());
            let p = program(Rc::clone(sh), child, copy);
            sys_fork_pinned(ctx, &rec.comm, pin, p).await;
        }
    }
}
