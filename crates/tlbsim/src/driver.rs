//! The timing driver: runs the world as a discrete-event simulation. Every
//! step a task posts takes simulated time from the profile; broadcast TLBIs
//! reach their targets after a latency; DVM Syncs are served one at a time by
//! the misc node. Events are ordered by `(time, sequence)`.

use crate::engine::exec::poll_once;
use crate::engine::queue::EventQueue;
use crate::engine::Ns;
use crate::hw::{AccessTrace, CpuId};
use crate::kernel::{sched, Ctx, LockId, Op, OpResult, TaskState, World};
use crate::observe::Event;
use std::collections::VecDeque;
use std::rc::Rc;

/// Does the invalidation scan the whole TLB (`ASIDE1`, `VMALLE1`)?
fn whole_tlb(scope: crate::hw::tlb::TlbiScope) -> bool {
    matches!(
        scope,
        crate::hw::tlb::TlbiScope::Asid(_) | crate::hw::tlb::TlbiScope::All
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// The CPU's current step finishes.
    StepDone(CpuId),
    /// A broadcast TLBI reaches its targets.
    DvmApply(usize),
    /// The misc node finished the DVM Sync of a CPU.
    SyncDone(CpuId),
    /// A reschedule IPI arrives.
    Kick(CpuId),
    /// A function-call IPI arrives: (target, handler, argument, sender,
    /// the call had a single target).
    Ipi(CpuId, usize, usize, CpuId, bool),
    /// A handler's acknowledgement reaches the waiting sender.
    Ack(CpuId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Running kernel/user code (being polled) or between steps.
    Free,
    /// A timed step is under way.
    Step,
    /// DSB ISH waiting for this CPU's broadcasts to reach everyone.
    DsbInflight,
    /// DSB ISH waiting for / in DVM Sync service.
    DsbSync,
    /// Spinning on a lock.
    Lock(LockId),
    /// The idle task waits for work.
    Idle,
    /// `CallFunction` waiting for every handler to return.
    IpiAck,
}

/// An IPI handler running on a CPU, and what it interrupted.
struct IrqRun {
    fut: crate::kernel::TaskFuture,
    mb: Rc<crate::kernel::TaskMailbox>,
    sender: CpuId,
    /// The interrupted wait (`Free` when taken at the end of a step).
    saved: Wait,
}

/// Why a run stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The checker found a violation (`Display` prints its report).
    Violation(crate::check::Violation),
    /// Simulated time passed the limit.
    TimeLimit(Ns),
    /// Nothing can make progress.
    Deadlock(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Violation(r) => write!(f, "checker violation:\n{r}"),
            RunError::TimeLimit(t) => write!(f, "simulated time limit of {t} ns reached"),
            RunError::Deadlock(s) => write!(f, "deadlock: {s}"),
        }
    }
}

/// The discrete-event driver.
pub struct TimingDriver {
    w: Rc<World>,
    /// Step costs of the profile's architecture.
    c: crate::config::StepCosts,
    q: EventQueue<Ev>,
    wait: Vec<Wait>,
    result: Vec<Option<OpResult>>,
    mn_queue: VecDeque<(CpuId, Ns)>,
    mn_busy: bool,
    trace: Vec<AccessTrace>,
    limit_ns: Ns,
    /// Inject speculative walks (see [`TimingDriver::set_speculative_walks`]).
    speculative: bool,
    /// Per CPU: the mm and VA of its last user access.
    last_va: Vec<Option<(crate::hw::tlb::MmId, u64)>>,
    /// Per CPU: function-call IPIs waiting to be taken (handler, argument,
    /// sender).
    irq_queue: Vec<VecDeque<(usize, usize, CpuId)>>,
    /// Per CPU: the handler running, if any (no nesting).
    irq: Vec<Option<IrqRun>>,
    /// Per CPU: a completion of the interrupted task's step that arrived
    /// while its handler ran.
    deferred: Vec<Option<OpResult>>,
    /// Per CPU: handlers still to return to this CPU's `CallFunction`.
    acks: Vec<usize>,
    /// Per CPU: the task's `Work` step under way (its event and end).
    work_step: Vec<Option<(crate::engine::queue::EventId, Ns)>>,
    /// Per CPU: work left of a `Work` step an IPI interrupted.
    interrupted_work: Vec<Option<Ns>>,
}

