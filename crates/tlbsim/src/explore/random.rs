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
        pick(&mut self.rng, self.spec_prob, enabled)
    }
}

/// A random choice among `cands` (non-empty): a speculative fill with
/// probability `spec_prob` when one is offered (uniformly among them),
/// else uniformly among the other actions. The random search's choice;
/// the DPOR search draws its backtrack choices with it and its fills at
/// new states ([`super::pos`]).
pub(super) fn pick(rng: &mut crate::engine::rng::Rng, spec_prob: f64, cands: &[Action]) -> usize {
    let plain: Vec<usize> = (0..cands.len())
        .filter(|&i| !matches!(cands[i], Action::Speculate(..)))
        .collect();
    let spec = cands.len() - plain.len();
    if plain.is_empty() || (spec > 0 && rng.gen_bool(spec_prob)) {
        let specs: Vec<usize> = (0..cands.len())
            .filter(|&i| matches!(cands[i], Action::Speculate(..)))
            .collect();
        return specs[rng.gen_range(0..specs.len())];
    }
    plain[rng.gen_range(0..plain.len())]
}

/// The probability with which the random search takes a speculative fill
/// when one is offered.
pub(super) const SPEC_PROB: f64 = 0.02;

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
                    run_one(exp, ropts, opts, &mut RandomChooser::new(rng, SPEC_PROB))
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
