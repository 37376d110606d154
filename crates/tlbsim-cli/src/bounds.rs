//! Bounded work: before a run starts, the workload's estimate of its size
//! ([`tlbsim::workload::Estimate`]) is compared with `--max-events`, so
//! that a typo such as `iterations = 9223372036854775807` is refused with
//! the estimate and the flag that overrides it, not found 25 minutes later
//! at the simulated-time limit. (Limits a run cannot pass at all, live
//! pages and tasks, are refused by the library itself.)

use tlbsim::config::Experiment;
use tlbsim::sim::{RunOptions, RunOutput, SimError};
use tlbsim::workload::Figure;

/// Events a run may be estimated at without `--max-events`: about 5 to 10
/// minutes of host time (tlbsim drives about 4-7 M events a second with
/// the checker on, docs/performance.md).
pub const DEFAULT_MAX_EVENTS: u64 = 3_000_000_000;

/// Events above which a run is announced on standard error with its
/// estimate (about half a minute of host time).
pub const WARN_EVENTS: u64 = 150_000_000;

/// Host events a second the time estimates assume.
const EVENTS_PER_SECOND: f64 = 5e6;

/// The bound a command puts on a run's estimated size.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkBound {
    /// Refuse a run whose workload is estimated, from its parameters and
    /// before it starts, at more than N simulated events (0: no bound).
    /// Runs estimated above 150,000,000 events are announced on standard
    /// error.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_EVENTS)]
    pub max_events: u64,
}

impl Default for WorkBound {
    fn default() -> Self {
        WorkBound {
            max_events: DEFAULT_MAX_EVENTS,
        }
    }
}

/// Builds `exp`, refuses it if its estimate exceeds `bound` (a
/// [`SimError::Field`] naming the workload parameter, the estimate and
/// `--max-events`), announces it on standard error if it is large, and
/// runs it.
pub fn run(exp: &Experiment, opts: &RunOptions, bound: &WorkBound) -> Result<RunOutput, SimError> {
    let built = tlbsim::sim::build(exp, opts)?;
    if let Some(f) = &built.estimate.events {
        if let Some(line) = check(f, bound.max_events)? {
            eprintln!("{line}");
        }
    }
    tlbsim::sim::run_built(exp, built)
}

/// The estimated events `f` against `max` (0: none): an error past it, a
/// note to print when the run is large, else nothing.
pub fn check(f: &Figure, max: u64) -> Result<Option<String>, SimError> {
    let about = format!(
        "about {} simulated events ({} each), roughly {} of host time",
        big(f.value),
        f.how,
        host_time(f.value)
    );
    if max != 0 && f.value > max {
        return Err(SimError::Field {
            section: "workload".into(),
            key: f.key.into(),
            message: format!(
                "{about}: over the bound of {} events (--max-events {max}; raise it, or 0 for none)",
                big(max)
            ),
        });
    }
    Ok((f.value > WARN_EVENTS).then(|| format!("note: [workload] {}: {about}", f.key)))
}

/// `n` in a short form: `3.0e12` above a million, else as is.
fn big(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1e}", n as f64)
    } else {
        n.to_string()
    }
}

/// The host time `events` take at [`EVENTS_PER_SECOND`], in the largest
/// unit that keeps it above 1.
fn host_time(events: u64) -> String {
    let s = events as f64 / EVENTS_PER_SECOND;
    match s {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.0} h", s / 3600.0),
        s if s < 3.2e9 => format!("{:.0} days", s / 86_400.0),
        s => format!("{:.0e} years", s / 3.15e7),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_over_the_bound_names_the_parameter_the_estimate_and_the_flag() {
        let f = Figure::product(
            "runs",
            &[(1_000_000, "runs"), (4000, "messages"), (7, "events")],
        );
        let e = check(&f, DEFAULT_MAX_EVENTS).unwrap_err().to_string();
        assert_eq!(
            e,
            "[workload] runs: about 2.8e10 simulated events (1000000 runs x 4000 messages x 7 events each), roughly 93 min of host time: over the bound of 3.0e9 events (--max-events 3000000000; raise it, or 0 for none)"
        );
        assert_eq!(
            check(&f, 0).unwrap().unwrap().split(':').next(),
            Some("note")
        );
        let small = Figure::product("runs", &[(10, "runs")]);
        assert_eq!(check(&small, DEFAULT_MAX_EVENTS).unwrap(), None);
    }
}
