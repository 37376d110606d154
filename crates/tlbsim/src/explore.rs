//! The explorer: the second driver of DESIGN §2. It runs the same kernel
//! code as the timing driver, but time plays no part: at every point it
//! chooses which CPU completes its next step, when a broadcast TLBI reaches
//! each target, and where the hardware fills the TLB speculatively. The
//! observer (the checker) sees every event, so a schedule that breaks an
//! invariant is reported with the exact action list that replays it.
//!
//! Actions (their printed form in brackets):
//! - `Step(c)` [`s<c>`]: CPU `c` completes its posted step and runs on to
//!   its next one. Steps that must wait (a lock, `DSB ISH` with TLBIs in
//!   flight, the idle loop) block until another action releases them.
//! - `Deliver(t)` [`d<t>`]: the oldest broadcast TLBI still pending at CPU
//!   `t` takes effect there.
//! - `Speculate(c, va)` [`p<c>:<va hex>`]: CPU `c` walks `va` through its
//!   current TTBR0 and fills its TLB, as an out-of-order core may at any time.
//!   Candidate VAs are those the workload has accessed in that mm.
//! - `Interrupt(c)` [`i<c>`]: CPU `c` takes its oldest pending function-call
//!   IPI, at a step boundary with interrupts on (`Ctx::irq_save` holds it
//!   off); the handler's steps are then CPU `c`'s steps until it returns,
//!   and the sender's `CallFunction` completes when every handler has.
//!
//! Reduction (documented in docs/model.md): a delivery only matters
//! relative to what reads the target's TLB, so `Deliver(t)` is offered only
//! while `t` is about to access memory, and everything still in flight is
//! delivered when a `DSB ISH` needs it. Speculation is offered only while
//! the per-schedule budget lasts.

use crate::hw::tlb::MmId;
use crate::hw::{AccessTrace, CpuId};
use crate::kernel::{Dsb, Op, OpResult, World};
use crate::step::{ops, Applied, Cpus, Polled, Wait};
use rand::Rng as _;
use std::collections::BTreeSet;
use std::fmt;
use std::rc::Rc;

/// One choice of the explorer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// CPU completes its posted step.
    Step(CpuId),
    /// The oldest pending broadcast TLBI reaches this CPU.
    Deliver(CpuId),
    /// Speculative walk and fill of a VA by a CPU.
    Speculate(CpuId, u64),
    /// The CPU takes its oldest pending IPI.
    Interrupt(CpuId),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Step(c) => write!(f, "s{c}"),
            Action::Deliver(t) => write!(f, "d{t}"),
            Action::Speculate(c, va) => write!(f, "p{c}:{va:x}"),
            Action::Interrupt(c) => write!(f, "i{c}"),
        }
    }
}

/// Formats a schedule compactly: repeated actions as `s0*12`.
pub fn format_schedule(s: &[Action]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let mut j = i + 1;
        while j < s.len() && s[j] == s[i] {
            j += 1;
        }
        if j - i > 1 {
            out.push(format!("{}*{}", s[i], j - i));
        } else {
            out.push(s[i].to_string());
        }
        i = j;
    }
    out.join(" ")
}

/// Parses [`format_schedule`]'s output. Errors name the bad token.
pub fn parse_schedule(text: &str) -> Result<Vec<Action>, String> {
    let mut out = Vec::new();
    for tok in text.split_whitespace() {
        let (a, n) = match tok.split_once('*') {
            Some((a, n)) => (
                a,
                n.parse::<usize>()
                    .map_err(|_| format!("bad repeat count in \"{tok}\""))?,
            ),
            None => (tok, 1),
        };
        let bad =
            || format!("bad action \"{tok}\" (expected s<cpu>, d<cpu>, i<cpu> or p<cpu>:<va hex>)");
        let num = |s: &str| s.parse::<usize>().map_err(|_| bad());
        let act = if let Some(c) = a.strip_prefix('s') {
            Action::Step(num(c)?)
        } else if let Some(c) = a.strip_prefix('d') {
            Action::Deliver(num(c)?)
        } else if let Some(c) = a.strip_prefix('i') {
            Action::Interrupt(num(c)?)
        } else if let Some(rest) = a.strip_prefix('p') {
            let (c, va) = rest.split_once(':').ok_or_else(bad)?;
            Action::Speculate(num(c)?, u64::from_str_radix(va, 16).map_err(|_| bad())?)
        } else {
            return Err(bad());
        };
        out.extend(std::iter::repeat_n(act, n));
    }
    Ok(out)
}

