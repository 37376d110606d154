//! Partial-order-aware sampling (POS; Yuan, Yang and Gu, "Partial Order
//! Aware Concurrency Sampling", CAV 2018): the DPOR search's choice at a
//! state its tree has not reached ([`super::dpor`]), in place of the
//! random search's uniform choice.
//!
//! Each process (an [`Action`] value stands for the process whose next
//! transition it is) draws a random priority when first offered, and the
//! process of highest priority among those offered runs. When an action
//! has run, every process whose next action races with it draws a new
//! priority, and so does the process that ran. A uniform choice at every
//! state makes a schedule that keeps two racing actions in one order for
//! a long stretch exponentially unlikely; POS keeps a process running
//! while nothing races with it, so such orders are as likely as short
//! ones, and it reorders only at races.
//!
//! Whether a process's next action races is judged from the footprint of
//! its last action in this schedule (a kernel step's footprint is known
//! only once it ran), or the one known before it runs
//! ([`super::footprint::footprint`]) if it has not run yet; an unknown
//! footprint races with everything. The estimate decides only the order
//! in which schedules are tried: DPOR's race analysis of what actually ran
//! decides what is explored, so the search stays complete.
//!
//! Speculative fills keep the random search's rule ([`super::random::pick`]):
//! taken with probability [`super::random::SPEC_PROB`] when offered.

use super::random::{pick, SPEC_PROB};
use super::Action;
use crate::engine::rng::Rng;
use crate::engine::track::Footprint;
use rand::Rng as _;

/// The priorities of the processes offered so far in one schedule.
#[derive(Debug)]
pub(super) struct Priorities {
    /// Per process: its priority and how many of its actions in a row
    /// repeated the footprint before.
    of: Vec<(Action, u64)>,
    repeats: Vec<(Action, usize)>,
    /// Repeats in a row after which a process yields.
    yield_after: usize,
}

impl Priorities {
    /// Priorities under which a process yields after repeating its
    /// footprint `yield_after` times in a row (`check --max-spin`).
    pub(super) fn new(yield_after: usize) -> Self {
        Priorities {
            of: Vec::new(),
            repeats: Vec::new(),
            yield_after,
        }
    }

    /// Forgets every priority (a new schedule).
    pub(super) fn clear(&mut self) {
        self.of.clear();
        self.repeats.clear();
    }

    /// `a`'s priority, drawn from `rng` when `a` is first offered.
    fn get(&mut self, rng: &mut Rng, a: Action) -> u64 {
        if let Some(&(_, p)) = self.of.iter().find(|(b, _)| *b == a) {
            return p;
        }
        let p = rng.gen::<u64>().max(1);
        self.of.push((a, p));
        p
    }

    /// The action to take among `offered` (non-empty): a speculative fill
    /// with probability [`SPEC_PROB`] when one is offered (uniformly among
    /// them), else the process of highest priority.
    pub(super) fn choose(&mut self, rng: &mut Rng, offered: &[Action]) -> Action {
        let is_spec = |a: &Action| matches!(a, Action::Speculate(..));
        let specs = offered.iter().filter(|a| is_spec(a)).count();
        if specs == offered.len() || (specs > 0 && rng.gen_bool(SPEC_PROB)) {
            return offered[pick(rng, 1.0, offered)];
        }
        let mut best: Option<(Action, u64)> = None;
        for &a in offered.iter().filter(|a| !is_spec(a)) {
            let p = self.get(rng, a);
            if best.is_none_or(|(_, q)| p > q) {
                best = Some((a, p));
            }
        }
        best.expect("a plain action is offered").0
    }

