//! `mutant-asid-ignore-reserved`: `arm64-asid-reserved` whose `new_context()`
//! never finds the mm's ASID among the reserved ones
//! (`check_update_reserved_asid()` always misses). An mm that was running on
//! another CPU at the rollover, and still runs there under its reserved
//! ASID, gets a second, fresh ASID when it switches in here: its flushes go
//! to the new number and leave the other CPU's entries under the old one.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::kernel::arm64::asid::{ContextFns, ReservedAsid, State};
use crate::kernel::registry::{AllocatorEntry, Breaks};

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct IgnoreReserved;

impl ContextFns for IgnoreReserved {
    /// Never a hit; updates nothing.
    fn check_update_reserved_asid(&self, _st: &mut State, _old: u64, _new: u64) -> bool {
        false
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "mutant-asid-ignore-reserved",
    description: "MUTANT: new_context ignores reserved ASIDs, so an mm running elsewhere at rollover gets a second ASID",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: super::ALLOCATOR_SEARCH,
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &IgnoreReserved)),
};
