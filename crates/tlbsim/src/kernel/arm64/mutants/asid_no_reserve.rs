//! `mutant-asid-no-reserve`: `arm64-asid-reserved` whose `flush_context()` does not reserve the
//! ASIDs running on other CPUs at rollover: a number still live in a TLB is
//! handed to another mm.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::hw::CpuId;
use crate::kernel::arm64::asid::{ContextFns, ReservedAsid, State};
use crate::kernel::registry::{AllocatorEntry, Breaks};

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct NoReserve;

impl ContextFns for NoReserve {
    /// Forgets every CPU's running ASID instead of reserving it.
    fn flush_context(&self, _a: &ReservedAsid, st: &mut State) {
        st.map.clone_from(&st.pinned_map);
        st.map[0] = true; // ASID 0 is reserved
        for cpu in CpuId::all(st.active.len()) {
            st.active[cpu] = 0; // atomic64_xchg(.., 0), value dropped
            st.reserved[cpu] = 0;
        }
        st.flush_pending.set_all();
    }
}

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "mutant-asid-no-reserve",
    description: "MUTANT: rollover does not reserve the ASIDs running on other CPUs",
    arch: Some(Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::AsidIsolation,
        search: super::ALLOCATOR_SEARCH,
    }),
    new: |k, bits| Box::new(ReservedAsid::with_fns(bits, k.kpti, &NoReserve)),
};
