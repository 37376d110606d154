//! The idle task (kernel/sched/idle.c, `do_idle()`).

use super::schedule;
use crate::kernel::{Ctx, Op, TaskFuture};

/// The idle task's program: schedule when there is work, else wait for a
/// reschedule IPI.
pub fn idle_main(ctx: Ctx) -> TaskFuture {
    Box::pin(async move {
        loop {
            let cpu = ctx.cpu();
            let work = {
                let k = ctx.w.k.borrow();
                !k.cpus[cpu].rq.is_empty()
            };
            ctx.w.rcu_quiescent(cpu);
            if work {
                schedule(&ctx).await;
            } else {
                ctx.step(Op::Idle).await;
            }
        }
    })
}
