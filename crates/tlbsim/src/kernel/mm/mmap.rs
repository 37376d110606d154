//! Mappings (mm/mmap.c, mm/vma.c): `mmap()` and `munmap()` of private
//! anonymous memory, where a mapping goes (`unmapped_area_topdown()`),
//! finding (`vma_lookup()`), splitting and merging VMAs.

use super::mm_types::{AnonId, AnonMap, ShmemMap};
use super::mmu_gather::MmuGather;
use super::swap::PageData;
use crate::hw::mem::{Granule, Perms};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::{Ctx, Vma};

/// Top of the user address space (48-bit VA).
pub const TASK_SIZE: u64 = 1 << 48;

/// `PAGE_ALIGN(x)` in the kernel's granule.
pub(crate) fn page_align(ctx: &Ctx, x: u64) -> u64 {
    ctx.w.granule.page_align(x)
}

/// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS)`: returns the
/// address. Its pages, once written, hold compressible data (see
/// [`sys_mmap_private`]).
pub async fn sys_mmap(ctx: &Ctx, len: u64, perms: Perms) -> u64 {
    sys_mmap_private(ctx, len, perms, PageData::Compressible).await
}

/// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS)` of memory whose
/// pages, once written, hold `data` (the model has no contents; swap
/// costs depend on it). Returns the address.
pub async fn sys_mmap_private(ctx: &Ctx, len: u64, perms: Perms, data: PageData) -> u64 {
    let _f = ctx.func(crate::label!("do_mmap"));
    syscall_enter(ctx, "mmap").await;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.mmap_ns).await;
    let len = page_align(ctx, len.max(1));
    let addr = {
        let mut k = ctx.w.k.borrow_mut();
        *k.anon_ids += 1;
        let anon = Some((*k.anon_ids, data));
        let m = &mut k.mms[mm];
        insert_vma(
            &mut m.vmas,
            m.mmap_base,
            len,
            perms,
            None,
            anon,
            ctx.w.granule,
        )
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mmap").await;
    addr
}

/// Places a new VMA of `len` bytes below `ceiling` (top-down, see
/// [`unmapped_area_topdown`]) and inserts it, mapping `shmem` or, for
/// private memory, the anon id and data in `anon` (its `vm_pgoff` is the
/// page number of its start); returns its start.
pub(crate) fn insert_vma(
    vmas: &mut std::collections::BTreeMap<u64, Vma>,
    ceiling: u64,
    len: u64,
    perms: Perms,
    shmem: Option<ShmemMap>,
    anon: Option<(AnonId, PageData)>,
    g: Granule,
) -> u64 {
    let start = unmapped_area_topdown(vmas, ceiling, len, g);
    vmas.insert(
        start,
        Vma {
            start,
            end: start + len,
            perms,
            rmap_order: 0,
            shmem,
            anon: anon.map(|(id, data)| AnonMap {
                id,
                pgoff: start / super::mm_types::PGOFF_UNIT,
                data,
            }),
        },
    );
    start
}

/// Lowest address `mmap` hands out.
pub(crate) const MMAP_MIN_ADDR: u64 = 0x1000_0000;

/// `unmapped_area_topdown()`: the start of the highest free range of `len`
/// bytes below `ceiling` (`mm->mmap_base`), so that ranges freed by munmap
/// are reused as in Linux. A free page (of granule `g`) is kept above and
/// below each mapping so that separate mappings never merge into one VMA.
pub(crate) fn unmapped_area_topdown(
    vmas: &std::collections::BTreeMap<u64, Vma>,
    ceiling: u64,
    len: u64,
    g: Granule,
) -> u64 {
    let page = g.page_size();
    let mut hi = ceiling;
    for v in vmas.range(..ceiling).rev().map(|(_, v)| v) {
        let fits = hi
            .checked_sub(page + len)
            .is_some_and(|start| start >= v.end + page);
        if fits {
            return hi - page - len;
        }
        hi = hi.min(v.start);
    }
    hi.checked_sub(page + len)
        .filter(|&start| start >= MMAP_MIN_ADDR)
        .expect("the model's 47-bit user address space is not exhausted")
}

/// Splits VMAs at `addr` so that a VMA boundary falls there.
pub(super) fn split_at(vmas: &mut std::collections::BTreeMap<u64, Vma>, addr: u64) {
    let hit = vmas
        .range(..addr)
        .next_back()
        .filter(|(_, v)| v.end > addr)
        .map(|(s, v)| (*s, *v));
    if let Some((s, v)) = hit {
        vmas.insert(s, Vma { end: addr, ..v });
        vmas.insert(addr, v.tail_from(addr));
    }
}

/// Merges adjacent VMAs with equal protection, in place (`vma_merge()`):
/// a VMA that starts where the one before it ends, with the same
/// protection and the next pages of the same object or `anon_vma`
/// ([`Vma::continued_by`]), is folded into it.
pub(super) fn merge(vmas: &mut std::collections::BTreeMap<u64, Vma>) {
    use std::ops::Bound::{Excluded, Unbounded};
    let Some(mut cur) = vmas.keys().next().copied() else {
        return;
    };
    loop {
        let c = vmas[&cur];
        let Some((&next, &n)) = vmas.range((Excluded(cur), Unbounded)).next() else {
            return;
        };
        if c.perms == n.perms && c.continued_by(&n) {
            vmas.remove(&next);
            vmas.get_mut(&cur).expect("just read").end = n.end;
        } else {
            cur = next;
        }
    }
}

