//! `mremap(2)` moving a mapping (mm/mremap.c): the VMA is copied to a new
//! place, every PTE is moved there under the old and the new PTE table's
//! locks (`move_ptes()`), and the old range is unmapped.
//!
//! Where the move flushes the old translations is what Linux got wrong
//! for two years. Since 4.19 (eb66ae030829, CVE-2018-18281) `move_ptes()`
//! flushes the old range of a table whenever it moved a present PTE,
//! before it drops either lock: a page stays mapped at the old address in
//! some TLB only while the new PTE's lock is held, so nobody who finds the
//! page at its new address (the reverse map: reclaim, truncation) can free
//! it meanwhile. Linux 4.9-4.18 (5d1904204c99) flushed a table's old range
//! after dropping the new table's lock and only if a moved PTE was dirty;
//! clean PTEs were flushed once, after the whole move, with every lock
//! dropped (`[kernel] mremap_flush_unlocked`): reclaim could find a clean
//! page at its new address, unmap it, flush that address and free the page
//! while the old translation still lived on another CPU.
//!
//! A `PMD_SIZE`-aligned `PMD_SIZE` whose PMD points to a PTE table, moved
//! to a `PMD_SIZE`-aligned place, is moved whole: `move_normal_pmd()`
//! moves the PMD entry under the old and new PMD tables' locks and flushes
//! the old range before dropping them, but takes no PTE lock (the table's
//! own lock moves with it). A reverse-map walker that found the table
//! through the old VMA, and holds its lock, would then clear a PTE that
//! now maps the new address and flush the old one. Rmap walks visit the
//! new VMA after the old one, so `copy_vma()` says the rmap locks are not
//! needed for a new VMA; Linux 5.0-5.13 (x86; arm64 from 5.10) believed it
//! for whole-table moves too (`[kernel] mremap_move_pmd =
//! "need-rmap-locks"`): reclaim cleared the PTE at its new address, flushed
//! only the old one and freed the page while another CPU held the new
//! translation (CVE-2022-41222). 97113eb39fa7 takes the rmap locks for
//! writing around every whole-table move (`"rmap-locks"`, the default).
//! Facts: docs/research/issue37-mremap-pmd.md.
//!
//! Modelled: `MREMAP_MAYMOVE` to an address the kernel picks or, with
//! `MREMAP_FIXED`, the caller's; same length. Growing or shrinking in
//! place is not; a huge page in the range is split first (Linux moves an
//! aligned one whole, `move_huge_pmd()`). A `PUD_SIZE`-aligned `PUD_SIZE`
//! moves its PMD table whole the same way (`move_normal_pud()`, Linux
//! 5.11+, under `mm->page_table_lock`; `[kernel] mremap_move_pud`), under
//! the same rmap-lock rule. A hugetlb VMA is refused (`EINVAL`), as
//! before 5.16.

use super::huge_memory::split_huge_range;
use super::hugetlb::{is_vm_hugetlb_page, pmd_lockptr};
use super::mmap::do_munmap;
use super::mmap::{find_vma, page_align, remove_vmas, unmapped_area_topdown};
use super::mmu_gather::MmuGather;
use super::pgtable::{
    move_pmd_pgtable, move_pud_pmd_table, pmd_alloc, pmd_table, present_ptes, pte_tables, set_pte,
    set_swp_entry, swp_entries,
};
use super::rmap::{rmap_lock, vma_rmap_roots};
use super::tlbbatch::flush_tlb_batched_pending;
use crate::config::MremapMovePmd;
use crate::hw::tlb::MmId;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::{Ctx, LockId, Vma};

/// `mremap(addr, len, len, MREMAP_MAYMOVE)`: moves the mapping of `[addr,
/// addr + len)`, which must lie in one VMA, to a free range the kernel
/// picks; returns its address, or `None` (`EFAULT`/`EINVAL`) if the range
/// is not page aligned, empty or not inside one VMA.
pub async fn sys_mremap(ctx: &Ctx, addr: u64, len: u64) -> Option<u64> {
    mremap(ctx, addr, len, None).await
}

/// `mremap(addr, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, new_addr)`: as
/// [`sys_mremap`], to `new_addr`, whatever is mapped there unmapped first
/// (`mremap_to()`: `do_munmap()`). `None` (`EINVAL`) also if `new_addr`
/// is not page aligned, or the two ranges overlap or leave the address
/// space.
pub async fn sys_mremap_fixed(ctx: &Ctx, addr: u64, len: u64, new_addr: u64) -> Option<u64> {
    mremap(ctx, addr, len, Some(new_addr)).await
}

