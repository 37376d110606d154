//! The scheduler core (kernel/sched/core.c): per-CPU run queues,
//! `schedule()` and `context_switch()` (with lazy TLB for tasks without
//! an mm), wake-ups with reschedule IPIs, CPU affinity and
//! `sched_yield()`; and [`advance`], with which both drivers run a CPU's
//! current task to its next step.

use super::fair::place_and_check_preempt;
use crate::engine::label::Label;
use crate::hw::CpuId;
use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::exit::do_exit;
use crate::kernel::fork::mmdrop;
use crate::kernel::{Ctx, Op, Program, TaskFuture, TaskId, TaskState, World};
use std::rc::Rc;

/// Wraps a new task's program: `schedule_tail()` first (which ends the
/// switch that started it, re-enabling interrupts), `do_exit(0)` if the
/// program returns.
pub fn start_program(ctx: Ctx, program: Program) -> TaskFuture {
    let inner = program(ctx.clone());
    Box::pin(async move {
        finish_task_switch(&ctx).await;
        inner.await;
        do_exit(&ctx).await;
    })
}

/// Preemption point on return to user space (arm `ret_to_user` →
/// `work_pending`): reschedules if `need_resched` is set. Without a timer
/// tick the model also checks the slice here, standing in for the tick's
/// `check_preempt_tick()`; with the tick on, as in Linux, only the tick
/// finds a slice used up (`kernel/tick.rs`) and this tests the flag alone.
pub async fn maybe_preempt(ctx: &Ctx) {
    let cpu = ctx.cpu();
    let now = ctx.now();
    let tick = ctx.w.tick_period_ns().is_some();
    let want = {
        let k = ctx.w.k.borrow();
        let pc = &k.cpus[cpu];
        let t = &k.tasks[ctx.task];
        pc.need_resched
            || (!tick
                && !pc.rq.is_empty()
                && now.saturating_sub(t.slice_start_ns) >= ctx.w.profile.kernel.time_slice_ns)
    };
    if want {
        schedule(ctx).await;
    }
}

/// `__schedule()`: picks the next task of this CPU's run queue (or idle) and
/// switches to it. The caller has already set its state if it is to sleep.
pub async fn schedule(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("__schedule"));
    let w = &ctx.w;
    let cpu = ctx.cpu();
    let prev = ctx.task;
    let next = {
        let mut k = w.k.borrow_mut();
        k.cpus[cpu].need_resched = false;
        let prev_running = k.tasks[prev].state == TaskState::Running;
        let prev_idle = k.tasks[prev].idle;
        let now = w.now.get();
        if k.tasks[prev].state == TaskState::Blocked {
            k.tasks[prev].sleep_start_ns = now;
        }
        // CFS: the task with the smallest vruntime runs next.
        let pick = {
            let pc = &k.cpus[cpu];
            (0..pc.rq.len()).min_by_key(|&i| (k.tasks[pc.rq[i]].vruntime_ns, i))
        };
        let picked = pick.and_then(|i| k.cpus[cpu].rq.remove(i));
        if picked.is_some() && !prev_idle {
            let ran = now.saturating_sub(k.tasks[prev].slice_start_ns);
            k.tasks[prev].vruntime_ns += ran;
            k.tasks[prev].slice_start_ns = now;
        }
        if let Some(n) = picked {
            let v = k.tasks[n].vruntime_ns;
            let m = &mut k.cpus[cpu].min_vruntime_ns;
            *m = (*m).max(v);
        }
        match picked {
            Some(n) => {
                k.tasks[n].queued = false;
                if prev_running && !prev_idle {
                    k.tasks[prev].state = TaskState::Runnable;
                }
                n
            }
            None if prev_running => return,
            None => k.cpus[cpu].idle,
        }
    };
    if next == prev {
        return;
    }
    w.k.borrow_mut().cpus[cpu].picked = Some(next);
    // raw_spin_lock_irq(&rq->lock): the switch runs with interrupts off
    // until finish_task_switch() in whichever task runs next here.
    ctx.irq_save();
    ctx.work(w.profile.kernel.context_switch_ns).await;
    context_switch(ctx, cpu, prev, next).await;
    finish_task_switch(ctx).await;
}

