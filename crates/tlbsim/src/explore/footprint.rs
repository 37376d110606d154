//! The footprints of explorer actions known before they run, and when
//! two actions are dependent: the relation the partial-order-reducing
//! search ([`super::dpor`]) reorders by. Documented in docs/model.md, "The
//! explorer's footprints and DPOR".
//!
//! Every action's footprint is recorded as it runs
//! ([`crate::engine::track`], [`super::Explorer::footprints`]); the DPOR
//! search compares those of the actions a schedule took. This file says
//! what an action that has not run (enabled somewhere, never taken
//! afterwards in the schedule) will touch: for the driver's own
//! hardware bookkeeping (`Deliver`, `Speculate`) that is fixed by the
//! action, and equal to what [`super::Explorer::apply`] records for it;
//! a `Step` or an `Interrupt` runs kernel code up to the next posted step,
//! whose footprint is known only once it ran: unknown (dependent on
//! everything) until then.

use super::Action;
use crate::engine::track::{part, Footprint, Loc, Space};
use crate::step::host_cx;

/// The footprint of `a` before it runs (see the module doc):
/// - `Deliver(t)`: the oldest TLBI pending at `t` invalidates `t`'s TLB
///   and walk cache and clears its pending bit there; it is offered only
///   while `t` has an access posted, so it reads `t`'s context;
/// - `Speculate(c, va)`: walks the page tables from `c`'s translation
///   registers, fills `c`'s TLB and walk cache, and spends one of the
///   schedule's speculative fills; it is offered for the VAs accessed so
///   far;
/// - `Step` and `Interrupt`: unknown.
pub fn footprint(a: &Action) -> Footprint {
    let hw = |p| Loc::part(Space::Hw, p);
    match *a {
        Action::Deliver(t) => Footprint::of(
            &[Loc::part(Space::Cx, part::cx(host_cx(t)))],
            &[hw(part::tlb(t)), hw(part::dvm_pending(t))],
        ),
        Action::Speculate(c, _) => Footprint::of(
            &[
                Loc::part(Space::Explore, part::TOUCHED),
                hw(part::regs(c)),
                hw(part::PAGE_TABLES),
            ],
            &[hw(part::tlb(c)), Loc::part(Space::Explore, part::BUDGET)],
        ),
        Action::Step(_) | Action::Interrupt(_) => Footprint::unknown(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;

    /// Are `a` and `b` dependent by their footprints before they run? An
    /// action is dependent on itself.
    fn dependent(a: &Action, b: &Action) -> bool {
        a == b || footprint(a).conflicts(&footprint(b))
    }

    #[test]
    fn deliveries_to_different_cpus_commute_and_to_one_do_not() {
        assert!(!dependent(
            &Action::Deliver(cpuid(0)),
            &Action::Deliver(cpuid(1))
        ));
        assert!(dependent(
            &Action::Deliver(cpuid(1)),
            &Action::Deliver(cpuid(1))
        ));
    }

    #[test]
    fn a_walk_conflicts_with_a_delivery_to_its_own_tlb_only() {
        let p = Action::Speculate(cpuid(0), 0x1000);
        assert!(dependent(&p, &Action::Deliver(cpuid(0))));
        assert!(!dependent(&p, &Action::Deliver(cpuid(1))));
        // The budget: one walk may disable the other.
        assert!(dependent(&p, &Action::Speculate(cpuid(1), 0x1000)));
    }

    #[test]
    fn kernel_steps_not_yet_run_are_dependent_on_everything() {
        for b in [
            Action::Step(cpuid(1)),
            Action::Deliver(cpuid(1)),
            Action::Interrupt(cpuid(1)),
            Action::Speculate(cpuid(1), 0),
        ] {
            assert!(dependent(&Action::Step(cpuid(0)), &b));
            assert!(dependent(&Action::Interrupt(cpuid(0)), &b));
        }
    }
}
