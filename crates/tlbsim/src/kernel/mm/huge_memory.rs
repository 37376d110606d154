//! Transparent huge pages (mm/huge_memory.c): the anonymous huge-page
//! fault, the huge zero page, a write to it (Linux 3.8-5.7's copy), and
//! splitting a huge PMD into a PTE table.

use super::mmap::find_vma;
use super::pgtable::{huge_leaves, pmd_none, set_huge, set_pte};
use crate::hw::mem::{Perms, Pte, ZERO_PFN};
use crate::hw::tlb::MmId;
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::{Ctx, Vma};

/// `__split_huge_pmd()` of the anonymous huge page at `base`, under its
/// PMD lock: the PMD is invalidated and the 2 MiB flushed
/// (`pmdp_invalidate`), then a PTE table maps the same 512 frames with the
/// same permissions. The huge zero page is split into 512 read-only
/// PTEs of the 4 KiB zero page (`__split_huge_zero_page_pmd()`, whose
/// `pmdp_huge_clear_flush()` flushes the same 2 MiB). Callers then work
/// on 4 KiB PTEs. A file VMA's PMD (a page-cache folio) is cleared and
/// flushed without a PTE table in its place
/// (`filemap::split_file_pmd_locked()`).
pub async fn split_huge_pmd(ctx: &Ctx, mm: MmId, base: u64) {
    let _f = ctx.func(crate::label!("__split_huge_pmd"));
    let w = &ctx.w;
    let g = w.granule;
    ctx.ptl_lock(mm, base).await;
    let file = find_vma(w, mm, base).is_some_and(|v| v.file_backed());
    if let Some(&(_, p)) = huge_leaves(w, mm, base, base + g.pmd_size()).first() {
        w.stats.borrow_mut().thp_split_pmd += 1;
        if file {
            super::filemap::split_file_pmd_locked(ctx, mm, base, p.pfn).await;
            ctx.ptl_unlock(mm, base).await;
            return;
        }
        set_huge(w, ctx.cpu(), mm, base, None);
        flush_tlb_range(ctx, mm, base, base + g.pmd_size(), g.pmd_size(), true).await;
        let cpu = ctx.cpu();
        let zero = w.hw.borrow().mem.is_huge_zero_pfn(p.pfn);
        let mut tables = 0;
        for i in 0..g.hpage_pmd_nr() {
            let new = if zero {
                (ZERO_PFN, Perms::R)
            } else {
                (p.pfn + i, p.perms)
            };
            let (_, t) = set_pte(w, cpu, mm, base + i * g.page_size(), Some(new));
            tables += t;
        }
        ctx.work(
            w.profile.kernel.pte_update_ns * g.hpage_pmd_nr()
                + w.profile.kernel.page_alloc_ns * u64::from(tables),
        )
        .await;
        if zero {
            // __split_huge_zero_page_pmd(): the PTEs map the 4 KiB zero
            // page; the huge one loses this mapping's reference.
            put_huge_zero_page(w, mm, base);
        }
    }
    ctx.ptl_unlock(mm, base).await;
}

/// Splits every huge page of `mm` overlapping `[start, end)` (callers that
/// only handle 4 KiB PTEs: mprotect and fork; docs/model.md).
pub(crate) async fn split_huge_range(ctx: &Ctx, mm: MmId, start: u64, end: u64) {
    for (base, _) in huge_leaves(&ctx.w, mm, start, end) {
        split_huge_pmd(ctx, mm, base).await;
    }
}

