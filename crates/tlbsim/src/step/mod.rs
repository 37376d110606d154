//! One step semantics, shared by both drivers (DESIGN §2).
//!
//! A CPU runs one *context* at a time: its current task, or the IPI handler
//! that interrupted it. A context runs until it posts a step ([`crate::kernel::Op`])
//! and waits for the driver to complete it. What a step *does* — to the
//! machine, to the kernel's locks and run queues, to the statistics and to
//! the observer's event stream — is written here once ([`Cpus::apply`] and
//! the arrival functions in [`ops`]). A driver decides only *when*:
//!
//! - the timing driver ([`crate::driver`]) applies a step as soon as it is
//!   posted and completes it after the step's cost in simulated time;
//! - the explorer ([`crate::explore`]) applies a step when it chooses
//!   `Step(cpu)`, and chooses when IPIs are taken and TLBIs arrive.
//!
//! Adding an operation means: one arm in [`Cpus::apply`] (its semantics),
//! one cost in the timing driver and, if other CPUs can observe it, one
//! choice point in the explorer.
//!
//! **Contexts.** What runs on a physical CPU is a *context* ([`Cx`]): one
//! kernel's CPU, with its own wait, pending IPIs, running handler and
//! acknowledgements owed. The host's CPU `i` is context `i`; a guest
//! kernel's vCPUs are contexts added after ([`Cpus::add_guest`]). A
//! physical CPU runs its host context until the host's vCPU thread enters
//! a guest ([`crate::kernel::Op::EnterGuest`]); from then it runs that
//! vCPU's context until the guest exits (`WFI`). Every per-CPU method
//! below takes the physical CPU and acts on the context it runs; IPIs,
//! acknowledgements and lock grants address contexts, which may not be
//! running anywhere (a vCPU whose thread sleeps): they then wait in the
//! context, and a guest's is marked pending for KVM
//! ([`crate::kernel::Guest::pending`]) and rings its doorbell.

pub mod cpu_time;
pub mod guests;
pub mod ops;
pub mod stolen;

use crate::engine::exec::poll_once;
use crate::engine::label::Label;
use crate::engine::track::{part, record, Loc, Space};
use crate::hw::{CpuId, CpuVec};
use crate::kernel::{sched, Ctx, LockId, Op, OpResult, TaskFuture, TaskId, TaskMailbox, World};
use std::collections::VecDeque;
use std::rc::Rc;

pub use guests::Guests;
pub use ops::Applied;
pub use stolen::Stolen;

/// A context: one kernel's CPU (see the module doc). The host's CPU `i`
/// is context `i` ([`host_cx`]).
pub type Cx = usize;

/// The context of the host's CPU `cpu`: its number.
#[inline(always)]
pub fn host_cx(cpu: CpuId) -> Cx {
    cpu.index()
}

/// Where a context belongs and runs.
#[derive(Debug, Clone, Copy)]
struct CxInfo {
    /// Index of its kernel in [`Cpus::kernels`] (0: the host).
    kernel: usize,
    /// Its CPU number in that kernel.
    cpu: CpuId,
    /// The physical CPU running it now, if any.
    on: Option<CpuId>,
}

/// What a CPU's running context waits for between steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// Running, or between steps with nothing outstanding.
    Free,
    /// Posted this step, not yet applied (the explorer applies it when it
    /// chooses `Step`).
    Posted(Op),
    /// Its step is applied and completes when the driver says (timing:
    /// after the step's cost).
    Step,
    /// `DSB ISH` waiting for this CPU's broadcast TLBIs to reach every
    /// target.
    DsbInflight,
    /// `DSB ISH` waiting for (or in) DVM Sync service.
    DsbSync,
    /// Spinning on a lock until a release grants it.
    Lock(LockId),
    /// The idle loop, waiting for a reschedule.
    Idle,
    /// `CallFunction` waiting for every handler to return.
    IpiAck,
    /// Released from a wait (or its step ended while a handler ran): it
    /// resumes with this result when the driver lets it run.
    Ready(OpResult),
    /// A host vCPU thread's `EnterGuest`: the physical CPU runs the guest
    /// until it exits.
    InGuest,
}

