//! `arm64-tlbbatch-6.6`: reclaim's deferred flush as merged in v6.6
//! (43b3dfdd0455, db6c1f6f236d) and shipped until v6.15 and the stable
//! kernels fixed by 4b634918384c (June 2025): as [`super::tlbbatch`], but
//! `arch_flush_tlb_batched_pending()` was a bare `DSB ISH`. A DSB
//! completes only the TLBIs of the CPU that executes it, so an mprotect,
//! munmap or madvise on another CPU that finds the reclaimer's flush
//! pending, and the PTE already clear, returns while the reclaimer's TLBI
//! may still be on its way: a translation the call should have removed can
//! outlive it. The fix's message calls the race theoretical, found by
//! review; the checker finds it (registry entry below). Its reclaim frees
//! once per list, as before 6.9 (bc2ff4cbc329).

use super::tlbbatch::{batch_search, TlbBatch};
use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry};
use crate::kernel::Ctx;

/// v6.6 `arch_flush_tlb_batched_pending()`: `dsb(ish)`.
pub fn arch_flush_tlb_batched_pending(ctx: &Ctx, _mm: MmId) -> KFuture<'_, ()> {
    Box::pin(async move {
        let _f = ctx.inline_func(crate::label!("arch_flush_tlb_batched_pending"));
        ctx.dsb_ish().await;
    })
}

/// The registry entry of `arm64-tlbbatch-6.6`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-tlbbatch-6.6",
    description: "arm64 deferred reclaim flush as in v6.6-v6.15, whose flush_tlb_batched_pending() ran only a DSB ISH (fixed by 4b634918384c)",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: batch_search(crate::experiment_file!("experiments/seed001-explore.toml")),
    }),
    new: || Box::new(TlbBatch::with_pending(arch_flush_tlb_batched_pending).freeing_per_list()),
};
