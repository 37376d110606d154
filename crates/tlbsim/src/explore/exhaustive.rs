//! Exhaustive search, bounded by delays (preemptions), stateless and
//! parallel.

use super::check::{run_one, CheckOptions, CheckReport};
use super::{Action, Chooser};
use crate::hw::CpuId;

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
pub(super) fn search(
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
