//! Running a registry [`Search`]: the explorer's search or timing runs on
//! an experiment, as the mutant tests and `tlbsim bugs` do.

use crate::config::Experiment;
use crate::driver::RunError;
use crate::explore::{check, CheckOptions, Finding, Strategy};
use crate::kernel::registry::{self, Search};
use crate::observe::Invariant;
use crate::sim::{run, RunOptions, SimError};

/// What a search did.
#[derive(Debug, Clone)]
pub struct Searched {
    /// The first violation (or deadlock), and in which schedule or run
    /// (0-based) it came; `None`: the search passed.
    pub failure: Option<(u64, Finding)>,
    /// Schedules (explorer) or runs (timing) made.
    pub runs: u64,
    /// The explorer's search ran out of schedules to try (every one of
    /// its bound was run); always false for timing runs.
    pub complete: bool,
    /// Host seconds the search took (not part of any result compared).
    pub host_s: f64,
}

impl Searched {
    /// The invariant the failure broke, if it is a violation.
    pub fn invariant(&self) -> Option<Invariant> {
        self.failure.as_ref().and_then(|(_, f)| f.invariant())
    }
}

/// Runs `s` on `e` (which must be `s`'s experiment, possibly with another
/// kernel): the first violation or deadlock, or a pass. The explorer runs
/// with the default spin cut.
pub fn run_search(e: &Experiment, s: &Search) -> Result<Searched, SimError> {
    let t0 = std::time::Instant::now();
    let mut out = match *s {
        Search::Explore {
            strategy,
            schedules,
            seed,
            max_actions,
            speculation,
            ..
        } => {
            let strategy = match strategy {
                registry::Strategy::Random => Strategy::Random,
                registry::Strategy::Pct(d) => Strategy::Pct(d),
                registry::Strategy::Exhaustive(b) => Strategy::Exhaustive(b),
                registry::Strategy::Dpor => Strategy::Dpor,
            };
            let o = CheckOptions {
                strategy,
                schedules,
                seed,
                max_actions: usize::try_from(max_actions).unwrap_or(usize::MAX),
                max_spin: crate::explore::DEFAULT_MAX_SPIN,
                speculation,
                cpus: None,
            };
            let r = check(e, &o)?;
            Searched {
                failure: r.failure.map(|f| (f.index, f.report)),
                runs: r.schedules,
                complete: r.exhausted,
                host_s: 0.0,
            }
        }
        Search::Runs { seeds, .. } => timing_runs(e, seeds)?,
    };
    out.host_s = t0.elapsed().as_secs_f64();
    Ok(out)
}

/// `tlbsim run` at each of `seeds` until one breaks an invariant.
fn timing_runs(e: &Experiment, seeds: &[u64]) -> Result<Searched, SimError> {
    let mut out = Searched {
        failure: None,
        runs: 0,
        complete: false,
        host_s: 0.0,
    };
    for (i, &seed) in seeds.iter().enumerate() {
        let o = RunOptions {
            seed: Some(seed),
            cpus: None,
        };
        out.runs += 1;
        match run(e, &o) {
            Ok(_) => {}
            Err(SimError::Run(RunError::Violation(v))) => {
                out.failure = Some((i as u64, Finding::Violation(v)));
                break;
            }
            Err(other) => return Err(other),
        }
    }
    Ok(out)
}