/// Removes `[addr, end)` from the VMA tree; returns the removed VMAs.
pub(crate) fn remove_vmas(ctx: &Ctx, mm: MmId, addr: u64, end: u64) -> Vec<Vma> {
    let mut k = ctx.w.k.borrow_mut();
    let vmas = &mut k.mms[mm].vmas;
    split_at(vmas, addr);
    split_at(vmas, end);
    let starts: Vec<u64> = vmas.range(addr..end).map(|(s, _)| *s).collect();
    starts.iter().filter_map(|s| vmas.remove(s)).collect()
}

/// `munmap(addr, len)`: zaps the PTEs, frees empty page tables, flushes.
pub async fn sys_munmap(ctx: &Ctx, addr: u64, len: u64) {
    let _f = ctx.func(crate::label!("do_vmi_munmap"));
    syscall_enter(ctx, "munmap").await;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.munmap_ns).await;
    if ctx.w.kcfg.munmap_downgrade {
        // __do_munmap(..., downgrade = true): the VMAs are detached under
        // the write hold, the unmap runs under a read hold.
        let removed = remove_vmas(ctx, mm, addr, end);
        ctx.mmap_write_downgrade(mm).await;
        unmap_region(ctx, mm, addr, end, &removed).await;
        ctx.mmap_read_unlock(mm).await;
    } else {
        do_munmap(ctx, mm, addr, end).await;
        ctx.mmap_write_unlock(mm).await;
    }
    syscall_exit(ctx, "munmap").await;
}

/// `do_munmap()` of `[addr, end)` (page aligned) with the mmap_lock held
/// for writing: removes the VMAs, zaps their PTEs, frees empty page
/// tables and flushes (`unmap_region()` through an mmu_gather).
pub(crate) async fn do_munmap(ctx: &Ctx, mm: MmId, addr: u64, end: u64) {
    let removed = remove_vmas(ctx, mm, addr, end);
    unmap_region(ctx, mm, addr, end, &removed).await;
}

/// `unmap_region()` of the detached VMAs `removed`, `[addr, end)`: zaps
/// their PTEs, frees empty page tables, flushes, then drops their shmem
/// references.
async fn unmap_region(ctx: &Ctx, mm: MmId, addr: u64, end: u64, removed: &[Vma]) {
    let mut g = MmuGather::begin(ctx, mm, false).await;
    g.unmap_vmas(ctx, removed, addr, end).await;
    g.free_pgtables(ctx, addr, end).await;
    g.finish(ctx).await;
    super::shmem::release_unmapped(ctx, mm, removed);
}

/// `vma_lookup(mm, addr)`: the VMA of `mm` containing `addr`, if any.
pub(crate) fn find_vma(w: &crate::kernel::World, mm: MmId, addr: u64) -> Option<Vma> {
    let k = w.k.borrow();
    k.mms[mm]
        .vmas
        .range(..=addr)
        .next_back()
        .map(|(_, v)| *v)
        .filter(|v| v.end > addr)
}

#[cfg(test)]
mod tests {
    use super::{insert_vma, Vma};
    use crate::hw::mem::{Granule, Perms};
    use std::collections::BTreeMap;

    fn map_in(g: Granule, vmas: &mut BTreeMap<u64, Vma>, ceiling: u64, len: u64) -> u64 {
        insert_vma(vmas, ceiling, len, Perms::RW, None, None, g)
    }

    fn map(vmas: &mut BTreeMap<u64, Vma>, ceiling: u64, len: u64) -> u64 {
        map_in(Granule::K4, vmas, ceiling, len)
    }

    #[test]
    fn with_64k_pages_the_guard_gap_is_one_64k_page() {
        let (g, top) = (Granule::K64, 0x7f00_0000_0000);
        let mut vmas = BTreeMap::new();
        let a = map_in(g, &mut vmas, top, 65536);
        assert_eq!(a, top - 2 * 65536);
        let b = map_in(g, &mut vmas, top, 2 * 65536);
        assert_eq!(b, a - 3 * 65536);
    }

    #[test]
    fn mmap_is_top_down_with_guard_pages_and_reuses_freed_ranges() {
        const PAGE_SIZE: u64 = crate::hw::mem::PAGE_SIZE_4K;
        let top = 0x7f00_0000_0000;
        let mut vmas = BTreeMap::new();
        let a = map(&mut vmas, top, 4 * PAGE_SIZE);
        assert_eq!(a, top - 5 * PAGE_SIZE, "one free page below the ceiling");
        let b = map(&mut vmas, top, 2 * PAGE_SIZE);
        assert_eq!(b, a - 3 * PAGE_SIZE, "one free page between mappings");
        let c = map(&mut vmas, top, PAGE_SIZE);
        // munmap(a): its range is handed out again, highest first.
        vmas.remove(&a);
        assert_eq!(map(&mut vmas, top, 4 * PAGE_SIZE), a);
        // b's hole (its 2 pages and the free pages around them) fits b
        // again, but not 3 pages: those go below c.
        vmas.remove(&b);
        let d = map(&mut vmas, top, 3 * PAGE_SIZE);
        assert_eq!(d, c - 4 * PAGE_SIZE);
        assert_eq!(map(&mut vmas, top, 2 * PAGE_SIZE), b);
    }
}