impl Wait {
    /// The wait as a deadlock report prints it (`spinning on lock 3`,
    /// `posted TLBI VAE1IS asid 2 va 0x...`), naming TLB maintenance in
    /// `arch`'s terms.
    pub fn display(&self, arch: crate::config::Arch) -> WaitDisplay<'_> {
        WaitDisplay { wait: self, arch }
    }
}

/// A [`Wait`] in words, made by [`Wait::display`].
#[derive(Debug, Clone, Copy)]
pub struct WaitDisplay<'a> {
    wait: &'a Wait,
    arch: crate::config::Arch,
}

impl std::fmt::Display for WaitDisplay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.wait {
            Wait::Free => f.write_str("free"),
            Wait::Posted(op) => write!(f, "posted {}", op.display(self.arch)),
            Wait::Step => f.write_str("in a step"),
            Wait::DsbInflight => f.write_str("DSB ISH waiting for its TLBIs to reach every target"),
            Wait::DsbSync => f.write_str("DSB ISH waiting for DVM Sync"),
            Wait::Lock(l) => write!(f, "spinning on lock {l}"),
            Wait::Idle => f.write_str("idle"),
            Wait::IpiAck => f.write_str("waiting for IPI acknowledgements"),
            Wait::Ready(r) => write!(f, "ready, {r}"),
            Wait::InGuest => f.write_str("running a guest"),
        }
    }
}

/// `rq task3 task4`, or `rq empty`: a run queue in a deadlock report.
fn run_queue(rq: &VecDeque<TaskId>) -> String {
    if rq.is_empty() {
        return "rq empty".to_string();
    }
    let tasks: Vec<String> = rq.iter().map(|t| format!("task{t}")).collect();
    format!("rq {}", tasks.join(" "))
}

/// What kind of interrupt a [`PendingIpi`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqKind {
    /// A function-call IPI (or a vCPU's doorbell): runs the registered
    /// handler after `ipi_handler_ns` of entry.
    Call,
    /// The periodic timer tick ([`crate::kernel::tick`]): `arg` counts
    /// the tick periods it stands for; its handler costs
    /// `tick_handler_ns`, entry to exit.
    Tick,
    /// A sleeper's high-resolution timer ([`crate::kernel::hrtimer`]):
    /// `arg` is the task it wakes and `handler` the number of the sleep
    /// it ends; entered in `ipi_handler_ns`, as an IPI.
    Hrtimer,
}

/// An interrupt that reached a CPU and waits to be taken: a function-call
/// IPI, or the timer tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingIpi {
    /// Which kind.
    pub kind: IrqKind,
    /// Index of the handler (`World::register_ipi_handler`; unused for a
    /// tick; for an hrtimer, the sleep's number).
    pub handler: usize,
    /// Its argument.
    pub arg: usize,
    /// The context whose `CallFunction` waits for the acknowledgement
    /// (`None`: nobody waits, as for a vCPU's doorbell).
    pub sender: Option<Cx>,
}

/// An IPI handler running on a CPU, and what it interrupted.
struct IrqRun {
    fut: TaskFuture,
    mb: Rc<TaskMailbox>,
    sender: Option<Cx>,
    /// The interrupted context's wait.
    saved: Wait,
}

