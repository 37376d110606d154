//! `x86-lazy-before-831d52b`: `x86-lazy-4.13`'s lazy TLB code with
//! `switch_mm()`'s order before 831d52bc1539 ("x86, mm: avoid possible
//! bogus tlb entries by clearing prev mm_cpumask after switching mm",
//! Suresh Siddha, late 2011; the order dates from 2.4.0): the CPU left
//! the previous mm's `mm_cpumask` first, then joined the next one's and
//! loaded its CR3. In between it still ran on the previous mm's page
//! tables without receiving their flush IPIs: a munmap on another CPU
//! could free a table that this CPU's paging-structure caches (and its
//! speculative walks) still reached. Everything else is 4.13's (the lazy
//! mode is the same scheme; `flush_tlb_batched_pending()` came later and
//! plays no part in the search).

use super::legacy::Legacy;
use crate::config::Arch;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Strategy};
use crate::observe::Invariant;

/// The registry entry of `x86-lazy-2.6.38`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-lazy-before-831d52b",
    description: "x86 switch_mm before 831d52bc1539 (2011): prev's mm_cpumask bit cleared before CR3 is loaded (the rest as x86-lazy-4.13)",
    arch: Arch::X86,
    requires: &[],
    allocators: Allocators::PicksOwnTags,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleWalk,
        search: SWITCH_VS_MUNMAP,
    }),
    new: || Box::new(Legacy::clearing_prev_first()),
};

/// Thread 0 munmaps (freeing the PTE table) while a reader's CPU switches
/// between the threaded mm and another process
/// (`experiments/bugs/switch-mm-clear-prev-first.toml`).
pub const SWITCH_VS_MUNMAP: Search = Search::Explore {
    experiment: crate::experiment_file!("experiments/bugs/switch-mm-clear-prev-first.toml"),
    strategy: Strategy::Random,
    schedules: 3_000,
    seed: 1,
    max_actions: 200_000,
    speculation: 2,
};
