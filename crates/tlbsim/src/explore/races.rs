//! Happens-before and races over one schedule the explorer ran, from the
//! footprints its actions recorded: what the DPOR search
//! ([`super::dpor`]) reverses.
//!
//! Processes are action values (`Step(0)`, `Deliver(1)`, ...): the events
//! of one process are ordered by the schedule (program order). Event `i`
//! happens before event `k` (`i → k`) if they are of one process, or
//! their footprints conflict, or through a chain of such pairs. Two
//! events are in a race (Abdulla, Aronis, Jonsson and Sagonas, "Optimal
//! dynamic partial order reduction", POPL 2014, §3) when they are of
//! different processes, conflict, and no third event lies between them
//! in happens-before: reversing them gives an inequivalent schedule.
//!
//! Vector clocks are computed from the last accesses of each location
//! (as race detectors do): an event's direct predecessors are the last
//! write of every location it touches and, if it writes, the reads since,
//! so the cost is linear in the schedule for a fixed footprint size. An
//! unknown footprint acts as a write of every location.

use super::Action;
use crate::engine::track::{part, Footprint, Loc, Space};
use std::collections::BTreeMap;

/// The accesses to one location since its last write: the write, and the
/// last read of each process since. A process's earlier read happens
/// before its later one (program order), so a later write's clock and
/// races need only the last: an earlier read is never in a race the later
/// one does not cover. This bounds the reads kept by the number of
/// processes, however long a CPU spins reading a location.
#[derive(Debug, Default, Clone)]
struct History {
    last_write: Option<u32>,
    /// `(process, event)`, one per process.
    reads: Vec<(u32, u32)>,
}

impl History {
    fn candidates(&self, write: bool, out: &mut Vec<u32>) {
        out.extend(self.last_write);
        if write {
            out.extend(self.reads.iter().map(|&(_, e)| e));
        }
    }

    /// Event `k` of process `q` accesses the location.
    fn access(&mut self, k: u32, q: u32, write: bool) {
        if write {
            self.last_write = Some(k);
            self.reads.clear();
        } else if let Some(r) = self.reads.iter_mut().find(|r| r.0 == q) {
            r.1 = k;
        } else {
            self.reads.push((q, k));
        }
    }
}

/// The histories of one space: the whole ([`part::ALL`]) and each part.
#[derive(Debug, Default)]
struct SpaceHistory {
    all: History,
    parts: BTreeMap<u32, History>,
}

/// Happens-before over a schedule: a vector clock per event.
#[derive(Debug)]
pub struct Hb {
    nprocs: usize,
    /// Process of each event.
    proc: Vec<u32>,
    /// Each event's number within its process, from 1.
    seq: Vec<u32>,
    /// Clocks, `nprocs` per event: entry `q` of event `k` is how many of
    /// process `q`'s events happen before `k` or are `k`.
    vc: Vec<u32>,
    ids: BTreeMap<Action, u32>,
    /// Each process's events, in order.
    events_of: Vec<Vec<u32>>,
}

impl Hb {
    /// Happens-before over `actions` with their recorded `fps`, and the
    /// races `(i, k)` with `k >= from`.
    pub fn build(actions: &[Action], fps: &[&Footprint], from: usize) -> (Hb, Vec<(usize, usize)>) {
        let mut ids = BTreeMap::new();
        for a in actions {
            let n = ids.len() as u32;
            ids.entry(*a).or_insert(n);
        }
        let nprocs = ids.len();
        let mut hb = Hb {
            nprocs,
            proc: Vec::with_capacity(actions.len()),
            seq: Vec::with_capacity(actions.len()),
            vc: vec![0; actions.len() * nprocs],
            ids,
            events_of: vec![Vec::new(); nprocs],
        };
        let mut spaces: BTreeMap<Space, SpaceHistory> = BTreeMap::new();
        let mut univ = History::default();
        let mut races = Vec::new();
        let mut cands = Vec::new();
        let mut preds = Vec::new();
        for (k, (a, fp)) in actions.iter().zip(fps).enumerate() {
            let q = hb.ids[a];
            let kk = k as u32;
            cands.clear();
            if fp.unknown {
                univ.candidates(true, &mut cands);
                for s in spaces.values() {
                    s.all.candidates(true, &mut cands);
                    s.parts
                        .values()
                        .for_each(|h| h.candidates(true, &mut cands));
                }
                spaces.clear();
                univ = History::default();
                univ.access(kk, q, true);
            } else {
                univ.candidates(false, &mut cands);
                univ.access(kk, q, false);
                for (locs, write) in [(&fp.reads, false), (&fp.writes, true)] {
                    for l in locs.iter() {
                        access(&mut spaces, l, kk, q, write, &mut cands);
                    }
                }
            }
            // An event that reads a part and writes the whole meets its
            // own read.
            cands.retain(|&c| c != kk);
            cands.sort_unstable();
            cands.dedup();
            preds.clear();
            preds.extend(cands.iter().copied());
            if let Some(&prev) = hb.events_of[q as usize].last() {
                preds.push(prev);
            }
            hb.push(k, q, &preds);
            if k >= from {
                for &i in &cands {
                    let direct = hb.proc[i as usize] != q
                        && !preds
                            .iter()
                            .any(|&p| p != i && hb.hb(i as usize, p as usize));
                    if direct {
                        races.push((i as usize, k));
                    }
                }
            }
        }
        (hb, races)
    }