/// What polling a CPU's running context gave.
#[derive(Debug)]
pub enum Polled {
    /// The context posted `op`, running as `task`, from inside the kernel
    /// function named last ([`crate::kernel::Ctx::func`]), if any.
    Step(TaskId, Op, Option<&'static Label>),
    /// The IPI handler returned: the interrupted context's wait is restored
    /// and `sender`, if any, is owed an acknowledgement ([`Cpus::ack`]).
    Returned {
        /// The context whose `CallFunction` sent the IPI.
        sender: Option<Cx>,
    },
}

/// The execution state of every CPU: the context running, what it waits
/// for, the IPIs queued for it, and the acknowledgements it waits for.
pub struct Cpus {
    /// The host kernel.
    pub w: Rc<World>,
    /// Every kernel: the host, then the guests.
    kernels: Vec<Rc<World>>,
    /// Per context: its kernel, CPU there, and where it runs.
    cxs: Vec<CxInfo>,
    /// Per physical CPU: the context it runs.
    on: CpuVec<Cx>,
    /// Per context: what it waits for (written only by
    /// [`Cpus::set_wait`] and the context-addressed releases).
    wait: Vec<Wait>,
    /// Time stolen from each physical CPU, which it is charged at its
    /// next step (the timing driver's; idle CPUs absorb it).
    pub stolen: Stolen,
    /// Per context.
    irq_queue: Vec<VecDeque<PendingIpi>>,
    /// Per context.
    irq: Vec<Option<IrqRun>>,
    /// Per context.
    acks: Vec<usize>,
    /// Per guest context: the doorbell that wakes its vCPU thread (a host
    /// IPI handler and its argument), set by KVM ([`Cpus::set_doorbell`]).
    doorbell: Vec<Option<(usize, usize)>>,
    /// Per context: its translation base while it does not run (a vCPU's
    /// `TTBR0_EL1`, kept by KVM; the host's, while its CPU runs a guest:
    /// VHE gives the host its own regime).
    saved_ttbr0: Vec<crate::hw::UserRegs>,
}

impl std::fmt::Debug for Cpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cpus").field("wait", &self.wait).finish()
    }
}

impl Cpus {
    /// The first runtime limit a kernel of the machine has grown past
    /// ([`World::over_limit`]).
    pub fn over_limit(&self) -> Option<String> {
        self.kernels.iter().find_map(|k| k.over_limit())
    }

    /// Every CPU of `w`, free, with no IPI pending.
    pub fn new(w: Rc<World>) -> Self {
        let n = w.ncpus();
        Self {
            kernels: vec![Rc::clone(&w)],
            w,
            cxs: CpuId::all(n)
                .map(|cpu| CxInfo {
                    kernel: 0,
                    cpu,
                    on: Some(cpu),
                })
                .collect(),
            on: CpuVec::from_fn(n, host_cx),
            wait: vec![Wait::Free; n],
            stolen: Stolen::new(n),
            irq_queue: vec![VecDeque::new(); n],
            irq: (0..n).map(|_| None).collect(),
            acks: vec![0; n],
            doorbell: vec![None; n],
            saved_ttbr0: vec![crate::hw::UserRegs::default(); n],
        }
    }

    /// Adds guest kernel `g`'s vCPUs as contexts, running nowhere yet;
    /// returns the context of its vCPU 0 (vCPU `i` is that plus `i`).
    pub fn add_guest(&mut self, g: Rc<World>) -> Cx {
        let base = self.cxs.len();
        let kernel = self.kernels.len();
        for cpu in CpuId::all(g.ncpus()) {
            self.cxs.push(CxInfo {
                kernel,
                cpu,
                on: None,
            });
            self.wait.push(Wait::Free);
            self.irq_queue.push(VecDeque::new());
            self.irq.push(None);
            self.acks.push(0);
            self.doorbell.push(None);
            self.saved_ttbr0.push(crate::hw::UserRegs::default());
        }
        self.kernels.push(g);
        base
    }

    /// Context `cx`'s doorbell: a host IPI `handler` with `arg`, sent to
    /// the physical CPU its vCPU last ran on when an interrupt arrives
    /// for it while it runs nowhere (GICv4.1 vPE doorbells).
    pub fn set_doorbell(&mut self, cx: Cx, handler: usize, arg: usize) {
        self.doorbell[cx] = Some((handler, arg));
    }

    /// The context `cpu` runs.
    #[inline]
    pub fn running(&self, cpu: CpuId) -> Cx {
        self.on[cpu]
    }

    /// Does `cpu` run a guest's context (not its host one)?
    #[inline]
    pub fn in_guest(&self, cpu: CpuId) -> bool {
        self.on[cpu] != host_cx(cpu)
    }

