//! Deliberately broken arm64 policies and ASID allocators, each beside what
//! it breaks. Each entry names the invariant the checker finds it breaking
//! and the search that finds it (tests/integration/mutants.rs runs them all).

pub mod asid_forget_cpu;
pub mod asid_ignore_reserved;
pub mod asid_no_reserve;
pub mod asid_plain_store;
pub mod free_before_sync;
pub mod range_no_broadcast;

use crate::kernel::registry::{Search, Source, Strategy};

/// The search that shows an ASID-allocator mutant: 2,000 random schedules of
/// `experiments/seed002-explore.toml` (2 CPUs, 2-bit ASIDs, about 10
/// rollovers a run).
pub const ALLOCATOR_SEARCH: Search = Search::Explore {
    experiment: Source::File("experiments/seed002-explore.toml"),
    strategy: Strategy::Random,
    schedules: 2_000,
    seed: 1,
    max_actions: 50_000,
};