/// How one schedule ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The workload's root task exited.
    Done,
    /// The checker reported a violation.
    Violation(crate::check::Violation),
    /// No action was possible before the root task exited.
    Deadlock(String),
    /// The step bound was reached first.
    Bounded,
}

/// Chooses among the enabled actions.
pub trait Chooser {
    /// Picks an index into `enabled` (never empty) at choice point `depth`.
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize;
}

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
        };
        for cpu in 0..n {
            e.run_cpu(cpu);
        }
        e
    }

    /// The world being explored.
    pub fn world(&self) -> &Rc<World> {
        &self.core.w
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
            if let Some(r) = self.core.w.failure() {
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
                let label = |c: CpuId| format!("{:?}", self.core.wait[c]);
                return Outcome::Deadlock(self.core.describe(label));
            }
            let i = chooser.choose(self.schedule.len(), &enabled);
            self.apply(enabled[i]);
        }
    }

    /// Applies `a`, which must be enabled (replay checks this first).
    pub fn apply(&mut self, a: Action) {
        let w = &self.core.w;
        w.now.set(w.now.get() + 1);
        w.stats.borrow_mut().events += 1;
        self.schedule.push(a);
        match a {
            Action::Step(c) => self.step(c),
            Action::Deliver(t) => self.deliver_one(t),
            Action::Speculate(c, va) => {
                self.speculation_budget -= 1;
                ops::speculate(&self.core.w, c, va, &mut self.trace);
            }
            Action::Interrupt(c) => {
                self.core.start_irq(c);
                self.run_cpu(c);
            }
        }
    }

    /// Can CPU `c` take an IPI now? At a step boundary of any context
    /// that is not running.
    fn interruptible(&self, c: CpuId) -> bool {
        self.core.may_take_irq(c)
            && matches!(
                self.core.wait[c],
                Wait::Posted(_) | Wait::Idle | Wait::Lock(_) | Wait::IpiAck | Wait::Ready(_)
            )
    }

    /// The actions possible now, in a fixed order.
    pub fn enabled(&self) -> Vec<Action> {
        let mut v = Vec::new();
        for (c, s) in self.core.wait.iter().enumerate() {
            if matches!(s, Wait::Posted(_) | Wait::Ready(_)) {
                v.push(Action::Step(c));
            }
        }
        for c in 0..self.core.wait.len() {
            if self.interruptible(c) {
                v.push(Action::Interrupt(c));
            }
        }
        for (c, s) in self.core.wait.iter().enumerate() {
            if matches!(s, Wait::Posted(Op::Access { .. })) && self.pending_at(c) {
                v.push(Action::Deliver(c));
            }
        }
        if self.speculation_budget > 0 {
            let hw = self.core.w.hw.borrow();
            for (c, cpu) in hw.cpus.iter().enumerate() {
                if let Some(t) = cpu.ttbr0 {
                    for &(_, va) in self.touched.range((t.mm, 0)..=(t.mm, u64::MAX)) {
                        v.push(Action::Speculate(c, va));
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
            for t in 0..self.core.w.ncpus() {
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

    /// `Step(cpu)`: applies CPU `cpu`'s posted step (or resumes a released
    /// wait), then runs it to its next step.
    fn step(&mut self, cpu: CpuId) {
        let op = match std::mem::replace(&mut self.core.wait[cpu], Wait::Free) {
            Wait::Posted(op) => op,
            Wait::Ready(r) => return self.complete(cpu, r),
            other => panic!("step of cpu{cpu} in state {other:?}"),
        };
        let task = self.core.w.k.borrow().cpus[cpu].current;
        if let Op::Access { va, .. } = op {
            if let Some(t) = self.core.w.hw.borrow().cpus[cpu].ttbr0 {
                self.touched
                    .insert((t.mm, va & !(crate::hw::mem::PAGE_SIZE - 1)));
            }
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
            Applied::Locked => self.complete(cpu, OpResult::Unit),
            Applied::LockWait | Applied::IdleWait => {}
            Applied::Unlocked(granted) => {
                let l = ops::lock_of(&op).expect("an unlock step");
                for g in granted {
                    let wcpu = self.core.w.k.borrow().tasks[g.task].cpu;
                    self.core.w.lock_granted(l, &g, self.core.w.now.get());
                    self.core
                        .release(wcpu, |s| *s == Wait::Lock(l), OpResult::Unit);
                }
                self.complete(cpu, OpResult::Unit);
            }
            Applied::Switched => self.run_cpu(cpu),
            Applied::ReschedIpi(target) => {
                self.core.resched_arrive(target);
                self.complete(cpu, OpResult::Unit);
            }
            Applied::CallFunction(targets, ipi) => {
                let n = targets.count();
                for t in targets.iter() {
                    self.core.ipi_arrive(t, ipi, n == 1);
                }
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
                Polled::Step(_, op) => {
                    let local = matches!(
                        op,
                        Op::Work { .. } | Op::Isb | Op::Dsb(Dsb::IshSt | Dsb::Nsh | Dsb::NshSt)
                    );
                    if n % 64 != 63 && local {
                        self.core.complete_at_once(cpu, OpResult::Unit);
                        continue;
                    }
                    self.core.wait[cpu] = Wait::Posted(op);
                    return;
                }
                Polled::Returned { sender } => {
                    self.core.ack(sender);
                    return;
                }
            }
        }
    }
}

/// Uniformly random choices from a seeded stream; speculative fills are
/// taken with probability `spec_prob` when offered.
#[derive(Debug)]
pub struct RandomChooser {
    rng: crate::engine::rng::Rng,
    spec_prob: f64,
}

impl RandomChooser {
    /// A chooser seeded from `streams` stream `explore/random`.
    pub fn new(rng: crate::engine::rng::Rng, spec_prob: f64) -> Self {
        Self { rng, spec_prob }
    }
}

impl Chooser for RandomChooser {
    fn choose(&mut self, _depth: usize, enabled: &[Action]) -> usize {
        let plain: Vec<usize> = (0..enabled.len())
            .filter(|&i| !matches!(enabled[i], Action::Speculate(..)))
            .collect();
        let spec = enabled.len() - plain.len();
        if plain.is_empty() || (spec > 0 && self.rng.gen_bool(self.spec_prob)) {
            let specs: Vec<usize> = (0..enabled.len())
                .filter(|&i| matches!(enabled[i], Action::Speculate(..)))
                .collect();
            return specs[self.rng.gen_range(0..specs.len())];
        }
        plain[self.rng.gen_range(0..plain.len())]
    }
}

/// PCT (Burckhardt et al., ASPLOS 2010): each CPU gets a random priority;
/// the highest-priority CPU with a step runs; at `depth - 1` random points
/// the running CPU drops to the lowest priority. Deliveries and speculation
/// are taken with probability `other_prob` when offered.
#[derive(Debug)]
pub struct PctChooser {
    rng: crate::engine::rng::Rng,
    prio: Vec<u64>,
    change_points: Vec<usize>,
    other_prob: f64,
    low: u64,
}

impl PctChooser {
    /// `ncpus` CPUs, bug depth `depth`, schedules of about `len` actions.
    pub fn new(mut rng: crate::engine::rng::Rng, ncpus: usize, depth: u32, len: usize) -> Self {
        let mut prio: Vec<u64> = (0..ncpus as u64).map(|i| i + depth as u64 + 1).collect();
        for i in (1..prio.len()).rev() {
            let j = rng.gen_range(0..=i);
            prio.swap(i, j);
        }
        let change_points = (1..depth).map(|_| rng.gen_range(0..len.max(1))).collect();
        Self {
            rng,
            prio,
            change_points,
            other_prob: 0.05,
            low: depth as u64,
        }
    }
}

impl Chooser for PctChooser {
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize {
        // A CPU's steps and its taking an interrupt run at its priority.
        let is_step = |a: &Action| matches!(a, Action::Step(_) | Action::Interrupt(_));
        let steps: Vec<usize> = (0..enabled.len())
            .filter(|&i| is_step(&enabled[i]))
            .collect();
        if steps.is_empty() || (steps.len() < enabled.len() && self.rng.gen_bool(self.other_prob)) {
            let others: Vec<usize> = (0..enabled.len())
                .filter(|&i| !is_step(&enabled[i]))
                .collect();
            return others[self.rng.gen_range(0..others.len())];
        }
        let best = *steps
            .iter()
            .max_by_key(|&&i| match enabled[i] {
                Action::Step(c) | Action::Interrupt(c) => (
                    self.prio[c],
                    u8::from(matches!(enabled[i], Action::Interrupt(_))),
                ),
                _ => (0, 0),
            })
            .expect("non-empty");
        if self.change_points.contains(&depth) {
            if let Action::Step(c) | Action::Interrupt(c) = enabled[best] {
                self.low = self.low.saturating_sub(1);
                self.prio[c] = self.low;
            }
        }
        best
    }
}

/// Exhaustive search with a delay bound (Emmi, Qadeer and Rakamarić,
/// "Delay-bounded scheduling", POPL 2011), stateless: schedules are
/// enumerated depth-first by replaying a prefix of choices. The default
/// scheduler takes a pending interrupt at once, else is round-robin over
/// the CPUs that can step (so spin loops waiting for another CPU
/// terminate); any other choice (another CPU, a delivery, a speculative
/// fill, postponing an interrupt) costs one delay.
#[derive(Debug, Default)]
pub struct DfsChooser {
    /// Choices to follow (index into the reordered candidates).
    pub prefix: Vec<usize>,
    /// Per depth of the last schedule: number of candidates, preemptions
    /// spent before this depth.
    pub seen: Vec<(usize, u32)>,
    last: Option<CpuId>,
    spent: u32,
}

impl DfsChooser {
    fn order(&self, enabled: &[Action]) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..enabled.len()).collect();
        // Round-robin: the first CPU after the last one stepped.
        let after = |a: &Action| match (a, self.last) {
            (Action::Step(c), Some(l)) => Some((*c <= l, *c)),
            (Action::Step(c), None) => Some((false, *c)),
            _ => None,
        };
        // Hardware takes an enabled interrupt at once: that is the default;
        // postponing it costs a delay.
        let default = (0..enabled.len())
            .find(|&i| matches!(enabled[i], Action::Interrupt(_)))
            .or_else(|| {
                (0..enabled.len())
                    .filter_map(|i| after(&enabled[i]).map(|k| (k, i)))
                    .min()
                    .map(|(_, i)| i)
            })
            .unwrap_or(0);
        idx.retain(|&i| i != default);
        idx.insert(0, default);
        idx
    }

    /// Prepares the next schedule; false when the search is complete.
    pub fn advance(&mut self, bound: u32) -> bool {
        self.advance_within(bound, 0)
    }

    /// [`DfsChooser::advance`] that only takes other choices at depths
    /// from `lo` on: the choices above stay as they are (the search of one
    /// subtree).
    fn advance_within(&mut self, bound: u32, lo: usize) -> bool {
        while self.seen.len() > lo {
            let (n, spent) = self.seen.pop().expect("non-empty");
            let d = self.seen.len();
            let cur = self.prefix.get(d).copied().unwrap_or(0);
            self.prefix.resize(d, 0);
            if cur + 1 < n && spent < bound {
                self.prefix.push(cur + 1);
                self.last = None;
                self.spent = 0;
                return true;
            }
        }
        false
    }
}

impl Chooser for DfsChooser {
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize {
        let order = self.order(enabled);
        let k = self.prefix.get(depth).copied().unwrap_or(0);
        let k = k.min(order.len() - 1);
        if self.seen.len() == depth {
            self.seen.push((order.len(), self.spent));
        }
        if k > 0 {
            self.spent += 1;
        }
        let i = order[k];
        if let Action::Step(c) = enabled[i] {
            self.last = Some(c);
        }
        i
    }
}

/// Replays `actions` on `e`, then stops. Errors if an action is not
/// enabled at its point (the schedule belongs to another configuration).
pub fn replay(
    e: &mut Explorer,
    actions: &[Action],
    done: impl Fn(&World) -> bool,
) -> Result<Outcome, String> {
    for (i, a) in actions.iter().enumerate() {
        if let Some(r) = e.core.w.failure() {
            return Ok(Outcome::Violation(r));
        }
        if done(&e.core.w) {
            return Ok(Outcome::Done);
        }
        if !e.enabled().contains(a) {
            return Err(format!(
                "schedule diverged at action {i} ({a}): enabled were {}",
                format_schedule(&e.enabled())
            ));
        }
        e.apply(*a);
    }
    if let Some(r) = e.core.w.failure() {
        return Ok(Outcome::Violation(r));
    }
    Ok(if done(&e.core.w) {
        Outcome::Done
    } else {
        Outcome::Bounded
    })
}

/// How `check` picks schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly random choices.
    Random,
    /// PCT with the given bug depth.
    Pct(u32),
    /// Depth-first enumeration of every schedule with at most this many
    /// preemptions.
    Exhaustive(u32),
}

/// Options of [`check`].
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Strategy.
    pub strategy: Strategy,
    /// Most schedules to run (exhaustive search may finish earlier).
    pub schedules: u64,
    /// Seed of the schedule choices (the workload uses the experiment seed).
    pub seed: u64,
    /// Actions per schedule before it is cut off.
    pub max_actions: usize,
    /// Speculative fills allowed per schedule.
    pub speculation: u32,
    /// CPU-count override.
    pub cpus: Option<u32>,
}

/// A failing schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Which schedule (0-based).
    pub index: u64,
    /// The schedule, in the form `--replay` accepts.
    pub schedule: String,
    /// The checker's violation, or the deadlock (`Display` prints the
    /// report).
    pub report: Finding,
}

