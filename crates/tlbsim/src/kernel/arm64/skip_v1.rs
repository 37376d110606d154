//! `arm64-skip-broadcast-v1`: seed 000's first posting. The flush is local
//! when the caller is the mm's only user (`current->mm == mm &&
//! atomic_read(&mm->mm_users) <= 1`); every other CPU is then marked stale
//! in `mm_cpumask` and flushes the ASID locally when it next switches to the
//! mm. v1 has no active-CPU count and no per-CPU lazy state: `switch_mm` is
//! the stock one (it does nothing when `prev == next`), and lazy CPUs keep
//! the user TTBR0. Reconstructed from the v2 posting and the reference's
//! description of v1 (docs/model.md).

use super::skip_v2::flush_if_stale;
use super::stock::{flush_mm_as, flush_range_as, round_range, use_full_flush, FlushScope, Stock};
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::Ctx;

/// The v1 policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct SkipV1;

impl SkipV1 {
    async fn check(&self, ctx: &Ctx, mm: MmId) -> FlushScope {
        let w = &ctx.w;
        let cpu = ctx.cpu();
        ctx.atomic().await; // atomic_read(&mm->mm_users)
        let single = {
            let k = w.k.borrow();
            k.tasks[ctx.task].mm == Some(mm) && k.mms[mm as usize].users <= 1
        };
        if !single {
            return FlushScope::Broadcast;
        }
        ctx.atomic().await; // mark every other CPU stale
        let mut k = w.k.borrow_mut();
        let m = &mut k.mms[mm as usize].cpumask;
        m.set_all();
        m.clear(cpu);
        FlushScope::Local
    }
}

impl TlbPolicy for SkipV1 {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Stock.switch_mm(ctx, prev, next)
    }

    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(flush_if_stale(ctx, mm))
    }

    fn on_new_context(&self, w: &crate::kernel::World, mm: MmId) {
        w.k.borrow_mut().mms[mm as usize].cpumask.clear_all();
    }

    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let scope = self.check(ctx, mm).await;
            flush_mm_as(ctx, mm, scope).await;
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
            let range = round_range(start, end, stride);
            if use_full_flush(ctx, range.0, range.1, stride) {
                return self.flush_tlb_mm(ctx, mm).await;
            }
            let scope = self.check(ctx, mm).await;
            flush_range_as(ctx, mm, range, stride, last_level, scope).await;
        })
    }
}
