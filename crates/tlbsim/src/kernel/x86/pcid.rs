//! `x86-pcid`: `x86-tlb-gen` plus process-context identifiers (Linux 4.14+):
//! each CPU keeps up to [`NR_DYN_ASIDS`](super::NR_DYN_ASIDS) address
//! spaces' entries tagged in its TLB at once. `choose_new_asid()` reuses the
//! slot that already holds the next mm (flushing it only if its `tlb_gen`
//! is behind) or evicts one round-robin, so a CR3 write between recently
//! used mms flushes nothing (the NOFLUSH bit).

use super::tlb_gen::{Options, TlbGen};
use crate::config::Arch;
use crate::kernel::registry::{Allocators, Feature, PolicyEntry};

/// The `x86-pcid` policy.
pub fn new() -> TlbGen {
    TlbGen::new(Options::PCID)
}

/// The registry entry of `x86-pcid`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-pcid",
    description: "x86-tlb-gen plus 6 dynamic PCIDs per CPU (Linux 4.14+)",
    arch: Arch::X86,
    requires: &[Feature::Pcid],
    allocators: Allocators::PicksOwnTags,
    breaks: None,
    new: || Box::new(new()),
};