    /// The physical CPU running context `cx`, if any.
    pub fn resident(&self, cx: Cx) -> Option<CpuId> {
        self.cxs[cx].on
    }

    /// The kernel of the context `cpu` runs, and its CPU number there.
    #[inline]
    pub fn kernel(&self, cpu: CpuId) -> (&Rc<World>, CpuId) {
        let cx = self.on[cpu];
        if cx == host_cx(cpu) {
            // The host's context (the only kind without VMs).
            return (&self.w, cpu);
        }
        let i = &self.cxs[cx];
        (&self.kernels[i.kernel], i.cpu)
    }

    /// The context of CPU `local` of the kernel that `cpu` runs.
    pub fn cx_of(&self, cpu: CpuId, local: CpuId) -> Cx {
        let k = self.cxs[self.on[cpu]].kernel;
        if k == 0 {
            host_cx(local)
        } else {
            // A guest's contexts are consecutive from its vCPU 0.
            self.on[cpu] - self.cxs[self.on[cpu]].cpu.index() + local.index()
        }
    }

    /// The context holding task `t` of the kernel that `cpu` runs (the
    /// task's CPU there).
    pub fn cx_of_task(&self, cpu: CpuId, t: TaskId) -> Cx {
        let local = self.kernel(cpu).0.k.borrow().tasks[t].cpu;
        self.cx_of(cpu, local)
    }

    /// What the running context of `cpu` waits for.
    #[inline]
    pub fn wait(&self, cpu: CpuId) -> &Wait {
        &self.wait[self.on[cpu]]
    }

    /// What each context waits for, by context (the host's first, by CPU).
    pub fn waits(&self) -> &[Wait] {
        &self.wait
    }

    /// Sets what the running context of `cpu` waits for; returns what it
    /// waited for before. Entering or leaving `Wait::Idle` is told to
    /// [`Cpus::stolen`].
    #[inline(always)]
    pub fn set_wait(&mut self, cpu: CpuId, w: Wait) -> Wait {
        record(|| Loc::part(Space::Cx, part::cx(self.on[cpu])), true);
        let idle = matches!(w, Wait::Idle);
        let old = std::mem::replace(&mut self.wait[self.on[cpu]], w);
        if matches!(old, Wait::Idle) != idle {
            self.stolen.set_idle(cpu, idle);
        }
        old
    }

    /// Is an IPI handler running on `cpu`?
    #[inline]
    pub fn in_irq(&self, cpu: CpuId) -> bool {
        self.irq[self.on[cpu]].is_some()
    }

    /// Does the idle loop of the context `cpu` runs have work (a
    /// reschedule due or a task queued)?
    pub fn idle_has_work(&self, cpu: CpuId) -> bool {
        let (w, local) = self.kernel(cpu);
        let k = w.k.borrow();
        k.cpus[local].need_resched || !k.cpus[local].rq.is_empty()
    }

    /// Are IPIs waiting for `cpu`'s host context while it runs a guest?
    pub fn irq_pending_cx(&self, cpu: CpuId) -> bool {
        !self.irq_queue[host_cx(cpu)].is_empty()
    }

    /// Are IPIs waiting to be taken on `cpu`?
    #[inline]
    pub fn irq_pending(&self, cpu: CpuId) -> bool {
        !self.irq_queue[self.on[cpu]].is_empty()
    }

    /// Are interrupts disabled on `cpu` (`local_irq_save`)?
    #[inline]
    pub fn irqs_off(&self, cpu: CpuId) -> bool {
        let (k, local) = self.kernel(cpu);
        k.k.borrow().cpus[local].irqs_off > 0
    }

    /// Could `cpu` take a pending IPI at a step boundary now: one is
    /// pending, no handler runs (no nesting) and interrupts are on?
    #[inline]
    pub fn may_take_irq(&self, cpu: CpuId) -> bool {
        !self.in_irq(cpu) && self.irq_pending(cpu) && !self.irqs_off(cpu)
    }

