//! Kernel-model scenarios built directly on the library API.

use std::cell::Cell;
use std::rc::Rc;
use tlbsim::check::Checker;
use tlbsim::config::{builtin_profile, KernelConfig};
use tlbsim::driver::TimingDriver;
use tlbsim::hw::mem::{Perms, PAGE_SIZE};
use tlbsim::kernel::mm::sys_mmap;
use tlbsim::kernel::policy::{asid_allocator, tlb_policy};
use tlbsim::kernel::sched::{spawn_kthread, spawn_user};
use tlbsim::kernel::{Ctx, TaskState, World};

fn world(cpus: u32) -> Rc<World> {
    let mut p = builtin_profile("ampere-32").unwrap();
    p.topology.cpus = cpus;
    let k = KernelConfig::default();
    let alloc = asid_allocator(&k.asid_allocator, &k, p.tlb.asid_bits).unwrap();
    let w = World::new(p, k.clone(), tlb_policy(&k.tlb_policy).unwrap(), alloc);
    *w.observer.borrow_mut() = Some(Box::new(Checker::new(w.ncpus(), 16)));
    w
}

/// What the kernel thread saw: its active_mm, TTBR0's mm, that mm's mm_count.
type Seen = (Option<u32>, Option<u32>, u32);

#[test]
fn a_kernel_thread_borrows_the_previous_mm_lazily() {
    let w = world(2);
    // A user process on CPU0 computes for 10 ms (longer than a 4 ms slice).
    let user = spawn_user(
        &w,
        "user",
        0,
        Box::new(|ctx: Ctx| {
            Box::pin(async move {
                let p = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                ctx.user_access(p, true).await;
                ctx.user_work(10_000_000).await;
                ctx.user_access(p, false).await;
            })
        }),
    );
    let user_mm = w.k.borrow().tasks[user].mm.unwrap();
    // A kernel thread on CPU0 runs when the user's slice ends.
    let seen: Rc<Cell<Option<Seen>>> = Rc::default();
    let seen2 = Rc::clone(&seen);
    let kt = spawn_kthread(
        &w,
        "kworker/0",
        0,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                ctx.work(5_000).await;
                let k = ctx.w.k.borrow();
                let me = &k.tasks[ctx.task];
                let ttbr_mm = ctx.w.hw.borrow().cpus[ctx.cpu()].ttbr0.map(|t| t.mm);
                let count = me.active_mm.map_or(0, |m| k.mms[m as usize].count);
                seen2.set(Some((me.active_mm, ttbr_mm, count)));
            })
        }),
    );
    let mut d = TimingDriver::new(Rc::clone(&w), 1_000_000_000);
    let end = d
        .run_until(|w| {
            let k = w.k.borrow();
            k.tasks[user].state == TaskState::Zombie && k.tasks[kt].state == TaskState::Zombie
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(end >= 10_000_000);
    let (active, ttbr, count) = seen.get().expect("the kernel thread ran");
    assert_eq!(active, Some(user_mm), "kthread borrows the user's mm");
    assert_eq!(
        ttbr,
        Some(user_mm),
        "TTBR0 keeps pointing at it (arm64 lazy TLB)"
    );
    assert_eq!(count, 2, "mm_count: the user plus the lazy borrower");
    assert!(w.failure().is_none());
    let k = w.k.borrow();
    assert_eq!(k.mms[user_mm as usize].users, 0, "exit released the mm");
    assert_eq!(
        k.tasks[user].cpu, 1,
        "a preempted task is re-queued on the idle CPU"
    );
}
