//! Dynamic partial-order reduction (Flanagan and Godefroid, "Dynamic
//! partial-order reduction for model checking software", POPL 2005), with
//! sleep sets (Godefroid 1996), stateless: each schedule is rebuilt from
//! the experiment and replays a prefix of choices, as the delay-bounded
//! search does ([`super::exhaustive`]). There is no preemption bound: the
//! search is complete when every class of equivalent schedules (schedules
//! that differ only in the order of independent actions,
//! [`super::footprint::dependent`]) has had one member run.
//!
//! Processes: each [`Action`] value stands for the process whose next
//! transition it is (`Step(c)`: CPU `c`'s next step; `Deliver(t)`: the
//! next TLBI arrival at `t`; `Interrupt(c)`; each `Speculate(c, va)`), so
//! "the same action enabled at an earlier state" is that process's next
//! transition there.
//!
//! Race analysis (after each schedule, at every state from where it left
//! the previous schedule, including the state it stopped in): for every
//! action `b` enabled there and every earlier choice `e_i` that `b` is
//! dependent on, `b` is added to the backtrack set of state `i` if it was
//! enabled there, else every action enabled there is. Flanagan and
//! Godefroid add it only at the last such `i` that does not happen before
//! `b`; adding it at every dependent `i` explores a superset of their
//! backtrack sets, so it keeps their soundness and needs no
//! happens-before clocks (with most footprints unknown today, the last
//! dependent `i` is almost always the one just before anyway).
//!
//! Sleep sets: after a choice `a` at a state has been explored, a later
//! choice there puts `a` to sleep below it until an action dependent on
//! `a` runs; a schedule whose every enabled action sleeps is redundant
//! and stops (counted as pruned).

use super::check::{CheckOptions, CheckReport, OneRun};
use super::footprint::dependent;
use super::{Action, Chooser, Explorer};
use crate::hw::CpuId;
use std::rc::Rc;

/// One state of the current schedule.
#[derive(Debug, Clone)]
struct Node {
    /// The actions enabled here, in the explorer's order.
    enabled: Vec<Action>,
    /// The action the current schedule takes here.
    taken: Action,
    /// Actions to explore here (a superset of `done` once analysed).
    backtrack: Vec<Action>,
    /// Actions explored here, `taken` last.
    done: Vec<Action>,
    /// Actions asleep here: explored from an earlier state in an
    /// equivalent order.
    sleep: Vec<Action>,
}

/// The DPOR chooser: follows the prefix of the schedule being
/// re-entered, then picks the default choice among the actions not
/// asleep (a pending interrupt first, else round-robin over the CPUs,
/// else the first enabled action).
#[derive(Debug, Default)]
pub struct DporChooser {
    nodes: Vec<Node>,
    /// States at depths below this are replayed as recorded.
    replay: usize,
    /// Every action enabled at the new state sleeps: the schedule is
    /// redundant.
    blocked: bool,
}

impl DporChooser {
    /// The default choice among `cands` (non-empty): a pending interrupt,
    /// else the first CPU after `last` that can step, else the first.
    fn default_choice(cands: &[Action], last: Option<CpuId>) -> Action {
        if let Some(a) = cands.iter().find(|a| matches!(a, Action::Interrupt(_))) {
            return *a;
        }
        let key = |c: CpuId| (last.is_some_and(|l| c <= l), c);
        cands
            .iter()
            .filter_map(|a| match a {
                Action::Step(c) => Some((key(*c), *a)),
                _ => None,
            })
            .min_by_key(|(k, _)| *k)
            .map(|(_, a)| a)
            .unwrap_or(cands[0])
    }

    /// The CPU stepped last before `depth`.
    fn last_stepped(&self, depth: usize) -> Option<CpuId> {
        self.nodes[..depth]
            .iter()
            .rev()
            .find_map(|n| match n.taken {
                Action::Step(c) => Some(c),
                _ => None,
            })
    }

    /// The sleep set of the state after `depth - 1`'s choice.
    fn sleep_below(&self, depth: usize) -> Vec<Action> {
        let Some(p) = depth.checked_sub(1).map(|d| &self.nodes[d]) else {
            return Vec::new();
        };
        let mut s: Vec<Action> = p
            .sleep
            .iter()
            .chain(p.done.iter().filter(|&&a| a != p.taken))
            .copied()
            .filter(|a| !dependent(a, &p.taken))
            .collect();
        s.sort_by_key(|a| a.to_string());
        s.dedup();
        s
    }

    /// Race analysis of the schedule just run: `ended` is what was
    /// enabled where it stopped. For each state `k` from `self.replay` on
    /// (those below were analysed with the schedules before) and each
    /// action `b` enabled there (its process's next transition), every
    /// earlier choice `e_i` that `b` is dependent on gets `b` into its
    /// backtrack set if `b` was enabled at `i`, else every action enabled
    /// at `i`.
    ///
    /// The pairs are visited from the last choice back, with the union of
    /// the actions enabled at the later new states, so the cost is the
    /// schedule's length times the number of distinct actions, not its
    /// square (the additions are the same: adding is idempotent).
    fn analyse(&mut self, ended: &[Action]) {
        let n = self.nodes.len();
        let from = self.replay.min(n);
        let mut later: Vec<Action> = ended.to_vec();
        for i in (0..n).rev() {
            let node = &mut self.nodes[i];
            let mut all = false;
            for b in &later {
                if node.taken == *b || !dependent(&node.taken, b) {
                    continue;
                }
                if node.enabled.contains(b) {
                    add(&mut node.backtrack, *b);
                } else {
                    all = true;
                }
            }
            if all {
                for a in node.enabled.clone() {
                    add(&mut node.backtrack, a);
                }
            }
            if i >= from {
                for a in node.enabled.clone() {
                    add(&mut later, a);
                }
            }
        }
    }