    /// Completes the step of the context running on `cpu` in its mailbox.
    #[inline(always)]
    fn complete_running(&self, cpu: CpuId, r: OpResult) {
        match &self.irq[self.on[cpu]] {
            Some(run) => run.mb.complete(r),
            None => {
                let (w, local) = self.kernel(cpu);
                let k = w.k.borrow();
                let t = k.cpus[local].current;
                // The task's mailbox: its part of the futures.
                record(|| w.futures.borrow().loc_of(t), true);
                k.tasks[t].mb.complete(r);
            }
        }
    }

    /// Completes the running context's step with `r` (its wait becomes
    /// `Free`); the driver then polls it on ([`Cpus::poll`]).
    #[inline]
    pub fn complete(&mut self, cpu: CpuId, r: OpResult) {
        self.set_wait(cpu, Wait::Free);
        self.complete_running(cpu, r);
    }

    /// Completes a step that took no time and leaves the wait as it is.
    pub fn complete_at_once(&self, cpu: CpuId, r: OpResult) {
        self.complete_running(cpu, r);
    }

    /// Polls the context running on `cpu` until it posts a step or, for a
    /// handler, returns. A returning handler restores the wait it
    /// interrupted.
    pub fn poll(&mut self, cpu: CpuId) -> Polled {
        let cx = self.on[cpu];
        if self.irq[cx].is_none() {
            let (w, local) = self.kernel(cpu);
            let (task, op, func) = sched::advance(w, local);
            return Polled::Step(task, op, func);
        }
        let run = self.irq[cx].as_mut().expect("a handler runs");
        if poll_once(run.fut.as_mut()).is_ready() {
            let run = self.irq[cx].take().expect("a handler runs");
            self.set_wait(cpu, run.saved);
            return Polled::Returned { sender: run.sender };
        }
        let (op, label) = (
            run.mb
                .take_posted()
                .expect("a pending handler posted a step"),
            run.mb.label(),
        );
        assert!(
            !matches!(
                op,
                Op::SwitchTo(_) | Op::Idle | Op::CallFunction { .. } | Op::EnterGuest(_)
            ),
            "an IPI handler may not schedule, send IPIs or enter a guest"
        );
        let (w, local) = self.kernel(cpu);
        let task = w.k.borrow().cpus[local].current;
        Polled::Step(task, op, label)
    }

    /// Takes the oldest pending IPI on `cpu`: its handler runs in the
    /// context of the current task, after the exception-entry cost
    /// (`ipi_handler_ns`), and saves the wait it interrupted. The driver
    /// then polls it ([`Cpus::poll`]).
    pub fn start_irq(&mut self, cpu: CpuId) {
        let cx = self.on[cpu];
        let ipi = self.irq_queue[cx].pop_front().expect("a pending IPI");
        let (w, cpu_k) = self.kernel(cpu);
        let w = Rc::clone(w);
        let task = w.k.borrow().cpus[cpu_k].current;
        let mb: Rc<TaskMailbox> = Rc::default();
        let ctx = Ctx::interrupt(&w, task, Rc::clone(&mb));
        let (entry, label, inner) = match ipi.kind {
            IrqKind::Call => {
                let h = Rc::clone(&w.ipi_handlers.borrow()[ipi.handler]);
                // The exception entry and the IPI dispatch, in the
                // handler's name for the profile (arm64 `do_handle_IPI`,
                // x86 `sysvec_call_function`, both calling this).
                let label = crate::label!("generic_smp_call_function_interrupt");
                (
                    w.profile.kernel.ipi_handler_ns,
                    label,
                    h(ctx.clone(), ipi.arg),
                )
            }
            // The tick's cost is all its own (entry to exit).
            IrqKind::Tick => (
                0,
                crate::label!("tick_handle_periodic"),
                Box::pin(crate::kernel::tick::tick_handle_periodic(
                    ctx.clone(),
                    ipi.arg,
                )) as TaskFuture,
            ),
            IrqKind::Hrtimer => (
                w.profile.kernel.ipi_handler_ns,
                crate::label!("hrtimer_interrupt"),
                Box::pin(crate::kernel::hrtimer::hrtimer_interrupt(
                    ctx.clone(),
                    TaskId::from_index(ipi.arg),
                    ipi.handler as u64,
                )) as TaskFuture,
            ),
        };
        let fut: TaskFuture = Box::pin(async move {
            let _f = ctx.func(label);
            ctx.w.k.borrow_mut().cpus[cpu_k].in_irq += 1; // irq_enter()
            ctx.work(entry).await;
            inner.await;
            // irq_exit(): back to the idle loop is a quiescent state.
            let idle = {
                let mut k = ctx.w.k.borrow_mut();
                k.cpus[cpu_k].in_irq -= 1;
                k.cpus[cpu_k].current == k.cpus[cpu_k].idle
            };
            if idle {
                ctx.w.rcu_quiescent(cpu_k);
            }
        });
        let saved = self.set_wait(cpu, Wait::Free);
        self.irq[cx] = Some(IrqRun {
            fut,
            mb,
            sender: ipi.sender,
            saved,
        });
    }

