//! A task's end (kernel/exit.c): `do_exit()`, and `wait()`, which reaps
//! an exited child.

use super::entry::{syscall_enter, syscall_exit};
use super::fork::{mm_release, mmput};
use super::sched::{schedule, wake_up};
use super::{Ctx, TaskId, TaskState};

/// `do_exit()`: releases the mm (the task stays lazily on it until it
/// switches out), becomes a zombie, wakes the parent, and never returns.
pub async fn do_exit(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("do_exit"));
    let w = &ctx.w;
    syscall_enter(ctx, "exit").await;
    ctx.work(w.profile.kernel.exit_ns).await;
    let mm = w.k.borrow_mut().tasks[ctx.task].mm.take();
    mm_release(ctx).await; // exit_mm() → exit_mm_release()
    if let Some(m) = mm {
        w.k.borrow_mut().mms[m].count += 1; // mmgrab(): stay lazy on it
        w.policy.enter_lazy_tlb(ctx, m, false).await;
        // exit_mm(): the task runs on without a user address space (it
        // never returns to user mode), the CPU keeps the mm lazily.
        w.emit(crate::observe::Event::Running {
            cpu: ctx.cpu(),
            task: ctx.task,
            mm: None,
        });
        mmput(ctx, m).await;
    }
    let parent = {
        let mut k = w.k.borrow_mut();
        k.tasks[ctx.task].state = TaskState::Zombie;
        let p = k.tasks[ctx.task].parent;
        if let Some(p) = p {
            k.tasks[p].zombies.push_back(ctx.task);
        }
        p
    };
    ctx.emit(crate::observe::Event::CallExit {
        cpu: ctx.cpu(),
        task: ctx.task,
        call: "exit",
    });
    if let Some(p) = parent {
        wake_up(ctx, p).await;
    }
    schedule(ctx).await;
    unreachable!("a zombie is never scheduled again");
}

/// `wait()`: reaps one exited child; `None` when there are no children.
pub async fn sys_wait(ctx: &Ctx) -> Option<TaskId> {
    let _f = ctx.func(crate::label!("do_wait"));
    syscall_enter(ctx, "wait4").await;
    let w = &ctx.w;
    let r = loop {
        let (reaped, none_left) = {
            let mut k = w.k.borrow_mut();
            let me = ctx.task;
            match k.tasks[me].zombies.pop_front() {
                Some(z) => {
                    k.tasks[z].state = TaskState::Dead;
                    *k.live_tasks -= 1;
                    k.tasks[me].children -= 1;
                    (Some(z), false)
                }
                None if k.tasks[me].children == 0 => (None, true),
                None => {
                    k.tasks[me].state = TaskState::Blocked;
                    (None, false)
                }
            }
        };
        if reaped.is_some() || none_left {
            break reaped;
        }
        schedule(ctx).await;
    };
    syscall_exit(ctx, "wait4").await;
    r
}