/// `do_huge_pmd_anonymous_page()`: allocate, clear and map 2 MiB; back off
/// if the PMD was filled meanwhile (the retry then faults the 4 KiB way or
/// finds the page). A read fault maps the huge zero page instead where
/// it is on ([`set_huge_zero_page`]), and allocates like a write with
/// `thp_huge_zero_page = "alloc-on-read"`.
pub(super) async fn do_huge_pmd_anonymous_page(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) {
    let _f = ctx.func(crate::label!("do_huge_pmd_anonymous_page"));
    let w = &ctx.w;
    let base = va & !(w.granule.pmd_size() - 1);
    if !write && w.kcfg.thp_huge_zero_page.maps_huge_zero_page() {
        set_huge_zero_page(ctx, mm, base).await;
        return;
    }
    let cost = w.profile.kernel.thp_fault_ns.unwrap_or(0);
    ctx.work(cost).await;
    let pfn = w.hw.borrow_mut().mem.alloc_huge();
    ctx.ptl_lock(mm, base).await;
    if pmd_none(w, mm, base) {
        w.stats.borrow_mut().thp_fault_alloc += 1;
        let (_, tables) = set_huge(w, ctx.cpu(), mm, base, Some((pfn, v.perms)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    } else {
        w.put_huge(ctx.cpu(), pfn, mm, base);
    }
    ctx.ptl_unlock(mm, base).await;
}

/// The read-fault branch of `do_huge_pmd_anonymous_page()` with
/// `transparent_hugepage/use_zero_page` (Linux 3.8+): under the PMD lock,
/// if the PMD is still empty, map the huge zero page read-only at it
/// (`mm_get_huge_zero_page()`, `set_huge_zero_page()`). Nothing is
/// allocated or cleared: the fault costs `page_fault_ns` plus any upper
/// table it allocates (the deposited PTE table is not modelled, as for
/// a THP).
async fn set_huge_zero_page(ctx: &Ctx, mm: MmId, base: u64) {
    let w = &ctx.w;
    let zero = w.hw.borrow_mut().mem.get_huge_zero_page();
    ctx.ptl_lock(mm, base).await;
    if pmd_none(w, mm, base) {
        let (_, tables) = set_huge(w, ctx.cpu(), mm, base, Some((zero, Perms::R)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    } else {
        put_huge_zero_page(w, mm, base);
    }
    ctx.ptl_unlock(mm, base).await;
}

/// `put_huge_zero_page()` for the mapping of `mm` at `base` that is gone
/// (its TLB entries flushed, since aa88b68c3b1d; see [`shrink_huge_zero_page`]).
pub(crate) fn put_huge_zero_page(w: &crate::kernel::World, mm: MmId, base: u64) {
    w.hw.borrow_mut().mem.put_huge_zero_page();
    *w.k.borrow_mut().huge_zero_last_unmap = Some((mm, base));
}

/// The huge zero page's shrinker (`shrink_huge_zero_page_scan()`, run by
/// reclaim's `shrink_slab()`) with `[kernel] huge_zero_shrinker`: frees
/// the page when no mapping holds a reference (`huge_zero_refcount` back
/// to 1). The free is reported under the mm and address it was last
/// unmapped at. Linux 3.8-4.8 count a reference per mapping; 4.9+
/// (6fcb52a56ff6) one per mm until it exits, which the model does not
/// have.
pub(crate) async fn shrink_huge_zero_page(ctx: &Ctx) {
    let w = &ctx.w;
    if !w.kcfg.huge_zero_shrinker {
        return;
    }
    let _f = ctx.func(crate::label!("shrink_huge_zero_page_scan"));
    // atomic_cmpxchg(&huge_zero_refcount, 1, 0)
    let taken = ctx
        .cmpxchg(|| w.hw.borrow_mut().mem.shrink_huge_zero_page())
        .await;
    let Some(pfn) = taken else {
        return;
    };
    let (mm, va) =
        w.k.borrow()
            .huge_zero_last_unmap
            .unwrap_or((MmId::new(0), 0));
    w.put_huge(ctx.cpu(), pfn, mm, va);
}

/// `do_huge_pmd_wp_page()`'s `alloc:` path for the huge zero page (Linux
/// 3.8-5.7, here as in 4.14): allocate and clear a huge page
/// (`thp_fault_ns`), then under the PMD lock, if the PMD is still
/// `orig` (`pmd_same()`), clear it and flush its 2 MiB
/// (`pmdp_huge_clear_flush_notify()` → `flush_tlb_range(vma, haddr,
/// haddr + HPAGE_PMD_SIZE)`) and map the new page writable; otherwise
/// free the new page (the retry finds whatever is there).
pub(super) async fn do_huge_pmd_wp_zero_alloc(ctx: &Ctx, mm: MmId, v: &Vma, base: u64, orig: Pte) {
    let _f = ctx.func(crate::label!("do_huge_pmd_wp_page"));
    let w = &ctx.w;
    ctx.work(w.profile.kernel.thp_fault_ns.unwrap_or(0)).await;
    let pfn = w.hw.borrow_mut().mem.alloc_huge();
    ctx.ptl_lock(mm, base).await;
    let pmd_size = w.granule.pmd_size();
    let same = huge_leaves(w, mm, base, base + pmd_size)
        .first()
        .map(|&(_, p)| p)
        == Some(orig);
    if same {
        w.stats.borrow_mut().thp_fault_alloc += 1;
        set_huge(w, ctx.cpu(), mm, base, None);
        flush_tlb_range(ctx, mm, base, base + pmd_size, pmd_size, true).await;
        set_huge(w, ctx.cpu(), mm, base, Some((pfn, v.perms)));
        put_huge_zero_page(w, mm, base);
    } else {
        w.put_huge(ctx.cpu(), pfn, mm, base);
    }
    ctx.ptl_unlock(mm, base).await;
}

/// Would a fault at `va` in `v` map a transparent huge page (a write
/// fault) or the huge zero page (a read fault, when it is on)? With
/// `thp = "always"`, when the aligned `PMD_SIZE` around `va` (2 MiB, or
/// 512 MiB with 64 KiB pages) lies inside the VMA and no PTE table (or
/// huge page) is there yet (`pmd_none`).
pub(super) fn thp_fits(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) -> bool {
    let pmd_size = ctx.w.granule.pmd_size();
    let base = va & !(pmd_size - 1);
    ctx.w.kcfg.thp == crate::config::Thp::Always
        && !v.file_backed()
        && base >= v.start
        && base + pmd_size <= v.end
        && pmd_none(&ctx.w, mm, base)
}
