//! The entry and exit of a system call (kernel/entry/common.c; arm64
//! `el0_svc_common()`, arch/arm64/kernel/syscall.c): the bracket every
//! modelled system call runs inside, with its statistics, the observer's
//! call events, and the return-to-user preemption point.

use super::{sched, Ctx};
use crate::hw::tlb::MmId;
use crate::observe::Event;

/// Kernel call bracket: statistics, observer events and the return-to-user
/// preemption point.
pub async fn syscall_enter(ctx: &Ctx, name: &'static str) {
    let _f = ctx.func(crate::label!("el0_svc_common"));
    let cpu = ctx.cpu();
    ctx.w.stats.borrow_mut().cpu[ctx.w.pcpu(cpu)].syscalls += 1;
    ctx.emit(Event::CallEnter {
        cpu,
        task: ctx.task,
        call: name,
    });
    ctx.work(ctx.w.profile.kernel.syscall_ns / 2).await;
}

/// Returns from a kernel call to user space.
pub async fn syscall_exit(ctx: &Ctx, name: &'static str) {
    {
        let _f = ctx.func(crate::label!("el0_svc_common"));
        ctx.work(ctx.w.profile.kernel.syscall_ns - ctx.w.profile.kernel.syscall_ns / 2)
            .await;
    }
    ctx.emit(Event::CallExit {
        cpu: ctx.cpu(),
        task: ctx.task,
        call: name,
    });
    sched::maybe_preempt(ctx).await;
}

/// Declares the range contract of the call in progress (`Event::CallRange`).
pub(crate) fn call_range(ctx: &Ctx, mm: MmId, start: u64, end: u64) {
    ctx.emit(Event::CallRange {
        cpu: ctx.cpu(),
        mm,
        start,
        end,
    });
}
