//! arm64 TLB maintenance primitives, as in arch/arm64/include/asm/tlbflush.h
//! (v5.10; `__flush_tlb_range_op` and `__flush_tlb_range_limit_excess` carry
//! the names later kernels gave the same code). Shareable sequences are
//! `dsb(ishst); tlbi ...is; dsb(ish)`, local ones `dsb(nshst); tlbi ...;
//! dsb(nsh)`. The local `flush_tlb_mm`/`__flush_tlb_range` forms and
//! `local_flush_tlb_asid` are seed 000's (`TLB_FLUSH_LOCAL`), which Linux
//! never merged.
//!
//! A policy decides where each flush goes (its `tlb_flush_check()`, or
//! always [`FlushScope::Broadcast`] for stock Linux) and passes the decision
//! here; these functions count it and issue the instructions.

use crate::config::Arm64FlushRangeLimit;
use crate::hw::mem::Granule;
use crate::hw::tlb::{Asid, MmId, TlbiScope};
use crate::kernel::tlbflush::{count_flush, FlushScope};
use crate::kernel::Ctx;

/// `MAX_TLBI_OPS` (`#define MAX_TLBI_OPS PTRS_PER_PTE`): from this many
/// strides on, a range flush without range ops flushes the whole ASID.
/// It follows the granule: 512 with 4 KiB pages, 8192 with 64 KiB pages.
pub const fn max_tlbi_ops(g: Granule) -> u64 {
    g.ptrs_per_pte()
}
/// `MAX_TLBI_RANGE_PAGES = __TLBI_RANGE_PAGES(31, 3)`.
pub const MAX_TLBI_RANGE_PAGES: u64 = 32 << 16;

/// The ASIDs a user TLBI is issued for: `__tlbi(op, asid)` and, under KPTI,
/// `__tlbi_user(op, asid)` for the user twin (`asid | 1`).
pub fn twins(asid: Asid, kpti: bool) -> impl Iterator<Item = Asid> {
    std::iter::once(asid).chain(kpti.then_some(asid | 1))
}

/// `__tlbi(aside1[is], asid); __tlbi_user(aside1[is], asid)`: the IS form
/// when `broadcast`. No barrier.
pub async fn __tlbi_aside1(ctx: &Ctx, asid: Asid, broadcast: bool) {
    for a in twins(asid, ctx.w.kcfg.kpti) {
        ctx.tlbi(TlbiScope::Asid(a), broadcast).await;
    }
}

/// `local_flush_tlb_all()`: `dsb(nshst); __tlbi(vmalle1); dsb(nsh); isb()`.
pub async fn local_flush_tlb_all(ctx: &Ctx) {
    let _f = ctx.inline_func(crate::label!("local_flush_tlb_all"));
    ctx.dsb_nshst().await;
    ctx.tlbi(TlbiScope::All, false).await;
    ctx.dsb_nsh().await;
    ctx.isb().await;
}

/// `local_flush_tlb_asid(asid)` (seed 000): `dsb(nshst); __tlbi(aside1);
/// __tlbi_user(aside1); dsb(nsh)`.
pub async fn local_flush_tlb_asid(ctx: &Ctx, asid: Asid) {
    ctx.dsb_nshst().await;
    __tlbi_aside1(ctx, asid, false).await;
    ctx.dsb_nsh().await;
}

/// `__flush_tlb_range_op()`: the TLBIs covering `[start, start + pages)`
/// with `stride`, range ops where available (`system_supports_tlb_range()`),
/// each also for the KPTI user twin. Issues no barrier. `broadcast` picks
/// the IS or the local form.
pub async fn __flush_tlb_range_op(
    ctx: &Ctx,
    mm: MmId,
    mut start: u64,
    mut pages: u64,
    stride: u64,
    last_level: bool,
    broadcast: bool,
) {
    let w = &ctx.w;
    let page_shift = w.granule.page_shift();
    let asid = w.asid.asid_of(w, mm);
    let range = w.profile.arm64().tlbirange;
    let kpti = w.kcfg.kpti;
    let mut scale = 0u32;
    while pages > 0 {
        if !range || pages % 2 == 1 {
            for a in twins(asid, kpti) {
                let va = TlbiScope::Va {
                    asid: a,
                    va: start,
                    last_level,
                };
                ctx.tlbi(va, broadcast).await;
            }
            start += stride;
            pages = pages.saturating_sub(stride >> page_shift);
            continue;
        }
        let num = __tlbi_range_num(pages, scale);
        if num >= 0 {
            let n = __tlbi_range_pages(num, scale);
            for a in twins(asid, kpti) {
                let op = __tlbi_vaddr_range(start >> page_shift, a, scale, num, w.granule);
                let range = TlbiScope::from_range_operand(op, page_shift, last_level);
                ctx.tlbi(range, broadcast).await;
            }
            start += n << page_shift;
            pages -= n;
        }
        scale += 1;
    }
}

