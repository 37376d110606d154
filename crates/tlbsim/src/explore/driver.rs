//! The explorer driver: applies the action a chooser picks — a CPU's step
//! (through the one step semantics of [`crate::step`]), a broadcast TLBI's
//! arrival, a speculative fill, an IPI taken — and lists the actions
//! enabled next.

use super::{Action, Chooser, Outcome, Stop};
use crate::engine::track::{self, part, Footprint, Loc, Space};
use crate::hw::tlb::MmId;
use crate::hw::{AccessTrace, CpuId, CpuVec};
use crate::kernel::{Dsb, GuestExit, LockId, LockWaiter, Op, OpResult, World};
use crate::observe::{Clock, Violation};
use crate::step::{host_cx, ops, Applied, Cpus, Cx, PendingIpi, Polled, Wait};
use std::collections::BTreeSet;
use std::rc::Rc;

/// The explorer driver for one schedule.
#[derive(Debug)]
pub struct Explorer {
    core: Cpus,
    /// Broadcast TLBIs in flight, oldest first: (inflight id).
    inflight: Vec<usize>,
    /// VAs accessed per mm (speculation candidates).
    touched: BTreeSet<(MmId, u64)>,
    speculation_budget: u32,
    trace: Vec<AccessTrace>,
    /// The actions taken.
    pub schedule: Vec<Action>,
    /// What each action of `schedule` read and wrote (recorded as it ran;
    /// unknown for the action that ended the run, which disables every
    /// other, and for every action of a run with VMs), when the chooser
    /// asks for footprints ([`Chooser::wants_footprints`]); else empty.
    pub footprints: Vec<Footprint>,
    /// Record footprints (set by [`Explorer::run`] from its chooser).
    recording: bool,
    /// Per CPU: the actions it took (`Step`, `Interrupt`); the clock that
    /// kernel code sees while it acts ([`Explorer::apply`]).
    clock: CpuVec<u64>,
    /// VMs run: footprints are not recorded for their contexts.
    vms: bool,
    /// Per CPU: a host reschedule IPI reached it while it runs a guest
    /// (`kvm_vcpu_kick`): the guest may exit (`Interrupt`).
    exit_requested: CpuVec<bool>,
}

impl Explorer {
    /// An explorer over `w` (tasks already created) allowing
    /// `speculation_budget` speculative fills per schedule.
    pub fn new(w: Rc<World>, speculation_budget: u32) -> Self {
        let n = w.ncpus();
        let mut e = Self {
            core: Cpus::new(w),
            inflight: Vec::new(),
            touched: BTreeSet::new(),
            speculation_budget,
            trace: Vec::new(),
            schedule: Vec::new(),
            footprints: Vec::new(),
            recording: false,
            clock: CpuVec::filled(n, 0),
            vms: false,
            exit_requested: CpuVec::filled(n, false),
        };
        for cpu in CpuId::all(n) {
            e.run_cpu(cpu);
        }
        e
    }

    /// The world being explored.
    pub fn world(&self) -> &Rc<World> {
        &self.core.w
    }

    /// Adds the VMs' vCPUs as contexts before the first action.
    pub fn add_vms(&mut self, guests: &crate::step::Guests) {
        guests.add_to(&mut self.core);
        self.vms = self.core.waits().len() > self.ncpus();
    }

    /// The checker's violation, if any, its times marked as the
    /// explorer's per-CPU clocks ([`Clock::PerCpuActions`]).
    pub fn failure(&self) -> Option<Violation> {
        let mut v = self.core.w.failure()?;
        v.clock = Clock::PerCpuActions;
        Some(v)
    }

    /// The number of physical CPUs.
    fn ncpus(&self) -> usize {
        self.core.w.ncpus()
    }

    /// Runs the schedule the chooser makes until `done`, a violation, a
    /// deadlock or `max_actions`.
    pub fn run(
        &mut self,
        chooser: &mut dyn Chooser,
        max_actions: usize,
        done: impl Fn(&World) -> bool,
    ) -> Outcome {
        loop {
            if let Some(r) = self.failure() {
                return Outcome::Violation(r);
            }
            if done(&self.core.w) {
                return Outcome::Done;
            }
            if self.schedule.len() >= max_actions {
                return Outcome::Bounded;
            }
            let enabled = self.enabled();
            if enabled.is_empty() {
                return Outcome::Deadlock(self.core.describe());
            }
            let i = chooser.choose(self.schedule.len(), &enabled);
            match chooser.stop() {
                Some(Stop::Redundant) => return Outcome::Pruned,
                Some(Stop::Spinning) => return Outcome::Spun,
                None => {}
            }
            self.recording = chooser.wants_footprints();
            self.apply(enabled[i]);
            if !self.recording {
                continue;
            }
            if done(&self.core.w) {
                // The run ends here: this action disables every other.
                *self.footprints.last_mut().expect("applied") = Footprint::unknown();
            }
            chooser.executed(self.footprints.last().expect("applied"));
        }
    }

