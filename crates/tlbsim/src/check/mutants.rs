//! Deliberately broken policies. Each must be caught by the checker; the
//! tests name the invariant each one breaks.

use crate::engine::exec::KFuture;
use crate::hw::mem::PAGE_SHIFT;
use crate::hw::tlb::MmId;
use crate::kernel::arm64::stock::{
    decided_flush_range, flush_range_ops, round_range, use_full_flush, Stock,
};
use crate::kernel::policy::TlbPolicy;
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;

/// `mutant-range-no-broadcast`: `flush_tlb_range` uses the local TLBI forms
/// and `DSB NSH`, so other CPUs keep stale entries (breaks "no stale use/hold").
#[derive(Debug, Clone, Copy)]
pub struct RangeNoBroadcast;

impl TlbPolicy for RangeNoBroadcast {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Stock.switch_mm(ctx, prev, next)
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
        let local = Box::pin(async { FlushScope::Local });
        decided_flush_range(ctx, mm, (start, end), stride, last_level, local)
    }
}

/// `mutant-free-before-sync`: when page-table pages were freed
/// (`!last_level`, or a whole-mm flush), the flush returns after issuing its
/// broadcast TLBIs but before `DSB ISH`, so the caller frees the pages while
/// walk caches may still point at them (breaks "no stale walk").
#[derive(Debug, Clone, Copy)]
pub struct FreeBeforeSync;

impl TlbPolicy for FreeBeforeSync {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Stock.switch_mm(ctx, prev, next)
    }
    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let asid = ctx.w.asid.asid_of(&ctx.w, mm);
            ctx.dsb_ishst().await;
            for a in crate::kernel::arm64::stock::twins(asid, ctx.w.kcfg.kpti) {
                ctx.tlbi(crate::hw::tlb::TlbiScope::Asid(a), true).await;
            }
            // missing: DSB ISH
        })
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
        Box::pin(async move {
            if last_level {
                return Stock
                    .flush_tlb_range(ctx, mm, start, end, stride, last_level)
                    .await;
            }
            let (start, end) = round_range(start, end, stride);
            if use_full_flush(ctx, start, end, stride) {
                return self.flush_tlb_mm(ctx, mm).await;
            }
            ctx.dsb_ishst().await;
            flush_range_ops(
                ctx,
                mm,
                start,
                (end - start) >> PAGE_SHIFT,
                stride,
                last_level,
                true,
            )
            .await;
            // missing: DSB ISH
        })
    }
}