/// `__TLBI_RANGE_NUM(pages, scale)` (5.10-6.8): the NUM operand for
/// `pages` at `scale`, -1 when that scale covers none of them.
pub fn __tlbi_range_num(pages: u64, scale: u32) -> i64 {
    ((pages >> (5 * scale + 1)) & 0x1f) as i64 - 1
}

/// `__TLBI_RANGE_PAGES(num, scale)`: the pages a range TLBI of `num` and
/// `scale` covers, `(num + 1) << (5 * scale + 1)`.
pub fn __tlbi_range_pages(num: i64, scale: u32) -> u64 {
    ((num + 1) as u64) << (5 * scale + 1)
}

/// `__TLBI_VADDR_RANGE(baddr, asid, scale, num, ttl)`: the 64-bit operand
/// of a range TLBI, the fields shifted into place without masks as Linux
/// does (BaseADDR masked to 37 bits; TTL 0: any level; TG the granule's,
/// `get_trans_granule()`). What the hardware does with it is
/// [`TlbiScope::from_range_operand`].
pub fn __tlbi_vaddr_range(baddr: u64, asid: Asid, scale: u32, num: i64, g: Granule) -> u64 {
    // TG for range operations: 0b01 4 KiB, 0b11 64 KiB.
    let tg: u64 = if g.page_shift() == 16 { 3 } else { 1 };
    (baddr & ((1 << 37) - 1))
        | (num as u64) << 39
        | u64::from(scale) << 44
        | tg << 46
        | u64::from(asid) << 48
}

/// `__flush_tlb_page_nosync(mm, uaddr)` (v6.6; in v6.15+
/// `__flush_tlb_range_nosync()` issues the same for one page): `dsb(ishst);
/// __tlbi(vale1is); __tlbi_user(vale1is)` and no `dsb(ish)`: the
/// invalidation is started, not completed (reclaim's
/// `arch_tlbbatch_add_pending()`).
pub async fn __flush_tlb_page_nosync(ctx: &Ctx, mm: MmId, va: u64) {
    ctx.dsb_ishst().await;
    let page_size = ctx.w.granule.page_size();
    __flush_tlb_range_op(ctx, mm, va, 1, page_size, true, true).await;
}

/// `MAX_TLB_RANGE` (Linux 4.1-4.19): `1024UL << PAGE_SHIFT` bytes.
pub const fn max_tlb_range(g: Granule) -> u64 {
    1024 << g.page_shift()
}

/// `__flush_tlb_range_limit_excess()`: should a range flush fall back to a
/// whole-ASID flush (too many per-stride TLBIs without FEAT_TLBIRANGE, or
/// more pages than range TLBIs cover)? Under `arm64_flush_range_limit =
/// "max-tlb-range"`, Linux 4.18's `(end - start) > MAX_TLB_RANGE` instead.
pub fn __flush_tlb_range_limit_excess(ctx: &Ctx, start: u64, end: u64, stride: u64) -> bool {
    let g = ctx.w.granule;
    if ctx.w.kcfg.arm64_flush_range_limit == Arm64FlushRangeLimit::MaxTlbRange {
        return end - start > max_tlb_range(g);
    }
    let pages = (end - start) >> g.page_shift();
    (!ctx.w.profile.arm64().tlbirange && end - start >= max_tlbi_ops(g) * stride)
        || pages >= MAX_TLBI_RANGE_PAGES
}

/// `start = round_down(start, stride); end = round_up(end, stride)`.
pub fn round_range(start: u64, end: u64, stride: u64) -> (u64, u64) {
    (start & !(stride - 1), end.div_ceil(stride) * stride)
}

/// `flush_tlb_mm(mm)` once the policy has decided `flush`: stock Linux's
/// `dsb(ishst); __tlbi(aside1is); __tlbi_user(aside1is); dsb(ish)` for
/// [`FlushScope::Broadcast`]; seed 000's `local_flush_tlb_asid()` for
/// `Local`; nothing for `Skip`.
pub async fn flush_tlb_mm(ctx: &Ctx, mm: MmId, flush: FlushScope) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_mm"));
    count_flush(ctx, flush);
    let asid = ctx.w.asid.asid_of(&ctx.w, mm);
    match flush {
        FlushScope::Skip => {}
        FlushScope::Local => local_flush_tlb_asid(ctx, asid).await,
        FlushScope::Broadcast => {
            ctx.dsb_ishst().await;
            __tlbi_aside1(ctx, asid, true).await;
            ctx.dsb_ish().await;
        }
    }
}