    /// `ran` has run with footprint `fp`: it and every process whose next
    /// action races with it (`next_of(b)`: the footprint estimated for
    /// `b`'s next action) draw new priorities, in the order they were
    /// first offered. If `ran` has now repeated its previous footprint
    /// `yield_after` times in a row (`repeated`: this action did; a spin,
    /// such as a loop reading a flag) it yields instead: its priority drops
    /// below every drawn one until it does something else, as a fair
    /// scheduler lets a spinning thread yield (Musuvathi and Qadeer, "Fair
    /// stateless model checking", PLDI 2008). Without it a spinner that
    /// redraws after each turn keeps running for as long as the process it
    /// waits for has a low priority: a million turns at one in a thousand.
    pub(super) fn ran<'f>(
        &mut self,
        rng: &mut Rng,
        (ran, repeated): (Action, bool),
        fp: &Footprint,
        next_of: impl Fn(Action) -> Option<&'f Footprint>,
    ) {
        let spins = match self.repeats.iter_mut().find(|(b, _)| *b == ran) {
            Some((_, n)) => {
                *n = if repeated { *n + 1 } else { 0 };
                *n
            }
            None => {
                self.repeats.push((ran, usize::from(repeated)));
                usize::from(repeated)
            }
        };
        for (b, p) in &mut self.of {
            if *b == ran && spins >= self.yield_after {
                *p = 0;
                continue;
            }
            let races = *b == ran
                || match next_of(*b) {
                    Some(f) => f.conflicts(fp),
                    None => super::footprint::footprint(b).conflicts(fp),
                };
            if races {
                // Drawn priorities are at least 1: 0 is a yield.
                *p = rng.gen::<u64>().max(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rng::Streams;
    use crate::engine::track::{Loc, Space};
    use crate::hw::cpu::cpuid;

    /// A footprint writing location `w` only.
    fn fp(w: u32) -> Footprint {
        Footprint::of(&[], &[Loc::part(Space::Var(w), 0)])
    }

    fn prio(pr: &Priorities, a: Action) -> u64 {
        pr.of.iter().find(|(b, _)| *b == a).expect("offered").1
    }

    /// What runs redraws its own priority and that of the processes it
    /// races with, and no other.
    #[test]
    fn a_run_redraws_its_process_and_those_it_races_with() {
        let mut rng = Streams::new(3).stream("t");
        let (a, b, c) = (
            Action::Step(cpuid(0)),
            Action::Step(cpuid(1)),
            Action::Step(cpuid(2)),
        );
        let mut pr = Priorities::new(1);
        pr.choose(&mut rng, &[a, b, c]);
        let before = |pr: &Priorities| [prio(pr, a), prio(pr, b), prio(pr, c)];
        let (f1, f2) = (fp(1), fp(2));
        let was = before(&pr);
        // b's next action writes what a wrote; c's does not.
        pr.ran(&mut rng, (a, false), &f1, |x| {
            Some(if x == b { &f1 } else { &f2 })
        });
        let now = before(&pr);
        assert_ne!(was[0], now[0]);
        assert_ne!(was[1], now[1]);
        assert_eq!(was[2], now[2]);
    }

    /// While nothing races, the process of highest priority runs on until
    /// its own redraw loses the lead: the others' priorities stay.
    #[test]
    fn the_lead_changes_only_by_a_redraw() {
        let mut rng = Streams::new(11).stream("t");
        let offered = [Action::Step(cpuid(0)), Action::Step(cpuid(1))];
        let mut pr = Priorities::new(1);
        let (own, other) = (fp(1), fp(2));
        for _ in 0..200 {
            let a = pr.choose(&mut rng, &offered);
            let [p, q] = offered.map(|x| prio(&pr, x));
            assert_eq!(a, if p > q { offered[0] } else { offered[1] });
            let idle = offered[usize::from(a == offered[0])];
            let kept = prio(&pr, idle);
            pr.ran(&mut rng, (a, false), &own, |x| (x != a).then_some(&other));
            assert_eq!(prio(&pr, idle), kept);
        }
    }

    /// A process that repeats its footprint `yield_after` times in a row
    /// yields to every other.
    #[test]
    fn a_spinning_process_yields() {
        let mut rng = Streams::new(5).stream("t");
        let offered = [Action::Step(cpuid(0)), Action::Step(cpuid(1))];
        let mut pr = Priorities::new(1);
        let a = pr.choose(&mut rng, &offered);
        let other = fp(2);
        pr.ran(&mut rng, (a, true), &fp(1), |x| (x != a).then_some(&other));
        assert_ne!(pr.choose(&mut rng, &offered), a);
        assert_eq!(prio(&pr, a), 0);
    }

    /// Every offered process leads at some seed, and a fill is chosen
    /// only about [`SPEC_PROB`] of the time.
    #[test]
    fn every_process_can_lead_and_fills_are_rare() {
        let offered = [
            Action::Step(cpuid(0)),
            Action::Step(cpuid(1)),
            Action::Speculate(cpuid(0), 0x1000),
        ];
        let mut seen = std::collections::BTreeMap::new();
        for seed in 0..2000 {
            let mut rng = Streams::new(seed).stream("t");
            let a = Priorities::new(1).choose(&mut rng, &offered);
            *seen.entry(a).or_insert(0) += 1;
        }
        assert!(
            seen[&offered[0]] > 800 && seen[&offered[1]] > 800,
            "{seen:?}"
        );
        assert!((10..=100).contains(&seen[&offered[2]]), "{seen:?}");
    }
}