/// Why a schedule failed: a checker violation, or no action possible
/// before the workload's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The checker found a violation.
    Violation(crate::check::Violation),
    /// The schedule deadlocked (a description of every CPU and task).
    Deadlock(String),
}

impl Finding {
    /// The invariant broken, if the finding is a violation.
    pub fn invariant(&self) -> Option<crate::check::Invariant> {
        match self {
            Finding::Violation(v) => Some(v.invariant),
            Finding::Deadlock(_) => None,
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Violation(v) => write!(f, "{v}"),
            Finding::Deadlock(d) => f.write_str(d),
        }
    }
}

/// What [`check`] explored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Schedules run.
    pub schedules: u64,
    /// Schedules that ran to the workload's end.
    pub completed: u64,
    /// Schedules cut off at `max_actions`.
    pub bounded: u64,
    /// Actions taken over all schedules.
    pub actions: u64,
    /// Of those, IPIs taken (`Interrupt` actions).
    pub interrupts: u64,
    /// Exhaustive search enumerated every schedule within its bound.
    pub exhausted: bool,
    /// The first failing schedule, if any (the search stops there).
    pub failure: Option<Failure>,
}

/// One schedule run by [`check`]: its outcome and actions.
struct OneRun {
    outcome: Outcome,
    schedule: Vec<Action>,
}

