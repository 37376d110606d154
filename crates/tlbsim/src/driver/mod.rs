//! The timing driver: runs the world as a discrete-event simulation. Every
//! step a task posts is applied at once ([`Cpus::apply`]) and completes
//! after its cost from the profile; broadcast TLBIs reach their targets
//! after a latency; DVM Syncs are served one at a time by each misc node
//! (one for the machine, or one per die: `driver/misc_node.rs`).
//! Events are ordered by `(time, sequence)`. What a step does is
//! [`crate::step`]'s; this file decides only when it completes.

mod misc_node;

use crate::config::StepCosts;
use crate::engine::label::Label;
use crate::engine::queue::{EventId, EventQueue};
use crate::engine::Ns;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{MmId, TlbiScope};
use crate::hw::{AccessInfo, AccessTrace, CpuId, CpuVec, Fault};
use crate::kernel::{GuestExit, LockId, LockWaiter, Op, OpResult, TaskId, World};
use crate::step::cpu_time::{self, CpuTime};
use crate::step::{host_cx, ops, Applied, Cpus, Cx, PendingIpi, Polled, Wait};
use std::rc::Rc;

/// How many misc nodes serve DVM Syncs on `w`'s machine: one, or one per
/// die (`dvm_sync_domain = "die"`).
fn sync_nodes_of(w: &World) -> usize {
    if w.profile.step_costs().sync_domain_die {
        w.hw.borrow().cpus.last().map_or(1, |c| c.die as usize + 1)
    } else {
        1
    }
}

/// Does the invalidation scan the whole TLB (`ASIDE1`, `VMALLE1`,
/// `VMALLS12E1`, `ALLE1`)?
fn whole_tlb(scope: TlbiScope) -> bool {
    matches!(scope, TlbiScope::Asid(_)) || scope.is_vmid_wide()
}

/// A queued event. Eight bytes, so that the queue moves and stores it in
/// a register (a 40-byte event was copied through memory at every push,
/// a tenth of the queue's cost); an IPI's payload waits in
/// [`TimingDriver::ipis`]. CPU numbers are `u32` within a [`CpuId`], ids
/// and contexts `u32` ([`ix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// The CPU's current step finishes.
    StepDone(CpuId),
    /// A broadcast TLBI reaches its targets.
    DvmApply(u32),
    /// The misc node finished the DVM Sync of a CPU.
    SyncDone(CpuId),
    /// A reschedule IPI arrives at a context.
    Kick(u32),
    /// A function-call IPI (or a timer's interrupt) arrives: its entry in
    /// [`TimingDriver::ipis`].
    Ipi(u32),
    /// A handler's acknowledgement reaches the waiting sender context.
    Ack(u32),
    /// The CPU's guest entry is done: the guest context runs.
    Entered(CpuId),
    /// A time slice of the vCPU thread running the CPU's guest is over
    /// (floating vCPUs: the scheduler tick that matters).
    SliceEnd(CpuId),
    /// The host CPU's timer fires (the periodic tick, `kernel/tick.rs`).
    Tick(CpuId),
}

/// A context, an IPI's slot or an in-flight id as carried in an [`Ev`].
/// Each indexes a vector the machine allocated (one entry per context,
/// IPI on its way or DVM operation in flight), so they are far below 2^32.
fn ix(i: usize) -> u32 {
    u32::try_from(i).expect("contexts and in-flight ids fit in 32 bits")
}

/// A function-call IPI on its way: the target context, the call, and
/// whether the call had this single target.
type IpiInFlight = (Cx, PendingIpi, bool);

/// The cache line of a lock word, as the timing driver sees it: which
/// CPU's cache holds it and when it is free for the next atomic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheLine {
    /// The CPU whose cache last held the line.
    pub cpu: Option<CpuId>,
    /// When the line is free for the next atomic on it.
    pub free_ns: Ns,
}

impl CacheLine {
    /// One atomic read-modify-write of the line by `cpu` at `now`:
    /// `atomic_ns` if the line is already in `cpu`'s cache, else
    /// `transfer_ns(last_cpu)` to move it from the CPU that held it; atomics
    /// on one line are served one at a time. Returns how long `cpu` waits
    /// for its atomic to complete.
    pub fn rmw(
        &mut self,
        cpu: CpuId,
        now: Ns,
        atomic_ns: Ns,
        transfer_ns: impl Fn(CpuId) -> Ns,
    ) -> Ns {
        let cost = match self.cpu {
            Some(c) if c != cpu => transfer_ns(c),
            _ => atomic_ns,
        };
        let start = now.max(self.free_ns);
        self.free_ns = start + cost;
        self.cpu = Some(cpu);
        self.free_ns - now
    }
}

/// Why a run stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The checker found a violation (`Display` prints its report).
    Violation(crate::observe::Violation),
    /// Simulated time passed the limit.
    TimeLimit(Ns),
    /// Nothing can make progress.
    Deadlock(String),
    /// The run grew past one of tlbsim's runtime limits
    /// ([`crate::config::limits`]).
    Limit(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Violation(r) => write!(f, "checker violation:\n{r}"),
            RunError::TimeLimit(t) => write!(f, "simulated time limit of {t} ns reached"),
            RunError::Deadlock(s) => write!(f, "deadlock: {s}"),
            RunError::Limit(s) => write!(f, "stopped: {s}"),
        }
    }
}

