//! The explorer: the second driver of DESIGN §2. It runs the same kernel
//! code as the timing driver, but time plays no part: at every point it
//! chooses which CPU completes its next step, when a broadcast TLBI reaches
//! each target, and where the hardware fills the TLB speculatively. The
//! observer (the checker) sees every event, so a schedule that breaks an
//! invariant is reported with the exact action list that replays it.
//!
//! Actions (their printed form in parentheses):
//! - `Step(c)` (`s<c>`): CPU `c` completes its posted step and runs on to
//!   its next one. Steps that must wait (a lock, `DSB ISH` with TLBIs in
//!   flight, the idle loop) block until another action releases them.
//! - `Deliver(t)` (`d<t>`): the oldest broadcast TLBI still pending at CPU
//!   `t` takes effect there.
//! - `Speculate(c, va)` (`p<c>:<va hex>`): CPU `c` walks `va` through its
//!   current TTBR0 and fills its TLB, as an out-of-order core may at any time.
//!   Candidate VAs are those the workload has accessed in that mm.
//! - `Interrupt(c)` (`i<c>`): CPU `c` takes its oldest pending function-call
//!   IPI, at a step boundary with interrupts on (`Ctx::irq_save` holds it
//!   off); the handler's steps are then CPU `c`'s steps until it returns,
//!   and the sender's `CallFunction` completes when every handler has.
//!
//! Reduction (documented in docs/model.md): a delivery only matters
//! relative to what reads the target's TLB, so `Deliver(t)` is offered only
//! while `t` is about to access memory, and everything still in flight is
//! delivered when a `DSB ISH` needs it. Speculation is offered only while
//! the per-schedule budget lasts.

//!
//! Rooms: [`driver`] (the explorer driver: what a choice does), [`schedule`]
//! (actions, their printed form, replay), one file per search strategy
//! ([`random`], [`pct`], [`exhaustive`], [`dpor`] with its dependence
//! relation in [`footprint`] and its walk at new states in `pos`), and [`mod@check`] (the searches behind
//! `tlbsim check`, their report).

pub mod check;
pub mod dpor;
pub mod driver;
pub mod exhaustive;
pub mod footprint;
pub mod pct;
mod pos;
pub mod races;
pub mod random;
pub mod schedule;

pub use check::{
    check, check_for, check_replay, CheckOptions, CheckReport, Failure, Finding, Strategy,
};
pub use dpor::{DporChooser, DEFAULT_MAX_SPIN};
pub use driver::Explorer;
pub use exhaustive::DfsChooser;
pub use pct::PctChooser;
pub use random::RandomChooser;
pub use schedule::{format_schedule, parse_schedule, replay, Action};

/// How one schedule ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The workload's root task exited.
    Done,
    /// The checker reported a violation.
    Violation(crate::observe::Violation),
    /// No action was possible before the root task exited.
    Deadlock(String),
    /// The step bound was reached first.
    Bounded,
    /// The chooser stopped the schedule: everything it could take next
    /// was already explored in an equivalent order (a DPOR sleep set).
    Pruned,
    /// The chooser cut the schedule: its processes spun while another
    /// enabled action slept ([`Stop::Spinning`]).
    Spun,
}

/// Why a chooser stops a schedule before its end ([`Chooser::stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every action it could take next sleeps: the rest of the schedule
    /// was explored in an equivalent order ([`Outcome::Pruned`]).
    Redundant,
    /// `max_spin` actions in a row were each taken while another enabled
    /// action slept, and each had the same footprint as its process's
    /// action before ([`Outcome::Spun`], counted with the cut schedules):
    /// spin loops (or idle CPUs) waiting for a process that this schedule
    /// no longer runs, since every order in which that process runs was
    /// explored from an earlier state (docs/model.md, "Spinning").
    Spinning,
}

/// Chooses among the enabled actions.
pub trait Chooser {
    /// Picks an index into `enabled` (never empty) at choice point `depth`.
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize;

    /// After [`Chooser::choose`]: stop this schedule instead of taking
    /// the choice, and why. Only the DPOR search does.
    fn stop(&self) -> Option<Stop> {
        None
    }

    /// Does it use footprints? Only then does the explorer record them
    /// (recording costs every action) and call [`Chooser::executed`].
    fn wants_footprints(&self) -> bool {
        false
    }

    /// After the chosen action ran: what it read and wrote
    /// ([`crate::engine::track`]). Only the DPOR search uses it.
    fn executed(&mut self, _footprint: &crate::engine::track::Footprint) {}
}
