//! Deliberately broken arm64 policies and ASID allocators, each beside what
//! it breaks. Each entry names the invariant the checker finds it breaking
//! and the search that finds it (tests/integration/mutants.rs runs them all).

use crate::kernel::registry::{Search, Strategy};

crate::kernel::registry::entries! {
    /// Mutant arm64 TLB-flush policies.
    pub POLICIES: crate::kernel::registry::PolicyEntry = [
        range_no_broadcast,
        free_before_sync,
        tlbbatch_no_pending_flush,
        tlbbatch_no_batch_sync,
        tlbbatch_clean_pte,
        affinity_mm_switch_time,
    ];
    /// Mutant ASID allocators.
    pub ALLOCATORS: crate::kernel::registry::AllocatorEntry = [
        asid_no_reserve,
        asid_plain_store,
        asid_forget_cpu,
        asid_ignore_reserved,
    ];
}

/// The search that shows an ASID-allocator mutant: 2,000 random schedules of
/// `experiments/seed002-explore.toml` (2 CPUs, 2-bit ASIDs, about 10
/// rollovers a run).
pub const ALLOCATOR_SEARCH: Search = Search::Explore {
    experiment: crate::experiment_file!("experiments/seed002-explore.toml"),
    strategy: Strategy::Random,
    schedules: 2_000,
    seed: 1,
    max_actions: 50_000,
    speculation: 2,
};
