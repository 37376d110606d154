//! `x86-tlb-gen-before-b956575`: seed 004 as first merged ("x86/mm: Rework
//! lazy TLB mode and TLB freshness tracking"), before commit b956575bed91
//! ("x86/mm: Flush more aggressively in lazy TLB mode"): lazy CPUs get no
//! flush IPIs at all, not even when page-table pages were freed, so a lazy
//! CPU's paging-structure caches may walk freed tables (no stale walk).
//! Like every kernel before Linux 4.20, it counts the flush ceiling in
//! 4 KiB pages, so a 2 MiB range is a full flush.

use super::tlb_gen::{Options, TlbGen, TlbGenFns};
use super::{CeilingUnit, FlushInfo};
use crate::observe::Invariant;
use crate::config::Arch;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Source, Strategy};

/// The kernel before b956575bed91: only its `native_flush_tlb_multi()`
/// condition differs.
#[derive(Debug, Clone, Copy)]
pub struct BeforeB956575;

impl TlbGenFns for BeforeB956575 {
    /// Lazy CPUs are never sent a flush.
    fn flush_reaches_lazy(&self, _info: &FlushInfo) -> bool {
        false
    }

    /// Linux 4.14-4.18 counted the ceiling in 4 KiB pages (a31acd3ee8f7
    /// came in 4.20).
    fn ceiling_unit(&self) -> CeilingUnit {
        CeilingUnit::BasePages
    }
}

/// Three x86 CPUs: thread 0 munmaps (freeing the PTE table) while a reader
/// hops between CPUs, leaving lazy CPUs behind (`x86-tlb-gen` passes).
pub const LAZY_MUNMAP: &str = "[experiment]\nname = \"lazy-munmap\"\nprofile = \"skylake-4c8t\"\n[machine]\ncpus = 3\n[kernel]\ntlb_policy = \"x86-tlb-gen\"\nasid_allocator = \"none\"\n[workload]\nname = \"threads\"\nthreads = 2\niterations = 3\nop = \"munmap\"\nreader_hop = true\n";

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-tlb-gen-before-b956575",
    description: "seed 004 before commit b956575bed91: lazy CPUs get no flush IPIs even when page tables were freed",
    arch: Arch::X86,
    requires: &[],
    allocators: Allocators::PicksOwnTags,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleWalk,
        search: Search::Explore {
            experiment: Source::Inline(LAZY_MUNMAP),
            strategy: Strategy::Random,
            schedules: 1_000,
            seed: 1,
            max_actions: 50_000,
            speculation: 2,
        },
    }),
    new: || Box::new(TlbGen::with_fns(Options::default(), &BeforeB956575)),
};