/// Runs one schedule of `exp` with `chooser`.
fn run_one(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    chooser: &mut dyn Chooser,
) -> Result<OneRun, crate::sim::SimError> {
    let b = crate::sim::build(exp, ropts)?;
    let done = b.done();
    let mut e = Explorer::new(Rc::clone(&b.world), opts.speculation);
    let outcome = e.run(chooser, opts.max_actions, done);
    b.world.teardown();
    Ok(OneRun {
        outcome,
        schedule: std::mem::take(&mut e.schedule),
    })
}

impl CheckReport {
    /// Counts schedule `index`; returns true if it failed (the search
    /// stops there).
    fn add(&mut self, index: u64, r: OneRun) -> bool {
        self.schedules += 1;
        self.actions += r.schedule.len() as u64;
        self.interrupts += r
            .schedule
            .iter()
            .filter(|a| matches!(a, Action::Interrupt(_)))
            .count() as u64;
        match r.outcome {
            Outcome::Done => self.completed += 1,
            Outcome::Bounded => self.bounded += 1,
            Outcome::Violation(v) => return self.fail(index, &r.schedule, Finding::Violation(v)),
            Outcome::Deadlock(d) => return self.fail(index, &r.schedule, Finding::Deadlock(d)),
        }
        false
    }

    /// Records schedule `index` as the failure; returns true (the search
    /// stops there).
    fn fail(&mut self, index: u64, schedule: &[Action], report: Finding) -> bool {
        self.failure = Some(Failure {
            index,
            schedule: format_schedule(schedule),
            report,
        });
        true
    }

