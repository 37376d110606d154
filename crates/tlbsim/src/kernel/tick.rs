//! The periodic timer tick (issue 17): each CPU of a kernel whose profile
//! (or experiment) sets `hz` takes a timer interrupt every `10^9 / hz` ns,
//! as a Linux 3.5 ARM kernel without `NO_HZ` does (`vexpress_defconfig`
//! sets neither `NO_HZ` nor `HIGH_RES_TIMERS`; the A15's architected
//! timer has only a one-shot mode, so `tick_setup_periodic()` programs
//! every CPU's timer at the global `tick_next_period`: the ticks of all
//! CPUs fall at the same instants, multiples of the period).
//!
//! The interrupt is delivered like a function-call IPI (`step::Cpus`): it
//! waits while the CPU has interrupts off or runs a handler, cuts a `Work`
//! step, and its handler runs on whatever task the CPU runs. What the
//! handler does is here; when it arrives is the timing driver's.

use super::Ctx;
use crate::hw::CpuId;

/// `tick_handle_periodic()` (kernel/time/tick-common.c, Linux 3.5) for a
/// timer interrupt that stands for `ticks` periods (more than 1 when
/// interrupts stayed off for longer than a period: the one-shot device's
/// re-programming finds the next expiry in the past and runs
/// `tick_periodic()` once per missed period). Costs `tick_handler_ns`
/// once, entry to exit.
pub async fn tick_handle_periodic(ctx: Ctx, ticks: usize) {
    let _f = ctx.func(crate::label!("tick_handle_periodic"));
    let cpu = ctx.cpu();
    for _ in 0..ticks {
        tick_periodic(&ctx, cpu);
    }
    let pcpu = ctx.w.pcpu(cpu);
    ctx.w.stats.borrow_mut().cpu[pcpu].timer_ticks += 1;
    let cost = ctx.w.profile.kernel.tick_handler_ns.unwrap_or(0);
    ctx.work(cost).await;
}

/// `tick_periodic(cpu)`: the CPU that keeps time (`tick_do_timer_cpu`,
/// the boot CPU, 0) advances `jiffies` (`do_timer(1)`); every CPU runs
/// `update_process_times()`.
fn tick_periodic(ctx: &Ctx, cpu: CpuId) {
    if cpu == CpuId::BOOT {
        *ctx.w.k.borrow_mut().jiffies += 1;
    }
    update_process_times(ctx, cpu);
}

/// `update_process_times()` (kernel/timer.c): of its work (time
/// accounting, expired timers, RCU, `scheduler_tick()`, POSIX CPU timers)
/// the model has only the scheduler's part; the rest is the handler's
/// cost.
fn update_process_times(ctx: &Ctx, cpu: CpuId) {
    scheduler_tick(ctx, cpu);
}

/// `scheduler_tick()` → `task_tick_fair()` → `entity_tick()`: with more
/// than one task on the CPU's CFS queue (`nr_running > 1`: the running one
/// and at least one queued), `check_preempt_tick()`.
fn scheduler_tick(ctx: &Ctx, cpu: CpuId) {
    let waiting = {
        let k = ctx.w.k.borrow();
        let pc = &k.cpus[cpu];
        pc.current != pc.idle && !pc.rq.is_empty()
    };
    if waiting {
        check_preempt_tick(ctx, cpu);
    }
}

/// `check_preempt_tick()` (kernel/sched/fair.c, 3.5): the running task has
/// run past its slice (`delta_exec > ideal_runtime`) → `resched_task()`,
/// which sets `need_resched`; the task gives up the CPU at its next return
/// to user space (also the return from this interrupt, if it interrupted
/// user code). The slice is the model's `time_slice_ns` (all tasks have
/// one weight); the second test (the leftmost task's vruntime behind by
/// more than a slice, after `sched_min_granularity`) is not modelled.
fn check_preempt_tick(ctx: &Ctx, cpu: CpuId) {
    let now = ctx.now();
    let mut k = ctx.w.k.borrow_mut();
    let current = k.cpus[cpu].current;
    let delta_exec = now.saturating_sub(k.tasks[current].slice_start_ns);
    if delta_exec > ctx.w.profile.kernel.time_slice_ns {
        k.cpus[cpu].need_resched = true; // resched_task(rq->curr)
    }
}
