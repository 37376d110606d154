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

pub mod cpu_time;
pub mod ops;
pub mod stolen;

use crate::engine::exec::poll_once;
use crate::engine::label::Label;
use crate::hw::CpuId;
use crate::kernel::{sched, Ctx, LockId, Op, OpResult, TaskFuture, TaskId, TaskMailbox, World};
use std::collections::VecDeque;
use std::rc::Rc;

pub use ops::Applied;
pub use stolen::Stolen;

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
}

/// A function-call IPI that reached a CPU and waits to be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingIpi {
    /// Index of the handler (`World::register_ipi_handler`).
    pub handler: usize,
    /// Its argument.
    pub arg: usize,
    /// The CPU whose `CallFunction` waits for the acknowledgement.
    pub sender: CpuId,
}

/// An IPI handler running on a CPU, and what it interrupted.
struct IrqRun {
    fut: TaskFuture,
    mb: Rc<TaskMailbox>,
    sender: CpuId,
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
    /// and `sender` is owed an acknowledgement ([`Cpus::ack`]).
    Returned {
        /// The CPU whose `CallFunction` sent the IPI.
        sender: CpuId,
    },
}

/// The execution state of every CPU: the context running, what it waits
/// for, the IPIs queued for it, and the acknowledgements it waits for.
pub struct Cpus {
    /// The world.
    pub w: Rc<World>,
    /// Per CPU: what its running context waits for (written only by
    /// [`Cpus::set_wait`]).
    wait: Vec<Wait>,
    /// Time stolen from each CPU, which it is charged at its next step
    /// (the timing driver's; idle CPUs absorb it).
    pub stolen: Stolen,
    irq_queue: Vec<VecDeque<PendingIpi>>,
    irq: Vec<Option<IrqRun>>,
    acks: Vec<usize>,
}

impl std::fmt::Debug for Cpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cpus").field("wait", &self.wait).finish()
    }
}

impl Cpus {
    /// Every CPU of `w`, free, with no IPI pending.
    pub fn new(w: Rc<World>) -> Self {
        let n = w.ncpus();
        Self {
            w,
            wait: vec![Wait::Free; n],
            stolen: Stolen::new(n),
            irq_queue: vec![VecDeque::new(); n],
            irq: (0..n).map(|_| None).collect(),
            acks: vec![0; n],
        }
    }

    /// What the running context of `cpu` waits for.
    pub fn wait(&self, cpu: CpuId) -> &Wait {
        &self.wait[cpu]
    }

    /// What each CPU's running context waits for, by CPU.
    pub fn waits(&self) -> &[Wait] {
        &self.wait
    }

    /// Sets what the running context of `cpu` waits for; returns what it
    /// waited for before. Entering or leaving `Wait::Idle` is told to
    /// [`Cpus::stolen`].
    #[inline]
    pub fn set_wait(&mut self, cpu: CpuId, w: Wait) -> Wait {
        let idle = matches!(w, Wait::Idle);
        let old = std::mem::replace(&mut self.wait[cpu], w);
        if matches!(old, Wait::Idle) != idle {
            self.stolen.set_idle(cpu, idle);
        }
        old
    }

    /// Is an IPI handler running on `cpu`?
    pub fn in_irq(&self, cpu: CpuId) -> bool {
        self.irq[cpu].is_some()
    }

    /// Are IPIs waiting to be taken on `cpu`?
    pub fn irq_pending(&self, cpu: CpuId) -> bool {
        !self.irq_queue[cpu].is_empty()
    }

    /// Are interrupts disabled on `cpu` (`local_irq_save`)?
    pub fn irqs_off(&self, cpu: CpuId) -> bool {
        self.w.k.borrow().cpus[cpu].irqs_off > 0
    }

    /// Could `cpu` take a pending IPI at a step boundary now: one is
    /// pending, no handler runs (no nesting) and interrupts are on?
    pub fn may_take_irq(&self, cpu: CpuId) -> bool {
        self.irq[cpu].is_none() && self.irq_pending(cpu) && !self.irqs_off(cpu)
    }

    /// Completes the step of the context running on `cpu` in its mailbox.
    fn complete_running(&self, cpu: CpuId, r: OpResult) {
        match &self.irq[cpu] {
            Some(run) => run.mb.complete(r),
            None => {
                let k = self.w.k.borrow();
                k.tasks[k.cpus[cpu].current].mb.complete(r);
            }
        }
    }

