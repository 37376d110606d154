//! `mutant-asid-forget-cpu`: `arm64-asid-reserved` whose `flush_context()` leaves the
//! last CPU out of `tlb_flush_pending`: it keeps old-generation entries.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::hw::CpuId;
use crate::kernel::arm64::asid::{flush_context, ContextFns, ReservedAsid, State};
use crate::kernel::registry::{AllocatorEntry, Breaks};

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct ForgetCpu;

impl ContextFns for ForgetCpu {
    /// Linux's, then clears the last CPU's pending flush.
    fn flush_context(&self, a: &ReservedAsid, st: &mut State) {
        flush_context(a, st);
        let last = CpuId::from_index(st.active.len() - 1);
        st.flush_pending.clear(last);
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "mutant-asid-forget-cpu",
    description: "MUTANT: rollover leaves the last CPU out of tlb_flush_pending",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleWalk,
        search: super::ALLOCATOR_SEARCH,
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &ForgetCpu)),
};
