//! Timed sleeps: an `hrtimer_sleeper` armed on the sleeper's CPU, whose
//! interrupt wakes the task when it expires (kernel/time/hrtimer.c and,
//! since Linux 6.13, kernel/time/sleep_timeout.c). Replay uses it for the
//! recorded sleeps that no recorded task ended (a `nanosleep`, a futex
//! wait with a timeout that ran out, Go's `usleep` in its scheduler).
//!
//! The timer is a step ([`Op::HrtimerStart`]): the timing driver delivers
//! its interrupt to the arming CPU `ns` later, the explorer makes it
//! pending at once and chooses when it is taken. The interrupt's handler
//! ([`hrtimer_interrupt`]) costs `ipi_handler_ns` of exception entry, as a
//! function-call IPI's does, then the wake-up's own steps.

use super::sched::{schedule, wake_up};
use super::{Ctx, Op, TaskId, TaskState};
use crate::engine::Ns;

/// `schedule_hrtimeout(&expires, HRTIMER_MODE_REL)` after
/// `set_current_state(TASK_INTERRUPTIBLE)`: arms a sleeper timer for
/// `ns` on this CPU (`hrtimer_sleeper_start_expires()`), sleeps unless it
/// has already fired (`if (likely(t.task)) schedule()`), and cancels it
/// on the way out (`hrtimer_cancel()`): a sleep ended by another wake-up
/// leaves no timer to wake the task later.
pub async fn schedule_hrtimeout(ctx: &Ctx, ns: Ns) {
    let _f = ctx.func(crate::label!("schedule_hrtimeout"));
    let seq = {
        let mut k = ctx.w.k.borrow_mut();
        let t = &mut k.tasks[ctx.task];
        t.state = TaskState::Blocked; // set_current_state(TASK_INTERRUPTIBLE)
        t.hrtimer_seq += 1; // odd: armed, t.task = current
        t.hrtimer_seq
    };
    ctx.step(Op::HrtimerStart { ns, seq }).await;
    if armed(ctx, ctx.task, seq) {
        schedule(ctx).await;
    }
    let mut k = ctx.w.k.borrow_mut();
    let t = &mut k.tasks[ctx.task];
    if t.hrtimer_seq == seq {
        t.hrtimer_seq += 1; // hrtimer_cancel(): it will not fire
    }
    t.state = TaskState::Running; // __set_current_state(TASK_RUNNING)
}

/// Is task `t`'s sleep number `seq` still armed (`t.task != NULL`)?
fn armed(ctx: &Ctx, t: TaskId, seq: u64) -> bool {
    ctx.w.k.borrow().tasks[t].hrtimer_seq == seq
}

/// `hrtimer_interrupt()` → `__run_hrtimer()` → `hrtimer_wakeup()` for
/// task `t`'s sleep number `seq`: clears the sleeper (`t->task = NULL`)
/// and wakes the task (`wake_up_process()`). A timer that was cancelled
/// (the task's sleep number moved on) does nothing.
pub async fn hrtimer_interrupt(ctx: Ctx, t: TaskId, seq: u64) {
    let _f = ctx.func(crate::label!("hrtimer_wakeup"));
    if !armed(&ctx, t, seq) {
        return;
    }
    ctx.w.k.borrow_mut().tasks[t].hrtimer_seq += 1;
    wake_up(&ctx, t).await;
}