    /// Prepares the next schedule; false when the search is complete.
    pub fn advance(&mut self) -> bool {
        while let Some(mut node) = self.nodes.pop() {
            let next = node.enabled.iter().copied().find(|a| {
                node.backtrack.contains(a) && !node.done.contains(a) && !node.sleep.contains(a)
            });
            if let Some(a) = next {
                node.taken = a;
                node.done.push(a);
                self.nodes.push(node);
                self.replay = self.nodes.len();
                self.blocked = false;
                return true;
            }
        }
        false
    }
}

fn add(set: &mut Vec<Action>, a: Action) {
    if !set.contains(&a) {
        set.push(a);
    }
}

impl Chooser for DporChooser {
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize {
        if depth < self.replay {
            let node = &self.nodes[depth];
            debug_assert_eq!(node.enabled, enabled, "replay diverged at {depth}");
            return enabled
                .iter()
                .position(|a| *a == node.taken)
                .expect("a replayed choice is enabled (the explorer is deterministic)");
        }
        let sleep = self.sleep_below(depth);
        let awake: Vec<Action> = enabled
            .iter()
            .copied()
            .filter(|a| !sleep.contains(a))
            .collect();
        if awake.is_empty() {
            self.blocked = true;
            return 0;
        }
        let a = Self::default_choice(&awake, self.last_stepped(depth));
        self.nodes.truncate(depth);
        self.nodes.push(Node {
            enabled: enabled.to_vec(),
            taken: a,
            backtrack: vec![a],
            done: vec![a],
            sleep,
        });
        enabled.iter().position(|x| *x == a).expect("chosen")
    }

    fn blocked(&self) -> bool {
        self.blocked
    }
}

/// Runs one schedule with `dpor`; also returns what was enabled where it
/// stopped.
fn run_one(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
    dpor: &mut DporChooser,
) -> Result<(OneRun, Vec<Action>), crate::sim::SimError> {
    let b = crate::sim::build(exp, ropts)?;
    let done = b.done();
    let mut e = Explorer::new(Rc::clone(&b.world), opts.speculation);
    e.add_vms(&b);
    let outcome = e.run(dpor, opts.max_actions, &done);
    let ended = e.enabled();
    b.teardown();
    crate::progress::PROGRESS.schedule_done();
    Ok((OneRun::new(outcome, std::mem::take(&mut e.schedule)), ended))
}

/// The DPOR search: at most `opts.schedules` schedules (pruned ones
/// included), sequential. `exhausted` in the report: every class was run.
pub(super) fn search(
    exp: &crate::config::Experiment,
    ropts: &crate::sim::RunOptions,
    opts: &CheckOptions,
) -> Result<CheckReport, crate::sim::SimError> {
    let mut rep = CheckReport::default();
    let mut dpor = DporChooser::default();
    while rep.schedules < opts.schedules {
        let (r, ended) = run_one(exp, ropts, opts, &mut dpor)?;
        dpor.analyse(&ended);
        if rep.add(rep.schedules, r) {
            return Ok(rep);
        }
        if !dpor.advance() {
            rep.exhausted = true;
            break;
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the DPOR search over a toy system in which each action of
    /// `actions` runs once, in any order; returns the orders explored.
    fn orders(actions: &[Action]) -> Vec<Vec<Action>> {
        let mut dpor = DporChooser::default();
        let mut out = Vec::new();
        loop {
            let mut left = actions.to_vec();
            let mut run = Vec::new();
            while !left.is_empty() {
                let i = dpor.choose(run.len(), &left);
                if dpor.blocked() {
                    break;
                }
                run.push(left.remove(i));
            }
            dpor.analyse(&left);
            if !dpor.blocked {
                out.push(run);
            }
            if !dpor.advance() {
                return out;
            }
        }
    }

    #[test]
    fn independent_actions_run_in_one_order_only() {
        // TLBIs reaching two different CPUs commute.
        let o = orders(&[Action::Deliver(0), Action::Deliver(1)]);
        assert_eq!(o, vec![vec![Action::Deliver(0), Action::Deliver(1)]]);
    }

    #[test]
    fn dependent_actions_run_in_both_orders() {
        // Kernel steps of two CPUs (footprint unknown).
        let o = orders(&[Action::Step(0), Action::Step(1)]);
        assert_eq!(
            o,
            vec![
                vec![Action::Step(0), Action::Step(1)],
                vec![Action::Step(1), Action::Step(0)],
            ]
        );
        // A TLBI reaching CPU 0 and CPU 0's own speculative walk.
        let o = orders(&[Action::Deliver(0), Action::Speculate(0, 0x1000)]);
        assert_eq!(o.len(), 2, "{o:?}");
    }

    #[test]
    fn three_actions_give_one_order_per_class() {
        // d0 and d1 commute; p0 conflicts with d0 only: the classes are
        // fixed by the order of d0 and p0 (2 of them).
        let o = orders(&[
            Action::Deliver(0),
            Action::Deliver(1),
            Action::Speculate(0, 0x1000),
        ]);
        assert_eq!(o.len(), 2, "{o:?}");
    }
}