    /// Applies `a`, which must be enabled (replay checks this first),
    /// recording its footprint if the chooser of [`Explorer::run`] wants
    /// footprints.
    ///
    /// Time: the clock kernel code reads while CPU `c` acts is the number
    /// of actions `c` has taken, its own history, so that actions of
    /// different CPUs that touch disjoint state commute (docs/model.md,
    /// "The explorer's footprints and DPOR").
    pub fn apply(&mut self, a: Action) {
        let w = &self.core.w;
        if let Action::Step(c) | Action::Interrupt(c) = a {
            self.clock[c] += 1;
            w.now.set(self.clock[c]);
        }
        w.stats.borrow_mut().events += 1;
        self.schedule.push(a);
        if self.recording {
            track::start();
        }
        match a {
            Action::Step(c) => self.step(c),
            Action::Deliver(t) => {
                // Offered beside an access posted at `t`.
                track::record(|| Loc::part(Space::Cx, part::cx(host_cx(t))), false);
                self.deliver_one(t);
            }
            Action::Speculate(c, va) => {
                // Offered for the accessed VAs while the budget lasts.
                track::record(|| Loc::part(Space::Explore, part::TOUCHED), false);
                track::record(|| Loc::part(Space::Explore, part::BUDGET), true);
                self.speculation_budget -= 1;
                ops::speculate(&self.core.w, c, va, &mut self.trace);
            }
            Action::Interrupt(c) if self.core.in_guest(c) => self.exit_guest(c),
            Action::Interrupt(c) => {
                self.core.start_irq(c);
                self.run_cpu(c);
            }
        }
        if !self.recording {
            return;
        }
        let fp = track::finish();
        self.footprints
            .push(if self.vms { Footprint::unknown() } else { fp });
    }

    /// The guest on `c` exits for a host interrupt: it keeps its wait (a
    /// posted step stays posted), the host's `EnterGuest` is ready.
    fn exit_guest(&mut self, c: CpuId) {
        self.exit_requested[c] = false;
        // A tick may be what interrupts it: the vCPU thread's slice ends
        // if another host task waits.
        self.core.tick_in_guest(c);
        self.core.exit_guest(c, OpResult::GuestExit(GuestExit::Irq));
    }

    /// Does the guest running on `c` owe the host an exit it can take now
    /// (at a step boundary)?
    fn guest_exit_due(&self, c: CpuId) -> bool {
        self.core.in_guest(c)
            && (self.exit_requested[c]
                || self.core.irq_pending_cx(c)
                || self.core.host_task_waits(c))
            && !self.core.in_irq(c)
            && matches!(
                *self.core.wait(c),
                Wait::Posted(_) | Wait::Idle | Wait::Lock(_) | Wait::IpiAck | Wait::Ready(_)
            )
    }

    /// The guest context `c` just entered runs from where it stopped; an
    /// idle one with nothing pending exits again (`WFI`).
    fn resume_guest(&mut self, c: CpuId) {
        match self.core.wait(c).clone() {
            Wait::Ready(r) => self.complete(c, r),
            Wait::Free => self.run_cpu(c),
            Wait::Idle if !self.core.may_take_irq(c) => {
                self.core.exit_guest(c, OpResult::GuestExit(GuestExit::Wfi));
            }
            _ => {}
        }
    }

    /// Something waits for context `cx`, which runs nowhere: its doorbell
    /// reaches the CPU it last ran on (a host IPI taken by `Interrupt`).
    fn ring_doorbell(&mut self, cx: usize) {
        if let Some((cpu, ipi)) = self.core.doorbell(cx) {
            self.core.ipi_arrive(host_cx(cpu), ipi, true);
        }
    }

    /// Can CPU `c` take an IPI now? At a step boundary of any context
    /// that is not running.
    fn interruptible(&self, c: CpuId) -> bool {
        if self.guest_exit_due(c) {
            return true;
        }
        self.core.may_take_irq(c)
            && matches!(
                *self.core.wait(c),
                Wait::Posted(_) | Wait::Idle | Wait::Lock(_) | Wait::IpiAck | Wait::Ready(_)
            )
    }

