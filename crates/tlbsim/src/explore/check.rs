//! `tlbsim check`: the searches over schedules of an experiment, and
//! their report.

use super::schedule::{format_schedule, parse_schedule, replay, Action};
use super::{dpor, exhaustive, pct, random, Chooser, Explorer, Outcome};
use crate::config::Experiment;
use crate::sim::{RunOptions, SimError};
use std::rc::Rc;

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
    /// Dynamic partial-order reduction with no preemption bound
    /// ([`super::dpor`]): one schedule per class of equivalent schedules.
    Dpor,
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
    /// DPOR: spinning actions in a row (each taken while another enabled
    /// action slept, each with its process's previous footprint) after
    /// which a schedule is cut ([`super::Stop::Spinning`]); ignored by
    /// the other searches.
    pub max_spin: usize,
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
    Violation(crate::observe::Violation),
    /// The schedule deadlocked (a description of every CPU and task).
    Deadlock(String),
}

impl Finding {
    /// The invariant broken, if the finding is a violation.
    pub fn invariant(&self) -> Option<crate::observe::Invariant> {
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
    /// Schedules DPOR cut after `max_spin` spinning actions
    /// ([`super::Stop::Spinning`]).
    pub spun: u64,
    /// Actions taken over all schedules.
    pub actions: u64,
    /// Of those, IPIs taken (`Interrupt` actions).
    pub interrupts: u64,
    /// Schedules the DPOR search stopped early as redundant (every action
    /// it could take next asleep); counted in `schedules`.
    pub pruned: u64,
    /// The DPOR search: the most states its explored tree held at once
    /// (its memory; 0 for the other searches).
    pub dpor_peak_states: u64,
    /// The DPOR search: backtrack choices it had not taken when it
    /// stopped (a lower bound on the schedules left to run; 0 when
    /// complete).
    pub dpor_choices_left: u64,
    /// The search stopped at its wall-clock limit ([`check_for`]).
    pub time_limited: bool,
    /// Exhaustive search enumerated every schedule within its bound (DPOR:
    /// every class of equivalent schedules).
    pub exhausted: bool,
    /// The first failing schedule, if any (the search stops there).
    pub failure: Option<Failure>,
}

/// One schedule run by [`check`]: its outcome and actions.
pub(super) struct OneRun {
    outcome: Outcome,
    pub(super) schedule: Vec<Action>,
}

impl OneRun {
    /// A schedule run and how it ended.
    pub(super) fn new(outcome: Outcome, schedule: Vec<Action>) -> Self {
        Self { outcome, schedule }
    }
}

/// Runs one schedule of `exp` with `chooser`.
pub(super) fn run_one(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    chooser: &mut dyn Chooser,
) -> Result<OneRun, crate::sim::SimError> {
    let b = crate::sim::build(exp, ropts)?;
    let done = b.done();
    let mut e = Explorer::new(Rc::clone(&b.world), opts.speculation);
    e.add_vms(&b.guests);
    let outcome = e.run(chooser, opts.max_actions, done);
    b.teardown();
    crate::progress::PROGRESS.schedule_done();
    Ok(OneRun {
        outcome,
        schedule: std::mem::take(&mut e.schedule),
    })
}

impl CheckReport {
    /// Counts schedule `index`; returns true if it failed (the search
    /// stops there).
    pub(super) fn add(&mut self, index: u64, r: OneRun) -> bool {
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
            Outcome::Spun => self.spun += 1,
            Outcome::Pruned => self.pruned += 1,
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
    pub(super) fn append(&mut self, later: CheckReport) {
        let base = self.schedules;
        self.schedules += later.schedules;
        self.completed += later.completed;
        self.bounded += later.bounded;
        self.spun += later.spun;
        self.pruned += later.pruned;
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
pub fn check(exp: &Experiment, opts: &CheckOptions) -> Result<CheckReport, SimError> {
    let ropts = RunOptions {
        seed: None,
        cpus: opts.cpus,
    };
    let streams = crate::engine::rng::Streams::new(opts.seed);
    match opts.strategy {
        Strategy::Random => random::search(exp, &ropts, opts, &streams),
        Strategy::Pct(d) => pct::search(exp, &ropts, opts, &streams, d),
        Strategy::Exhaustive(bound) => exhaustive::search(exp, &ropts, opts, bound),
        Strategy::Dpor => dpor::search(exp, &ropts, opts, &streams),
    }
}

/// [`check`] that also stops after `limit` of wall-clock time (the report
/// says so: `time_limited`): how far a search gets in a given time, for a
/// search too big to finish. The DPOR search only (its schedules are
/// sequential); another strategy runs as [`check`]. The count reached
/// depends on the machine's speed: not deterministic.
pub fn check_for(
    exp: &Experiment,
    opts: &CheckOptions,
    limit: std::time::Duration,
) -> Result<CheckReport, SimError> {
    match opts.strategy {
        Strategy::Dpor => {
            let ropts = RunOptions {
                seed: None,
                cpus: opts.cpus,
            };
            let streams = crate::engine::rng::Streams::new(opts.seed);
            let deadline = std::time::Instant::now() + limit;
            dpor::search_until(exp, &ropts, opts, &streams, Some(deadline))
        }
        _ => check(exp, opts),
    }
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
    e.add_vms(&b.guests);
    let r = replay(&mut e, &actions, done);
    b.teardown();
    r
}
