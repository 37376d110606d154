//! The periodic timer tick (issue 17, `kernel/tick.rs`): its rate, its
//! deferral while interrupts are off, its cost, the slice it enforces,
//! its settings, and determinism.

use super::common;
use std::cell::Cell;
use std::rc::Rc;
use tlbsim::check::Checker;
use tlbsim::config::{builtin_profile, KernelConfig};
use tlbsim::driver::TimingDriver;
use tlbsim::kernel::exit::sys_wait;
use tlbsim::kernel::fork::{spawn_user, sys_clone_thread};
use tlbsim::kernel::policy::{asid_allocator, tlb_policy};
use tlbsim::kernel::{Ctx, TaskState, World};

/// 10 ms: one tick at HZ = 100.
const PERIOD_NS: u64 = 10_000_000;

/// A 2-CPU cortex-a15-2 world with the checker, the tick at `hz` (`None`:
/// off).
fn world(hz: Option<u32>) -> Rc<World> {
    let mut p = builtin_profile("cortex-a15-2").unwrap();
    p.kernel.hz = hz;
    p.validate().unwrap();
    let k = KernelConfig::default(); // arm64-asid-reserved
    tlbsim::engine::state::new_machine();
    let alloc = asid_allocator(&k.asid_allocator, &k, p.tlb.asid_bits).unwrap();
    let w = World::new(p, k.clone(), tlb_policy(&k.tlb_policy).unwrap(), alloc);
    *w.observer.borrow_mut() = Some(Box::new(Checker::new(w.ncpus(), 16)));
    w
}

/// Runs `program` as a user process on CPU 0 until it exits; returns the
/// time it exited.
fn run_process(w: &Rc<World>, program: tlbsim::kernel::Program) -> u64 {
    let t = spawn_user(w, "test", tlbsim::hw::CpuId::BOOT, program);
    let mut d = TimingDriver::new(Rc::clone(w), 10_000_000_000);
    let end = d
        .run_until(|w| w.k.borrow().tasks[t].state == TaskState::Zombie)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(w.failure().is_none(), "{:?}", w.failure());
    end
}

/// Ticks each CPU took.
fn ticks(w: &World) -> Vec<u64> {
    w.stats.borrow().cpu.iter().map(|c| c.timer_ticks).collect()
}

/// One second of user work on CPU 0, CPU 1 idle.
fn busy_second(ctx: Ctx) -> tlbsim::kernel::TaskFuture {
    Box::pin(async move { ctx.user_work(1_000_000_000).await })
}

#[test]
fn the_tick_fires_at_hz_on_a_busy_and_an_idle_cpu() {
    let w = world(Some(100));
    let end = run_process(&w, Box::new(busy_second));
    assert!(end > 1_000_000_000, "{end}");
    // Every period boundary up to the end, on both CPUs: the busy one
    // takes it in its user work, the idle one in its idle loop.
    let periods = end / PERIOD_NS;
    assert_eq!(ticks(&w), vec![periods, periods]);
    assert!((100..=102).contains(&periods), "{periods}");
    // CPU 0 keeps jiffies.
    assert_eq!(*w.k.borrow().jiffies, periods);
}

#[test]
fn without_hz_there_is_no_tick() {
    let w = world(None);
    run_process(&w, Box::new(busy_second));
    assert_eq!(ticks(&w), vec![0, 0]);
    assert_eq!(*w.k.borrow().jiffies, 0);
}

#[test]
fn the_tick_cost_is_charged_to_the_interrupted_cpu() {
    let off = run_process(&world(None), Box::new(busy_second));
    let w = world(Some(100));
    let on = run_process(&w, Box::new(busy_second));
    let cost = w.profile.kernel.tick_handler_ns.unwrap();
    assert!(cost > 0);
    // The process ran on CPU 0 alone: each of its ticks made it later by
    // one handler.
    assert_eq!(on - off, ticks(&w)[0] * cost, "on {on}, off {off}");
}