/// `context_switch()`: the mm part, then the register switch.
async fn context_switch(ctx: &Ctx, cpu: CpuId, prev: TaskId, next: TaskId) {
    let w = &ctx.w;
    // From here until `next` runs, the CPU executes the scheduler, not a
    // user task: its TLB may keep the previous mm's entries while switch_mm
    // runs (x86 leaves mm_cpumask before loading CR3), and the checker
    // examines them when a task of that mm runs here again.
    w.emit(crate::observe::Event::Running {
        cpu,
        task: prev,
        mm: None,
    });
    let (prev_mm, prev_active, next_mm, next_idle) = {
        let k = w.k.borrow();
        (
            k.tasks[prev].mm,
            k.tasks[prev].active_mm,
            k.tasks[next].mm,
            k.tasks[next].idle,
        )
    };
    match next_mm {
        None => {
            // Kernel thread (or idle): borrow prev's mm lazily.
            w.k.borrow_mut().tasks[next].active_mm = prev_active;
            if let Some(m) = prev_active {
                w.k.borrow_mut().mms[m].count += 1; // mmgrab()
                w.policy.enter_lazy_tlb(ctx, m, next_idle).await;
            }
        }
        Some(m) => {
            w.policy.switch_mm(ctx, prev_active, m).await;
        }
    }
    if w.arch() == crate::config::Arch::Arm64 && w.kcfg.switch_to_dsb {
        // arm64 __switch_to(): "Complete any pending TLB or cache
        // maintenance on this CPU in case the thread migrates to a
        // different CPU."
        let _f = ctx.func(crate::label!("__switch_to"));
        ctx.dsb_ish().await;
    }
    {
        let mut k = w.k.borrow_mut();
        if prev_mm.is_none() {
            // prev was lazy: its reference is dropped by finish_task_switch.
            k.cpus[cpu].mm_to_drop = k.tasks[prev].active_mm.take();
        }
        k.cpus[cpu].last = Some(prev);
        k.cpus[cpu].current = next;
        k.cpus[cpu].picked = None;
        let t = &mut k.tasks[next];
        t.cpu = cpu;
        t.state = TaskState::Running;
        t.on_cpu = true;
        t.slice_start_ns = w.now.get();
    }
    w.stats.borrow_mut().cpu[w.pcpu(cpu)].context_switches += 1;
    w.emit(crate::observe::Event::Running {
        cpu,
        task: next,
        mm: next_mm,
    });
    ctx.step(Op::SwitchTo(next)).await;
}

/// `finish_task_switch()`: runs in the task that was switched in. Drops the
/// lazy mm reference of the task that left and re-queues it if it was
/// preempted or woken while switching out.
pub async fn finish_task_switch(ctx: &Ctx) {
    let w = &ctx.w;
    let cpu = ctx.cpu();
    let (last, drop_mm) = {
        let mut k = w.k.borrow_mut();
        let last = k.cpus[cpu].last.take();
        let drop_mm = k.cpus[cpu].mm_to_drop.take();
        if let Some(l) = last {
            k.tasks[l].on_cpu = false;
        }
        (last, drop_mm)
    };
    if let Some(l) = last {
        let requeue = {
            let k = w.k.borrow();
            k.tasks[l].state == TaskState::Runnable && !k.tasks[l].queued && !k.tasks[l].idle
        };
        if requeue {
            enqueue(ctx, l, false).await;
        }
    }
    // finish_lock_switch(): raw_spin_unlock_irq(&rq->lock).
    ctx.irq_restore();
    w.rcu_quiescent(cpu); // a context switch is an RCU quiescent state
    w.asid.finish_arch_post_lock_switch(ctx).await;
    if let Some(m) = drop_mm {
        mmdrop(ctx, m).await;
    }
}

