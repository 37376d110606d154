//! `mutant-asid-fast-path-over-zero`: `arm64-asid-reserved` whose lockless
//! fast path in `check_and_switch_context()` drops the `old_active_asid &&`
//! test, as a conversion to `atomic64_try_cmpxchg_relaxed()` might: the
//! try-cmpxchg succeeds over the zero that `flush_context()` left in
//! `active_asids[cpu]`. Linux relies on that zero (and on `cmpxchg`
//! returning it, which is false) to send the CPU through the slow path, the
//! only place that tests `tlb_flush_pending` and runs
//! `local_flush_tlb_all()`. Here a CPU switching, after a rollover, to an
//! mm that already has a new-generation ASID skips its flush and keeps the
//! old generation's entries under a number now given to another mm.

use crate::check::Invariant;
use crate::config::Arch;
use crate::kernel::arm64::asid::{ContextFns, ReservedAsid};
use crate::kernel::registry::{AllocatorEntry, Breaks, Search, Source, Strategy};

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct FastPathOverZero;

impl ContextFns for FastPathOverZero {
    /// `asid_gen_match(asid)` only: a zero `active_asids` no longer forces
    /// the slow path.
    fn fast_path_may_try(&self, _old_active: u64, gen_match: bool) -> bool {
        gen_match
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "mutant-asid-fast-path-over-zero",
    description: "MUTANT: the fast path try-cmpxchgs over a zero active_asids, skipping the slow path's pending local flush",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::AsidIsolation,
        search: Search::Explore {
            experiment: Source::File("experiments/seed002-explore.toml"),
            strategy: Strategy::Random,
            schedules: 2_000,
            seed: 1,
            max_actions: 50_000,
        },
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &FastPathOverZero)),
};
