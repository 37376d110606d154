//! `madvise()` (mm/madvise.c). `MADV_DONTNEED` zaps a range's PTEs and
//! keeps its VMAs and page tables ([`sys_madvise_dontneed`]).
//! `MADV_PAGEOUT` (Linux 5.4+): reclaims the pages
//! of a range that only the calling address space maps, at once, whatever
//! their age. `madvise(MADV_FREE)` (4.5+): lets reclaim drop the range's
//! private pages without writing them, unless they are written again. `madvise(MADV_COLD)` (5.4+): makes them the next ones
//! reclaim takes (`folio_deactivate()`), after marking their PTEs old and
//! flushing those translations, so that a later access is seen.
//!
//! Shared (shmem) and private anonymous pages are paged out; the zero
//! page, transparent huge pages and pages mapped by more than one PTE are
//! skipped.

use super::anon::{delete_from_swap_cache, free_swap_and_cache};
use super::mmap::page_align;
use super::mmu_gather::MmuGather;
use super::pgtable::{present_ptes, pte_tables, set_pte, set_swap_pte, swp_entries};
use super::tlbbatch::flush_tlb_batched_pending;
use super::vmscan::{reclaim_pages, Isolated};
use crate::hw::mem::{Perms, SwpEntry, ZERO_PFN};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::{Ctx, Vma};

/// The `madvise()` advice modelled here besides `MADV_DONTNEED`
/// ([`sys_madvise_dontneed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Advice {
    /// `MADV_PAGEOUT`.
    Pageout,
    /// `MADV_COLD`.
    Cold,
    /// `MADV_FREE`.
    Free,
}

/// `do_madvise()` for the advice that walks the range's PTE tables under
/// the mmap_lock for reading (`madvise_walk_vmas()`).
async fn do_madvise(ctx: &Ctx, addr: u64, len: u64, advice: Advice) {
    let _f = ctx.func(crate::label!("do_madvise"));
    syscall_enter(ctx, "madvise").await;
    let mm = ctx.mm().expect("user task");
    let end = addr.saturating_add(ctx.w.granule.page_align(len));
    ctx.mmap_read_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.madvise_ns).await;
    match advice {
        Advice::Pageout => madvise_pageout(ctx, mm, addr, end).await,
        Advice::Cold => madvise_cold(ctx, mm, addr, end).await,
        Advice::Free => madvise_free(ctx, mm, addr, end).await,
    }
    ctx.mmap_read_unlock(mm).await;
    syscall_exit(ctx, "madvise").await;
}

/// `madvise(addr, len, MADV_PAGEOUT)`: per VMA of the range, per PTE
/// table, isolates the folios it may reclaim under the table's lock
/// (`madvise_pageout_pte_range`), then reclaims them with the lock
/// dropped, as `madvise_cold_or_pageout_pte_range()` does.
pub async fn sys_madvise_pageout(ctx: &Ctx, addr: u64, len: u64) {
    do_madvise(ctx, addr, len, Advice::Pageout).await;
}

async fn madvise_pageout(ctx: &Ctx, mm: MmId, addr: u64, end: u64) {
    for (_, tlo, thi) in table_ranges(ctx, mm, addr, end) {
        let isolated = madvise_pageout_pte_range(ctx, mm, tlo, thi).await;
        if !isolated.is_empty() {
            reclaim_pages(ctx, &isolated).await;
        }
    }
}

/// The parts of `[addr, end)` inside one VMA and one PTE table each, with
/// their VMA, in address order (`walk_page_range()` as madvise uses it);
/// the VMAs cannot change while the caller holds the mmap_lock.
fn table_ranges(ctx: &Ctx, mm: MmId, addr: u64, end: u64) -> Vec<(Vma, u64, u64)> {
    let vmas: Vec<Vma> = ctx.w.k.borrow().mms[mm]
        .vmas
        .values()
        .filter(|v| v.start < end && v.end > addr)
        .copied()
        .collect();
    let span = ctx.w.granule.pmd_size();
    let mut out = Vec::new();
    for v in vmas {
        let (lo, hi) = (addr.max(v.start), end.min(v.end));
        for table_va in pte_tables(&ctx.w, mm, lo, hi) {
            out.push((v, lo.max(table_va), hi.min(table_va + span)));
        }
    }
    out
}

/// `madvise(addr, len, MADV_COLD)`: per PTE table of the range, under its
/// lock, each present page that only this PTE maps (not the zero page)
/// has its PTE made old and its translation queued for the flush
/// (`ptep_get_and_clear_full()`, `pte_mkold()`, `tlb_remove_tlb_entry()`;
/// the model has no access flag, so every mapped PTE counts as young and
/// keeps its value), and a shmem folio moves to where reclaim looks first
/// (`folio_deactivate()`: the head of the model's one list). The range's
/// translations are flushed once at the end (`tlb_finish_mmu()`).
pub async fn sys_madvise_cold(ctx: &Ctx, addr: u64, len: u64) {
    do_madvise(ctx, addr, len, Advice::Cold).await;
}