/// The discrete-event driver.
#[derive(Debug)]
pub struct TimingDriver {
    core: Cpus,
    /// Step costs of the profile's architecture.
    c: StepCosts,
    q: EventQueue<Ev>,
    /// Per CPU: the result its timed step completes with.
    result: CpuVec<Option<OpResult>>,
    /// The misc nodes serving DVM Syncs, when the profile serialises them.
    mns: misc_node::MiscNodes,
    /// Scratch for the nodes one Sync needs and the Syncs one service
    /// starts (kept, so that a `DSB ISH` allocates nothing).
    sync_scratch: (Vec<usize>, Vec<misc_node::Sync>),
    trace: Vec<AccessTrace>,
    limit_ns: Ns,
    /// Inject speculative walks (see [`TimingDriver::set_speculative_walks`]).
    speculative: bool,
    /// Per CPU: the mm and VA of its last user access.
    last_va: CpuVec<Option<(MmId, u64)>>,
    /// Per CPU: the task's `Work` step under way (its event and end).
    work_step: CpuVec<Option<(EventId, Ns)>>,
    /// Per CPU: work left of a `Work` step an IPI interrupted.
    interrupted_work: CpuVec<Option<Ns>>,
    /// Per CPU: the function the interrupted `Work` step was charged to
    /// (`step::cpu_time`), given back when it resumes (until 2026-11-26
    /// the handler's function kept the rest of the step unless the tick
    /// was on).
    interrupted_label: CpuVec<Option<&'static Label>>,
    /// Per CPU: its last `Work` step (under way, or interrupted) is user
    /// work, which an interrupt returning with `need_resched` cuts short
    /// when the tick is on.
    user_step: CpuVec<bool>,
    /// The periodic tick's first events are queued.
    ticking: bool,
    /// Per host lock: its word's cache line.
    lines: Vec<CacheLine>,
    /// Per guest kernel (from 1), per lock: its word's cache line.
    guest_lines: Vec<Vec<CacheLine>>,
    /// What each CPU's time is charged to (`step::cpu_time`).
    cpu_time: CpuTime,
    /// IPIs on their way, indexed by [`Ev::Ipi`]; `None` once arrived.
    ipis: Vec<Option<IpiInFlight>>,
    /// Per CPU: a host interrupt waits for the guest it runs to exit.
    exit_pending: CpuVec<bool>,
    /// Per CPU: its guest entry under way (the event that ends it).
    entering: CpuVec<Option<EventId>>,
    /// Per CPU: the end of the slice of the guest it runs, when vCPU
    /// threads share CPUs ([`TimingDriver::slice_vcpus`]).
    slice_end: CpuVec<Option<EventId>>,
    /// Some VM's vCPU threads float: guests are time-sliced.
    slice_vcpus: bool,
    /// Per guest context (from [`TimingDriver::guest_work_base`]): work
    /// left of a `Work` step an exit cut.
    guest_work: Vec<Option<Ns>>,
    /// The first guest context.
    guest_work_base: usize,
    /// Free entries of `ipis`.
    free_ipis: Vec<u32>,
}

impl TimingDriver {
    /// A driver for `w` that stops at `limit_ns` of simulated time.
    pub fn new(w: Rc<World>, limit_ns: Ns) -> Self {
        let n = w.ncpus();
        let nodes = sync_nodes_of(&w);
        Self {
            speculative: false,
            c: w.profile.step_costs(),
            last_va: CpuVec::filled(n, None),
            work_step: CpuVec::filled(n, None),
            interrupted_work: CpuVec::filled(n, None),
            interrupted_label: CpuVec::filled(n, None),
            user_step: CpuVec::filled(n, false),
            ticking: false,
            core: Cpus::new(w),
            q: EventQueue::default(),
            result: CpuVec::filled(n, None),
            mns: misc_node::MiscNodes::new(nodes, n),
            sync_scratch: (Vec::new(), Vec::new()),
            trace: Vec::new(),
            limit_ns,
            lines: Vec::new(),
            guest_lines: Vec::new(),
            cpu_time: CpuTime::new(n),
            ipis: Vec::new(),
            free_ipis: Vec::new(),
            exit_pending: CpuVec::filled(n, false),
            entering: CpuVec::filled(n, None),
            slice_end: CpuVec::filled(n, None),
            slice_vcpus: false,
            guest_work: Vec::new(),
            guest_work_base: n,
        }
    }

    /// From now, `cpu`'s time is charged to the task it runs (by name):
    /// at the start and after each context switch.
    fn charge_to_current(&mut self, cpu: CpuId) {
        let (w, local) = self.core.kernel(cpu);
        let task = w.k.borrow().cpus[local].current;
        let comm = self.cpu_time.comm(w.id as usize, task.index(), || {
            w.k.borrow().tasks[task].name.clone()
        });
        let (now, label) = (w.now.get(), self.cpu_time.label(cpu));
        self.cpu_time.switch(cpu, now, label, comm);
    }

    /// Adds the VMs' vCPUs as contexts before the run.
    pub fn add_vms(&mut self, guests: &crate::step::Guests) {
        guests.add_to(&mut self.core);
        self.guest_work = vec![None; guests.vcpus()];
        self.slice_vcpus = guests.any_vcpu_floats(&self.core.w);
    }

    fn w(&self) -> &Rc<World> {
        &self.core.w
    }

    fn now(&self) -> Ns {
        self.core.w.now.get()
    }

    /// With `on`, every kernel or user `Work` step of a CPU whose TTBR0
    /// holds an mm is preceded by a speculative walk of the last VA that CPU
    /// accessed in that mm (a lazy CPU running a kernel thread keeps walking
    /// the user tables it still has installed). Timing is unchanged.
    pub fn set_speculative_walks(&mut self, on: bool) {
        self.speculative = on;
    }