    /// Releases context `cx`, if it waits as `blocked` says — its own
    /// code, else the code a handler interrupted — to resume with `r`.
    /// Returns whether it did. A released guest context that runs nowhere
    /// is marked pending for KVM.
    pub fn release(&mut self, cx: Cx, blocked: impl Fn(&Wait) -> bool, r: OpResult) -> bool {
        record(|| Loc::part(Space::Cx, part::cx(cx)), true);
        if blocked(&self.wait[cx]) {
            match self.cxs[cx].on {
                Some(cpu) => {
                    self.set_wait(cpu, Wait::Ready(r));
                }
                None => {
                    self.wait[cx] = Wait::Ready(r);
                    self.mark_pending(cx);
                }
            }
            return true;
        }
        if let Some(run) = self.irq[cx].as_mut() {
            if blocked(&run.saved) {
                run.saved = Wait::Ready(r);
                return true;
            }
        }
        false
    }

    /// Context `cx`, which runs nowhere, has something to do: its vCPU is
    /// marked pending (`kvm_vcpu_check_block()` sees it).
    fn mark_pending(&self, cx: Cx) {
        let i = self.cxs[cx];
        if let Some(g) = &self.kernels[i.kernel].guest {
            g.pending[i.cpu].set(true);
        }
    }

    /// The doorbell to ring for context `cx` now that something waits for
    /// it: `None` if it runs somewhere or has none; else the physical CPU
    /// it last ran on and the host IPI to send there.
    pub fn doorbell(&self, cx: Cx) -> Option<(CpuId, PendingIpi)> {
        let i = self.cxs[cx];
        if i.on.is_some() {
            return None;
        }
        let (handler, arg) = self.doorbell[cx]?;
        let at = self.kernels[i.kernel].pcpu(i.cpu);
        let ipi = PendingIpi {
            kind: IrqKind::Call,
            handler,
            arg,
            sender: None,
        };
        Some((at, ipi))
    }

    /// The physical CPU whose statistics count what reaches `cx`: where
    /// it runs, or last ran.
    fn stat_cpu(&self, cx: Cx) -> CpuId {
        let i = self.cxs[cx];
        i.on.unwrap_or_else(|| self.kernels[i.kernel].pcpu(i.cpu))
    }

    /// A function-call IPI reaches context `target` (counted as
    /// /proc/interrupts does) and waits there to be taken.
    pub fn ipi_arrive(&mut self, target: Cx, ipi: PendingIpi, single: bool) {
        record(|| Loc::part(Space::Cx, part::cx(target)), true);
        if ipi.sender.is_some() {
            // A doorbell is not an IPI in /proc/interrupts.
            let mut st = self.w.stats.borrow_mut();
            let c = &mut st.cpu[self.stat_cpu(target)];
            if single {
                c.ipi_call_single += 1;
            } else {
                c.ipi_call += 1;
            }
        }
        self.irq_queue[target].push_back(ipi);
        if self.cxs[target].on.is_none() {
            self.mark_pending(target);
        }
    }