    /// The actions possible now, in a fixed order.
    pub fn enabled(&self) -> Vec<Action> {
        let mut v = Vec::new();
        let n = self.ncpus();
        for c in CpuId::all(n) {
            if matches!(self.core.wait(c), Wait::Posted(_) | Wait::Ready(_)) {
                v.push(Action::Step(c));
            }
        }
        for c in CpuId::all(n) {
            if self.interruptible(c) {
                v.push(Action::Interrupt(c));
            }
        }
        for c in CpuId::all(n) {
            if matches!(self.core.wait(c), Wait::Posted(Op::Access { .. })) && self.pending_at(c) {
                v.push(Action::Deliver(c));
            }
        }
        if self.speculation_budget > 0 {
            let hw = self.core.w.hw.borrow();
            for c in CpuId::all(n) {
                if let Some(t) = hw.walk_context(c) {
                    for &(_, va) in self.touched.range((t.mm, 0)..=(t.mm, u64::MAX)) {
                        // A walk that can change nothing is no choice.
                        if hw.may_speculate(c, va) {
                            v.push(Action::Speculate(c, va));
                        }
                    }
                }
            }
        }
        v
    }

    fn pending_at(&self, t: CpuId) -> bool {
        let hw = self.core.w.hw.borrow();
        self.inflight
            .iter()
            .any(|&id| hw.inflight[id].as_ref().is_some_and(|f| f.pending.test(t)))
    }

    fn deliver_one(&mut self, t: CpuId) {
        let id = {
            let hw = self.core.w.hw.borrow();
            self.inflight
                .iter()
                .copied()
                .find(|&id| hw.inflight[id].as_ref().is_some_and(|f| f.pending.test(t)))
        };
        if let Some(id) = id {
            self.deliver(id, t);
        }
    }

    fn deliver(&mut self, id: usize, t: CpuId) {
        if self.core.dvm_deliver(id, t) {
            self.inflight.retain(|&x| x != id);
        }
    }

    /// Delivers everything `cpu` has in flight (its `DSB ISH` completes).
    fn drain(&mut self, cpu: CpuId) {
        let mine: Vec<usize> = {
            let hw = self.core.w.hw.borrow();
            self.inflight
                .iter()
                .copied()
                .filter(|&id| hw.inflight[id].as_ref().is_some_and(|f| f.issuer == cpu))
                .collect()
        };
        for id in mine {
            for t in CpuId::all(self.core.w.ncpus()) {
                let pending = self.core.w.hw.borrow().inflight[id]
                    .as_ref()
                    .is_some_and(|f| f.pending.test(t));
                if pending {
                    self.deliver(id, t);
                }
            }
        }
    }

    /// Completes the step of the context running on `c` with `r` and runs
    /// that context on.
    fn complete(&mut self, c: CpuId, r: OpResult) {
        self.core.complete(c, r);
        self.run_cpu(c);
    }

    /// An access to `va` on `cpu` adds its page to the VAs accessed so far
    /// (which speculative fills may walk).
    fn touch(&mut self, cpu: CpuId, va: u64) {
        let ttbr0 = self.core.w.hw.read_at(part::regs(cpu)).cpus[cpu].ttbr0();
        if let Some(t) = ttbr0 {
            if self
                .touched
                .insert((t.mm, self.core.w.granule.page_down(va)))
            {
                track::record(|| Loc::part(Space::Explore, part::TOUCHED), true);
            }
        }
    }

    /// Lock `l`, released on `cpu`, is granted to each of `granted`: its
    /// waiter is released, its doorbell rung if it is a vCPU not resident.
    fn grant(&mut self, cpu: CpuId, l: LockId, granted: Vec<LockWaiter>) {
        let kernel = Rc::clone(self.core.kernel(cpu).0);
        for g in granted {
            let wcx = self.core.cx_of_task(cpu, g.task);
            kernel.lock_granted(l, &g, self.core.w.now.get());
            self.core
                .release(wcx, |s| *s == Wait::Lock(l), OpResult::Unit);
            if self.core.resident(wcx).is_none() {
                self.ring_doorbell(wcx);
            }
        }
    }

    /// An interrupt `ipi` arrives at context `cx` (`single`: the only
    /// target of its call), ringing its doorbell if it is a vCPU not
    /// resident.
    fn ipi_arrive(&mut self, cx: Cx, ipi: PendingIpi, single: bool) {
        self.core.ipi_arrive(cx, ipi, single);
        if self.core.resident(cx).is_none() {
            self.ring_doorbell(cx);
        }
    }

