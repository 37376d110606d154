//! `x86-lazy-4.13`: Linux 4.13's x86 TLB maintenance, the lazy TLB mode of
//! `x86-lazy-legacy` (4.12) with `flush_tlb_batched_pending()` (commit
//! 3ea277194daa, "mm, mprotect: flush TLB if potentially racing with a
//! parallel reclaim leaving stale TLB entries"): an mprotect, munmap or
//! madvise that may find a PTE whose flush reclaim deferred flushes the
//! mm first. The fixed counterpart of the 4.12 race in `tlbsim bugs`.

use super::legacy::{flush_tlb_batched_pending_4_13, Legacy};
use crate::config::Arch;
use crate::kernel::registry::{Allocators, PolicyEntry};

/// The registry entry of `x86-lazy-4.13`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-lazy-4.13",
    description: "x86 Linux 4.13: x86-lazy-legacy's lazy mode with flush_tlb_batched_pending (3ea277194daa)",
    arch: Arch::X86,
    requires: &[],
    allocators: Allocators::PicksOwnTags,
    breaks: None,
    new: || Box::new(Legacy::with_batched_pending(flush_tlb_batched_pending_4_13)),
};