#[test]
fn the_tick_waits_while_interrupts_are_off_and_catches_up() {
    let w = world(Some(100));
    let seen: Rc<Cell<(u64, u64, u64)>> = Rc::default();
    let s = Rc::clone(&seen);
    let end = run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                // 25 ms with interrupts off: two period boundaries pass.
                ctx.irq_save();
                ctx.work(25_000_000).await;
                let during = *ctx.w.k.borrow().jiffies;
                let at = ctx.now();
                ctx.irq_restore();
                ctx.work(1_000).await; // the tick is taken at this step
                let after = *ctx.w.k.borrow().jiffies;
                s.set((during, at, after));
                ctx.user_work(1_000_000).await;
            })
        }),
    );
    let (during, at, after) = seen.get();
    assert!(at > 2 * PERIOD_NS, "{at}");
    assert_eq!(during, 0, "no tick is taken with interrupts off");
    // One interrupt for both periods: jiffies catch up, one LOC.
    assert_eq!(after, at / PERIOD_NS);
    assert_eq!(ticks(&w)[0], end / PERIOD_NS - 1);
    assert_eq!(ticks(&w)[1], end / PERIOD_NS);
}

#[test]
fn the_tick_preempts_a_task_that_used_its_slice() {
    // Two threads pinned to CPU 1, each with 100 ms of user work in one
    // call: only the tick can take the CPU from the first.
    let run = |hz: Option<u32>| {
        let w = world(hz);
        let done: Rc<Cell<[u64; 2]>> = Rc::default();
        let d = Rc::clone(&done);
        run_process(
            &w,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    for i in 0..2 {
                        let d = Rc::clone(&d);
                        let prog = Box::new(move |c: Ctx| {
                            Box::pin(async move {
                                c.user_work(100_000_000).await;
                                let mut v = d.get();
                                v[i] = c.now();
                                d.set(v);
                            }) as tlbsim::kernel::TaskFuture
                        });
                        sys_clone_thread(&ctx, "spin", Some(common::cpuid(1)), prog).await;
                    }
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        );
        let switches = w.stats.borrow().cpu[common::cpuid(1)].context_switches;
        (done.get(), switches)
    };
    let (on, on_switches) = run(Some(100));
    // The tick preempts each thread once its 10 ms slice is used up (at
    // the second tick after it was switched in, every 20 ms): both finish
    // at about 200 ms, after at least 8 switches. Without the cut at the
    // tick's return to user, each would run its 100 ms in one go (5
    // switches in all).
    assert!(
        on.iter().all(|&t| (200_000_000..210_000_000).contains(&t)),
        "{on:?}"
    );
    assert!(on_switches >= 8, "{on_switches}");
    // Without the tick the model slices user work itself.
    let (off, off_switches) = run(None);
    assert!(
        off.iter().all(|&t| (200_000_000..210_000_000).contains(&t)),
        "{off:?}"
    );
    assert!(off_switches >= 8, "{off_switches}");
}

#[test]
fn tick_settings_are_checked() {
    let mut p = builtin_profile("cortex-a15-2").unwrap();
    p.kernel.hz = Some(0);
    assert!(p.validate().unwrap_err().contains("kernel.hz = 0"));
    p.kernel.hz = Some(100_000);
    assert!(p.validate().unwrap_err().contains("kernel.hz"));
    p.kernel.hz = Some(100);
    p.kernel.tick_handler_ns = Some(10_000_000);
    assert!(p
        .validate()
        .unwrap_err()
        .contains("not shorter than one tick period"));
    // A profile without the tick's cost cannot turn it on.
    let mut a = builtin_profile("ampere-32").unwrap();
    a.kernel.hz = Some(250);
    assert!(a.validate().unwrap_err().contains("tick_handler_ns"));
    // An experiment's [kernel] hz turns it on; the resolved profile says so.
    let mut e = super::common::file("experiments/seed002-hackbench.toml");
    e.workload
        .params
        .insert("runs".into(), toml::Value::Integer(1));
    let off = super::common::run_ok(&e);
    assert_eq!(off.profile.kernel.hz, None);
    assert_eq!(off.profile.kernel.tick_handler_ns, None);
    assert!(off.stats.per_cpu.iter().all(|c| c.timer_ticks == 0));
    e.kernel.hz = Some(100);
    let on = super::common::run_ok(&e);
    assert_eq!(on.profile.kernel.hz, Some(100));
    assert!(on.stats.per_cpu.iter().all(|c| c.timer_ticks > 0));
    assert!(on.elapsed_ns != off.elapsed_ns);
}

#[test]
fn runs_with_the_tick_are_deterministic() {
    let mut e = super::common::file("experiments/seed002-hackbench.toml");
    e.workload
        .params
        .insert("runs".into(), toml::Value::Integer(1));
    e.kernel.hz = Some(100);
    let text = || format!("{:?}", super::common::run_ok(&e));
    assert_eq!(text(), text());
}