impl std::fmt::Debug for TimingDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimingDriver")
            .field("queued", &self.q.len())
            .finish()
    }
}

impl TimingDriver {
    /// A driver for `w` that stops at `limit_ns` of simulated time.
    pub fn new(w: Rc<World>, limit_ns: Ns) -> Self {
        let n = w.ncpus();
        Self {
            speculative: false,
            c: w.profile.step_costs(),
            last_va: vec![None; n],
            irq_queue: vec![VecDeque::new(); n],
            irq: (0..n).map(|_| None).collect(),
            deferred: vec![None; n],
            acks: vec![0; n],
            work_step: vec![None; n],
            interrupted_work: vec![None; n],
            w,
            q: EventQueue::default(),
            wait: vec![Wait::Free; n],
            result: vec![None; n],
            mn_queue: VecDeque::new(),
            mn_busy: false,
            trace: Vec::new(),
            limit_ns,
        }
    }

    fn now(&self) -> Ns {
        self.w.now.get()
    }

    /// Moving a cache line from `from`'s cache to `to`'s.
    fn transfer_ns(&self, from: CpuId, to: CpuId) -> Ns {
        let k = &self.w.profile.kernel;
        let hw = self.w.hw.borrow();
        if hw.cpus[from].socket == hw.cpus[to].socket {
            k.cacheline_transfer_ns
        } else {
            k.cacheline_cross_socket_ns
                .unwrap_or(k.cacheline_transfer_ns)
        }
    }

    /// Are interrupts disabled on `cpu` (`Ctx::irq_save`)?
    fn irqs_off(&self, cpu: CpuId) -> bool {
        self.w.k.borrow().cpus[cpu].irqs_off > 0
    }

    /// Starts a queued IPI on `cpu` if it waits interruptibly (idle, on a
    /// lock, for acknowledgements) with interrupts on and no handler runs.
    fn take_pending_irq(&mut self, cpu: CpuId) {
        if self.irq[cpu].is_none()
            && !self.irq_queue[cpu].is_empty()
            && !self.irqs_off(cpu)
            && matches!(self.wait[cpu], Wait::Idle | Wait::Lock(_) | Wait::IpiAck)
        {
            self.start_irq(cpu);
        }
    }

    /// Interrupts the `Work` step under way on `cpu` to take its next IPI;
    /// the rest of the work runs after the handler.
    fn interrupt_work(&mut self, cpu: CpuId) {
        if let (Wait::Step, Some((id, end))) = (self.wait[cpu], self.work_step[cpu]) {
            self.q.cancel(id);
            self.work_step[cpu] = None;
            self.interrupted_work[cpu] = Some(end - self.now());
            self.wait[cpu] = Wait::Free;
            self.start_irq(cpu);
        }
    }

