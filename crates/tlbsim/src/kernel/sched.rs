//! Scheduling: per-CPU FIFO run queues with time slices, wake-ups with
//! reschedule IPIs, the idle task, lazy TLB for tasks without an mm, and the
//! process lifecycle (fork, exec, exit, wait) (kernel/sched/core.c,
//! kernel/fork.c, kernel/exit.c, fs/exec.c).

use super::entry::{syscall_enter, syscall_exit};
use super::fork::{dup_mmap, mmdrop, mmput};
use super::{Ctx, Op, Program, TaskFuture, TaskId, TaskState, World};
use crate::engine::label::Label;
use crate::hw::cpumask::CpuMask;
use crate::hw::CpuId;
use std::rc::Rc;

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
                w.k.borrow_mut().mms[m as usize].count += 1; // mmgrab()
                w.policy.enter_lazy_tlb(ctx, m, next_idle).await;
            }
        }
        Some(m) => {
            w.policy.switch_mm(ctx, prev_active, m).await;
        }
    }
    if w.policy.arch() == crate::config::Arch::Arm64 && w.kcfg.switch_to_dsb {
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
    if let Some(c) = (0..n).find(|&c| allowed(c) && idle(c)) {
        return c;
    }
    let load = |c: CpuId| k.cpus[c].rq.len() + usize::from(k.cpus[c].current != k.cpus[c].idle);
    (0..n)
        .filter(|&c| allowed(c))
        .min_by_key(|&c| (load(c), c != task.cpu, c))
        .unwrap_or(task.cpu)
}

/// Puts a runnable task on a run queue and kicks that CPU if it idles.
async fn enqueue(ctx: &Ctx, t: TaskId, fork: bool) {
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

/// CFS's wake-up placement and preemption (kernel/sched/fair.c, equal
/// weights): a woken task's vruntime is raised to at least `min_vruntime -
/// sched_latency / 2` (GENTLE_FAIR_SLEEPERS); it preempts the running task
/// when that task's vruntime (including its current run) is ahead by more
/// than `wakeup_granularity`. Both tunables are Linux's defaults scaled by
/// `1 + ilog2(min(ncpus, 8))`.
fn place_and_check_preempt(w: &World, t: TaskId, cpu: CpuId) -> bool {
    let mut k = w.k.borrow_mut();
    let now = w.now.get();
    let factor = 1 + (w.ncpus().clamp(1, 8) as u64).ilog2() as u64;
    let latency = w.profile.kernel.sched_latency_ns * factor;
    let gran = w.profile.kernel.wakeup_granularity_ns * factor;
    let floor = k.cpus[cpu].min_vruntime_ns.saturating_sub(latency / 2);
    let v = k.tasks[t].vruntime_ns.max(floor);
    k.tasks[t].vruntime_ns = v;
    let pc = &k.cpus[cpu];
    if pc.current == pc.idle {
        return false;
    }
    let cur = &k.tasks[pc.current];
    let cur_v = cur.vruntime_ns + now.saturating_sub(cur.slice_start_ns);
    cur_v > v + gran
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

/// `fork()`/`clone()` of a process: copies the address space and starts
/// `program` in the child. Returns the child's id.
pub async fn sys_fork(ctx: &Ctx, name: &str, program: Program) -> TaskId {
    sys_fork_pinned(ctx, name, None, program).await
}

/// The CPUs a new child may run on: `pin` alone, or its parent's.
fn child_affinity(w: &World, parent: TaskId, pin: Option<CpuId>) -> Option<CpuMask> {
    match pin {
        Some(c) => {
            let mut m = CpuMask::new(w.ncpus());
            m.set(c);
            Some(m)
        }
        None => w.k.borrow().tasks[parent].affinity.clone(),
    }
}

/// [`sys_fork`], the child pinned to CPU `pin` from its creation if given
/// (replay's recorded placement: the child's first CPU).
pub async fn sys_fork_pinned(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    let _f = ctx.func(crate::label!("kernel_clone"));
    syscall_enter(ctx, "fork").await;
    let w = &ctx.w;
    ctx.work(w.profile.kernel.fork_ns).await;
    let mm = match ctx.mm() {
        Some(m) => Some(dup_mmap(ctx, m).await),
        None => None,
    };
    let child = w.new_task(name.to_string(), mm, ctx.cpu(), Some(ctx.task), program);
    let affinity = child_affinity(w, ctx.task, pin);
    {
        let mut k = w.k.borrow_mut();
        k.tasks[ctx.task].children += 1;
        k.tasks[child].state = TaskState::Runnable;
        k.tasks[child].affinity = affinity;
    }
    enqueue(ctx, child, true).await; // wake_up_new_task()
    syscall_exit(ctx, "fork").await;
    child
}

/// `clone(CLONE_VM | ...)`: starts a thread sharing this task's mm,
/// optionally pinned to one CPU. Threads are reaped with `sys_wait` by the
/// task that created them (a simplification of CLONE_THREAD).
pub async fn sys_clone_thread(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    clone_vm(ctx, "clone", name, pin, program).await
}

/// The system call `call` creating a `CLONE_VM` child that owes nobody a
/// wake-up ([`copy_process_vm`]).
async fn clone_vm(
    ctx: &Ctx,
    call: &'static str,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    let _f = ctx.func(crate::label!("kernel_clone"));
    syscall_enter(ctx, call).await;
    let child = copy_process_vm(ctx, name, pin, program, false).await;
    syscall_exit(ctx, call).await;
    child
}

/// `vfork()` (`clone(CLONE_VM | CLONE_VFORK)`, also glibc's
/// `posix_spawn()`): a child process that runs in this task's mm, no copy
/// made (`copy_mm()` with `CLONE_VM`: `mmget()`), until it execs or exits
/// (`mm_release()`); this task waits for that (`wait_for_vfork_done()`).
/// Returns the child's id.
pub async fn sys_vfork(ctx: &Ctx, name: &str, program: Program) -> TaskId {
    let _f = ctx.func(crate::label!("kernel_clone"));
    syscall_enter(ctx, "vfork").await;
    let child = copy_process_vm(ctx, name, None, program, true).await;
    // wait_for_vfork_done(): until complete_vfork_done() in the child.
    while ctx.w.k.borrow().tasks[child].vfork_parent == Some(ctx.task) {
        block_until_woken(ctx).await;
    }
    syscall_exit(ctx, "vfork").await;
    child
}

/// [`sys_vfork`] for a replay, the child pinned to CPU `pin` from its
/// creation if given, and without the parent's wait: the trace has it
/// (the parent's sleep until the child's wake-up at its exec).
pub async fn sys_vfork_replayed(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    clone_vm(ctx, "vfork", name, pin, program).await
}

/// `copy_process()` of a `CLONE_VM` child, a thread or a `vfork()`
/// process: it shares this task's mm (one more user), copies nothing
/// (`fork_ns / 4`), and with `vfork_done` owes this task a wake-up at
/// its [`mm_release`].
async fn copy_process_vm(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
    vfork_done: bool,
) -> TaskId {
    let w = &ctx.w;
    ctx.work(w.profile.kernel.fork_ns / 4).await;
    let mm = ctx.mm().expect("user task");
    // mmget()
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm as usize].users += 1)
        .await;
    let child = w.new_task(
        name.to_string(),
        Some(mm),
        ctx.cpu(),
        Some(ctx.task),
        program,
    );
    let affinity = child_affinity(w, ctx.task, pin);
    {
        let mut k = w.k.borrow_mut();
        k.tasks[ctx.task].children += 1;
        k.tasks[child].state = TaskState::Runnable;
        k.tasks[child].affinity = affinity;
        k.tasks[child].vfork_parent = vfork_done.then_some(ctx.task);
    }
    enqueue(ctx, child, true).await; // wake_up_new_task()
    child
}