async fn madvise_cold(ctx: &Ctx, mm: MmId, addr: u64, end: u64) {
    let mut tlb = MmuGather::begin(ctx, mm, false).await;
    for (_, tlo, thi) in table_ranges(ctx, mm, addr, end) {
        madvise_cold_pte_range(ctx, mm, &mut tlb, tlo, thi).await;
    }
    tlb.finish(ctx).await;
}

/// `madvise_cold_or_pageout_pte_range()` for cold, over `[lo, hi)` inside
/// one PTE table (see [`sys_madvise_cold`]).
async fn madvise_cold_pte_range(ctx: &Ctx, mm: MmId, tlb: &mut MmuGather, lo: u64, hi: u64) {
    let _f = ctx.func(crate::label!("madvise_cold_or_pageout_pte_range"));
    let w = &ctx.w;
    ctx.ptl_lock(mm, lo).await;
    flush_tlb_batched_pending(ctx, mm).await;
    let ptes = present_ptes(w, mm, lo, hi);
    let mut old = 0;
    for &(va, p) in &ptes {
        let refs = w.hw.borrow().mem.frame_refs(p.pfn);
        let mut k = w.k.borrow_mut();
        let folio = k.folios.get(&p.pfn).copied();
        // folio_mapcount() == 1: the PTE's reference, and the page cache's
        // for a shmem folio.
        let alone = refs == 1 + folio.map_or(0, |f| f.cache_refs());
        if p.pfn == ZERO_PFN || !alone {
            continue;
        }
        tlb.remove_tlb_entry(va);
        old += 1;
        if folio.is_some_and(|f| !f.isolated) {
            // folio_deactivate(): reclaim takes it next.
            k.folios.deactivate(p.pfn);
        }
    }
    ctx.work(w.profile.kernel.pte_update_ns * old).await;
    ctx.ptl_unlock(mm, lo).await;
}

/// `madvise_cold_or_pageout_pte_range()` for pageout, over `[lo, hi)`
/// inside one PTE table: under the table's lock, isolates each present
/// page that is a folio mapped by this PTE alone (`folio_mapcount() ==
/// 1`) and not already isolated.
async fn madvise_pageout_pte_range(ctx: &Ctx, mm: MmId, lo: u64, hi: u64) -> Vec<Isolated> {
    let _f = ctx.func(crate::label!("madvise_cold_or_pageout_pte_range"));
    let w = &ctx.w;
    ctx.ptl_lock(mm, lo).await;
    flush_tlb_batched_pending(ctx, mm).await;
    let ptes = present_ptes(w, mm, lo, hi);
    let mut out = Vec::new();
    {
        let mut k = w.k.borrow_mut();
        let hw = w.hw.borrow();
        for &(va, p) in &ptes {
            // This PTE's reference and its cache's: mapped here alone
            // (not the zero page, not shared with a fork).
            let alone = |f: &super::folio::Folio| hw.mem.frame_refs(p.pfn) == 1 + f.cache_refs();
            if p.pfn == ZERO_PFN || !k.folios.get(&p.pfn).is_some_and(alone) {
                continue;
            }
            if k.folios.isolate(p.pfn) {
                out.push(Isolated {
                    pfn: p.pfn,
                    found_at: (mm, va),
                });
            }
        }
    }
    // folio_isolate_lru() takes a reference: the folio cannot be freed
    // (and its frame reused) while reclaim holds it.
    for f in &out {
        w.hw.borrow_mut().mem.get_frame(f.pfn);
    }
    ctx.work(w.profile.kernel.pte_update_ns * ptes.len() as u64)
        .await;
    ctx.ptl_unlock(mm, lo).await;
    out
}

/// `madvise(addr, len, MADV_FREE)` (mm/madvise.c, 4.5+): the private
/// anonymous pages of the range may be dropped instead of swapped if
/// nobody writes them again. Per PTE table, under its lock, after
/// `flush_tlb_batched_pending()` (`madvise_free_pte_range()`); the
/// translations it changed are flushed once at the end
/// (`tlb_finish_mmu()`, which flushes the whole range if another gather
/// of the mm ran meanwhile: 99baac21e458, v4.13). File-backed VMAs
/// (shared or a private file mapping) are left alone (Linux fails them
/// with `EINVAL`: `!vma_is_anonymous()`).
pub async fn sys_madvise_free(ctx: &Ctx, addr: u64, len: u64) {
    do_madvise(ctx, addr, len, Advice::Free).await;
}

