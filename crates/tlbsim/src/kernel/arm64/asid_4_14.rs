//! `arm64-asid-reserved-4.14`: arm64's ASID allocator from its rewrite
//! (5aec715d7d31, "arm64: mm: rewrite ASID allocator and MM
//! context-switching code", 2015) until a8ffaaa060b8 ("arm64: asid: Do not
//! replace active_asids if already 0", 4.15), a bug the TLA+ model of the
//! allocator found (Catalin Marinas, 2019: "This specific bug was found by
//! the TLA+ model checker").
//!
//! `check_and_switch_context()`'s fast path was
//! `if (!((asid ^ atomic64_read(&asid_generation)) >> asid_bits) &&
//! atomic64_xchg_relaxed(&per_cpu(active_asids, cpu), asid)) goto
//! switch_mm_fastpath;`: the `xchg` stores the mm's ASID whatever the slot
//! holds, and only its result (0: a rollover cleared the slot) sends the
//! switch to the slow path. A CPU that checked the generation before a
//! rollover and exchanges after it writes an ASID of the old generation
//! over the rollover's 0; a second rollover before this CPU takes the lock
//! reserves that stale ASID, and two mms end up with one ASID in the new
//! generation. The fix reads the slot first and publishes with a
//! `cmpxchg` only over the non-zero value it read (`arm64-asid-reserved`).

use super::asid::{ContextFns, ReservedAsid};
use crate::config::Arch;
use crate::kernel::registry::{AllocatorEntry, Breaks};
use crate::observe::Invariant;

/// The 4.5-4.14 fast path.
#[derive(Debug, Clone, Copy)]
pub struct Xchg;

impl ContextFns for Xchg {
    /// The fast path reads no slot before its `xchg`.
    fn fast_path_checks_active(&self) -> bool {
        false
    }

    /// `atomic64_xchg_relaxed(&active_asids[cpu], new)`: stores `new` and
    /// is true when the slot held a non-zero ASID.
    fn cmpxchg_active_asid(&self, slot: &mut u64, _old: u64, new: u64) -> bool {
        std::mem::replace(slot, new) != 0
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm64-asid-reserved-4.14",
    description: "arm64's ASID allocator before a8ffaaa060b8 (to 4.14): the fast path's xchg overwrites a rollover's 0",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::AsidIsolation,
        search: super::mutants::ALLOCATOR_SEARCH,
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &Xchg)),
};