    /// Appends `later`, whose schedule indices start after this report's.
    fn append(&mut self, later: CheckReport) {
        let base = self.schedules;
        self.schedules += later.schedules;
        self.completed += later.completed;
        self.bounded += later.bounded;
        self.actions += later.actions;
        self.interrupts += later.interrupts;
        self.failure = later.failure.map(|f| Failure {
            index: base + f.index,
            ..f
        });
    }
}

/// Explores schedules of `exp` under the checker.
///
/// Random and exhaustive searches run on every rayon thread; the report
/// (counts, the first failing schedule and its index) is the same as a
/// sequential search's, schedule for schedule. PCT sizes each schedule's
/// priority changes by the previous schedule's length, so it is sequential.
pub fn check(
    exp: &crate::config::Experiment,
    opts: &CheckOptions,
) -> Result<CheckReport, crate::sim::SimError> {
    let ropts = crate::sim::RunOptions {
        seed: None,
        cpus: opts.cpus,
    };
    let streams = crate::engine::rng::Streams::new(opts.seed);
    match opts.strategy {
        Strategy::Random => {
            // Each schedule has its own random stream: run batches in
            // parallel and count them in order.
            let mut rep = CheckReport::default();
            let batch = 64 * rayon::current_num_threads() as u64;
            while rep.schedules < opts.schedules {
                let first = rep.schedules;
                let last = (first + batch).min(opts.schedules);
                let runs: Vec<_> = {
                    use rayon::prelude::*;
                    (first..last)
                        .into_par_iter()
                        .map(|idx| {
                            let rng = streams.stream(&format!("explore/{idx}"));
                            run_one(exp, &ropts, opts, &mut RandomChooser::new(rng, 0.02))
                        })
                        .collect()
                };
                for (idx, r) in (first..last).zip(runs) {
                    if rep.add(idx, r?) {
                        return Ok(rep);
                    }
                }
            }
            Ok(rep)
        }
        Strategy::Pct(d) => {
            let mut rep = CheckReport::default();
            let mut pct_len = 1000usize;
            let ncpus = crate::sim::resolve_profile(exp, &ropts)?.topology.cpus as usize;
            while rep.schedules < opts.schedules {
                let idx = rep.schedules;
                let rng = streams.stream(&format!("explore/{idx}"));
                let mut c = PctChooser::new(rng, ncpus, d, pct_len);
                let r = run_one(exp, &ropts, opts, &mut c)?;
                pct_len = r.schedule.len().max(1);
                if rep.add(idx, r) {
                    break;
                }
            }
            Ok(rep)
        }
        Strategy::Exhaustive(bound) => exhaustive(exp, &ropts, opts, bound),
    }
}