    /// Completes the running context's step with `r` (its wait becomes
    /// `Free`); the driver then polls it on ([`Cpus::poll`]).
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
        let Some(run) = self.irq[cpu].as_mut() else {
            let (task, op, func) = sched::advance(&self.w, cpu);
            return Polled::Step(task, op, func);
        };
        if poll_once(run.fut.as_mut()).is_ready() {
            let run = self.irq[cpu].take().expect("a handler runs");
            self.set_wait(cpu, run.saved);
            return Polled::Returned { sender: run.sender };
        }
        let op = run
            .mb
            .take_posted()
            .expect("a pending handler posted a step");
        assert!(
            !matches!(op, Op::SwitchTo(_) | Op::Idle | Op::CallFunction { .. }),
            "an IPI handler may not schedule or send IPIs"
        );
        let task = self.w.k.borrow().cpus[cpu].current;
        Polled::Step(task, op, run.mb.label())
    }

    /// Takes the oldest pending IPI on `cpu`: its handler runs in the
    /// context of the current task, after the exception-entry cost
    /// (`ipi_handler_ns`), and saves the wait it interrupted. The driver
    /// then polls it ([`Cpus::poll`]).
    pub fn start_irq(&mut self, cpu: CpuId) {
        let ipi = self.irq_queue[cpu].pop_front().expect("a pending IPI");
        let w = Rc::clone(&self.w);
        let task = w.k.borrow().cpus[cpu].current;
        let mb: Rc<TaskMailbox> = Rc::default();
        let ctx = Ctx::interrupt(&w, task, Rc::clone(&mb));
        let h = Rc::clone(&w.ipi_handlers.borrow()[ipi.handler]);
        let entry = w.profile.kernel.ipi_handler_ns;
        let inner = h(ctx.clone(), ipi.arg);
        let fut: TaskFuture = Box::pin(async move {
            // The exception entry and the IPI dispatch, in the handler's
            // name for the profile (arm64 `do_handle_IPI`, x86
            // `sysvec_call_function`, both calling this).
            let _f = ctx.func(crate::label!("generic_smp_call_function_interrupt"));
            ctx.w.k.borrow_mut().cpus[cpu].in_irq += 1; // irq_enter()
            ctx.work(entry).await;
            inner.await;
            // irq_exit(): back to the idle loop is a quiescent state.
            let idle = {
                let mut k = ctx.w.k.borrow_mut();
                k.cpus[cpu].in_irq -= 1;
                k.cpus[cpu].current == k.cpus[cpu].idle
            };
            if idle {
                ctx.w.rcu_quiescent(cpu);
            }
        });
        let saved = self.set_wait(cpu, Wait::Free);
        self.irq[cpu] = Some(IrqRun {
            fut,
            mb,
            sender: ipi.sender,
            saved,
        });
    }

    /// Releases the context of `cpu` that waits as `blocked` says — the
    /// running one, else the one a handler interrupted — to resume with
    /// `r`. Returns whether one did.
    pub fn release(&mut self, cpu: CpuId, blocked: impl Fn(&Wait) -> bool, r: OpResult) -> bool {
        if blocked(&self.wait[cpu]) {
            self.set_wait(cpu, Wait::Ready(r));
            return true;
        }
        if let Some(run) = self.irq[cpu].as_mut() {
            if blocked(&run.saved) {
                run.saved = Wait::Ready(r);
                return true;
            }
        }
        false
    }

    /// A function-call IPI reaches `target` (counted as /proc/interrupts
    /// does) and waits there to be taken.
    pub fn ipi_arrive(&mut self, target: CpuId, ipi: PendingIpi, single: bool) {
        {
            let mut st = self.w.stats.borrow_mut();
            if single {
                st.cpu[target].ipi_call_single += 1;
            } else {
                st.cpu[target].ipi_call += 1;
            }
        }
        self.irq_queue[target].push_back(ipi);
    }

    /// A handler's acknowledgement reaches `sender`; when it is the last,
    /// the sender's `CallFunction` is released. Returns whether it was.
    pub fn ack(&mut self, sender: CpuId) -> bool {
        self.acks[sender] -= 1;
        self.acks[sender] == 0 && self.release(sender, |w| *w == Wait::IpiAck, OpResult::Unit)
    }

    /// A reschedule IPI reaches `target`: counted, and an idle loop waiting
    /// there is released. Returns whether one was.
    pub fn resched_arrive(&mut self, target: CpuId) -> bool {
        self.w.stats.borrow_mut().cpu[target].ipi_resched += 1;
        self.release(target, |w| *w == Wait::Idle, OpResult::Unit)
    }

    /// One line per CPU: its task, its wait (as `label` names it), whether
    /// interrupts are off, its pending IPIs and run queue — for deadlock
    /// reports.
    pub fn describe(&self, label: impl Fn(CpuId) -> String) -> String {
        let k = self.w.k.borrow();
        let mut s = String::new();
        for (c, pc) in k.cpus.iter().enumerate() {
            s.push_str(&format!(
                "cpu{c}: {} ({}{}{}), rq {:?}; ",
                k.tasks[pc.current].name,
                label(c),
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
}