    /// Event `k` of process `q` with direct predecessors `preds`: its
    /// clock is the join of theirs, and itself.
    fn push(&mut self, k: usize, q: u32, preds: &[u32]) {
        let n = self.nprocs;
        let base = k * n;
        for &p in preds {
            let pb = p as usize * n;
            for j in 0..n {
                self.vc[base + j] = self.vc[base + j].max(self.vc[pb + j]);
            }
        }
        let s = self.events_of[q as usize].len() as u32 + 1;
        self.vc[base + q as usize] = s;
        self.proc.push(q);
        self.seq.push(s);
        self.events_of[q as usize].push(k as u32);
    }

    /// Does event `i` happen before event `k` (or is it `k`)?
    pub fn hb(&self, i: usize, k: usize) -> bool {
        self.vc[k * self.nprocs + self.proc[i] as usize] >= self.seq[i]
    }

    /// Does event `i` happen before the events of process `b` before
    /// position `j` (its last one there, if any)?
    pub fn before_process(&self, i: usize, b: &Action, j: usize) -> bool {
        let Some(&q) = self.ids.get(b) else {
            return false;
        };
        let ev = &self.events_of[q as usize];
        let n = ev.partition_point(|&e| (e as usize) < j);
        n > 0 && self.hb(i, ev[n - 1] as usize)
    }

    /// The initials of the race `(i, k)` (source-DPOR's `I[pre(i)](v)`,
    /// `v` = the events after `i` that do not happen after it, then `k`):
    /// the processes whose first event in `v` has no predecessor in `v`;
    /// any of them, run at `i`'s state, starts a schedule that reverses
    /// the race. `k`'s process first if it is one.
    pub fn initials(&self, actions: &[Action], i: usize, k: usize) -> Vec<Action> {
        let v: Vec<usize> = (i + 1..k)
            .filter(|&x| !self.hb(i, x))
            .chain(std::iter::once(k))
            .collect();
        let mut first: Vec<Option<usize>> = vec![None; self.nprocs];
        let mut out = Vec::new();
        for &x in &v {
            let q = self.proc[x] as usize;
            if first[q].is_some() {
                continue;
            }
            let free = first
                .iter()
                .enumerate()
                .all(|(p, y)| p == q || y.is_none_or(|y| !self.hb(y, x)));
            first[q] = Some(x);
            if free {
                out.push(actions[x]);
            }
        }
        if let Some(p) = out.iter().position(|a| *a == actions[k]) {
            out.swap(0, p);
        }
        out
    }
}

/// The normal form of the class of a schedule (its Mazurkiewicz trace):
/// the least topological order of its events by action, where an event
/// follows every earlier event of its action and every earlier one whose
/// footprint conflicts with its own. Two schedules are equivalent (one
/// is the other with adjacent independent actions swapped, repeatedly)
/// exactly when their normal forms are equal. Quadratic: for tests.
pub fn normal_form(run: &[Action], fps: &[&Footprint]) -> Vec<Action> {
    let n = run.len();
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let next = (0..n)
            .filter(|&j| !done[j])
            .filter(|&j| (0..j).all(|i| done[i] || (run[i] != run[j] && !fps[i].conflicts(fps[j]))))
            .min_by_key(|&j| run[j])
            .expect("a schedule's order is acyclic");
        done[next] = true;
        out.push(run[next]);
    }
    out
}

