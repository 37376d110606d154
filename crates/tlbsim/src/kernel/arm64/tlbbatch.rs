//! `arm64-tlbbatch`: arm64 with reclaim's batched, deferred TLB flush as in
//! mainline since v6.16 (43b3dfdd0455 in v6.6, its race closed by
//! 4b634918384c; the hook then removed, a9e056de661c, v6.17, without
//! changing what runs). Each page reclaim unmaps gets its `TLBI VALE1IS`
//! at once and no `DSB ISH`; one `DSB ISH` completes the whole batch on
//! the reclaiming CPU (`__switch_to()`'s `DSB ISH` covers a task that
//! migrates in between). A path that finds a deferred flush of the mm
//! pending (`flush_tlb_batched_pending()`) flushes the mm (`flush_tlb_mm`):
//! its own DSB cannot complete another CPU's TLBIs. Everything else is
//! [`super::stock`].

use super::stock::Stock;
use super::tlbflush::__flush_tlb_page_nosync;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::mem::Pte;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, PolicyEntry, Search, Source, Strategy};
use crate::kernel::Ctx;

/// A hook of the batch: `arch_flush_tlb_batched_pending(mm)`.
pub type PendingHook = for<'a> fn(&'a Ctx, MmId) -> KFuture<'a, ()>;
/// A hook of the batch: `arch_tlbbatch_flush()`.
pub type FlushHook = for<'a> fn(&'a Ctx) -> KFuture<'a, ()>;
/// A hook of the batch: `pte_dirty()` of a PTE reclaim cleared.
pub type DirtyHook = fn(Pte) -> bool;

/// Stock arm64 with reclaim's batch; its hooks are the seams where
/// historical versions and mutants differ (each in its own file).
#[derive(Debug, Clone, Copy)]
pub struct TlbBatch {
    pending: PendingHook,
    flush: FlushHook,
    dirty: DirtyHook,
    /// Reclaim frees in batches of 31 (6.9+; mainline), or once per list.
    batch_free: bool,
}

impl Default for TlbBatch {
    /// Mainline.
    fn default() -> Self {
        Self {
            pending: |ctx, mm| Box::pin(crate::kernel::tlbflush::flush_tlb_mm(ctx, mm)),
            flush: |ctx| Box::pin(arch_tlbbatch_flush(ctx)),
            dirty: crate::kernel::policy::pte_dirty,
            batch_free: true,
        }
    }
}

impl TlbBatch {
    /// Mainline but for `arch_flush_tlb_batched_pending()`.
    pub fn with_pending(pending: PendingHook) -> Self {
        Self {
            pending,
            ..Self::default()
        }
    }

    /// The same, with reclaim freeing once per list (before 6.9).
    pub fn freeing_per_list(self) -> Self {
        Self {
            batch_free: false,
            ..self
        }
    }

    /// Mainline but for `arch_tlbbatch_flush()`.
    pub fn with_flush(flush: FlushHook) -> Self {
        Self {
            flush,
            ..Self::default()
        }
    }

    /// Mainline but for `pte_dirty()`.
    pub fn with_dirty(dirty: DirtyHook) -> Self {
        Self {
            dirty,
            ..Self::default()
        }
    }
}

/// The search that shows a broken version of the batch (historical or
/// mutant): 10,000 random schedules of `experiment` from seed 1, at most
/// 200,000 steps each (seed 001's explore experiments finish well within).
pub const fn batch_search(experiment: Source) -> Search {
    Search::Explore {
        experiment,
        strategy: Strategy::Random,
        schedules: 10_000,
        seed: 1,
        max_actions: 200_000,
        speculation: 2,
    }
}

/// `arch_tlbbatch_flush()`: `dsb(ish)`, completing this CPU's TLBIs.
pub async fn arch_tlbbatch_flush(ctx: &Ctx) {
    ctx.dsb_ish().await;
}

impl TlbPolicy for TlbBatch {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Stock.switch_mm(ctx, prev, next)
    }

    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Stock.flush_tlb_mm(ctx, mm)
    }

    fn flush_tlb_range<'a>(
        &'a self,
        ctx: &'a Ctx,
        mm: MmId,
        start: u64,
        end: u64,
        stride: u64,
        last_level: bool,
    ) -> KFuture<'a, ()> {
        Stock.flush_tlb_range(ctx, mm, start, end, stride, last_level)
    }

    /// Always (the REPEAT_TLBI erratum that turned it off before v7.0 is
    /// not modelled).
    fn arch_tlbbatch_should_defer(&self, _ctx: &Ctx, _mm: MmId) -> bool {
        true
    }

    fn arch_tlbbatch_add_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId, va: u64) -> KFuture<'a, ()> {
        // __flush_tlb_page_nosync()
        Box::pin(__flush_tlb_page_nosync(ctx, mm, va))
    }

    fn arch_tlbbatch_flush<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        (self.flush)(ctx)
    }

    fn reclaim_frees_in_batches(&self) -> bool {
        self.batch_free
    }

    fn arch_flush_tlb_batched_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        (self.pending)(ctx, mm)
    }

    fn pte_dirty(&self, pte: Pte) -> bool {
        (self.dirty)(pte)
    }
}

/// The registry entry of `arm64-tlbbatch`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-tlbbatch",
    description: "arm64 with reclaim's deferred flush, mainline (v6.16+): TLBI now, one DSB ISH per batch; a pending batch seen elsewhere costs flush_tlb_mm",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: None,
    new: || Box::new(TlbBatch::default()),
};