async fn madvise_free(ctx: &Ctx, mm: MmId, addr: u64, end: u64) {
    let mut tlb = MmuGather::begin(ctx, mm, false).await;
    for (v, tlo, thi) in table_ranges(ctx, mm, addr, end) {
        if !v.file_backed() {
            madvise_free_pte_range(ctx, mm, &mut tlb, tlo, thi).await;
        }
    }
    tlb.finish(ctx).await;
}

/// `madvise_free_pte_range()` over `[lo, hi)` inside one PTE table: swap
/// entries are dropped (`free_swap_and_cache()`: the data is not
/// wanted); each present page that is an anonymous folio only this PTE
/// maps leaves the swap cache (unless a swap entry elsewhere still
/// refers to its slot: then it is skipped) and is marked clean
/// (`folio_free_swap()`, `folio_clear_dirty()`), its PTE made clean and old
/// (`ptep_get_and_clear_full()`, `pte_mkold(pte_mkclean())`, read-only in
/// the model, where dirty is writable) with its translation queued for
/// the gather's flush (`tlb_remove_tlb_entry()`: every mapped PTE counts
/// as young), and the folio is made lazily freeable
/// (`folio_mark_lazyfree()`: no longer swap-backed, youngest on the
/// list).
async fn madvise_free_pte_range(ctx: &Ctx, mm: MmId, tlb: &mut MmuGather, lo: u64, hi: u64) {
    let _f = ctx.func(crate::label!("madvise_free_pte_range"));
    let w = &ctx.w;
    let cpu = ctx.cpu();
    ctx.ptl_lock(mm, lo).await;
    flush_tlb_batched_pending(ctx, mm).await;
    // Migration entries are left as they are.
    let mut swapped = 0;
    for (va, e) in swp_entries(w, mm, lo, hi) {
        if let SwpEntry::Swap(slot) = e {
            set_swap_pte(w, mm, va, None);
            free_swap_and_cache(w, cpu, slot, mm, va);
            swapped += 1;
        }
    }
    let ptes = present_ptes(w, mm, lo, hi);
    let mut changed = 0;
    for &(va, p) in &ptes {
        let refs = w.hw.borrow().mem.frame_refs(p.pfn);
        let folio = w.k.borrow().folios.get(&p.pfn).copied();
        let Some(f) = folio.filter(|f| f.anon() && refs == 1 + f.cache_refs()) else {
            continue; // the zero page, a huge page's part, or shared
        };
        if let Some(slot) = f.swap {
            // folio_free_swap() fails while a swap entry elsewhere (a
            // fork's) still refers to the slot: the page is left alone.
            if w.k.borrow().swap.refs(slot) > 1 {
                continue;
            }
            // Only this PTE and the cache hold it: its lock is free.
            delete_from_swap_cache(w, p.pfn);
            w.put_frame(cpu, p.pfn, mm, va);
        }
        if p.perms.write() {
            let clean = Perms(p.perms.0 & !(Perms::RW.0 & !Perms::R.0));
            set_pte(w, cpu, mm, va, Some((p.pfn, clean)));
        }
        tlb.remove_tlb_entry(va);
        changed += 1;
        let mut k = w.k.borrow_mut();
        let x = k.folios.get_mut(&p.pfn).expect("read above");
        x.dirty = false;
        x.lazyfree = true;
        if !x.isolated {
            k.folios.putback(p.pfn);
        }
    }
    ctx.work(w.profile.kernel.pte_update_ns * (changed + swapped))
        .await;
    ctx.ptl_unlock(mm, lo).await;
}

/// `madvise(addr, len, MADV_DONTNEED)`: zaps PTEs, keeps VMAs and tables.
pub async fn sys_madvise_dontneed(ctx: &Ctx, addr: u64, len: u64) {
    let _f = ctx.func(crate::label!("do_madvise"));
    syscall_enter(ctx, "madvise").await;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    ctx.mmap_read_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.madvise_ns).await;
    let mut g = MmuGather::begin(ctx, mm, false).await;
    g.zap(ctx, addr, end).await;
    if ctx.w.kcfg.pt_reclaim {
        g.reclaim_empty_pte_tables(ctx, addr, end).await;
    }
    if ctx.w.kcfg.zap_flush_always {
        // Linux 4.14-4.18: flush_tlb_range() per VMA inside zap_page_range().
        let page_size = ctx.w.granule.page_size();
        flush_tlb_range(ctx, mm, addr, end, page_size, true).await;
    }
    g.finish(ctx).await;
    ctx.mmap_read_unlock(mm).await;
    syscall_exit(ctx, "madvise").await;
}