/// Event `k` of process `q` accesses `l`: its candidates (the conflicting accesses not
/// covered by a later one) go to `out`, and the histories move on.
fn access(
    spaces: &mut BTreeMap<Space, SpaceHistory>,
    l: &Loc,
    k: u32,
    q: u32,
    write: bool,
    out: &mut Vec<u32>,
) {
    let s = spaces.entry(l.space).or_default();
    s.all.candidates(write, out);
    if l.part == part::ALL {
        s.parts.values().for_each(|h| h.candidates(write, out));
        if write {
            // Every access to a part so far happens before this one.
            s.parts.clear();
        }
        s.all.access(k, q, write);
    } else {
        let h = s.parts.entry(l.part).or_default();
        h.candidates(write, out);
        h.access(k, q, write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;

    fn loc(p: u32) -> Loc {
        Loc::part(Space::Var(9), p)
    }

    #[test]
    fn a_chain_of_conflicts_orders_its_ends_without_a_race_between_them() {
        // s0 writes x; s1 reads x and writes y; s2 reads y: s0 → s1 → s2.
        let a = [
            Action::Step(cpuid(0)),
            Action::Step(cpuid(1)),
            Action::Step(cpuid(2)),
        ];
        let f = [
            Footprint::of(&[], &[loc(1)]),
            Footprint::of(&[loc(1)], &[loc(2)]),
            Footprint::of(&[loc(2)], &[]),
        ];
        let fps: Vec<&Footprint> = f.iter().collect();
        let (hb, races) = Hb::build(&a, &fps, 0);
        assert!(hb.hb(0, 2));
        assert_eq!(races, vec![(0, 1), (1, 2)]);
        // Reversing s0 and s1: s1 alone is the initial.
        assert_eq!(hb.initials(&a, 0, 1), vec![Action::Step(cpuid(1))]);
    }

    #[test]
    fn reads_do_not_race_and_a_whole_write_meets_every_part() {
        let a = [
            Action::Step(cpuid(0)),
            Action::Step(cpuid(1)),
            Action::Step(cpuid(2)),
        ];
        let f = [
            Footprint::of(&[loc(1)], &[]),
            Footprint::of(&[], &[loc(2)]),
            Footprint::of(&[], &[Loc::all(Space::Var(9))]),
        ];
        let fps: Vec<&Footprint> = f.iter().collect();
        let (hb, races) = Hb::build(&a, &fps, 0);
        assert!(!hb.hb(0, 1));
        assert_eq!(races, vec![(0, 2), (1, 2)]);
    }

    #[test]
    fn an_event_that_reads_a_part_and_writes_the_whole_is_not_its_own_predecessor() {
        let k = |p| Loc::part(Space::Var(0), p);
        let a = [Action::Step(cpuid(1)), Action::Step(cpuid(0))];
        let f = [
            Footprint::of(&[k(part::cpu(1))], &[]),
            Footprint::of(&[k(part::cpu(0))], &[Loc::all(Space::Var(0))]),
        ];
        let fps: Vec<&Footprint> = f.iter().collect();
        let (_, races) = Hb::build(&a, &fps, 0);
        assert_eq!(races, vec![(0, 1)]);
    }

    #[test]
    fn an_unknown_footprint_races_with_the_last_events_only() {
        let a = [
            Action::Step(cpuid(0)),
            Action::Step(cpuid(0)),
            Action::Step(cpuid(1)),
        ];
        let f = [
            Footprint::of(&[], &[loc(1)]),
            Footprint::of(&[], &[loc(2)]),
            Footprint::unknown(),
        ];
        let fps: Vec<&Footprint> = f.iter().collect();
        let (_, races) = Hb::build(&a, &fps, 0);
        // Step(0)'s first event happens before its second.
        assert_eq!(races, vec![(1, 2)]);
    }

    #[test]
    fn initials_skip_what_happens_after_the_first_event() {
        // d0 (i), then p1 independent of it, then s2 after d0: the race
        // d0/s2 is reversed by starting with p1 or s2... s2 happens after
        // d0 only through the race itself, so both are initials.
        let a = [
            Action::Deliver(cpuid(0)),
            Action::Deliver(cpuid(1)),
            Action::Step(cpuid(2)),
        ];
        let f = [
            Footprint::of(&[], &[loc(1)]),
            Footprint::of(&[], &[loc(2)]),
            Footprint::of(&[loc(1)], &[]),
        ];
        let fps: Vec<&Footprint> = f.iter().collect();
        let (hb, races) = Hb::build(&a, &fps, 0);
        assert_eq!(races, vec![(0, 2)]);
        assert_eq!(
            hb.initials(&a, 0, 2),
            vec![Action::Step(cpuid(2)), Action::Deliver(cpuid(1))]
        );
    }
}
