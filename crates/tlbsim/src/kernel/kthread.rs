//! A kernel thread working on a user address space (kernel/kthread.c):
//! `kthread_use_mm()` and `kthread_unuse_mm()`, as io_uring's SQPOLL
//! thread and vhost's workers use them to touch a process's memory
//! (`copy_from_user()` and the like) from a kernel thread. Between the two
//! the thread is a user of the mm's translations like any of its tasks:
//! its CPU joins the mm (`switch_mm`), flushes of the mm must reach it,
//! and the checker holds it to the same invariants (`Running` with the
//! mm). The caller holds an `mm_users` reference (`mmget()`), as Linux's
//! callers do, so the address space outlives the use.

use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::MmId;
use crate::hw::CpuId;
use crate::kernel::fork::mmdrop;
use crate::kernel::sched::enqueue;
use crate::kernel::{Ctx, Program, TaskId, TaskState};
use crate::observe::Event;

/// `kthread_run_on_cpu()` from a running task: a kernel thread (no mm; it
/// keeps one lazily) bound to `cpu`, woken at once (`wake_up_process()`:
/// an idle `cpu` is kicked).
pub async fn kthread_run_on_cpu(ctx: &Ctx, name: &str, cpu: CpuId, program: Program) -> TaskId {
    let w = &ctx.w;
    let t = w.new_task(name.to_string(), None, cpu, None, program);
    {
        let mut k = w.k.borrow_mut();
        let mut m = CpuMask::new(w.ncpus());
        m.set(cpu);
        k.tasks[t].affinity = Some(m);
        k.tasks[t].state = TaskState::Runnable;
    }
    enqueue(ctx, t, true).await;
    t
}

/// `kthread_use_mm(mm)` (5.8+, 38cf307c1f20's order): `mmgrab(mm)`; with
/// interrupts off ("hold off tlb flush IPIs while switching mm's"), the
/// thread's `active_mm` and `mm` become `mm` and `switch_mm_irqs_off()`
/// loads it; then `mmdrop_lazy_tlb()` of the mm it kept lazily.
pub async fn kthread_use_mm(ctx: &Ctx, mm: MmId) {
    let _f = ctx.func(crate::label!("kthread_use_mm"));
    let w = &ctx.w;
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm].count += 1).await; // mmgrab()
    ctx.irq_save();
    let active = {
        let mut k = w.k.borrow_mut();
        let t = &mut k.tasks[ctx.task];
        debug_assert!(t.mm.is_none(), "kthread_use_mm() by a task with an mm");
        t.mm = Some(mm);
        t.active_mm.replace(mm)
    };
    w.policy.switch_mm(ctx, active, mm).await;
    ctx.emit(Event::Running {
        cpu: ctx.cpu(),
        task: ctx.task,
        mm: Some(mm),
    });
    ctx.irq_restore();
    if let Some(a) = active {
        mmdrop(ctx, a).await; // mmdrop_lazy_tlb()
    }
}

/// `kthread_unuse_mm(mm)`: with interrupts off, the thread's `mm` is
/// cleared and it keeps `mm` lazily as its `active_mm`
/// (`mmgrab_lazy_tlb()`, `enter_lazy_tlb()`); then the reference
/// `kthread_use_mm()` took is dropped (`mmdrop()`).
pub async fn kthread_unuse_mm(ctx: &Ctx, mm: MmId) {
    let _f = ctx.func(crate::label!("kthread_unuse_mm"));
    let w = &ctx.w;
    ctx.irq_save();
    w.k.borrow_mut().tasks[ctx.task].mm = None;
    ctx.emit(Event::Running {
        cpu: ctx.cpu(),
        task: ctx.task,
        mm: None,
    });
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm].count += 1).await; // mmgrab_lazy_tlb()
    w.policy.enter_lazy_tlb(ctx, mm, false).await;
    ctx.irq_restore();
    mmdrop(ctx, mm).await;
}
