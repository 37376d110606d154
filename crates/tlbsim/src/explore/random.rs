//! Random search: uniformly random choices, one seeded stream per schedule.

use super::check::{run_one, CheckOptions, CheckReport};
use super::{Action, Chooser};
use crate::config::Experiment;
use crate::engine::rng::Streams;
use crate::sim::{RunOptions, SimError};
use rand::Rng as _;

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

/// Random search: each schedule has its own random stream
/// (`explore/<index>`), so batches run in parallel and are counted in
/// order; the report is the sequential search's.
pub(super) fn search(
    exp: &Experiment,
    ropts: &RunOptions,
    opts: &CheckOptions,
    streams: &Streams,
) -> Result<CheckReport, SimError> {
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
                    run_one(exp, ropts, opts, &mut RandomChooser::new(rng, 0.02))
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
