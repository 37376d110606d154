//! `arm64-asid-reserved-6.12`: arm64's ASID allocator before c0900d15d31c
//! ("arm64: Ensure bits ASID\[15:8\] are masked out when the kernel uses
//! 8-bit ASIDs", 6.13; backported to the stable kernels): `ASID(mm)` was
//! `atomic64_read(&mm->context.id) & 0xffff`.
//!
//! The kernel's ASID width is the smallest of its CPUs' (or what a
//! hypervisor reports), but each CPU whose hardware has 16-bit ASIDs sets
//! `TCR_EL1.AS` and tags its TLB entries with all 16 bits of the TTBR0
//! field. With fewer kernel bits the generation, which sits just above
//! them in `context.id`, reaches the tag: after a rollover a thread of an
//! mm that kept its ASID number switches in under a different tag than
//! its sibling still running on another CPU, and the flushes of
//! `ASID(mm)` miss the sibling's entries. The model's `[kernel]
//! asid_bits` below the profile's `tlb.asid_bits` is that configuration.

use super::asid::{ContextFns, ReservedAsid};
use crate::config::Arch;
use crate::kernel::registry::{AllocatorEntry, Breaks};
use crate::observe::Invariant;

/// The 16-bit `ASID()` macro.
#[derive(Debug, Clone, Copy)]
pub struct Unmasked;

impl ContextFns for Unmasked {
    /// `#define ASID(mm) (atomic64_read(&(mm)->context.id) & 0xffff)`.
    fn asid(&self, id: u64, _bits: u8) -> u64 {
        id & 0xffff
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm64-asid-reserved-6.12",
    description: "arm64's ASID allocator before c0900d15d31c (to 6.12): ASID(mm) keeps bits 15:8 of context.id, generation bits when the kernel uses fewer ASID bits than the hardware",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: super::mutants::ALLOCATOR_SEARCH,
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &Unmasked)),
};