async fn mremap(ctx: &Ctx, addr: u64, len: u64, fixed: Option<u64>) -> Option<u64> {
    let _f = ctx.func(crate::label!("__do_sys_mremap"));
    syscall_enter(ctx, "mremap").await;
    let mm = ctx.mm().expect("user task");
    let len = page_align(ctx, len);
    let end = addr.checked_add(len);
    let page = ctx.w.granule.page_size();
    let target_ok = fixed.is_none_or(|n| {
        n.is_multiple_of(page)
            && n.checked_add(len).is_some_and(|e| e <= super::TASK_SIZE)
            && end.is_some_and(|end| n + len <= addr || n >= end)
    });
    ctx.mmap_write_lock(mm).await;
    // mremap_to(): the destination is unmapped before the source is
    // looked at (a failing source leaves it unmapped, as in Linux).
    if let Some(n) = fixed.filter(|_| target_ok && len > 0) {
        do_munmap(ctx, mm, n, n + len).await;
    }
    // vma_to_resize(): the range must lie inside one VMA, not a hugetlb
    // one (Linux before 5.16 refuses those; the model does too).
    let vma = end
        .filter(|_| addr.is_multiple_of(page) && len > 0 && target_ok)
        .and_then(|end| find_vma(&ctx.w, mm, addr).filter(|v| v.end >= end))
        .filter(|v| !is_vm_hugetlb_page(v));
    let moved = match (vma, end) {
        (Some(v), Some(end)) => {
            call_range(ctx, mm, addr, end);
            Some(move_vma(ctx, mm, &v, (addr, len), fixed).await)
        }
        _ => None,
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mremap").await;
    moved
}

/// `move_vma()`: a new VMA for the range at `fixed` or a free place
/// ([`copy_vma`]), the PTEs moved into it ([`move_page_tables`]), then the
/// old range unmapped (`do_vmi_munmap()`: its PTEs are gone already;
/// emptied page tables are freed after a flush). Returns the new address.
async fn move_vma(
    ctx: &Ctx,
    mm: MmId,
    v: &Vma,
    (addr, len): (u64, u64),
    fixed: Option<u64>,
) -> u64 {
    let _f = ctx.func(crate::label!("move_vma"));
    let w = &ctx.w;
    ctx.work(w.profile.kernel.mmap_ns).await;
    split_huge_range(ctx, mm, addr, addr + len).await;
    let new_addr = fixed.unwrap_or_else(|| {
        let k = w.k.borrow();
        let m = &k.mms[mm];
        unmapped_area_topdown(&m.vmas, m.mmap_base, len, w.granule)
    });
    let need_rmap_locks = copy_vma(ctx, mm, v, addr, (new_addr, len)).await;
    move_page_tables(ctx, mm, (addr, new_addr, len), need_rmap_locks).await;
    ctx.work(w.profile.kernel.munmap_ns).await;
    remove_vmas(ctx, mm, addr, addr + len);
    let mut g = MmuGather::begin(ctx, mm, false).await;
    g.zap(ctx, addr, addr + len).await;
    g.free_pgtables(ctx, addr, addr + len).await;
    g.finish(ctx).await;
    new_addr
}

/// `copy_vma()`: links a VMA for `[new, new + len)` mapping what `v` maps
/// from `addr` (`vm_pgoff` kept) into its reverse maps, under their locks
/// for writing (`anon_vma_clone()`, `vma_link()`: the model holds both at
/// once), after `v` in their order ([`Vma::rmap_order`]). Returns
/// `need_rmap_locks`: false, as for every new (unmerged) VMA, which rmap
/// walks visit after the old one (the model never merges it).
async fn copy_vma(ctx: &Ctx, mm: MmId, v: &Vma, addr: u64, (new, len): (u64, u64)) -> bool {
    let w = &ctx.w;
    let locks = take_rmap_locks(ctx, mm, v).await;
    w.k.borrow_mut().mms[mm].vmas.insert(
        new,
        Vma {
            start: new,
            end: new + len,
            rmap_order: v.rmap_order + 1,
            ..v.tail_from(addr)
        },
    );
    drop_rmap_locks(ctx, &locks).await;
    false
}

/// `take_rmap_locks()`: `v`'s file's `i_mmap_rwsem`, then its
/// `anon_vma`'s, for writing. Returns them, for [`drop_rmap_locks`].
async fn take_rmap_locks(ctx: &Ctx, mm: MmId, v: &Vma) -> Vec<LockId> {
    let locks: Vec<LockId> = vma_rmap_roots(&ctx.w, mm, v)
        .into_iter()
        .map(|r| rmap_lock(&ctx.w, r))
        .collect();
    for &l in &locks {
        ctx.down(l, false).await;
    }
    locks
}

/// [`take_rmap_locks`] of the VMA at `addr` if `take`, else nothing.
async fn take_rmap_locks_if(ctx: &Ctx, mm: MmId, addr: u64, take: bool) -> Vec<LockId> {
    if !take {
        return Vec::new();
    }
    let vma = find_vma(&ctx.w, mm, addr).expect("the old VMA stays until the move is done");
    take_rmap_locks(ctx, mm, &vma).await
}

/// `drop_rmap_locks()`: releases what [`take_rmap_locks`] took.
async fn drop_rmap_locks(ctx: &Ctx, locks: &[LockId]) {
    for &l in locks.iter().rev() {
        ctx.up(l, false).await;
    }
}

/// `move_page_tables()`: moves the PTEs of `[old, old + len)` to `new`,
/// one stretch at a time that lies in one PTE table at both ends: a whole
/// aligned table by its PMD entry where `[kernel] mremap_move_pmd` allows
/// ([`move_normal_pmd`]), else PTE by PTE ([`move_ptes`]). With `[kernel]
/// mremap_flush_unlocked`, the old range is flushed at the end if a clean
/// present PTE was moved (Linux 4.9-4.18).
pub(crate) async fn move_page_tables(
    ctx: &Ctx,
    mm: MmId,
    (old, new, len): (u64, u64, u64),
    need_rmap_locks: bool,
) {
    let _f = ctx.func(crate::label!("move_page_tables"));
    let w = &ctx.w;
    let (pmd, pud) = (w.granule.pmd_size(), pud_size(w));
    let moves = w.kcfg.mremap_move_pmd != MremapMovePmd::Off;
    let old_end = old + len;
    let mut need_flush = false;
    let (mut o, mut n) = (old, new);
    while o < old_end {
        // get_extent(NORMAL_PUD, ...): a whole PUD moves by its entry if
        // it can, else by its PMD stretches (get_extent(NORMAL_PMD, ...)).
        let pud_extent = extent(pud, o, n, old_end);
        if pud_extent == pud && pmd_table(w, mm, o).is_none() {
            // get_old_pud() found none: nothing here to move.
            o += pud;
            n += pud;
            continue;
        }
        let pud_whole = moves && w.kcfg.mremap_move_pud && pud_extent == pud;
        if pud_whole && move_pgt_entry(ctx, mm, (o, n, pud), need_rmap_locks).await {
            o += pud;
            n += pud;
            continue;
        }
        let extent = extent(pmd, o, n, old_end);
        let tables = pte_tables(w, mm, o, o + extent);
        // get_old_pmd(): an empty PMD has nothing to move.
        let whole = moves && extent == pmd && !tables.is_empty();
        if whole && move_pgt_entry(ctx, mm, (o, n, pmd), need_rmap_locks).await {
            // moved whole
        } else if !tables.is_empty() {
            let locks = take_rmap_locks_if(ctx, mm, o, need_rmap_locks).await;
            need_flush |= move_ptes(ctx, mm, (o, o + extent), n).await;
            drop_rmap_locks(ctx, &locks).await;
        }
        o += extent;
        n += extent;
    }
    if need_flush {
        let page_size = ctx.w.granule.page_size();
        flush_tlb_range(ctx, mm, old, old_end, page_size, false).await;
    }
}

/// The bytes one stretch from `o` (moving to `n`, ending by `end`) may
/// span without crossing a `size` boundary at either end
/// (`get_extent()`).
fn extent(size: u64, o: u64, n: u64, end: u64) -> u64 {
    let next_o = (o | (size - 1)) + 1;
    let next_n = (n | (size - 1)) + 1;
    (next_o - o).min(next_n - n).min(end - o)
}

/// `PUD_SIZE` of the granule (what one PMD table maps).
fn pud_size(w: &crate::kernel::World) -> u64 {
    1 << w.granule.level_shift(crate::hw::mem::HUGE_LEVEL - 1)
}

/// `move_pgt_entry(NORMAL_PMD or NORMAL_PUD, ...)`: [`move_normal_pmd`]
/// or [`move_normal_pud`] (`size` is `PMD_SIZE` or `PUD_SIZE`) under the
/// rmap locks of the VMA at `old` for writing if `need_rmap_locks` (Linux
/// 5.0-5.13, `[kernel] mremap_move_pmd = "need-rmap-locks"`) or always
/// (97113eb39fa7). Returns whether the table moved.
async fn move_pgt_entry(
    ctx: &Ctx,
    mm: MmId,
    (old, new, size): (u64, u64, u64),
    need_rmap_locks: bool,
) -> bool {
    let take = need_rmap_locks || ctx.w.kcfg.mremap_move_pmd == MremapMovePmd::RmapLocks;
    let locks = take_rmap_locks_if(ctx, mm, old, take).await;
    let moved = if size == ctx.w.granule.pmd_size() {
        move_normal_pmd(ctx, mm, old, new).await
    } else {
        move_normal_pud(ctx, mm, old, new).await
    };
    drop_rmap_locks(ctx, &locks).await;
    moved
}

/// The PTE tables' locks (`ptdesc->ptl`) of `[old, old + len)` go with
/// their tables to `new`.
fn move_pte_locks(w: &crate::kernel::World, mm: MmId, (old, new, len): (u64, u64, u64)) {
    let shift = w.granule.pmd_shift();
    let mut k = w.k.borrow_mut();
    let locks = &mut k.mms[mm].pte_locks;
    let (lo, hi, to) = (old >> shift, (old + len) >> shift, new >> shift);
    let moved: Vec<(u64, LockId)> = locks.range(lo..hi).map(|(&key, &l)| (key, l)).collect();
    let stale: Vec<u64> = locks
        .range(to..to + (hi - lo))
        .map(|(&key, _)| key)
        .collect();
    for key in stale {
        locks.remove(&key);
    }
    for (key, l) in moved {
        locks.remove(&key);
        locks.insert(to + (key - lo), l);
    }
}

/// `move_normal_pud()`: under `pud_lock()` (the mm's `page_table_lock`,
/// for both PUDs), moves the PUD entry of `old` to `new`
/// (`move_pud_pmd_table()`: the PMD table and every PTE table under it)
/// and flushes the old `PUD_SIZE` before dropping it. The PTE tables'
/// locks go with them. Returns false, moving nothing, if the old PUD does
/// not point to a PMD table or the new one is not empty.
async fn move_normal_pud(ctx: &Ctx, mm: MmId, old: u64, new: u64) -> bool {
    let _f = ctx.func(crate::label!("move_normal_pud"));
    let w = &ctx.w;
    let ptl = w.k.borrow().mms[mm].ptl;
    ctx.spin_lock(ptl).await;
    let moved = move_pud_pmd_table(w, ctx.cpu(), mm, old, new);
    let size = pud_size(w);
    if moved.is_some() {
        move_pte_locks(w, mm, (old, new, size));
    }
    let k = &w.profile.kernel;
    let tables = moved.map_or(0, |(_, a)| a);
    ctx.work(k.pte_update_ns * 2 + k.page_alloc_ns * u64::from(tables))
        .await;
    if moved.is_some() {
        let page_size = w.granule.page_size();
        flush_tlb_range(ctx, mm, old, old + size, page_size, false).await;
    }
    ctx.spin_unlock(ptl).await;
    moved.is_some()
}

/// `move_normal_pmd()`: with `alloc_new_pmd()` done first, under the old
/// PMD table's lock and the new one's (`pmd_lock()`, `spin_lock_nested()`
/// if they differ), moves the PMD entry of `old` to `new`
/// (`move_pmd_pgtable()`) and flushes the old range
/// (`flush_tlb_range(vma, old_addr, old_addr + PMD_SIZE)`: not leaf-only,
/// the walk caches hold the old PMD) before dropping them. The PTE
/// table's own lock goes with it. Returns false, moving nothing, if the
/// old PMD does not point to a PTE table or the new one is not empty
/// (the caller then moves PTE by PTE). The old PMD is checked again under
/// the lock: that is 6fa1066fc5d0 (6.12, 6.6.58; CVE-2024-50066); before
/// it Linux populated the new PMD with whatever it read there, which the
/// model does not express (docs/validation.md).
async fn move_normal_pmd(ctx: &Ctx, mm: MmId, old: u64, new: u64) -> bool {
    let _f = ctx.func(crate::label!("move_normal_pmd"));
    let w = &ctx.w;
    let Some(old_pmd) = pmd_table(w, mm, old) else {
        return false;
    };
    let (new_pmd, allocated) = pmd_alloc(w, mm, new);
    let (old_ptl, new_ptl) = (pmd_lockptr(w, old_pmd), pmd_lockptr(w, new_pmd));
    ctx.spin_lock(old_ptl).await;
    if new_ptl != old_ptl {
        ctx.spin_lock(new_ptl).await;
    }
    let moved = move_pmd_pgtable(w, ctx.cpu(), mm, old, new);
    if moved.is_some() {
        move_pte_locks(w, mm, (old, new, w.granule.pmd_size()));
    }
    let k = &w.profile.kernel;
    let tables = allocated + moved.map_or(0, |(_, a)| a);
    ctx.work(k.pte_update_ns * 2 + k.page_alloc_ns * u64::from(tables))
        .await;
    if moved.is_some() {
        let page_size = w.granule.page_size();
        flush_tlb_range(ctx, mm, old, old + w.granule.pmd_size(), page_size, false).await;
    }
    if new_ptl != old_ptl {
        ctx.spin_unlock(new_ptl).await;
    }
    ctx.spin_unlock(old_ptl).await;
    moved.is_some()
}

/// `move_ptes()`: under the old table's lock and the new one's (one lock
/// if the same table), clears each present PTE of `[old.0, old.1)` and
/// sets it at the same offset from `new` (`ptep_get_and_clear()`,
/// `set_pte_at()`; the frame's reference moves with it). Since 4.19 the
/// old range is flushed before either lock is dropped if any PTE moved.
/// With `[kernel] mremap_flush_unlocked` (4.9-4.18) the new lock is
/// dropped first, the flush is done here only if a moved PTE was dirty,
/// and otherwise left to the caller: returns whether it must flush.
async fn move_ptes(ctx: &Ctx, mm: MmId, old: (u64, u64), new: u64) -> bool {
    let _f = ctx.func(crate::label!("move_ptes"));
    let w = &ctx.w;
    let (lo, hi) = old;
    let shift = w.granule.pmd_shift();
    let same_table = lo >> shift == new >> shift;
    ctx.ptl_lock(mm, lo).await;
    if !same_table {
        ctx.ptl_lock(mm, new).await; // spin_lock_nested()
    }
    flush_tlb_batched_pending(ctx, mm).await;
    let ptes = present_ptes(w, mm, lo, hi);
    let cpu = ctx.cpu();
    let mut tables = 0;
    let mut dirty = false;
    for &(va, p) in &ptes {
        set_pte(w, cpu, mm, va, None);
        let (_, allocated) = set_pte(w, cpu, mm, new + (va - lo), Some((p.pfn, p.perms)));
        tables += u64::from(allocated);
        dirty |= w.policy.pte_dirty(p);
    }
    // Swap entries move as they are (no translation to flush).
    let swapped = swp_entries(w, mm, lo, hi);
    for &(va, e) in &swapped {
        set_swp_entry(w, mm, va, None);
        tables += u64::from(set_swp_entry(w, mm, new + (va - lo), Some(e)).1);
    }
    let k = &w.profile.kernel;
    let moved = (ptes.len() + swapped.len()) as u64;
    ctx.work(k.pte_update_ns * 2 * moved + k.page_alloc_ns * tables)
        .await;
    let force_flush = !ptes.is_empty();
    let unlocked = w.kcfg.mremap_flush_unlocked;
    if !same_table && unlocked {
        ctx.ptl_unlock(mm, new).await;
    }
    let flush_now = if unlocked { dirty } else { force_flush };
    if flush_now {
        // flush_tlb_range(vma, ...): never leaf-only on arm64 ("we may be
        // invalidating table entries as part of ... moving page tables").
        flush_tlb_range(ctx, mm, lo, hi, w.granule.page_size(), false).await;
    }
    if !same_table && !unlocked {
        ctx.ptl_unlock(mm, new).await;
    }
    ctx.ptl_unlock(mm, lo).await;
    unlocked && !dirty
}
