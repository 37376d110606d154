//! `mutant-tlbbatch-no-pending-flush`: `arm64-tlbbatch` whose
//! `flush_tlb_batched_pending()` flushes nothing, as if its calls were
//! missing (Linux before 3ea277194daa, v4.13, had none: an mprotect or
//! munmap that found a PTE already cleared by reclaim, its flush still
//! deferred, returned with the translation live on other CPUs).

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::arm64::tlbbatch::{batch_search, TlbBatch};
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry};
use crate::kernel::Ctx;

/// The mutant's `arch_flush_tlb_batched_pending()`.
fn no_flush(_ctx: &Ctx, _mm: MmId) -> KFuture<'_, ()> {
    Box::pin(async {}) // missing: flush_tlb_mm(mm)
}

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-tlbbatch-no-pending-flush",
    description: "MUTANT: arm64-tlbbatch whose flush_tlb_batched_pending() flushes nothing",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: batch_search(crate::experiment_file!("experiments/seed001-explore.toml")),
    }),
    new: || Box::new(TlbBatch::with_pending(no_flush)),
};
