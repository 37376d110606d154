//! `arm64-stock`: Linux's arm64 TLB maintenance (arch/arm64/include/asm/
//! tlbflush.h, v5.10+): every flush of a user address space is broadcast to
//! the inner-shareable domain and completed by `dsb(ish)`; `switch_mm` only
//! switches the ASID (`check_and_switch_context`).

use super::tlbflush::{__flush_tlb_range, flush_tlb_mm};
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, PolicyEntry};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;

/// The stock policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stock;

/// `switch_mm(prev, next)` (arch/arm64/include/asm/mmu_context.h): a new
/// ASID and TTBR0 only when the mm changes.
pub async fn switch_mm(ctx: &Ctx, prev: Option<MmId>, next: MmId) {
    let _f = ctx.func(crate::label!("switch_mm"));
    if prev != Some(next) {
        ctx.w.asid.check_and_switch_context(ctx, next).await;
    }
}

impl TlbPolicy for Stock {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Box::pin(switch_mm(ctx, prev, next))
    }

    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(flush_tlb_mm(ctx, mm, FlushScope::Broadcast))
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
            let flush = FlushScope::Broadcast;
            __flush_tlb_range(ctx, mm, (start, end), stride, last_level, flush).await;
        })
    }
}

/// The registry entry of `arm64-stock`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-stock",
    description: "Linux arm64 flush primitives: always broadcast (TLBI ...IS; DSB ISH)",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: None,
    new: || Box::new(Stock),
};