/// Chooses a CPU for a waking or new task: its previous CPU if idle, else the
/// first idle CPU it may use, else the allowed CPU with the shortest queue.
fn select_task_rq(w: &World, t: TaskId, fork: bool) -> CpuId {
    let k = w.k.borrow();
    let task = &k.tasks[t];
    let allowed = |c: CpuId| task.affinity.as_ref().is_none_or(|m| m.test(c));
    let idle = |c: CpuId| {
        let pc = &k.cpus[c];
        pc.current == pc.idle && pc.rq.is_empty() && pc.picked.is_none()
    };
    let n = k.cpus.len();
    if !fork && allowed(task.cpu) && idle(task.cpu) {
        return task.cpu;
    }
    if let Some(c) = CpuId::all(n).find(|&c| allowed(c) && idle(c)) {
        return c;
    }
    let load = |c: CpuId| k.cpus[c].rq.len() + usize::from(k.cpus[c].current != k.cpus[c].idle);
    CpuId::all(n)
        .filter(|&c| allowed(c))
        .min_by_key(|&c| (load(c), c != task.cpu, c))
        .unwrap_or(task.cpu)
}

/// Puts a runnable task on a run queue and kicks that CPU if it idles.
pub(crate) async fn enqueue(ctx: &Ctx, t: TaskId, fork: bool) {
    let w = &ctx.w;
    let target = select_task_rq(w, t, fork);
    let this_cpu = ctx.cpu();
    let kick = {
        let mut k = w.k.borrow_mut();
        k.tasks[t].queued = true;
        k.tasks[t].cpu = target;
        if fork {
            // A new task starts at the queue's min_vruntime.
            let m = k.cpus[target].min_vruntime_ns;
            k.tasks[t].vruntime_ns = k.tasks[t].vruntime_ns.max(m);
        }
        k.cpus[target].rq.push_back(t);
        let idle = k.cpus[target].current == k.cpus[target].idle;
        if target == this_cpu {
            k.cpus[target].need_resched |= idle;
            false
        } else {
            idle
        }
    };
    if kick {
        ctx.step(Op::ReschedIpi(target)).await;
    }
}

/// `try_to_wake_up()`.
pub async fn wake_up(ctx: &Ctx, t: TaskId) {
    let _f = ctx.func(crate::label!("try_to_wake_up"));
    let defer = {
        let mut k = ctx.w.k.borrow_mut();
        if k.tasks[t].state != TaskState::Blocked {
            return;
        }
        k.tasks[t].state = TaskState::Runnable;
        k.tasks[t].on_cpu
    };
    if !defer {
        enqueue_woken(ctx, t).await;
    }
}

/// Enqueues a woken task; if it preempts, its CPU reschedules (through an
/// IPI if remote).
async fn enqueue_woken(ctx: &Ctx, t: TaskId) {
    let w = &ctx.w;
    let target = select_task_rq(w, t, false);
    let this_cpu = ctx.cpu();
    let preempt = place_and_check_preempt(w, t, target);
    let kick = {
        let mut k = w.k.borrow_mut();
        k.tasks[t].queued = true;
        k.tasks[t].cpu = target;
        let idle = k.cpus[target].current == k.cpus[target].idle;
        k.cpus[target].rq.push_back(t);
        if target == this_cpu {
            k.cpus[target].need_resched |= idle || preempt;
            false
        } else {
            k.cpus[target].need_resched |= preempt;
            idle || preempt
        }
    };
    if kick {
        ctx.step(Op::ReschedIpi(target)).await;
    }
}