    /// Runs until `done(world)` holds after an event; returns the time then.
    pub fn run_until(&mut self, done: impl Fn(&World) -> bool) -> Result<Ns, RunError> {
        for cpu in 0..self.w.ncpus() {
            self.run_cpu(cpu);
        }
        loop {
            if let Some(r) = self.w.failure() {
                return Err(RunError::Violation(r));
            }
            if done(&self.w) {
                return Ok(self.now());
            }
            let Some((t, ev)) = self.q.pop() else {
                return Err(RunError::Deadlock(self.describe()));
            };
            if t > self.limit_ns {
                return Err(RunError::TimeLimit(self.limit_ns));
            }
            self.w.now.set(t);
            self.w.stats.borrow_mut().events += 1;
            match ev {
                Ev::StepDone(cpu) => {
                    let r = self.result[cpu].take().unwrap_or(OpResult::Unit);
                    if self.irq[cpu].is_none()
                        && !self.irq_queue[cpu].is_empty()
                        && !self.irqs_off(cpu)
                    {
                        // An IPI is taken at the end of the step.
                        self.deferred[cpu] = Some(r);
                        self.wait[cpu] = Wait::Free;
                        self.start_irq(cpu);
                    } else {
                        self.complete(cpu, r);
                    }
                }
                Ev::Ack(sender) => {
                    self.acks[sender] -= 1;
                    if self.acks[sender] == 0 {
                        self.complete_task(sender, OpResult::Unit);
                    }
                }
                Ev::Ipi(cpu, handler, arg, sender, single) => {
                    crate::effects::ipi_received(&self.w, cpu, single);
                    self.irq_queue[cpu].push_back((handler, arg, sender));
                    if self.irq[cpu].is_none() && !self.irqs_off(cpu) {
                        if self.wait[cpu] == Wait::Step && self.work_step[cpu].is_some() {
                            self.interrupt_work(cpu);
                        } else if matches!(
                            self.wait[cpu],
                            Wait::Idle | Wait::Lock(_) | Wait::IpiAck
                        ) {
                            self.start_irq(cpu);
                        }
                    }
                }
                Ev::DvmApply(id) => self.dvm_apply(id),
                Ev::SyncDone(cpu) => {
                    self.w.hw.borrow_mut().cpus[cpu].dvm_since_dsb = false;
                    self.w.emit(Event::DsbDone { cpu });
                    if self.c.sync_serialized {
                        self.mn_busy = false;
                        self.mn_start();
                    }
                    self.complete(cpu, OpResult::Unit);
                }
                Ev::Kick(cpu) => {
                    self.w.stats.borrow_mut().cpu[cpu].ipi_resched += 1;
                    match &self.irq[cpu] {
                        Some(run) if run.saved == Wait::Idle => {
                            self.deferred[cpu] = Some(OpResult::Unit);
                        }
                        None if self.wait[cpu] == Wait::Idle => {
                            self.complete(cpu, OpResult::Unit);
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    fn describe(&self) -> String {
        let k = self.w.k.borrow();
        let mut s = String::new();
        for (c, pc) in k.cpus.iter().enumerate() {
            s.push_str(&format!(
                "cpu{c}: {} ({:?}{}{}), rq {:?}; ",
                k.tasks[pc.current].name,
                self.wait[c],
                if pc.irqs_off > 0 { ", irqs off" } else { "" },
                match self.irq_queue[c].len() {
                    0 => String::new(),
                    n => format!(", {n} IPIs pending"),
                },
                pc.rq
            ));
        }
        s
    }

    /// Completes the CPU's outstanding step and runs it on.
    fn complete(&mut self, cpu: CpuId, r: OpResult) {
        self.wait[cpu] = Wait::Free;
        if let Some(run) = &self.irq[cpu] {
            run.mb.complete(r);
            self.run_irq(cpu);
            return;
        }
        let task = self.w.k.borrow().cpus[cpu].current;
        let mb = std::rc::Rc::clone(&self.w.k.borrow().tasks[task].mb);
        mb.complete(r);
        self.run_cpu(cpu);
    }

    /// Completes the interrupted task's step, now or, if a handler runs on
    /// the CPU, when it returns.
    fn complete_task(&mut self, cpu: CpuId, r: OpResult) {
        if self.irq[cpu].is_some() {
            self.deferred[cpu] = Some(r);
        } else {
            self.complete(cpu, r);
        }
    }

    /// Takes the next queued IPI on `cpu`: the handler runs in the context
    /// of the current task, after the exception-entry cost.
    fn start_irq(&mut self, cpu: CpuId) {
        let Some((handler, arg, sender)) = self.irq_queue[cpu].pop_front() else {
            return;
        };
        let w = Rc::clone(&self.w);
        let task = w.k.borrow().cpus[cpu].current;
        let mb: Rc<crate::kernel::TaskMailbox> = Rc::default();
        let ctx = Ctx::interrupt(&w, task, Rc::clone(&mb));
        let h = Rc::clone(&w.ipi_handlers.borrow()[handler]);
        let entry = w.profile.kernel.ipi_handler_ns;
        let inner = h(ctx.clone(), arg);
        let fut: crate::kernel::TaskFuture = Box::pin(async move {
            ctx.work(entry).await;
            inner.await;
        });
        let saved = std::mem::replace(&mut self.wait[cpu], Wait::Free);
        self.irq[cpu] = Some(IrqRun {
            fut,
            mb,
            sender,
            saved,
        });
        self.run_irq(cpu);
    }

    /// Polls the handler running on `cpu` until it posts a timed step or
    /// returns.
    fn run_irq(&mut self, cpu: CpuId) {
        loop {
            let run = self.irq[cpu].as_mut().expect("a handler runs");
            if poll_once(run.fut.as_mut()).is_ready() {
                let run = self.irq[cpu].take().expect("a handler runs");
                self.wait[cpu] = run.saved;
                // Acknowledge: the sender's CallFunction ends when it has
                // seen the last.
                let at = self.now() + self.w.profile.kernel.ipi_ack_ns;
                self.q.push(at, Ev::Ack(run.sender));
                if !self.irq_queue[cpu].is_empty() {
                    self.start_irq(cpu);
                } else if let Some(left) = self.interrupted_work[cpu].take() {
                    self.after_work(cpu, left);
                } else if let Some(r) = self.deferred[cpu].take() {
                    self.complete(cpu, r);
                } else if run.saved == Wait::Idle {
                    // The idle loop looks for work again.
                    self.complete(cpu, OpResult::Unit);
                }
                return;
            }
            let op = run
                .mb
                .take_posted()
                .expect("a pending handler posted a step");
            let task = self.w.k.borrow().cpus[cpu].current;
            assert!(
                !matches!(op, Op::SwitchTo(_) | Op::Idle | Op::CallFunction { .. }),
                "an IPI handler may not schedule or send IPIs"
            );
            match self.dispatch(cpu, task, op) {
                Some(r) => self.irq[cpu]
                    .as_ref()
                    .expect("a handler runs")
                    .mb
                    .complete(r),
                None => return,
            }
        }
    }

    /// Polls the CPU's current task until it posts a step that takes time.
    fn run_cpu(&mut self, cpu: CpuId) {
        loop {
            let (task, op) = sched::advance(&self.w, cpu);
            if let Some(next_poll) = self.dispatch(cpu, task, op) {
                let mb = Rc::clone(&self.w.k.borrow().tasks[task].mb);
                mb.complete(next_poll);
                continue;
            }
            return;
        }
    }

    /// With `on`, every kernel or user `Work` step of a CPU whose TTBR0
    /// holds an mm is preceded by a speculative walk of the last VA that CPU
    /// accessed in that mm (a lazy CPU running a kernel thread keeps walking
    /// the user tables it still has installed). Timing is unchanged.
    pub fn set_speculative_walks(&mut self, on: bool) {
        self.speculative = on;
    }

    fn speculate(&mut self, cpu: CpuId) {
        let Some(t) = self.w.hw.borrow().cpus[cpu].ttbr0 else {
            return;
        };
        if let Some((mm, va)) = self.last_va[cpu] {
            if mm == t.mm {
                crate::effects::speculate(&self.w, cpu, va, &mut self.trace);
            }
        }
    }

    fn after(&mut self, cpu: CpuId, ns: Ns, r: OpResult) {
        self.wait[cpu] = Wait::Step;
        self.result[cpu] = Some(r);
        let t = self.now() + ns;
        self.q.push(t, Ev::StepDone(cpu));
        self.work_step[cpu] = None;
    }

    /// A `Work` step of a task: an IPI may interrupt it (the rest of the
    /// work resumes when the handler returns).
    fn after_work(&mut self, cpu: CpuId, ns: Ns) {
        self.wait[cpu] = Wait::Step;
        self.result[cpu] = Some(OpResult::Unit);
        let t = self.now() + ns;
        let id = self.q.push(t, Ev::StepDone(cpu));
        self.work_step[cpu] = if self.irq[cpu].is_none() {
            Some((id, t))
        } else {
            None
        };
    }

    fn take_stolen(&self, cpu: CpuId) -> Ns {
        std::mem::take(&mut self.w.hw.borrow_mut().cpus[cpu].stolen_ns)
    }

    /// Starts `op`; returns `Some(result)` if it completes at once (zero
    /// time) and the task should be polled again immediately.
    fn dispatch(&mut self, cpu: CpuId, task: usize, op: Op) -> Option<OpResult> {
        let w = Rc::clone(&self.w);
        let p = &w.profile;
        match op {
            Op::Work { ns, user: _ } => {
                if self.speculative {
                    self.speculate(cpu);
                }
                let s = self.take_stolen(cpu);
                w.stats.borrow_mut().cpu[cpu].busy_ns += ns;
                self.after_work(cpu, ns + s);
                // An IPI that waited for interrupts to come back on is
                // taken now.
                if self.irq[cpu].is_none() && !self.irq_queue[cpu].is_empty() && !self.irqs_off(cpu)
                {
                    self.interrupt_work(cpu);
                }
            }
            Op::Access { va, write } => {
                if self.speculative {
                    self.last_va[cpu] = w.hw.borrow().cpus[cpu].ttbr0.map(|t| (t.mm, va));
                }
                let (r, info) = crate::effects::access(&w, cpu, va, write, &mut self.trace);
                let cost = if info.tlb_hit {
                    p.tlb.tlb_hit_ns
                } else {
                    p.tlb.tlb_hit_ns + p.tlb.walk_level_ns * u64::from(info.levels_walked)
                };
                let s = self.take_stolen(cpu);
                self.after(cpu, cost + s, OpResult::Access(r));
            }
            Op::Tlbi { scope, broadcast } => {
                let c = self.c;
                match crate::effects::tlbi(&w, cpu, scope, broadcast) {
                    Some(id) => {
                        let cross = if p.topology.sockets > 1 {
                            c.bcast_cross_socket_ns
                        } else {
                            0
                        };
                        let at = self.now() + c.bcast_latency_ns + cross;
                        self.q.push(at, Ev::DvmApply(id));
                        self.after(cpu, c.bcast_issue_ns, OpResult::Unit);
                    }
                    None => {
                        let cost = if whole_tlb(scope) {
                            c.inval_local_all_ns
                        } else {
                            c.inval_local_ns
                        };
                        self.after(cpu, cost, OpResult::Unit);
                    }
                }
            }
            Op::DsbSt | Op::DsbNsh => self.after(cpu, self.c.barrier_ns, OpResult::Unit),
            Op::Isb => self.after(cpu, self.c.isb_ns, OpResult::Unit),
            Op::DsbIsh => {
                w.stats.borrow_mut().cpu[cpu].dsb_ish += 1;
                if w.hw.borrow().cpus[cpu].inflight > 0 {
                    self.wait[cpu] = Wait::DsbInflight;
                } else {
                    self.dsb_sync(cpu);
                }
            }
            Op::SetTtbr0(t) => {
                crate::effects::set_ttbr0(&w, cpu, t);
                self.after(cpu, self.c.ttbr_write_ns, OpResult::Unit);
            }
            Op::LoadCr3 { cr3, flush } => {
                crate::effects::load_cr3(&w, cpu, cr3, flush);
                let cost = self.c.ttbr_write_ns + flush.map_or(0, |_| self.c.inval_local_all_ns);
                self.after(cpu, cost, OpResult::Unit);
            }
            Op::Atomic => self.after(cpu, p.kernel.atomic_ns, OpResult::Unit),
            Op::LockWord(l) => {
                let now = self.now();
                let cost =
                    w.k.borrow_mut().locks[l].line_rmw(cpu, now, p.kernel.atomic_ns, |from| {
                        self.transfer_ns(from, cpu)
                    });
                self.after(cpu, cost, OpResult::Unit);
            }
            Op::Lock(l) | Op::LockShared(l) => {
                let shared = matches!(op, Op::LockShared(_));
                let now = self.now();
                let (got, name, cost) = {
                    let mut k = w.k.borrow_mut();
                    let lock = &mut k.locks[l];
                    let got = lock.acquire(task, shared, now);
                    if got && !shared {
                        lock.held_since_ns = now;
                    }
                    let cost = if got {
                        lock.line_rmw(cpu, now, p.kernel.atomic_ns, |from| {
                            self.transfer_ns(from, cpu)
                        })
                    } else {
                        0
                    };
                    (got, lock.name, cost)
                };
                w.stats.borrow_mut().lock(name).acquisitions += 1;
                if got {
                    self.after(cpu, cost, OpResult::Unit);
                } else {
                    self.wait[cpu] = Wait::Lock(l);
                    self.take_pending_irq(cpu);
                }
            }
            Op::Unlock(l) | Op::UnlockShared(l) => {
                let shared = matches!(op, Op::UnlockShared(_));
                let now = self.now();
                let (granted, name, cost) = {
                    let mut k = w.k.borrow_mut();
                    let lock = &mut k.locks[l];
                    if !shared {
                        let held = now.saturating_sub(lock.held_since_ns);
                        w.stats.borrow_mut().lock(lock.name).hold_ns.record(held);
                    }
                    let cost = lock.line_rmw(cpu, now, p.kernel.atomic_ns, |from| {
                        self.transfer_ns(from, cpu)
                    });
                    let granted = lock.release(shared);
                    (granted, lock.name, cost)
                };
                if let Some(g) = granted.last() {
                    // The waiters take the line over after the release.
                    let mut k = w.k.borrow_mut();
                    let gcpu = k.tasks[g.task].cpu;
                    k.locks[l].line_cpu = Some(gcpu);
                }
                for g in granted {
                    let wcpu = w.k.borrow().tasks[g.task].cpu;
                    let handoff = self.transfer_ns(cpu, wcpu);
                    if !g.shared {
                        w.k.borrow_mut().locks[l].held_since_ns = now + handoff;
                    }
                    let waited = self.now() + handoff - g.since_ns;
                    w.stats
                        .borrow_mut()
                        .lock(name)
                        .contended_wait_ns
                        .record(waited);
                    if self.irq[wcpu].is_some() && self.wait[wcpu] != Wait::Lock(l) {
                        // The spinning task was interrupted: it gets the
                        // lock when its handler returns.
                        self.deferred[wcpu] = Some(OpResult::Unit);
                    } else {
                        self.after(wcpu, handoff, OpResult::Unit);
                    }
                }
                self.after(cpu, cost, OpResult::Unit);
            }
            Op::SwitchTo(_next) => {
                // The posting task parks with its step completed; it resumes
                // when it is switched to again. A task that exited is dropped.
                let state = w.k.borrow().tasks[task].state;
                if matches!(state, TaskState::Zombie | TaskState::Dead) {
                    w.futures.borrow_mut()[task] = None;
                } else {
                    let mb = Rc::clone(&w.k.borrow().tasks[task].mb);
                    mb.complete(OpResult::Unit);
                }
                self.wait[cpu] = Wait::Free;
                self.run_cpu(cpu);
            }
            Op::Idle => {
                let work = {
                    let k = w.k.borrow();
                    k.cpus[cpu].need_resched || !k.cpus[cpu].rq.is_empty()
                };
                if work {
                    return Some(OpResult::Unit);
                }
                w.hw.borrow_mut().cpus[cpu].stolen_ns = 0;
                self.wait[cpu] = Wait::Idle;
                self.take_pending_irq(cpu);
            }
            Op::ReschedIpi(target) => {
                w.stats.borrow_mut().cpu[cpu].ipis_sent += 1;
                let at = self.now() + p.kernel.resched_ipi_ns;
                self.q.push(at, Ev::Kick(target));
                self.after(cpu, p.kernel.atomic_ns, OpResult::Unit);
            }
            Op::CallFunction {
                targets,
                handler,
                arg,
            } => {
                let n = targets.count();
                if n == 0 {
                    return Some(OpResult::Unit);
                }
                self.acks[cpu] = n;
                self.wait[cpu] = Wait::IpiAck;
                // One interrupt-controller write per group of
                // `ipi_cpus_per_send` CPUs, one after another; each IPI
                // arrives `ipi_latency_ns` after its write.
                let k = &p.kernel;
                let per = k.ipi_cpus_per_send as usize;
                let mut t = self.now();
                let mut group = usize::MAX;
                for target in targets.iter() {
                    if target / per != group {
                        group = target / per;
                        t += k.ipi_send_ns;
                    }
                    self.q.push(
                        t + k.ipi_latency_ns,
                        Ev::Ipi(target, handler, arg, cpu, n == 1),
                    );
                }
                // The sender takes IPIs while it waits.
                self.take_pending_irq(cpu);
            }
        }
        None
    }

    fn dsb_sync(&mut self, cpu: CpuId) {
        if self.w.hw.borrow().cpus[cpu].dvm_since_dsb {
            self.w.stats.borrow_mut().cpu[cpu].dvm_syncs += 1;
            self.wait[cpu] = Wait::DsbSync;
            if self.c.sync_serialized {
                self.mn_queue.push_back((cpu, self.now()));
                self.mn_start();
            } else {
                // Completion barriers of different CPUs proceed in parallel
                // (x86 TLBSYNC unless the profile says otherwise).
                let at = self.now() + self.sync_service_ns();
                self.q.push(at, Ev::SyncDone(cpu));
            }
        } else {
            self.after(cpu, self.c.barrier_ns, OpResult::Unit);
        }
    }

    /// Service time of one completion barrier (DVM Sync / TLBSYNC). With
    /// several sockets it also makes a round trip to the other socket
    /// (docs/model.md).
    fn sync_service_ns(&self) -> Ns {
        let cross = if self.w.profile.topology.sockets > 1 {
            2 * self.c.bcast_cross_socket_ns
        } else {
            0
        };
        self.c.sync_base_ns + self.c.sync_per_target_ns * self.w.ncpus() as u64 + cross
    }

    /// The misc node starts serving the next DVM Sync, if idle.
    fn mn_start(&mut self) {
        if self.mn_busy {
            return;
        }
        let Some((cpu, since)) = self.mn_queue.pop_front() else {
            return;
        };
        self.mn_busy = true;
        let waited = self.now() - since;
        self.w
            .stats
            .borrow_mut()
            .dvm_sync_queue_wait_ns
            .record(waited);
        let at = self.now() + self.sync_service_ns();
        self.q.push(at, Ev::SyncDone(cpu));
    }

    fn dvm_apply(&mut self, id: usize) {
        let issuer = {
            let mut hw = self.w.hw.borrow_mut();
            let mut st = self.w.stats.borrow_mut();
            let f = hw.inflight[id].as_ref().expect("live");
            let issuer = f.issuer;
            let stall = if whole_tlb(f.scope) {
                self.c.bcast_target_stall_all_ns
            } else {
                self.c.bcast_target_stall_ns
            };
            let wait = &self.wait;
            hw.dvm_apply_all(id, |c, t| {
                if t != issuer {
                    st.cpu[t].dvm_ops_received += 1;
                    // An idle CPU absorbs the work (docs/model.md).
                    if wait[t] != Wait::Idle {
                        c.stolen_ns += stall;
                    }
                }
            })
        };
        if self.w.hw.borrow().cpus[issuer].inflight == 0 && self.wait[issuer] == Wait::DsbInflight {
            self.dsb_sync(issuer);
        }
    }
}
