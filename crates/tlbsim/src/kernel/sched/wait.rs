//! Sleeping until woken (kernel/sched/wait.c, include/linux/wait.h).

use super::{schedule, wake_up};
use crate::kernel::{Ctx, TaskId, TaskState};

/// Blocks the caller until another task calls [`wake_up`] on it.
pub async fn block_until_woken(ctx: &Ctx) {
    ctx.w.k.borrow_mut().tasks[ctx.task].state = TaskState::Blocked;
    schedule(ctx).await;
}

/// `wait_event()` on a wait queue the caller keeps: runs `attempt` until
/// it succeeds, sleeping after each failure until some task wakes the
/// caller (`attempt` must then have queued it as a waiter); on success,
/// wakes the tasks `attempt` returned (`wake_up_interruptible_sync_poll`
/// on the queue, or one waiter).
pub async fn wait_event(ctx: &Ctx, mut attempt: impl FnMut() -> Option<Vec<TaskId>>) {
    loop {
        if let Some(woken) = attempt() {
            for t in woken {
                wake_up(ctx, t).await;
            }
            return;
        }
        block_until_woken(ctx).await;
    }
}