/// `sched_setaffinity(0, mask)`: restricts the caller to `mask` (`None`:
/// every CPU). If the current CPU is no longer allowed the task migrates at
/// once: it gives up the CPU and is enqueued on an allowed one.
pub async fn sys_sched_setaffinity(ctx: &Ctx, mask: Option<crate::hw::cpumask::CpuMask>) {
    syscall_enter(ctx, "sched_setaffinity").await;
    if set_affinity(ctx, mask, true) {
        // stop_one_cpu(migration_cpu_stop): modelled as time, not as a task.
        ctx.work(ctx.w.profile.kernel.migrate_ns).await;
        schedule(ctx).await;
    }
    syscall_exit(ctx, "sched_setaffinity").await;
}

/// Restricts the caller to `cpu` as `set_cpus_allowed_ptr()` does, for a
/// placement that a recorded host scheduler chose (trace replay): no
/// system call and no stopper (`migrate_ns`) is charged, since the host's
/// own cost of the placement lies in time the replay does not run (a
/// wake-up's `select_task_rq()`, or load balancing while the task was
/// preempted). With `now`, a caller running on another CPU moves there at
/// once (requeued, then [`schedule`]); without it the mask only steers the
/// next wake-up (for a caller about to sleep).
pub async fn set_cpus_allowed_replayed(ctx: &Ctx, cpu: CpuId, now: bool) {
    let mut m = crate::hw::cpumask::CpuMask::new(ctx.w.ncpus());
    m.set(cpu);
    if set_affinity(ctx, Some(m), now) {
        schedule(ctx).await;
    }
}

/// Gives the caller `mask` (`None`: every CPU). With `leave`, a caller
/// whose CPU is outside it is marked runnable, to be requeued on an
/// allowed CPU by the [`schedule`] the caller must then run; returns
/// whether it must.
fn set_affinity(ctx: &Ctx, mask: Option<crate::hw::cpumask::CpuMask>, leave: bool) -> bool {
    let cpu = ctx.cpu();
    let mut k = ctx.w.k.borrow_mut();
    let t = &mut k.tasks[ctx.task];
    let must = leave && !mask.as_ref().is_none_or(|m| m.test(cpu));
    t.affinity = mask;
    if must {
        t.state = TaskState::Runnable; // requeued by finish_task_switch
    }
    must
}

/// `sched_yield()`: gives the CPU to the next runnable task, if any; the
/// caller goes back on a run queue.
pub async fn sys_sched_yield(ctx: &Ctx) {
    syscall_enter(ctx, "sched_yield").await;
    let waiting = !ctx.w.k.borrow().cpus[ctx.cpu()].rq.is_empty();
    if waiting {
        schedule(ctx).await;
    }
    syscall_exit(ctx, "sched_yield").await;
}

/// Runs the task current on `cpu` until it posts its next step, starting
/// its program on first use; returns the task, the step and the kernel
/// function it was posted from ([`Ctx::func`], for the CPU-time profile).
/// Both drivers advance tasks with this.
pub fn advance(w: &Rc<World>, cpu: CpuId) -> (TaskId, Op, Option<&'static Label>) {
    let task = w.k.borrow().cpus[cpu].current;
    let fut = w.futures.borrow_mut()[task].take();
    let mut fut = match fut {
        Some(f) => f,
        None => {
            let program = w.programs.borrow_mut()[task]
                .take()
                .expect("a task without future has a program");
            let ctx = Ctx::new(w, task);
            if w.k.borrow().tasks[task].idle {
                program(ctx)
            } else {
                start_program(ctx, program)
            }
        }
    };
    let done = crate::engine::exec::poll_once(fut.as_mut()).is_ready();
    w.futures.borrow_mut()[task] = Some(fut);
    assert!(!done, "task {task} returned without do_exit");
    let (op, func) = {
        let k = w.k.borrow();
        let mb = &k.tasks[task].mb;
        (mb.take_posted(), mb.label())
    };
    (task, op.expect("a pending task posted a step"), func)
}