/// Depth-first search of one subtree: the schedules whose choices below
/// `root.len()` are `root`, at most `cap` of them. With `batch`, it also
/// stops early (its report then neither exhausted nor failed) when the
/// batch has run its budget or an earlier subtree of it failed.
fn subtree(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    bound: u32,
    root: &[usize],
    cap: u64,
    batch: Option<(&BatchStop, usize)>,
) -> Result<CheckReport, crate::sim::SimError> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut rep = CheckReport::default();
    let mut dfs = DfsChooser {
        prefix: root.to_vec(),
        ..Default::default()
    };
    while rep.schedules < cap {
        if let Some((b, i)) = batch {
            if b.run.fetch_add(1, Relaxed) >= b.budget || b.failed.load(Relaxed) < i {
                break;
            }
        }
        let r = run_one(exp, ropts, opts, &mut dfs)?;
        if rep.add(rep.schedules, r) {
            if let Some((b, i)) = batch {
                b.failed.fetch_min(i, Relaxed);
            }
            return Ok(rep);
        }
        if !dfs.advance_within(bound, root.len()) {
            rep.exhausted = true;
            break;
        }
    }
    Ok(rep)
}

/// What the subtrees of one parallel batch share: schedules run so far
/// against a budget (the cap left), and the first subtree that failed.
/// Both only make subtrees stop early; the join re-runs any subtree whose
/// result it needs and that stopped early, so the report does not depend
/// on timing.
struct BatchStop {
    run: std::sync::atomic::AtomicU64,
    budget: u64,
    failed: std::sync::atomic::AtomicUsize,
}