    /// Runs until `done(world)` holds after an event; returns the time then.
    pub fn run_until(&mut self, done: impl Fn(&World) -> bool) -> Result<Ns, RunError> {
        for cpu in CpuId::all(self.w().ncpus()) {
            self.charge_to_current(cpu);
            self.run(cpu);
        }
        self.start_ticks();
        // Counted here and added to the statistics once, on the way out.
        let mut events = 0;
        let end = loop {
            if let Some(r) = self.w().failure() {
                break Err(RunError::Violation(r));
            }
            if done(self.w()) {
                break Ok(self.now());
            }
            let Some((t, ev)) = self.q.pop() else {
                break Err(RunError::Deadlock(self.core.describe()));
            };
            if t > self.limit_ns {
                break Err(RunError::TimeLimit(self.limit_ns));
            }
            // Memory and tasks grow only as fast as steps allocate: a look
            // every 4,096 events bounds them.
            if events % 4096 == 0 {
                if let Some(m) = self.core.over_limit() {
                    break Err(RunError::Limit(m));
                }
                crate::progress::PROGRESS.advance_run(t, 4096.min(events));
            }
            self.w().now.set(t);
            events += 1;
            self.event(ev);
        };
        let now = self.now();
        let mut st = self.core.w.stats.borrow_mut();
        st.events += events;
        self.cpu_time.drain_into(&mut st, now);
        drop(st);
        end
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::StepDone(cpu) => {
                let r = self.result[cpu].take().unwrap_or(OpResult::Unit);
                if self.core.may_take_irq(cpu) {
                    // An IPI is taken at the end of the step; the step's
                    // result waits for the handler to return.
                    self.core.set_wait(cpu, Wait::Ready(r));
                    self.start_irq(cpu);
                } else {
                    self.complete(cpu, r);
                }
            }
            Ev::Ack(sender) => {
                let sender = sender as usize;
                if self.core.ack(sender) {
                    self.resume_cx(sender);
                }
            }
            Ev::Ipi(i) => {
                let (cx, ipi, single) = self.ipis[i as usize].take().expect("an IPI in flight");
                self.free_ipis.push(i);
                self.core.ipi_arrive(cx, ipi, single);
                self.irq_arrived(cx);
            }
            Ev::Tick(cpu) => {
                let period = self.w().tick_period_ns().expect("ticks only with a period");
                self.q.push(self.now() + period, Ev::Tick(cpu));
                // The host context of the CPU (guests have no tick).
                self.core.tick_arrive(host_cx(cpu));
                self.irq_arrived(host_cx(cpu));
            }
            Ev::DvmApply(id) => self.dvm_apply(id as usize),
            Ev::SyncDone(cpu) => {
                self.core.dsb_ish_done(cpu);
                if self.c.sync_serialized {
                    let mut started = std::mem::take(&mut self.sync_scratch.1);
                    self.mns.done(cpu, &mut started);
                    for next in started.drain(..) {
                        self.sync_start(next);
                    }
                    self.sync_scratch.1 = started;
                }
                self.complete(cpu, OpResult::Unit);
            }
            Ev::Entered(cpu) => {
                self.entering[cpu] = None;
                self.start_slice(cpu);
                self.resume_guest(cpu);
            }
            Ev::SliceEnd(cpu) => {
                self.slice_end[cpu] = None;
                if self.core.in_guest(cpu) && self.core.tick_in_guest(cpu) {
                    self.force_exit(cpu);
                } else {
                    self.start_slice(cpu);
                }
            }
            Ev::Kick(cx) => {
                let cx = cx as usize;
                if self.core.resched_arrive(cx) {
                    self.resume_cx(cx);
                } else if let Some(cpu) = self.core.resident(cx) {
                    if self.core.running(cpu) != cx {
                        // A host reschedule IPI to a CPU running a guest
                        // (`kvm_vcpu_kick`).
                        self.force_exit(cpu);
                    }
                }
            }
        }
    }

    /// An interrupt was queued at context `cx`: it is taken at once if
    /// `cx` runs with interrupts on and no handler (cutting a `Work`
    /// step), else when they come back on or the step ends; a guest
    /// context that runs nowhere rings its doorbell; a host interrupt to
    /// a CPU running a guest makes the guest exit.
    fn irq_arrived(&mut self, cx: Cx) {
        let Some(cpu) = self.core.resident(cx) else {
            self.ring_doorbell(cx);
            return;
        };
        if self.core.running(cpu) != cx {
            // A host interrupt to a CPU running a guest.
            self.force_exit(cpu);
            return;
        }
        if !self.core.in_irq(cpu) && !self.core.irqs_off(cpu) {
            if *self.core.wait(cpu) == Wait::Step && self.work_step[cpu].is_some() {
                self.interrupt_work(cpu);
            } else {
                self.take_pending_irq(cpu);
            }
        }
    }

    /// Queues each host CPU's first timer tick, at the first multiple of
    /// the tick period after now (every CPU's tick falls at the same
    /// instants: `kernel/tick.rs`). Nothing without a tick.
    fn start_ticks(&mut self) {
        let Some(period) = self.w().tick_period_ns() else {
            return;
        };
        if self.ticking {
            return;
        }
        self.ticking = true;
        let first = (self.now() / period + 1) * period;
        for cpu in CpuId::all(self.w().ncpus()) {
            self.q.push(first, Ev::Tick(cpu));
        }
    }

    /// A host interrupt reached `cpu`, which runs a guest: the guest exits
    /// to the host to take it, at once where it spins or waits, at the end
    /// of its step if one is timed (a `Work` step is cut, its rest resumes
    /// after the next entry), after a `DSB` it waits in.
    fn force_exit(&mut self, cpu: CpuId) {
        let cx = self.core.running(cpu);
        match self.core.wait(cpu).clone() {
            Wait::Step => match self.work_step[cpu].take() {
                Some((id, end)) if !self.core.in_irq(cpu) => {
                    self.q.cancel(id);
                    self.guest_work[cx - self.guest_work_base] = Some(end - self.now());
                    self.core.set_wait(cpu, Wait::Free);
                    self.exit_now(cpu);
                }
                other => {
                    self.work_step[cpu] = other;
                    self.exit_pending[cpu] = true;
                }
            },
            Wait::DsbInflight | Wait::DsbSync => self.exit_pending[cpu] = true,
            Wait::Free | Wait::Ready(_) | Wait::Lock(_) | Wait::IpiAck | Wait::Idle => {
                if self.core.in_irq(cpu) {
                    // A guest handler runs: the exit waits for its end.
                    self.exit_pending[cpu] = true;
                } else {
                    self.exit_now(cpu);
                }
            }
            Wait::Posted(_) | Wait::InGuest => {
                unreachable!("not a guest's wait in the timing driver")
            }
        }
    }

    /// When vCPU threads share CPUs, the guest `cpu` runs gets a time
    /// slice (`time_slice_ns`) before the host looks at its queue again.
    /// With the host's timer tick on, the tick does this instead.
    fn start_slice(&mut self, cpu: CpuId) {
        if self.slice_vcpus && self.core.in_guest(cpu) && !self.ticking {
            let at = self.now() + self.w().profile.kernel.time_slice_ns;
            self.slice_end[cpu] = Some(self.q.push(at, Ev::SliceEnd(cpu)));
        }
    }

    /// The guest `cpu` runs exits for a host interrupt, its step done
    /// with `r`.
    #[cold]
    fn exit_with(&mut self, cpu: CpuId, r: OpResult) {
        self.core.set_wait(cpu, Wait::Ready(r));
        self.exit_now(cpu);
    }

    /// The guest `cpu` runs exits for a host interrupt now.
    fn exit_now(&mut self, cpu: CpuId) {
        self.exit_pending[cpu] = false;
        if let Some(id) = self.entering[cpu].take() {
            // The interrupt came during the entry: the guest never ran.
            self.q.cancel(id);
        }
        self.core
            .exit_guest(cpu, OpResult::GuestExit(GuestExit::Irq));
        self.guest_exited(cpu);
    }

    /// Context `cx` was released from its wait: it runs on at once where
    /// it runs (unless a handler runs there), or its doorbell rings.
    fn resume_cx(&mut self, cx: Cx) {
        match self.core.resident(cx) {
            Some(cpu) if self.core.running(cpu) == cx => self.resume_if_ready(cpu),
            Some(_) => {}
            None => self.ring_doorbell(cx),
        }
    }

    /// Something waits for context `cx`, which runs nowhere: its
    /// doorbell, if it has one, reaches the CPU it last ran on after the
    /// IPI latency.
    fn ring_doorbell(&mut self, cx: Cx) {
        if let Some((cpu, ipi)) = self.core.doorbell(cx) {
            let at = self.now() + self.w().profile.kernel.ipi_latency_ns;
            let i = self.ipi_slot((host_cx(cpu), ipi, true));
            self.q.push(at, Ev::Ipi(i));
        }
    }

    /// Stores an IPI on its way; returns its [`Ev::Ipi`] index.
    fn ipi_slot(&mut self, entry: IpiInFlight) -> u32 {
        match self.free_ipis.pop() {
            Some(i) => {
                self.ipis[i as usize] = Some(entry);
                i
            }
            None => {
                self.ipis.push(Some(entry));
                ix(self.ipis.len() - 1)
            }
        }
    }

    /// The guest context `cpu` just entered runs from where it stopped:
    /// released, with its result; free, polled; idle, it takes a pending
    /// interrupt or exits again at once (`WFI` with nothing pending).
    fn resume_guest(&mut self, cpu: CpuId) {
        self.charge_to_current(cpu);
        let cx = self.core.running(cpu);
        if let Some(left) = self.guest_work[cx - self.guest_work_base].take() {
            self.after_work(cpu, left);
            return;
        }
        match self.core.wait(cpu).clone() {
            Wait::Ready(r) => self.complete(cpu, r),
            Wait::Free => self.run(cpu),
            Wait::Idle if self.core.may_take_irq(cpu) => self.start_irq(cpu),
            Wait::Idle => {
                self.core
                    .exit_guest(cpu, OpResult::GuestExit(GuestExit::Wfi));
                self.guest_exited(cpu);
            }
            _ => self.take_pending_irq(cpu),
        }
    }

    /// The host entered a guest on `cpu`: it runs after the entry's cost.
    #[cold]
    fn entered_guest(&mut self, cpu: CpuId) {
        let cost = self.w().profile.virt_costs().guest_entry_ns;
        let s = self.take_stolen(cpu);
        let id = self.q.push(self.now() + cost + s, Ev::Entered(cpu));
        self.entering[cpu] = Some(id);
    }

    /// The guest `cpu` ran exited: the host's vCPU thread resumes after
    /// the exit's cost.
    #[cold]
    fn guest_exited(&mut self, cpu: CpuId) {
        if let Some(id) = self.slice_end[cpu].take() {
            self.q.cancel(id);
        }
        self.charge_to_current(cpu);
        let Wait::Ready(r) = *self.core.wait(cpu) else {
            unreachable!("an exit leaves EnterGuest ready")
        };
        let cost = self.w().profile.virt_costs().guest_exit_ns;
        self.after(cpu, cost, r);
    }

    /// Completes the running context's step on `cpu` and runs it on
    /// (unless a guest's exit is due: it then waits with its result).
    #[inline]
    fn complete(&mut self, cpu: CpuId, r: OpResult) {
        if self.exit_pending[cpu] && !self.core.in_irq(cpu) {
            self.exit_with(cpu, r);
            return;
        }
        self.core.complete(cpu, r);
        self.run(cpu);
    }

    /// A context released from its wait runs on at once, unless a handler
    /// runs on the CPU (then it resumes when the handler returns).
    fn resume_if_ready(&mut self, cpu: CpuId) {
        if let (false, Wait::Ready(r)) = (self.core.in_irq(cpu), self.core.wait(cpu)) {
            let r = *r;
            self.complete(cpu, r);
        }
    }

    /// Polls the CPU's running context (task or handler) until it posts a
    /// step that takes time, or its handler returns.
    fn run(&mut self, cpu: CpuId) {
        loop {
            match self.core.poll(cpu) {
                Polled::Step(task, op, func) => match self.dispatch(cpu, task, op, func) {
                    Some(r) => self.core.complete_at_once(cpu, r),
                    None => return,
                },
                Polled::Returned { sender } => {
                    self.handler_returned(cpu, sender);
                    return;
                }
            }
        }
    }

    /// Takes the next queued IPI on `cpu` and runs its handler.
    fn start_irq(&mut self, cpu: CpuId) {
        self.core.start_irq(cpu);
        self.run(cpu);
    }

    /// A handler returned on `cpu`: its acknowledgement travels to the
    /// sender; the CPU takes its next IPI, or resumes what was interrupted.
    fn handler_returned(&mut self, cpu: CpuId, sender: Option<Cx>) {
        if let Some(sender) = sender {
            let at = self.now() + self.w().profile.kernel.ipi_ack_ns;
            self.q.push(at, Ev::Ack(ix(sender)));
        }
        if self.core.irq_pending(cpu) {
            self.start_irq(cpu);
        } else if let Some(left) = self.interrupted_work[cpu].take() {
            let label = self.interrupted_label[cpu].take();
            if self.user_step[cpu] && self.resched_on_return_to_user(cpu) {
                // ret_to_user_from_irq → work_pending → schedule(): the
                // task stops its user work here and does the rest later.
                let mut st = self.core.w.stats.borrow_mut();
                let busy = &mut st.cpu[cpu].busy_ns;
                *busy = busy.saturating_sub(left);
                drop(st);
                self.complete(cpu, OpResult::WorkLeft(left));
            } else {
                if let Some(label) = label {
                    self.cpu_time.relabel(cpu, self.now(), label);
                }
                self.after_work(cpu, left);
            }
        } else {
            match *self.core.wait(cpu) {
                Wait::Ready(r) => self.complete(cpu, r),
                // The idle loop looks for work again.
                Wait::Idle => self.complete(cpu, OpResult::Unit),
                _ => {}
            }
        }
    }

    /// Does a handler that interrupted user work on `cpu` return to user
    /// space with `need_resched` set, in a host kernel with the timer tick
    /// on? (Without the tick, user work is cut at slice boundaries
    /// instead: `Ctx::user_work`.)
    fn resched_on_return_to_user(&self, cpu: CpuId) -> bool {
        self.ticking && !self.core.in_guest(cpu) && self.core.w.k.borrow().cpus[cpu].need_resched
    }

    /// Starts a queued IPI on `cpu` if it waits interruptibly (idle, on a
    /// lock, for acknowledgements) with interrupts on and no handler runs.
    fn take_pending_irq(&mut self, cpu: CpuId) {
        if self.core.may_take_irq(cpu)
            && matches!(
                *self.core.wait(cpu),
                Wait::Idle | Wait::Lock(_) | Wait::IpiAck
            )
        {
            self.start_irq(cpu);
        }
    }

    /// Interrupts the `Work` step under way on `cpu` to take its next IPI;
    /// the rest of the work runs after the handler.
    fn interrupt_work(&mut self, cpu: CpuId) {
        if let (Wait::Step, Some((id, end))) = (self.core.wait(cpu), self.work_step[cpu]) {
            self.q.cancel(id);
            self.work_step[cpu] = None;
            self.interrupted_work[cpu] = Some(end - self.now());
            // The rest of the step is charged to what it was charged to
            // before the handler ran, not to the handler.
            self.interrupted_label[cpu] = Some(self.cpu_time.label(cpu));
            self.core.set_wait(cpu, Wait::Free);
            self.start_irq(cpu);
        }
    }

    fn speculate(&mut self, cpu: CpuId) {
        let Some(t) = self.w().hw.borrow().walk_context(cpu) else {
            return;
        };
        if let Some((mm, va)) = self.last_va[cpu] {
            if mm == t.mm {
                ops::speculate(&self.core.w, cpu, va, &mut self.trace);
            }
        }
    }

    /// The step of `cpu` completes with `r` after `ns`.
    #[inline]
    fn after(&mut self, cpu: CpuId, ns: Ns, r: OpResult) {
        self.core.set_wait(cpu, Wait::Step);
        self.result[cpu] = Some(r);
        let t = self.now() + ns;
        self.q.push(t, Ev::StepDone(cpu));
        self.work_step[cpu] = None;
    }

    /// A `Work` step of a task: an IPI may interrupt it (the rest of the
    /// work resumes when the handler returns).
    fn after_work(&mut self, cpu: CpuId, ns: Ns) {
        self.core.set_wait(cpu, Wait::Step);
        self.result[cpu] = Some(OpResult::Unit);
        let t = self.now() + ns;
        let id = self.q.push(t, Ev::StepDone(cpu));
        self.work_step[cpu] = if self.core.in_irq(cpu) {
            None
        } else {
            Some((id, t))
        };
    }

    /// Time broadcast TLBIs took from `cpu` since its last step.
    #[inline]
    fn take_stolen(&mut self, cpu: CpuId) -> Ns {
        self.core.stolen.take(cpu)
    }

    /// Moving a cache line from `from`'s cache to `to`'s.
    fn transfer_ns(&self, from: CpuId, to: CpuId) -> Ns {
        let k = &self.w().profile.kernel;
        let hw = self.w().hw.borrow();
        if hw.cpus[from].socket == hw.cpus[to].socket {
            k.cacheline_transfer_ns
        } else {
            k.cacheline_cross_socket_ns
                .unwrap_or(k.cacheline_transfer_ns)
        }
    }

    /// An atomic on lock `l`'s word (of the kernel `cpu` runs) by `cpu`
    /// now: how long it takes.
    fn line_rmw(&mut self, l: LockId, cpu: CpuId) -> Ns {
        let k = self.core.kernel(cpu).0.id as usize;
        let (now, atomic_ns) = (self.now(), self.w().profile.kernel.atomic_ns);
        let mut line = *self.line(k, l);
        let cost = line.rmw(cpu, now, atomic_ns, |from| self.transfer_ns(from, cpu));
        *self.line(k, l) = line;
        cost
    }

    /// The cache line of lock `l` of kernel `k` (0: the host).
    #[inline]
    fn line(&mut self, k: usize, l: LockId) -> &mut CacheLine {
        let lines = if k == 0 {
            &mut self.lines
        } else {
            if self.guest_lines.len() < k {
                self.guest_lines.resize(k, Vec::new());
            }
            &mut self.guest_lines[k - 1]
        };
        if lines.len() <= l {
            lines.resize(l + 1, CacheLine::default());
        }
        &mut lines[l]
    }

    /// With speculative walks on: a `Work` step is a chance to speculate,
    /// and an access names the VA the next speculation may walk near.
    #[inline]
    fn before_speculating(&mut self, cpu: CpuId, op: &Op) {
        match *op {
            Op::Work { .. } => self.speculate(cpu),
            Op::Access { va, .. } => {
                let t = self.w().hw.borrow().cpus[cpu].ttbr0();
                self.last_va[cpu] = t.map(|t| (t.mm, va));
            }
            _ => {}
        }
    }

    /// A user access: a TLB hit, or a walk of `levels_walked` (and stage-2)
    /// reads, plus what was stolen from the CPU meanwhile.
    #[inline]
    fn time_access(&mut self, cpu: CpuId, r: Result<(), Fault>, info: AccessInfo) {
        self.cpu_time.relabel(cpu, self.now(), &cpu_time::USER);
        let p = &self.w().profile.tlb;
        let cost = if info.tlb_hit {
            p.tlb_hit_ns
        } else {
            let reads = u64::from(info.levels_walked) + u64::from(info.s2_levels);
            p.tlb_hit_ns + p.walk_level_ns * reads
        };
        let s = self.take_stolen(cpu);
        self.after(cpu, cost + s, OpResult::Access(r));
    }

    /// `hrtimer_start()`: the interrupt travels as an IPI with no sender
    /// (not counted as one) to `cx`, `ns` from now; arming costs one
    /// atomic (the timer base's lock and its queue, an estimate).
    fn time_hrtimer(&mut self, cpu: CpuId, cx: Cx, ipi: PendingIpi, ns: u64) {
        let at = self.now().saturating_add(ns);
        let i = self.ipi_slot((cx, ipi, true));
        self.q.push(at, Ev::Ipi(i));
        let atomic = self.w().profile.kernel.atomic_ns;
        self.after(cpu, atomic, OpResult::Unit);
    }

    /// Applies `op` and times it; returns `Some(result)` if it completes at
    /// once (zero time) and the context should be polled again at once.
    fn dispatch(
        &mut self,
        cpu: CpuId,
        task: TaskId,
        op: Op,
        func: Option<&'static Label>,
    ) -> Option<OpResult> {
        // Charged to the kernel function posting it; user code and the idle
        // loop are told apart below, where their arms match anyway.
        let label = func.unwrap_or(&cpu_time::KERNEL);
        self.cpu_time.relabel(cpu, self.now(), label);
        if self.speculative {
            self.before_speculating(cpu, &op);
        }
        let applied = self.core.apply(cpu, task, &op, &mut self.trace);
        match applied {
            Applied::Done(r) => return self.time_done(cpu, &op, r),
            Applied::Access(r, info) => self.time_access(cpu, r, info),
            Applied::Tlbi(id) => self.time_tlbi(cpu, &op, id),
            Applied::DsbIsh => {
                if self.w().hw.borrow().cpus[cpu].inflight > 0 {
                    self.core.set_wait(cpu, Wait::DsbInflight);
                } else {
                    self.dsb_sync(cpu);
                }
            }
            Applied::Locked(l) => {
                let cost = self.line_rmw(l, cpu);
                self.after(cpu, cost, OpResult::Unit);
            }
            Applied::LockWait => self.take_pending_irq(cpu),
            Applied::Unlocked(l, granted) => {
                self.hand_over(cpu, l, granted);
            }
            Applied::Switched => {
                self.charge_to_current(cpu);
                self.core.set_wait(cpu, Wait::Free);
                self.run(cpu);
            }
            Applied::IdleWait => {
                self.cpu_time.relabel(cpu, self.now(), &cpu_time::IDLE);
                // The idle loop absorbs what was stolen from the CPU.
                self.core.stolen.take(cpu);
                self.take_pending_irq(cpu);
            }
            Applied::GuestIdleExit => self.guest_exited(cpu),
            Applied::EnteredGuest => self.entered_guest(cpu),
            Applied::ReschedIpi(target) => {
                let k = &self.w().profile.kernel;
                let (at, atomic) = (self.now() + k.resched_ipi_ns, k.atomic_ns);
                self.q.push(at, Ev::Kick(ix(target)));
                self.after(cpu, atomic, OpResult::Unit);
            }
            Applied::CallFunction(targets, ipi) => self.send_ipis(cpu, &targets, ipi),
            Applied::Hrtimer(cx, ipi, ns) => self.time_hrtimer(cpu, cx, ipi, ns),
        }
        None
    }

    /// Times a step whose effect is done: its fixed cost from the profile.
    fn time_done(&mut self, cpu: CpuId, op: &Op, r: OpResult) -> Option<OpResult> {
        let cost = match *op {
            Op::Work { ns, user } => {
                if user {
                    self.cpu_time.relabel(cpu, self.now(), &cpu_time::USER);
                }
                let s = self.take_stolen(cpu);
                self.w().stats.borrow_mut().cpu[cpu].busy_ns += ns;
                if !self.core.in_irq(cpu) {
                    // A handler's work is not the task's.
                    self.user_step[cpu] = user;
                }
                self.after_work(cpu, ns + s);
                // An IPI that waited for interrupts to come back on is
                // taken now.
                if self.core.may_take_irq(cpu) {
                    self.interrupt_work(cpu);
                }
                return None;
            }
            // Found work at once, or called no CPU: zero time.
            Op::Idle | Op::CallFunction { .. } => return Some(r),
            Op::Dsb(_) => self.c.barrier_ns,
            Op::Isb => self.c.isb_ns,
            // A system-register write, like TTBR0's.
            Op::SetTtbr0(_)
            | Op::SetReservedTtbr0
            | Op::SetDvmAffinity(_)
            | Op::SetVttbr { .. }
            | Op::SetHcrTge(_) => self.c.ttbr_write_ns,
            Op::LoadCr3 { flush, .. } => {
                self.c.ttbr_write_ns + flush.map_or(0, |_| self.c.inval_local_all_ns)
            }
            Op::Atomic => self.w().profile.kernel.atomic_ns,
            Op::LockWord(l) => self.line_rmw(l, cpu),
            _ => unreachable!("{op:?} is timed by its own arm"),
        };
        self.after(cpu, cost, r);
        None
    }

    /// Times a TLBI: a local one by what it scans; a broadcast one reaches
    /// its targets after the broadcast latency.
    fn time_tlbi(&mut self, cpu: CpuId, op: &Op, id: Option<usize>) {
        let Op::Tlbi { scope, .. } = *op else {
            unreachable!("a TLBI step")
        };
        let c = self.c;
        match id {
            Some(id) => {
                let spans = match &self.w().hw.borrow().cpus[cpu].dvm_affinity {
                    None => self.w().profile.topology.sockets > 1,
                    Some(m) => self.spans_sockets(m),
                };
                let cross = if spans { c.bcast_cross_socket_ns } else { 0 };
                let at = self.now() + c.bcast_latency_ns + cross;
                self.q.push(at, Ev::DvmApply(ix(id)));
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

    /// `cpu` released lock `l` and `granted` now hold it: each gets the line
    /// after a transfer from `cpu` and completes its wait then.
    fn hand_over(&mut self, cpu: CpuId, l: LockId, granted: Vec<LockWaiter>) {
        let cost = self.line_rmw(l, cpu);
        if granted.is_empty() {
            // Nobody waited (the common case).
            self.after(cpu, cost, OpResult::Unit);
            return;
        }
        let kernel = Rc::clone(self.core.kernel(cpu).0);
        let waiters: Vec<(Cx, CpuId)> = granted
            .iter()
            .map(|g| {
                let wcx = self.core.cx_of_task(cpu, g.task);
                let wcpu = self
                    .core
                    .resident(wcx)
                    .unwrap_or_else(|| kernel.pcpu(kernel.k.borrow().tasks[g.task].cpu));
                (wcx, wcpu)
            })
            .collect();
        if let Some(&(_, gcpu)) = waiters.last() {
            // The waiters take the line over after the release.
            self.line(kernel.id as usize, l).cpu = Some(gcpu);
        }
        for (g, (wcx, wcpu)) in granted.iter().zip(waiters) {
            let handoff = self.transfer_ns(cpu, wcpu);
            kernel.lock_granted(l, g, self.now() + handoff);
            let spinning_here = self.core.running(wcpu) == wcx
                && !(self.core.in_irq(wcpu) && *self.core.wait(wcpu) != Wait::Lock(l));
            if spinning_here {
                self.after(wcpu, handoff, OpResult::Unit);
            } else {
                // The spinning task was interrupted (by a handler, or its
                // vCPU by an exit): it gets the lock when it runs again.
                self.core
                    .release(wcx, |w| *w == Wait::Lock(l), OpResult::Unit);
                if self.core.resident(wcx).is_none() {
                    self.ring_doorbell(wcx);
                }
            }
        }
        self.after(cpu, cost, OpResult::Unit);
    }

    /// `smp_call_function_many`: one interrupt-controller write per group
    /// of `ipi_cpus_per_send` CPUs, one after another; each IPI arrives
    /// `ipi_latency_ns` after its write. The sender takes IPIs while it
    /// waits for the acknowledgements.
    fn send_ipis(&mut self, cpu: CpuId, targets: &[Cx], ipi: PendingIpi) {
        let n = targets.len();
        let k = self.core.w.profile.kernel.clone();
        let per = k.ipi_cpus_per_send as usize;
        let mut t = self.now();
        let mut group = usize::MAX;
        for &target in targets {
            if target / per != group {
                group = target / per;
                t += k.ipi_send_ns;
            }
            let i = self.ipi_slot((target, ipi, n == 1));
            self.q.push(t + k.ipi_latency_ns, Ev::Ipi(i));
        }
        self.take_pending_irq(cpu);
    }

    fn dsb_sync(&mut self, cpu: CpuId) {
        if self.core.dsb_needs_sync(cpu) {
            self.core.set_wait(cpu, Wait::DsbSync);
            let reach = self.w().hw.borrow_mut().take_dvm_reach(cpu);
            if self.c.sync_serialized {
                let mut nodes = std::mem::take(&mut self.sync_scratch.0);
                self.sync_nodes(reach.as_ref(), &mut nodes);
                let started = self.mns.arrive(cpu, self.now(), reach, &nodes);
                self.sync_scratch.0 = nodes;
                if let Some(s) = started {
                    self.sync_start(s);
                }
            } else {
                // Completion barriers of different CPUs proceed in parallel
                // (x86 TLBSYNC unless the profile says otherwise).
                self.sync_reaches_targets(cpu, reach.as_ref());
                let at = self.now() + self.sync_service_ns(reach.as_ref());
                self.q.push(at, Ev::SyncDone(cpu));
            }
        } else {
            self.after(cpu, self.c.barrier_ns, OpResult::Unit);
        }
    }

    /// Service time of one completion barrier (DVM Sync / TLBSYNC) that
    /// goes to `reach` (`None`: every CPU): a response from each CPU it
    /// reaches and, if they span sockets, a round trip to the other socket
    /// (docs/model.md).
    fn sync_service_ns(&self, reach: Option<&CpuMask>) -> Ns {
        let (targets, cross) = match reach {
            None => (self.w().ncpus(), self.w().profile.topology.sockets > 1),
            Some(m) => (m.count(), self.spans_sockets(m)),
        };
        let cross = if cross {
            2 * self.c.bcast_cross_socket_ns
        } else {
            0
        };
        self.c.sync_base_ns + self.c.sync_per_target_ns * targets as u64 + cross
    }

    /// Do the CPUs of `m` sit on more than one socket?
    fn spans_sockets(&self, m: &CpuMask) -> bool {
        let hw = self.w().hw.borrow();
        let mut sockets = m.iter().map(|c| hw.cpus[c].socket);
        let first = sockets.next();
        sockets.any(|s| Some(s) != first)
    }

    /// The misc nodes a Sync to `reach` (`None`: every CPU) queues at, in
    /// increasing order, into `nodes` (cleared first): the one node, or
    /// with a node per die, those of the dies it reaches.
    fn sync_nodes(&self, reach: Option<&CpuMask>, nodes: &mut Vec<usize>) {
        nodes.clear();
        if !self.c.sync_domain_die {
            nodes.push(0);
            return;
        }
        let hw = self.w().hw.borrow();
        match reach {
            None => nodes.extend(0..self.mns.nodes()),
            Some(m) => {
                nodes.extend(m.iter().map(|c| hw.cpus[c].die as usize));
                nodes.sort_unstable();
                nodes.dedup();
            }
        }
    }

    /// A misc node (or the nodes of every die it reaches) starts serving
    /// Sync `s`.
    fn sync_start(&mut self, s: misc_node::Sync) {
        let waited = self.now() - s.since;
        self.w()
            .stats
            .borrow_mut()
            .dvm_sync_queue_wait_ns
            .record(waited);
        self.sync_reaches_targets(s.cpu, s.reach.as_ref());
        let at = self.now() + self.sync_service_ns(s.reach.as_ref());
        self.q.push(at, Ev::SyncDone(s.cpu));
    }

    /// The DVM Sync of `cpu` is served: every other busy CPU it reaches
    /// (`reach`, `None`: every CPU) answers it and loses the profile's
    /// `sync_target_stall_ns` (an idle CPU absorbs it, as it does a TLBI's
    /// stall; docs/model.md).
    fn sync_reaches_targets(&mut self, cpu: CpuId, reach: Option<&CpuMask>) {
        let stall = self.c.sync_target_stall_ns;
        if stall == 0 {
            return;
        }
        match reach {
            None => self.core.stolen.charge_all_busy(cpu, stall),
            Some(m) => {
                for t in m.iter().filter(|&t| t != cpu) {
                    self.core.stolen.charge(t, stall);
                }
            }
        }
    }

    /// Broadcast TLBI `id` reaches every target; each busy target loses the
    /// profile's stall (an idle CPU absorbs the work, docs/model.md). A
    /// `DSB ISH` of the issuer that waited for it goes on to its Sync.
    fn dvm_apply(&mut self, id: usize) {
        let scope = self.w().hw.borrow().inflight[id]
            .as_ref()
            .expect("live")
            .scope;
        let stall = if whole_tlb(scope) {
            self.c.bcast_target_stall_all_ns
        } else {
            self.c.bcast_target_stall_ns
        };
        let (f, to_all) = self.core.dvm_deliver_all(id);
        let issuer = f.issuer;
        if to_all {
            self.core.stolen.charge_all_busy(issuer, stall);
        } else {
            for t in f.pending.iter().filter(|&t| t != issuer) {
                self.core.stolen.charge(t, stall);
            }
        }
        if self.w().hw.borrow().cpus[issuer].inflight == 0
            && *self.core.wait(issuer) == Wait::DsbInflight
        {
            self.dsb_sync(issuer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CacheLine;
    use crate::hw::{cpu::cpuid, CpuId};

    #[test]
    fn lock_words_move_between_caches_one_atomic_at_a_time() {
        let mut l = CacheLine::default();
        // First touch and repeated use by one CPU: an L1 atomic.
        // CPUs 0-1 on one socket, 2-3 on another: 110 ns within, 200 across.
        let t = |to: u32| move |from: CpuId| if from.get() / 2 == to / 2 { 110 } else { 200 };
        assert_eq!(l.rmw(cpuid(0), 1_000, 10, t(0)), 10);
        assert_eq!(l.rmw(cpuid(0), 2_000, 10, t(0)), 10);
        // Another CPU pays a transfer.
        assert_eq!(l.rmw(cpuid(1), 3_000, 10, t(1)), 110);
        // Two CPUs at the same instant: the second waits for the first.
        assert_eq!(l.rmw(cpuid(2), 5_000, 10, t(2)), 200);
        assert_eq!(l.rmw(cpuid(3), 5_000, 10, t(3)), 310);
        assert_eq!(l.free_ns, 5_310);
    }
}
