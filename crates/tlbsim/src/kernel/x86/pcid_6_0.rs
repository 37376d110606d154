//! `x86-pcid-6.0`: `x86-pcid` with Linux 6.0's early return in
//! `flush_tlb_func()` (aa44284960d5, "x86/mm/tlb: Avoid reading mm_tlb_gen
//! when possible", with 8f1d56f64f8d's exception for flushes without a
//! generation, [`flush_is_known_6_0`]): a flush whose generation this
//! CPU's PCID already covers returns before reading the mm's `tlb_gen`.
//! The fixed counterpart of `x86-pcid-aa44284` in `tlbsim bugs`.

use super::tlb_gen::{flush_is_known_6_0, Options, TlbGen, TlbGenFns};
use crate::config::Arch;
use crate::kernel::registry::{Allocators, Feature, PolicyEntry};

/// Linux 6.0's `flush_tlb_func()`.
#[derive(Debug, Clone, Copy)]
pub struct Pcid60;

impl TlbGenFns for Pcid60 {
    fn flush_is_known(&self, new_tlb_gen: u64, local_gen: u64) -> bool {
        flush_is_known_6_0(new_tlb_gen, local_gen)
    }
}

/// The registry entry of `x86-pcid-6.0`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-pcid-6.0",
    description: "x86-pcid with Linux 6.0's flush_tlb_func() early return (aa44284960d5, 8f1d56f64f8d)",
    arch: Arch::X86,
    requires: &[Feature::Pcid],
    allocators: Allocators::PicksOwnTags,
    breaks: None,
    new: || Box::new(TlbGen::with_fns(Options::PCID, &Pcid60)),
};
