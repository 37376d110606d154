//! `mutant-tlbbatch-clean-pte`: `arm64-tlbbatch` whose `pte_dirty()` reads
//! every PTE reclaim clears as clean, as a `pte_dirty()` that missed a
//! dirty state would (on arm64 the hardware may hold it: with FEAT_HAFDBS
//! a store to a writable-clean PTE clears `PTE_RDONLY` rather than setting
//! the software `PTE_DIRTY`). The task's batch is then never marked
//! `writable`, `try_to_unmap_flush_dirty()` flushes nothing, and
//! `pageout()` writes a page out while another CPU may still hold a
//! writable translation of it: a store through it after the write-out
//! began is lost (the ordering d950c9477d51 made the rule when it deferred
//! dirty PTEs' flushes, v4.3: flush before the page is queued for I/O).

use crate::observe::Invariant;
use crate::config::Arch;
use crate::hw::mem::Pte;
use crate::kernel::arm64::tlbbatch::{batch_search, TlbBatch};
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Source};

/// The mutant's `pte_dirty()`.
fn always_clean(_pte: Pte) -> bool {
    false // missing: pte_sw_dirty(pte) || pte_hw_dirty(pte)
}

/// `experiments/seed001-explore.toml` with threads writing the pages
/// instead of forked children (MADV_PAGEOUT skips a page another process
/// maps, so only threads hold writable translations of what it writes out).
pub const PAGEOUT_THREADS: &str = "[experiment]\nname = \"pageout-threads\"\nprofile = \"ampere-32\"\nseed = 1\n[machine]\ncpus = 3\n[kernel]\ntlb_policy = \"arm64-stock\"\nkpti = false\n[workload]\nname = \"pageout-race\"\npages = 2\niterations = 3\nusers = 2\nop = \"touch\"\nfork = false\n[checker]\nspeculative_walks = true\n";

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-tlbbatch-clean-pte",
    description: "MUTANT: arm64-tlbbatch whose pte_dirty() reads cleared PTEs as clean: pages written out before their deferred flush",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoLostWrite,
        search: batch_search(Source::Inline(PAGEOUT_THREADS)),
    }),
    new: || Box::new(TlbBatch::with_dirty(always_clean)),
};