/// `__flush_tlb_range(vma, start, end, stride, last_level)` once the policy
/// has decided `flush`: rounds the range to `stride`; above the per-op
/// limits flushes the whole ASID ([`flush_tlb_mm`]); else `dsb(ishst)`,
/// [`__flush_tlb_range_op`] (IS forms), `dsb(ish)` — or, for seed 000's
/// `Local`, `dsb(nshst)`, the local forms, `dsb(nsh)`.
pub async fn __flush_tlb_range(
    ctx: &Ctx,
    mm: MmId,
    (start, end): (u64, u64),
    stride: u64,
    last_level: bool,
    flush: FlushScope,
) {
    let _f = ctx.inline_func(crate::label!("__flush_tlb_range"));
    // Linux 4.1-4.19's __flush_tlb_range() had no stride: one TLBI per
    // base page.
    let stride = match ctx.w.kcfg.arm64_flush_range_limit {
        Arm64FlushRangeLimit::MaxTlbiOps => stride,
        Arm64FlushRangeLimit::MaxTlbRange => ctx.w.granule.page_size(),
    };
    let (start, end) = round_range(start, end, stride);
    if __flush_tlb_range_limit_excess(ctx, start, end, stride) {
        return flush_tlb_mm(ctx, mm, flush).await;
    }
    count_flush(ctx, flush);
    let pages = (end - start) >> ctx.w.granule.page_shift();
    match flush {
        FlushScope::Skip => {}
        FlushScope::Local => {
            ctx.dsb_nshst().await;
            __flush_tlb_range_op(ctx, mm, start, pages, stride, last_level, false).await;
            ctx.dsb_nsh().await;
        }
        FlushScope::Broadcast => {
            ctx.dsb_ishst().await;
            __flush_tlb_range_op(ctx, mm, start, pages, stride, last_level, true).await;
            ctx.dsb_ish().await;
        }
    }
}

/// The `flush_tlb_mm()` and `__flush_tlb_range()` of a policy in the shape
/// of seed 000's patch: each asks the policy's own `tlb_flush_check(ctx,
/// mm)` where the flush goes (`FlushScope`), then runs the primitive there.
/// Expands inside an `impl TlbPolicy` whose type has that method.
macro_rules! flush_after_tlb_flush_check {
    () => {
        fn flush_tlb_mm<'a>(
            &'a self,
            ctx: &'a $crate::kernel::Ctx,
            mm: $crate::hw::tlb::MmId,
        ) -> $crate::engine::exec::KFuture<'a, ()> {
            Box::pin(async move {
                let flush = self.tlb_flush_check(ctx, mm).await;
                $crate::kernel::arm64::tlbflush::flush_tlb_mm(ctx, mm, flush).await;
            })
        }

        fn flush_tlb_range<'a>(
            &'a self,
            ctx: &'a $crate::kernel::Ctx,
            mm: $crate::hw::tlb::MmId,
            start: u64,
            end: u64,
            stride: u64,
            last_level: bool,
        ) -> $crate::engine::exec::KFuture<'a, ()> {
            Box::pin(async move {
                let flush = self.tlb_flush_check(ctx, mm).await;
                let range = (start, end);
                $crate::kernel::arm64::tlbflush::__flush_tlb_range(
                    ctx, mm, range, stride, last_level, flush,
                )
                .await;
            })
        }
    };
}
pub(crate) use flush_after_tlb_flush_check;

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(start_page: u64, asid: Asid, scale: u32, num: i64, g: Granule) -> TlbiScope {
        let op = __tlbi_vaddr_range(start_page, asid, scale, num, g);
        TlbiScope::from_range_operand(op, g.page_shift(), true)
    }

    #[test]
    fn a_range_operand_carries_what_scale_and_num_encode() {
        for g in [Granule::K4, Granule::K64] {
            for scale in 0..4 {
                for num in 0..32 {
                    let want = TlbiScope::Range {
                        asid: 0x1234,
                        va: 0x7f_1234 << g.page_shift(),
                        pages: __tlbi_range_pages(num, scale),
                        last_level: true,
                    };
                    assert_eq!(decoded(0x7f_1234, 0x1234, scale, num, g), want);
                }
            }
        }
    }

    #[test]
    fn operands_out_of_range_spill_into_the_next_field() {
        // NUM 32 does not fit its 5 bits: it becomes NUM 0 and SCALE + 1,
        // 64 pages where the kernel counted 66.
        let TlbiScope::Range { pages, .. } = decoded(0, 1, 0, 32, Granule::K4) else {
            panic!("a range");
        };
        assert_eq!((pages, __tlbi_range_pages(32, 0)), (64, 66));
        // __TLBI_RANGE_NUM cannot give NUM 31 at SCALE 3 for exactly
        // MAX_TLBI_RANGE_PAGES (CVE-2024-35980, fixed in 6.9 by
        // e3ba51ab24fd); a stage-1 flush of that many pages falls back to
        // flushing the ASID (__flush_tlb_range_limit_excess, `>=`).
        assert_eq!(__tlbi_range_num(MAX_TLBI_RANGE_PAGES, 3), -1);
        assert_eq!(__tlbi_range_pages(31, 3), MAX_TLBI_RANGE_PAGES);
    }
}
