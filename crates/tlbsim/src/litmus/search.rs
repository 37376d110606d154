//! The exhaustive search over a litmus test's runs: from the initial
//! state, every enabled [`Action`] (a thread's next instruction, a TLBI
//! reaching a CPU, a speculative fill, an eviction), depth first, with
//! states already seen skipped. A dedicated enumerator rather than the
//! experiment explorer (`explore/`): that one drives kernel tasks of an
//! experiment and replays each schedule from scratch; a litmus test's
//! whole state (registers, memory, TLBs, TLBIs in flight) is small, so
//! the search keeps a set of visited states and is exhaustive without a
//! preemption bound (docs/model.md, "Litmus tests").
//!
//! It is driven through [`Machine::enabled`] and [`Machine::apply`]
//! only, so a partial-order-reducing explorer can drive the same
//! machine.

use super::machine::{Action, Machine, RunError, State};
use crate::hw::tlb::TlbiScope;
use rustc_hash::FxHashSet;

/// What the search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Some final state satisfies the condition.
    pub some: bool,
    /// Some final state does not.
    pub some_not: bool,
    /// Distinct states visited.
    pub states: u64,
    /// Final states reached (distinct).
    pub finals: u64,
    /// The state bound was hit: `some`/`some_not` are lower bounds.
    pub incomplete: bool,
}

/// The canonical form of a state: equal keys, equal futures. TLB
/// contents enter as sorted sets (LRU order and slot positions do not
/// change what a TLB can return), TLBIs in flight by issuer, scope and
/// remaining targets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    threads: Vec<super::machine::ThreadState>,
    mem: Vec<(super::ast::Loc, super::ast::Val)>,
    faults: Vec<super::machine::FaultRec>,
    leaves: Vec<Vec<(u64, u64, u8, u64)>>,
    walks: Vec<Vec<(u8, u64, u32)>>,
    inflight: Vec<InflightKey>,
}

/// A TLBI in flight: issuer, scope (kind, VA or ASID, last level), the
/// targets it has not reached.
type InflightKey = (usize, (u8, u64, bool), Vec<usize>);

fn key(st: &State) -> Key {
    let leaves = st
        .hw
        .cpus
        .iter()
        .map(|c| {
            let mut v: Vec<_> = c
                .tlb
                .leaf_entries()
                .map(|e| (e.vpn, e.pfn, e.perms.0, e.version))
                .collect();
            v.sort_unstable();
            v
        })
        .collect();
    let walks = st
        .hw
        .cpus
        .iter()
        .map(|c| {
            let mut v: Vec<_> = c
                .tlb
                .walk_entries()
                .map(|w| (w.level, w.va_prefix, w.next))
                .collect();
            v.sort_unstable();
            v
        })
        .collect();
    let mut inflight: Vec<_> = st
        .hw
        .inflight
        .iter()
        .flatten()
        .map(|f| {
            let scope = match f.scope {
                TlbiScope::Va { va, last_level, .. } => (0, va, last_level),
                TlbiScope::Asid(a) => (1, u64::from(a), false),
                TlbiScope::All => (2, 0, false),
                _ => (3, 0, false),
            };
            (f.issuer, scope, f.pending.iter().collect())
        })
        .collect();
    inflight.sort_unstable();
    Key {
        threads: st.threads.clone(),
        mem: st.mem.iter().map(|(l, v)| (*l, *v)).collect(),
        faults: st.faults.iter().copied().collect(),
        leaves,
        walks,
        inflight,
    }
}

/// Explores every run of `m` (at most `max_states` distinct states) and
/// reports whether final states satisfy the test's condition.
pub fn explore(m: &Machine<'_>, max_states: u64) -> Result<Outcome, RunError> {
    let mut out = Outcome::default();
    let init = m.initial()?;
    let mut seen: FxHashSet<Key> = FxHashSet::default();
    seen.insert(key(&init));
    let mut stack: Vec<State> = vec![init];
    while let Some(st) = stack.pop() {
        out.states += 1;
        if m.is_final(&st) {
            out.finals += 1;
            if m.eval(&st, &m.test.cond) {
                out.some = true;
            } else {
                out.some_not = true;
            }
            continue;
        }
        for a in m.enabled(&st) {
            let mut next = st.clone();
            m.apply(&mut next, a)?;
            if seen.insert(key(&next)) {
                if seen.len() as u64 > max_states {
                    out.incomplete = true;
                    return Ok(out);
                }
                stack.push(next);
            }
        }
    }
    Ok(out)
}

/// Applies `actions` in order from the initial state (a schedule found
/// by the search, or written by hand in a test) and returns the state.
pub fn replay(m: &Machine<'_>, actions: &[Action]) -> Result<State, RunError> {
    let mut st = m.initial()?;
    for &a in actions {
        m.apply(&mut st, a)?;
    }
    Ok(st)
}
