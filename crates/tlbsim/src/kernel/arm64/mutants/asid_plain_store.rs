//! `mutant-asid-plain-store`: `arm64-asid-reserved` whose fast path publishes the ASID
//! with a plain store after its checks instead of a compare-and-exchange,
//! overwriting the zero a concurrent rollover wrote.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::kernel::arm64::asid::{ContextFns, ReservedAsid};
use crate::kernel::registry::{AllocatorEntry, Breaks};

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct PlainStore;

impl ContextFns for PlainStore {
    /// Stores `new` whatever the slot holds.
    fn cmpxchg_active_asid(&self, slot: &mut u64, _old: u64, new: u64) -> bool {
        *slot = new;
        true
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "mutant-asid-plain-store",
    description: "MUTANT: the fast path publishes the ASID with a plain store, not a cmpxchg",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: super::ALLOCATOR_SEARCH,
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &PlainStore)),
};