/// Exhaustive search. With several threads, the tree is cut where each
/// schedule first leaves the default schedule: the default schedule
/// itself, then, deepest first (depth-first order), one subtree per depth
/// `d` and non-default choice `c` there (every schedule starting with `d`
/// default choices and then `c`). Batches of subtrees are searched in
/// parallel and their reports joined in that order, so the result is the
/// sequential search's, index for index. A batch stops after as many
/// schedules as the cap leaves, or when one of its subtrees fails.
fn exhaustive(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    bound: u32,
) -> Result<CheckReport, crate::sim::SimError> {
    let threads = rayon::current_num_threads();
    if threads < 2 || bound == 0 || opts.schedules < 2 {
        return subtree(exp, ropts, opts, bound, &[], opts.schedules, None);
    }
    // The default schedule: its candidates per depth give the subtrees.
    let mut dfs = DfsChooser::default();
    let first = run_one(exp, ropts, opts, &mut dfs)?;
    let mut rep = CheckReport::default();
    if rep.add(0, first) {
        return Ok(rep);
    }
    let roots: Vec<(usize, usize)> = (0..dfs.seen.len())
        .rev()
        .flat_map(|d| (1..dfs.seen[d].0).map(move |c| (d, c)))
        .collect();
    let prefix = |&(d, c): &(usize, usize)| {
        let mut p = vec![0; d];
        p.push(c);
        p
    };
    for batch in roots.chunks(8 * threads) {
        let left = opts.schedules - rep.schedules;
        if left == 0 {
            return Ok(rep);
        }
        let stop = BatchStop {
            run: 0.into(),
            budget: left,
            failed: usize::MAX.into(),
        };
        let reports: Vec<Result<CheckReport, _>> = {
            use rayon::prelude::*;
            batch
                .par_iter()
                .enumerate()
                .map(|(i, r)| subtree(exp, ropts, opts, bound, &prefix(r), left, Some((&stop, i))))
                .collect()
        };
        for (r, root) in reports.into_iter().zip(batch) {
            let mut r = r?;
            let left = opts.schedules - rep.schedules;
            if r.schedules > left || (!r.exhausted && r.failure.is_none()) {
                // Cut by the cap, by the batch's budget, or past the cap:
                // search it again alone, stopping where the sequential
                // search would.
                r = subtree(exp, ropts, opts, bound, &prefix(root), left, None)?;
            }
            let stop = r.failure.is_some() || !r.exhausted;
            rep.append(r);
            if stop {
                return Ok(rep);
            }
        }
    }
    rep.exhausted = true;
    Ok(rep)
}

/// Re-runs one schedule of `exp` (as printed by [`check`]).
pub fn check_replay(
    exp: &crate::config::Experiment,
    cpus: Option<u32>,
    schedule: &str,
) -> Result<Outcome, String> {
    let actions = parse_schedule(schedule)?;
    let ropts = crate::sim::RunOptions { seed: None, cpus };
    let b = crate::sim::build(exp, &ropts).map_err(|e| e.to_string())?;
    let done = b.done();
    let mut e = Explorer::new(Rc::clone(&b.world), u32::MAX);
    let r = replay(&mut e, &actions, done);
    b.world.teardown();
    r
}
