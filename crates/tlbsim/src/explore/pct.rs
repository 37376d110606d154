//! PCT search (probabilistic concurrency testing).

use super::check::{run_one, CheckOptions, CheckReport};
use super::{Action, Chooser};
use crate::config::Experiment;
use crate::engine::rng::Streams;
use crate::hw::CpuVec;
use crate::sim::{RunOptions, SimError};
use rand::Rng as _;

/// PCT (Burckhardt et al., ASPLOS 2010): each CPU gets a random priority;
/// the highest-priority CPU with a step runs; at `depth - 1` random points
/// the running CPU drops to the lowest priority. Deliveries and speculation
/// are taken with probability `other_prob` when offered.
#[derive(Debug)]
pub struct PctChooser {
    rng: crate::engine::rng::Rng,
    /// Per CPU: its priority.
    prio: CpuVec<u64>,
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
            prio: CpuVec::from_vec(prio),
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

/// PCT search with bug depth `depth`. Each schedule's priority changes are
/// spread over the previous schedule's length, so it is sequential.
pub(super) fn search(
    exp: &Experiment,
    ropts: &RunOptions,
    opts: &CheckOptions,
    streams: &Streams,
    depth: u32,
) -> Result<CheckReport, SimError> {
    let mut rep = CheckReport::default();
    let mut pct_len = 1000usize;
    let ncpus = crate::sim::resolve_profile(exp, ropts)?.topology.cpus as usize;
    while rep.schedules < opts.schedules {
        let idx = rep.schedules;
        let rng = streams.stream(&format!("explore/{idx}"));
        let mut c = PctChooser::new(rng, ncpus, depth, pct_len);
        let r = run_one(exp, ropts, opts, &mut c)?;
        pct_len = r.schedule.len().max(1);
        if rep.add(idx, r) {
            break;
        }
    }
    Ok(rep)
}