    /// A timer tick reaches host context `cx` and waits there to be taken.
    /// A tick already waiting (interrupts off, or a handler running, for
    /// a whole period) absorbs it: one interrupt then stands for both
    /// periods ([`crate::kernel::tick::tick_handle_periodic`]).
    pub fn tick_arrive(&mut self, cx: Cx) {
        let q = &mut self.irq_queue[cx];
        match q.iter_mut().find(|i| i.kind == IrqKind::Tick) {
            Some(t) => t.arg += 1,
            None => q.push_back(PendingIpi {
                kind: IrqKind::Tick,
                handler: 0,
                arg: 1,
                sender: None,
            }),
        }
    }

    /// A handler's acknowledgement reaches context `sender`; when it is
    /// the last, the sender's `CallFunction` is released. Returns whether
    /// it was.
    pub fn ack(&mut self, sender: Cx) -> bool {
        record(|| Loc::part(Space::Cx, part::cx(sender)), true);
        self.acks[sender] -= 1;
        self.acks[sender] == 0 && self.release(sender, |w| *w == Wait::IpiAck, OpResult::Unit)
    }

    /// A reschedule IPI reaches context `target`: counted, and an idle
    /// loop waiting there is released. Returns whether one was.
    pub fn resched_arrive(&mut self, target: Cx) -> bool {
        self.w.stats.borrow_mut().cpu[self.stat_cpu(target)].ipi_resched += 1;
        self.release(target, |w| *w == Wait::Idle, OpResult::Unit)
    }

    /// `cpu` starts running guest context `cx` (the host's vCPU thread
    /// entered it): the vCPU is placed there and its pending mark is
    /// cleared (what was pending is in its queue and wait).
    pub fn enter_guest(&mut self, cpu: CpuId, cx: Cx) {
        debug_assert!(!self.in_guest(cpu), "only the host enters a guest");
        let i = self.cxs[cx];
        let g = self.kernels[i.kernel].guest.as_ref().expect("a guest");
        g.pcpu[i.cpu].set(cpu);
        g.pending[i.cpu].set(false);
        self.cxs[cx].on = Some(cpu);
        self.on[cpu] = cx;
        self.stolen
            .set_idle(cpu, matches!(self.wait[cx], Wait::Idle));
        self.saved_ttbr0[host_cx(cpu)] = self.w.hw.borrow().user_regs(cpu);
        self.w.hw.borrow_mut().enter_guest(cpu);
        ops::switch_regime_ttbr0(&self.w, cpu, self.saved_ttbr0[cx]);
        self.tell_running(cpu);
    }

    /// The scheduler tick on `cpu` while it runs a guest
    /// (`scheduler_tick()` on the host, whose vCPU thread has run its
    /// slice): if another host task waits for the CPU, the vCPU thread
    /// must reschedule (`need_resched`) and the guest exit. Returns
    /// whether it must.
    pub fn tick_in_guest(&self, cpu: CpuId) -> bool {
        let mut k = self.w.k.borrow_mut();
        let pc = &mut k.cpus[cpu];
        let waiting = !pc.rq.is_empty();
        pc.need_resched |= waiting;
        waiting
    }

    /// Does a host task wait for `cpu`, which runs a guest?
    pub fn host_task_waits(&self, cpu: CpuId) -> bool {
        !self.w.k.borrow().cpus[cpu].rq.is_empty()
    }

    /// Tells the observer which task runs on `cpu` now that it switched
    /// between host and guest (a vCPU's task may have run elsewhere).
    fn tell_running(&self, cpu: CpuId) {
        let (w, local) = self.kernel(cpu);
        let (task, mm) = {
            let k = w.k.borrow();
            let t = k.cpus[local].current;
            (t, k.tasks[t].mm)
        };
        self.w.m.emit(crate::observe::Event::Running {
            cpu,
            task: w.gid_task(task),
            mm: mm.map(|m| w.gid_mm(m)),
        });
    }

