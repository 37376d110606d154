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
//! Modelled: `MREMAP_MAYMOVE` to an address the kernel picks, same length.
//! Growing or shrinking in place and `MREMAP_FIXED` are not; a huge page in
//! the range is split first (Linux moves an aligned one whole,
//! `move_huge_pmd()`).

use super::huge_memory::split_huge_range;
use super::mmap::{find_vma, page_align, remove_vmas, unmapped_area_topdown};
use super::mmu_gather::MmuGather;
use super::pgtable::{present_ptes, pte_tables, set_pte, set_swp_entry, swp_entries};
use super::tlbbatch::flush_tlb_batched_pending;
use crate::hw::tlb::MmId;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::{Ctx, Vma};

/// `mremap(addr, len, len, MREMAP_MAYMOVE)`: moves the mapping of `[addr,
/// addr + len)`, which must lie in one VMA, to a free range the kernel
/// picks; returns its address, or `None` (`EFAULT`/`EINVAL`) if the range
/// is not page aligned, empty or not inside one VMA.
pub async fn sys_mremap(ctx: &Ctx, addr: u64, len: u64) -> Option<u64> {
    let _f = ctx.func(crate::label!("__do_sys_mremap"));
    syscall_enter(ctx, "mremap").await;
    let mm = ctx.mm().expect("user task");
    let len = page_align(ctx, len);
    let end = addr.checked_add(len);
    ctx.mmap_write_lock(mm).await;
    // vma_to_resize(): the range must lie inside one VMA.
    let vma = end
        .filter(|_| addr.is_multiple_of(ctx.w.granule.page_size()) && len > 0)
        .and_then(|end| find_vma(&ctx.w, mm, addr).filter(|v| v.end >= end));
    let moved = match (vma, end) {
        (Some(v), Some(end)) => {
            call_range(ctx, mm, addr, end);
            Some(move_vma(ctx, mm, &v, addr, len).await)
        }
        _ => None,
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mremap").await;
    moved
}

/// `move_vma()`: a new VMA for the range (`copy_vma()`, with the shmem
/// page offset of `addr`), the PTEs moved into it ([`move_page_tables`]),
/// then the old range unmapped (`do_vmi_munmap()`: its PTEs are gone
/// already; emptied page tables are freed after a flush). Returns the new
/// address.
async fn move_vma(ctx: &Ctx, mm: MmId, v: &Vma, addr: u64, len: u64) -> u64 {
    let _f = ctx.func(crate::label!("move_vma"));
    let w = &ctx.w;
    ctx.work(w.profile.kernel.mmap_ns).await;
    split_huge_range(ctx, mm, addr, addr + len).await;
    let new_addr = {
        let mut k = w.k.borrow_mut();
        let m = &mut k.mms[mm];
        let start = unmapped_area_topdown(&m.vmas, m.mmap_base, len, ctx.w.granule);
        // copy_vma(): the new VMA maps the same pages (vm_pgoff kept).
        m.vmas.insert(
            start,
            Vma {
                start,
                end: start + len,
                ..v.tail_from(addr)
            },
        );
        start
    };
    move_page_tables(ctx, mm, addr, new_addr, len).await;
    ctx.work(w.profile.kernel.munmap_ns).await;
    remove_vmas(ctx, mm, addr, addr + len);
    let mut g = MmuGather::begin(ctx, mm, false).await;
    g.zap(ctx, addr, addr + len).await;
    g.free_pgtables(ctx, addr, addr + len).await;
    g.finish(ctx).await;
    new_addr
}

/// `move_page_tables()`: moves the PTEs of `[old, old + len)` to `new`,
/// one stretch at a time that lies in one PTE table at both ends
/// ([`move_ptes`]). With `[kernel] mremap_flush_unlocked`, the old range is
/// flushed at the end if a clean present PTE was moved (Linux 4.9-4.18).
pub(crate) async fn move_page_tables(ctx: &Ctx, mm: MmId, old: u64, new: u64, len: u64) {
    let _f = ctx.func(crate::label!("move_page_tables"));
    let span = ctx.w.granule.pmd_size();
    let old_end = old + len;
    let mut need_flush = false;
    let (mut o, mut n) = (old, new);
    while o < old_end {
        let next_o = (o | (span - 1)) + 1;
        let next_n = (n | (span - 1)) + 1;
        let extent = (next_o - o).min(next_n - n).min(old_end - o);
        if !pte_tables(&ctx.w, mm, o, o + extent).is_empty() {
            need_flush |= move_ptes(ctx, mm, (o, o + extent), n).await;
        }
        o += extent;
        n += extent;
    }
    if need_flush {
        let page_size = ctx.w.granule.page_size();
        flush_tlb_range(ctx, mm, old, old_end, page_size, true).await;
    }
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
        flush_tlb_range(ctx, mm, lo, hi, w.granule.page_size(), true).await;
    }
    if !same_table && !unlocked {
        ctx.ptl_unlock(mm, new).await;
    }
    ctx.ptl_unlock(mm, lo).await;
    unlocked && !dirty
}