/// `mm_release()` → `complete_vfork_done()`: a `vfork()` child that
/// execs or exits wakes the parent waiting in [`sys_vfork`].
async fn mm_release(ctx: &Ctx) {
    let parent = ctx.w.k.borrow_mut().tasks[ctx.task].vfork_parent.take();
    if let Some(p) = parent {
        wake_up(ctx, p).await;
    }
}

/// Starts a kernel thread on `cpu` (no mm: it borrows one lazily).
pub fn spawn_kthread(w: &Rc<World>, name: &str, cpu: CpuId, program: Program) -> TaskId {
    let t = w.new_task(name.to_string(), None, cpu, None, program);
    let mut k = w.k.borrow_mut();
    k.tasks[t].state = TaskState::Runnable;
    k.tasks[t].queued = true;
    let mut m = crate::hw::cpumask::CpuMask::new(w.ncpus());
    m.set(cpu);
    k.tasks[t].affinity = Some(m);
    k.cpus[cpu].rq.push_back(t);
    k.cpus[cpu].need_resched = true;
    t
}

/// Starts the first user process (like init) on `cpu` with a new mm.
pub fn spawn_user(w: &Rc<World>, name: &str, cpu: CpuId, program: Program) -> TaskId {
    let mm = w.new_mm();
    let t = w.new_task(name.to_string(), Some(mm), cpu, None, program);
    let mut k = w.k.borrow_mut();
    k.tasks[t].state = TaskState::Runnable;
    k.tasks[t].queued = true;
    k.cpus[cpu].rq.push_back(t);
    k.cpus[cpu].need_resched = true;
    t
}

/// `execve()`: replaces the address space with a fresh one, whose only
/// mapping is the argument stack at a random depth
/// ([`super::exec::setup_arg_pages`]).
pub async fn sys_exec(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("begin_new_exec"));
    syscall_enter(ctx, "execve").await;
    let w = &ctx.w;
    ctx.work(w.profile.kernel.exec_ns).await;
    let new = w.new_mm();
    let old = {
        let mut k = w.k.borrow_mut();
        let t = &mut k.tasks[ctx.task];
        let old = t.mm;
        t.mm = Some(new);
        t.active_mm = Some(new);
        old
    };
    // exec_mmap(): exec_mm_release(), then activate_mm().
    mm_release(ctx).await;
    w.policy.switch_mm(ctx, old, new).await;
    if let Some(o) = old {
        mmput(ctx, o).await;
    }
    super::exec::setup_arg_pages(ctx, new).await;
    syscall_exit(ctx, "execve").await;
}

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
        w.k.borrow_mut().mms[m as usize].count += 1; // mmgrab(): stay lazy on it
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

/// A system call that does nothing but enter and return (`getpid`,
/// `getuid`, `umask`, `dup`, `close` of unixbench's `syscall` test):
/// `syscall_ns` in all.
pub async fn sys_null(ctx: &Ctx, name: &'static str) {
    syscall_enter(ctx, name).await;
    syscall_exit(ctx, name).await;
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