    /// `Step(cpu)`: applies CPU `cpu`'s posted step (or resumes a released
    /// wait), then runs it to its next step.
    fn step(&mut self, cpu: CpuId) {
        let op = match self.core.set_wait(cpu, Wait::Free) {
            Wait::Posted(op) => op,
            Wait::Ready(r) => return self.complete(cpu, r),
            other => panic!("step of cpu{cpu} in state {other:?}"),
        };
        let task = {
            let (w, local) = self.core.kernel(cpu);
            let t = w.k.borrow().cpus[local].current;
            t
        };
        if let Op::Access { va, .. } = op {
            self.touch(cpu, va);
        }
        match self.core.apply(cpu, task, &op, &mut self.trace) {
            Applied::Done(r) => self.complete(cpu, r),
            Applied::Access(r, _) => self.complete(cpu, OpResult::Access(r)),
            Applied::Tlbi(id) => {
                self.inflight.extend(id);
                self.complete(cpu, OpResult::Unit);
            }
            Applied::DsbIsh => {
                self.drain(cpu);
                if self.core.dsb_needs_sync(cpu) {
                    self.core.dsb_ish_done(cpu);
                }
                self.complete(cpu, OpResult::Unit);
            }
            Applied::Locked(_) => self.complete(cpu, OpResult::Unit),
            Applied::LockWait | Applied::IdleWait => {}
            Applied::Unlocked(l, granted) => {
                self.grant(cpu, l, granted);
                self.complete(cpu, OpResult::Unit);
            }
            Applied::Switched => self.run_cpu(cpu),
            Applied::ReschedIpi(target) => {
                let released = self.core.resched_arrive(target);
                match self.core.resident(target) {
                    None if released => self.ring_doorbell(target),
                    // A kick to a CPU that runs a guest.
                    Some(c) if self.core.running(c) != target => self.exit_requested[c] = true,
                    _ => {}
                }
                self.complete(cpu, OpResult::Unit);
            }
            Applied::CallFunction(targets, ipi) => {
                let n = targets.len();
                for &t in &targets {
                    self.ipi_arrive(t, ipi, n == 1);
                }
            }
            Applied::GuestIdleExit => {}
            Applied::EnteredGuest => self.resume_guest(cpu),
            Applied::Hrtimer(cx, ipi, _) => {
                // Untimed: the timer may expire at any point from now on,
                // so its interrupt is pending at once (`Interrupt`).
                self.ipi_arrive(cx, ipi, true);
                self.complete(cpu, OpResult::Unit);
            }
        }
    }

    /// Polls the context running on `cpu` (task or handler) until it posts
    /// a step, or its handler returns (the sender then has its
    /// acknowledgement).
    /// Steps that touch nothing another CPU or the checker can see (time,
    /// barriers whose effect the explorer already applies) complete at
    /// once: no choice point before them (a partial-order reduction).
    /// A context that only spins on such steps (waiting for a flag another
    /// CPU sets) posts every 64th one as a choice point, so that it does
    /// not run forever.
    fn run_cpu(&mut self, cpu: CpuId) {
        for n in 0.. {
            match self.core.poll(cpu) {
                Polled::Step(_, op, _) => {
                    // A guest's DSB NSH is a DSB ISH (HCR_EL2.BSU): not local.
                    let upgraded = matches!(op, Op::Dsb(Dsb::Nsh))
                        && self.core.w.hw.borrow().upgrades_barriers(cpu);
                    let local = !upgraded
                        && matches!(
                            op,
                            Op::Work { .. } | Op::Isb | Op::Dsb(Dsb::IshSt | Dsb::Nsh | Dsb::NshSt)
                        );
                    if n % 64 != 63 && local {
                        self.core.complete_at_once(cpu, OpResult::Unit);
                        continue;
                    }
                    self.core.set_wait(cpu, Wait::Posted(op));
                    return;
                }
                Polled::Returned { sender } => {
                    if let Some(s) = sender {
                        if self.core.ack(s) && self.core.resident(s).is_none() {
                            self.ring_doorbell(s);
                        }
                    }
                    if *self.core.wait(cpu) == Wait::Idle && self.core.idle_has_work(cpu) {
                        // The handler made work (a doorbell woke a vCPU
                        // thread here): the idle loop looks again.
                        self.core.set_wait(cpu, Wait::Ready(OpResult::Unit));
                    }
                    return;
                }
            }
        }
    }
}
