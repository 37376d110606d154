//! What one explorer action touches (its footprint), and when two actions
//! are dependent: the relation the partial-order-reducing search
//! ([`super::dpor`]) reorders by. Documented in docs/model.md, "The
//! explorer's footprints (DPOR)".
//!
//! A footprint is known only for the actions whose whole effect is the
//! driver's own hardware bookkeeping: a broadcast TLBI reaching one CPU
//! (`Deliver`) and a speculative walk (`Speculate`). A `Step` or an
//! `Interrupt` runs kernel code until the next posted step, and that code
//! reads and writes kernel state (`World::k`, the policy's and the ASID
//! allocator's own cells, page tables, pipes, KVM state) with nothing that
//! records which parts: its footprint is unknown, so it is dependent on
//! every action. This is sound (an unknown footprint never lets two
//! actions commute), and it is where the reduction stops today.

use super::Action;
use crate::hw::CpuId;

/// An abstract location of the machine an action reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Loc {
    /// The TLB and walk cache of a CPU (entries and their LRU order).
    Tlb(CpuId),
    /// The pending bits, at a CPU, of the broadcast TLBIs in flight.
    DvmPending(CpuId),
    /// The translation registers of a CPU (TTBR0, the ASID, VTTBR).
    Regs(CpuId),
    /// The posted step of a CPU (what `Deliver` is offered beside).
    Posted(CpuId),
    /// Every page-table entry in memory.
    PageTables,
    /// The per-schedule budget of speculative fills.
    SpeculationBudget,
}

/// The locations an action reads and writes. `None` from
/// [`footprint`]: unknown (dependent on everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// Locations read (a location also written is listed only there).
    pub reads: Vec<Loc>,
    /// Locations written.
    pub writes: Vec<Loc>,
}

impl Footprint {
    /// Do the two footprints conflict: one writes what the other reads or
    /// writes?
    pub fn conflicts(&self, other: &Footprint) -> bool {
        let hits = |w: &[Loc], o: &Footprint| {
            w.iter()
                .any(|l| o.writes.contains(l) || o.reads.contains(l))
        };
        hits(&self.writes, other) || hits(&other.writes, self)
    }
}

/// The footprint of `a`, from what the driver does for it
/// ([`super::Explorer::apply`]):
/// - `Deliver(t)`: the oldest TLBI pending at `t` invalidates `t`'s TLB
///   and walk cache (`Hw::dvm_apply`) and clears its pending bit there; it
///   is offered only while `t` has an access posted, so it reads that;
/// - `Speculate(c, va)`: walks the page tables from `c`'s translation
///   registers, fills `c`'s TLB and walk cache (`Hw::speculate`), and
///   spends one of the schedule's speculative fills (which, once spent,
///   disable every other `Speculate`);
/// - `Step` and `Interrupt`: unknown (`None`), see the module doc.
///
/// The driver's own list of TLBIs in flight is changed by a `Deliver` that
/// clears the last pending bit; deliveries to different CPUs reach the
/// same list whichever goes first, so it is not a location.
pub fn footprint(a: &Action) -> Option<Footprint> {
    match *a {
        Action::Deliver(t) => Some(Footprint {
            reads: vec![Loc::Posted(t)],
            writes: vec![Loc::Tlb(t), Loc::DvmPending(t)],
        }),
        Action::Speculate(c, _) => Some(Footprint {
            reads: vec![Loc::Regs(c), Loc::PageTables],
            writes: vec![Loc::Tlb(c), Loc::SpeculationBudget],
        }),
        Action::Step(_) | Action::Interrupt(_) => None,
    }
}

/// Are `a` and `b` dependent: may running them in the two orders from one
/// state give different states, or may one enable or disable the other?
/// True if either footprint is unknown or the footprints conflict. An
/// action is dependent on itself.
pub fn dependent(a: &Action, b: &Action) -> bool {
    if a == b {
        return true;
    }
    match (footprint(a), footprint(b)) {
        (Some(x), Some(y)) => x.conflicts(&y),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_to_different_cpus_commute_and_to_one_do_not() {
        assert!(!dependent(&Action::Deliver(0), &Action::Deliver(1)));
        assert!(dependent(&Action::Deliver(1), &Action::Deliver(1)));
    }

    #[test]
    fn a_walk_conflicts_with_a_delivery_to_its_own_tlb_only() {
        let p = Action::Speculate(0, 0x1000);
        assert!(dependent(&p, &Action::Deliver(0)));
        assert!(!dependent(&p, &Action::Deliver(1)));
        // The budget: one walk may disable the other.
        assert!(dependent(&p, &Action::Speculate(1, 0x1000)));
    }

    #[test]
    fn kernel_steps_are_dependent_on_everything() {
        for b in [
            Action::Step(1),
            Action::Deliver(1),
            Action::Interrupt(1),
            Action::Speculate(1, 0),
        ] {
            assert!(dependent(&Action::Step(0), &b));
            assert!(dependent(&Action::Interrupt(0), &b));
        }
    }
}