    /// The guest context `cpu` runs exits to the host context, whose
    /// `EnterGuest` completes with `r`.
    pub fn exit_guest(&mut self, cpu: CpuId, r: OpResult) {
        let cx = self.on[cpu];
        debug_assert!(self.in_guest(cpu), "a guest runs");
        self.cxs[cx].on = None;
        self.on[cpu] = host_cx(cpu);
        self.saved_ttbr0[cx] = self.w.hw.borrow().user_regs(cpu);
        self.w.hw.borrow_mut().exit_guest(cpu);
        ops::switch_regime_ttbr0(&self.w, cpu, self.saved_ttbr0[host_cx(cpu)]);
        self.tell_running(cpu);
        self.stolen.set_idle(cpu, false);
        self.wait[host_cx(cpu)] = Wait::Ready(r);
    }

    /// One line per CPU: its task, its wait ([`Wait::display`]), whether
    /// interrupts are off, its pending IPIs and run queue — for deadlock
    /// reports.
    pub fn describe(&self) -> String {
        let arch = self.w.profile.arch;
        let mut s = String::new();
        for c in CpuId::all(self.on.len()) {
            let (w, local) = self.kernel(c);
            let k = w.k.borrow();
            let pc = &k.cpus[local];
            s.push_str(&format!(
                "cpu{c}: {} ({}{}{}), {}; ",
                k.tasks[pc.current].name,
                self.wait(c).display(arch),
                if pc.irqs_off > 0 { ", irqs off" } else { "" },
                match self.irq_queue[self.on[c]].len() {
                    0 => String::new(),
                    n => format!(", {n} IPIs pending"),
                },
                run_queue(&pc.rq)
            ));
        }
        // Guest vCPUs that run nowhere, with what they wait for.
        for (cx, i) in self.cxs.iter().enumerate().filter(|(_, i)| i.on.is_none()) {
            let w = &self.kernels[i.kernel];
            let k = w.k.borrow();
            let pc = &k.cpus[i.cpu];
            s.push_str(&format!(
                "vm{}/vcpu{}: {} ({}{}), {}; ",
                w.id,
                i.cpu,
                k.tasks[pc.current].name,
                self.wait[cx].display(arch),
                match self.irq_queue[cx].len() {
                    0 => String::new(),
                    n => format!(", {n} IPIs pending"),
                },
                run_queue(&pc.rq)
            ));
        }
        for w in self.kernels.iter().skip(1) {
            let k = w.k.borrow();
            let blocked: Vec<String> = k
                .tasks
                .iter()
                .filter(|t| t.state == crate::kernel::TaskState::Blocked)
                .take(8)
                .map(|t| format!("{} ({}) on vcpu{}", t.name, t.id, t.cpu))
                .collect();
            if !blocked.is_empty() {
                s.push_str(&format!("vm{} blocked: {}; ", w.id, blocked.join(", ")));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Arch;
    use crate::hw::tlb::TlbiScope;

    #[test]
    fn a_deadlock_report_names_waits_in_words() {
        let posted = Wait::Posted(Op::Tlbi {
            scope: TlbiScope::Va {
                asid: 2,
                va: 0x7f00_0000_1000,
                last_level: true,
            },
            broadcast: false,
        });
        assert_eq!(
            posted.display(Arch::Arm64).to_string(),
            "posted TLBI VALE1 asid 2 va 0x7f0000001000"
        );
        assert_eq!(
            posted.display(Arch::X86).to_string(),
            "posted INVLPG pcid 2 va 0x7f0000001000 last-level"
        );
        assert_eq!(
            Wait::Lock(3).display(Arch::Arm64).to_string(),
            "spinning on lock 3"
        );
        let ready = Wait::Ready(OpResult::Access(Ok(())));
        assert_eq!(ready.display(Arch::Arm64).to_string(), "ready, access done");
        assert_eq!(run_queue(&VecDeque::new()), "rq empty");
        assert_eq!(
            run_queue(&VecDeque::from([3, 4].map(TaskId::from_index))),
            "rq task3 task4"
        );
    }
}
