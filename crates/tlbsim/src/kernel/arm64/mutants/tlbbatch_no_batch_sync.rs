//! `mutant-tlbbatch-no-batch-sync`: `arm64-tlbbatch` whose
//! `arch_tlbbatch_flush()` omits its `DSB ISH`: reclaim returns, and frees
//! the pages it unmapped, while their `TLBI`s may still be on their way,
//! so a CPU can keep using a translation after the call that removed it
//! returned ("no stale hold"), and of a frame handed to someone else ("no
//! use after free"; the ordering 72b252aed506 put first: flush, then
//! `free_unref_folios()`). Which the checker sees first depends on the
//! schedule; its registered search finds the stale hold.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::kernel::arm64::tlbbatch::{batch_search, TlbBatch};
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry};
use crate::kernel::Ctx;

/// The mutant's `arch_tlbbatch_flush()`.
fn no_sync(_ctx: &Ctx) -> KFuture<'_, ()> {
    Box::pin(async {}) // missing: dsb(ish)
}

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-tlbbatch-no-batch-sync",
    description: "MUTANT: arm64-tlbbatch whose batch flush omits its DSB ISH: pages freed before their TLBIs complete",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: batch_search(crate::experiment_file!("experiments/seed001-explore.toml")),
    }),
    new: || Box::new(TlbBatch::with_flush(no_sync)),
};
