//! `arm64-stock`: Linux's arm64 TLB maintenance (arch/arm64/include/asm/
//! tlbflush.h, v5.10+): every flush of a user address space is broadcast to
//! the inner-shareable domain and completed by `DSB ISH`; `switch_mm` only
//! switches the ASID (`check_and_switch_context`).

use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::mem::{PAGE_SHIFT, PTRS_PER_TABLE};
use crate::hw::tlb::{MmId, TlbiScope};
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, PolicyEntry};
use crate::kernel::tlbflush::{count_flush, FlushScope};
use crate::kernel::Ctx;

/// `MAX_TLBI_OPS`: above this many strides, flush the whole ASID (no range ops).
pub const MAX_TLBI_OPS: u64 = PTRS_PER_TABLE;
/// `MAX_TLBI_RANGE_PAGES = __TLBI_RANGE_PAGES(31, 3)`.
pub const MAX_TLBI_RANGE_PAGES: u64 = 32 << 16;

/// The stock policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stock;

/// `__flush_tlb_range_op`: the TLBIs covering `[start, start + pages)` with
/// `stride`, range ops where available, each also for the KPTI user twin.
/// Issues no barrier. `broadcast` picks the IS or the local form.
pub async fn flush_range_ops(
    ctx: &Ctx,
    mm: MmId,
    mut start: u64,
    mut pages: u64,
    stride: u64,
    last_level: bool,
    broadcast: bool,
) {
    let w = &ctx.w;
    let asid = w.asid.asid_of(w, mm);
    let range = w.profile.arm64().tlbirange;
    let kpti = w.kcfg.kpti;
    let mut scale = 0u32;
    while pages > 0 {
        if !range || pages % 2 == 1 {
            for a in twins(asid, kpti) {
                ctx.tlbi(
                    TlbiScope::Va {
                        asid: a,
                        va: start,
                        last_level,
                    },
                    broadcast,
                )
                .await;
            }
            start += stride;
            pages = pages.saturating_sub(stride >> PAGE_SHIFT);
            continue;
        }
        // __TLBI_RANGE_NUM(pages, scale)
        let num = ((pages >> (5 * scale + 1)) & 0x1f) as i64 - 1;
        if num >= 0 {
            let n = ((num as u64) + 1) << (5 * scale + 1);
            for a in twins(asid, kpti) {
                ctx.tlbi(
                    TlbiScope::Range {
                        asid: a,
                        va: start,
                        pages: n,
                        last_level,
                    },
                    broadcast,
                )
                .await;
            }
            start += n << PAGE_SHIFT;
            pages -= n;
        }
        scale += 1;
    }
}

/// The ASIDs a user TLBI is issued for: the ASID, plus its user twin under KPTI.
pub fn twins(asid: u16, kpti: bool) -> impl Iterator<Item = u16> {
    std::iter::once(asid).chain(kpti.then_some(asid | 1))
}

/// Should a range flush fall back to a whole-ASID flush?
pub fn use_full_flush(ctx: &Ctx, start: u64, end: u64, stride: u64) -> bool {
    let pages = (end - start) >> PAGE_SHIFT;
    (!ctx.w.profile.arm64().tlbirange && end - start >= MAX_TLBI_OPS * stride)
        || pages >= MAX_TLBI_RANGE_PAGES
}

/// Rounds `[start, end)` out to `stride`.
pub fn round_range(start: u64, end: u64, stride: u64) -> (u64, u64) {
    (start & !(stride - 1), end.div_ceil(stride) * stride)
}

/// `flush_tlb_mm` body for a decided scope: `DSB ST; TLBI ASIDE1[IS]` (and
/// the KPTI twin); `DSB ISH` or `DSB NSH`.
pub async fn flush_mm_as(ctx: &Ctx, mm: MmId, scope: FlushScope) {
    count_flush(ctx, scope);
    if scope == FlushScope::Skip {
        return;
    }
    let broadcast = scope == FlushScope::Broadcast;
    let w = &ctx.w;
    let asid = w.asid.asid_of(w, mm);
    ctx.dsb_ishst().await;
    for a in twins(asid, w.kcfg.kpti) {
        ctx.tlbi(TlbiScope::Asid(a), broadcast).await;
    }
    if broadcast {
        ctx.dsb_ish().await;
    } else {
        ctx.dsb_nsh().await;
    }
}

/// `__flush_tlb_range` body for a decided scope, on a range already rounded
/// to `stride` and small enough for per-stride (or range) TLBIs.
pub async fn flush_range_as(
    ctx: &Ctx,
    mm: MmId,
    (start, end): (u64, u64),
    stride: u64,
    last_level: bool,
    scope: FlushScope,
) {
    count_flush(ctx, scope);
    if scope == FlushScope::Skip {
        return;
    }
    let broadcast = scope == FlushScope::Broadcast;
    ctx.dsb_ishst().await;
    let pages = (end - start) >> PAGE_SHIFT;
    flush_range_ops(ctx, mm, start, pages, stride, last_level, broadcast).await;
    if broadcast {
        ctx.dsb_ish().await;
    } else {
        ctx.dsb_nsh().await;
    }
}

/// `flush_tlb_mm` of a policy that decides the scope of each flush:
/// awaits `decide`, then flushes the ASID with that scope.
pub fn decided_flush_mm<'a>(
    ctx: &'a Ctx,
    mm: MmId,
    decide: KFuture<'a, FlushScope>,
) -> KFuture<'a, ()> {
    Box::pin(async move {
        let scope = decide.await;
        flush_mm_as(ctx, mm, scope).await;
    })
}

/// `__flush_tlb_range` of a policy that decides the scope of each flush:
/// rounds the range, awaits `decide`, then flushes the range (or, above the
/// per-op limits, the whole ASID) with that scope.
pub fn decided_flush_range<'a>(
    ctx: &'a Ctx,
    mm: MmId,
    (start, end): (u64, u64),
    stride: u64,
    last_level: bool,
    decide: KFuture<'a, FlushScope>,
) -> KFuture<'a, ()> {
    Box::pin(async move {
        let range = round_range(start, end, stride);
        let scope = decide.await;
        if use_full_flush(ctx, range.0, range.1, stride) {
            flush_mm_as(ctx, mm, scope).await;
        } else {
            flush_range_as(ctx, mm, range, stride, last_level, scope).await;
        }
    })
}

impl TlbPolicy for Stock {
    fn arch(&self) -> crate::config::Arch {
        crate::config::Arch::Arm64
    }

    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            if prev != Some(next) {
                ctx.w.asid.check_and_switch_context(ctx, next).await;
            }
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
