//! Regular files mapped with `mmap` (mm/filemap.c and the file paths of
//! mm/memory.c, Linux 6.18): a file's page cache, `MAP_SHARED` and
//! `MAP_PRIVATE` mappings of it, and the faults on them —
//! `do_read_fault()` with fault-around, `do_cow_fault()`,
//! `do_shared_fault()` — with PMD mappings of PMD-sized folios where the
//! filesystem caches the file in them (`[kernel] file_large_folios`).
//!
//! A file is a page-cache object beside the shmem ones
//! ([`super::shmem::ShmemInode`] with [`RegularFile`] set): the same
//! index-to-frame map, the same VMA link (`Vma::shmem`, `vm_file`), the
//! same reverse-map entry (`inode.mms`). What differs from shmem:
//!
//! - **The page cache outlives the mappings.** `munmap` of the last VMA
//!   leaves the file's pages cached (the file stays open in the model for
//!   the rest of the run), so a second `mmap` finds them.
//! - **A miss reads around.** `filemap_fault()` on a missing page runs
//!   `do_sync_mmap_readahead()`'s read-around: `read_ahead_kb` of the
//!   file centred on the page (order-0 folios), or, with
//!   `file_large_folios = "pmd"`, one PMD-sized folio of the aligned
//!   `PMD_SIZE` of the file. The file is sparse: reading a hole fills a
//!   zeroed folio (`ext4_mpage_readpages()` zeroes a hole), no I/O.
//! - **Its folios are not on the LRU**: the model neither reclaims,
//!   migrates nor truncates file pages, so a fault needs neither the
//!   folio lock nor a reference of its own to keep a cached folio
//!   (docs/model.md, "Page cache of regular files").
//!
//! Frame references: the page cache holds one on each frame of a cached
//! folio (a PMD-sized folio is `HPAGE_PMD_NR` frames with one each), a
//! PTE mapping one on its frame, a PMD mapping one on each frame.

use super::anon::new_anon_folio;
use super::mm_types::{AnonMap, ShmemId, ShmemMap, PGOFF_UNIT};
use super::pgtable::{get_pte, huge_leaves, pmd_none, pte_none, set_huge, set_pte};
use super::shmem::{ShmemEntry, ShmemInode};
use super::swap::PageData;
use crate::config::FileLargeFolios;
use crate::hw::mem::{Perms, Pfn};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::{Ctx, Vma, World};
use std::collections::{BTreeMap, BTreeSet};

/// What makes a page-cache object a regular file.
#[derive(Debug, Clone, Default)]
pub struct RegularFile {
    /// `i_size` in bytes.
    pub size: u64,
    /// The PMD-sized folios by the page index of their first page, with
    /// their first frame (every page of one is also in `pages`).
    pub large: BTreeMap<u64, Pfn>,
}

/// Creates a regular file of `size` bytes with no page cached
/// (`open(O_CREAT)` then `ftruncate()`, as will-it-scale's `mkstemp` +
/// `ftruncate`: a sparse file). One system call's cost. Returns its id.
pub async fn sys_create_file(ctx: &Ctx, size: u64) -> ShmemId {
    syscall_enter(ctx, "ftruncate").await;
    let inode = ShmemInode {
        live: true,
        data: PageData::Compressible,
        regular: Some(RegularFile {
            size,
            large: BTreeMap::new(),
        }),
        ..Default::default()
    };
    let id = super::shmem::add_inode(&mut ctx.w.k.borrow_mut(), inode);
    syscall_exit(ctx, "ftruncate").await;
    id
}

/// `read()` of the whole of file `id` (`filemap_read()`): every page not
/// cached is read in by its read-around, as a page-cache miss of a fault
/// is (`read_around()`: a PMD-sized folio or order-0 pages, their
/// allocation costs); the copy to user memory is not charged (a caller
/// that only wants the cache filled, as a program that has run a while
/// has it). One system call's cost.
pub async fn filemap_read(ctx: &Ctx, id: ShmemId) {
    syscall_enter(ctx, "read").await;
    let size = {
        let k = ctx.w.k.borrow();
        k.shmem[id as usize].regular.as_ref().map_or(0, |f| f.size)
    };
    let step = index_step(&ctx.w);
    let pages = size / ctx.w.granule.page_size();
    for p in 0..pages {
        filemap_fault(ctx, id, p * step).await;
    }
    syscall_exit(ctx, "read").await;
}

/// Is `v` a mapping of a regular file (not of a shmem object)?
pub fn is_regular(w: &World, v: &Vma) -> bool {
    v.shmem
        .is_some_and(|s| w.k.borrow().shmem[s.id as usize].regular.is_some())
}

/// `mmap(NULL, len, prot, MAP_SHARED or MAP_PRIVATE, fd, 0)` of regular
/// file `file` (`do_mmap()` → `mmap_region()`): a VMA mapping the file
/// from its first page; a private one gets an `anon_vma` for the pages
/// its writes copy. Where the file's folios are PMD-sized the address is
/// `PMD_SIZE` aligned (`thp_get_unmapped_area()`, ext4's
/// `get_unmapped_area`: the length is padded by `PMD_SIZE` and the start
/// rounded up), so that `do_set_pmd()` can map them. Returns the address.
pub async fn sys_mmap_file(ctx: &Ctx, file: ShmemId, len: u64, perms: Perms, shared: bool) -> u64 {
    let _f = ctx.func(crate::label!("do_mmap"));
    syscall_enter(ctx, "mmap").await;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.mmap_ns).await;
    let g = ctx.w.granule;
    let len = g.page_align(len.max(1));
    let pmd = g.pmd_size();
    let align = ctx.w.kcfg.file_large_folios == FileLargeFolios::Pmd && len >= pmd;
    let addr = {
        let mut k = ctx.w.k.borrow_mut();
        k.shmem[file as usize].mms.insert(mm);
        let anon = (!shared).then(|| {
            *k.anon_ids += 1;
            *k.anon_ids
        });
        let m = &mut k.mms[mm];
        let start = if align {
            let padded = super::mmap::unmapped_area_topdown(&m.vmas, m.mmap_base, len + pmd, g);
            start_round_up(padded, pmd)
        } else {
            super::mmap::unmapped_area_topdown(&m.vmas, m.mmap_base, len, g)
        };
        m.vmas.insert(
            start,
            Vma {
                start,
                end: start + len,
                perms,
                rmap_order: 0,
                shmem: Some(ShmemMap {
                    id: file,
                    pgoff: 0,
                    shared,
                    hugetlb: false,
                }),
                anon: anon.map(|id| AnonMap {
                    id,
                    pgoff: start / PGOFF_UNIT,
                    data: PageData::Compressible,
                }),
            },
        );
        start
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mmap").await;
    addr
}

fn start_round_up(x: u64, align: u64) -> u64 {
    x.div_ceil(align) * align
}

/// Page indices (in [`PGOFF_UNIT`]s) one base page spans.
fn index_step(w: &World) -> u64 {
    w.granule.page_size() / PGOFF_UNIT
}

/// `do_fault()` for a regular file's VMA `v` whose PTE at `va` is empty:
/// a read maps the cached page (`do_read_fault()`); a write to a private
/// mapping copies it (`do_cow_fault()`), to a shared one maps it writable
/// and dirty (`do_shared_fault()`).
pub async fn do_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) {
    if !write {
        do_read_fault(ctx, mm, v, va).await;
    } else if !v.shared() {
        do_cow_fault(ctx, mm, v, va).await;
    } else {
        do_shared_fault(ctx, mm, v, va).await;
    }
}

/// `do_read_fault()`: fault-around first (`should_fault_around()`:
/// `fault_around_bytes` above one page); if it did not map the faulting
/// page (not cached yet), `__do_fault()` → `filemap_fault()` reads it
/// and `finish_fault()` maps it read-only.
async fn do_read_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) {
    let _f = ctx.func(crate::label!("do_read_fault"));
    let w = &ctx.w;
    if w.kcfg.fault_around_bytes > w.granule.page_size() && do_fault_around(ctx, mm, v, va).await {
        return;
    }
    let (id, index) = v.shmem_index(va).expect("a file VMA");
    let pfn = filemap_fault(ctx, id, index).await;
    finish_fault(ctx, mm, v, va, pfn, false).await;
}

/// `do_cow_fault()`: the file's page is read into the page cache
/// (`__do_fault()`), a new anonymous page allocated and the cached page
/// copied into it (`copy_mc_user_highpage()`: `page_copy_ns`, or
/// `page_alloc_ns` on a profile without it), then
/// `finish_fault()` maps the copy writable, unless the PTE was filled
/// meanwhile.
async fn do_cow_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) {
    let _f = ctx.func(crate::label!("do_cow_fault"));
    let w = &ctx.w;
    let (id, index) = v.shmem_index(va).expect("a file VMA");
    filemap_fault(ctx, id, index).await;
    super::vmscan::direct_reclaim(ctx).await;
    let k = &w.profile.kernel;
    ctx.work(k.page_copy_ns.unwrap_or(k.page_alloc_ns)).await;
    let pfn = w.hw.borrow_mut().mem.alloc_frame();
    ctx.ptl_lock(mm, va).await;
    if pte_none(w, mm, va) && huge_leaves(w, mm, va, va + w.granule.page_size()).is_empty() {
        new_anon_folio(w, ctx.cpu(), mm, v, va, pfn);
        let (_, tables) = set_pte(w, ctx.cpu(), mm, va, Some((pfn, v.perms)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    } else {
        w.put_frame(ctx.cpu(), pfn, mm, va);
    }
    ctx.ptl_unlock(mm, va).await;
    super::vmscan::wakeup_kswapd(ctx).await;
}

/// `do_shared_fault()`: `__do_fault()` reads the page,
/// [`do_page_mkwrite`] tells the filesystem, and `finish_fault()` maps it
/// writable; the folio is dirty (`fault_dirty_shared_page()`).
async fn do_shared_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) {
    let _f = ctx.func(crate::label!("do_shared_fault"));
    let (id, index) = v.shmem_index(va).expect("a file VMA");
    let pfn = filemap_fault(ctx, id, index).await;
    do_page_mkwrite(ctx).await;
    finish_fault(ctx, mm, v, va, pfn, true).await;
    super::shmem::fault_dirty_shared_page(&ctx.w, pfn);
}

/// `do_page_mkwrite()`: the filesystem's `->page_mkwrite()` before a
/// shared file page becomes writable (`page_mkwrite_ns`; 0 on a profile
/// without it).
pub(crate) async fn do_page_mkwrite(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("do_page_mkwrite"));
    ctx.work(ctx.w.profile.kernel.page_mkwrite_ns.unwrap_or(0))
        .await;
}

/// The cached frame of page `index` of file `id`, if any.
fn cached(w: &World, id: ShmemId, index: u64) -> Option<Pfn> {
    match w.k.borrow().shmem[id as usize].pages.get(&index) {
        Some(&ShmemEntry::Folio(pfn)) => Some(pfn),
        _ => None,
    }
}

/// The PMD-sized folio holding page `index` of file `id`, if it is one:
/// its first index and first frame.
pub(crate) fn large_folio(w: &World, id: ShmemId, index: u64) -> Option<(u64, Pfn)> {
    let span = w.granule.hpage_pmd_nr() * index_step(w);
    let base = index - index % span;
    let k = w.k.borrow();
    let f = k.shmem[id as usize].regular.as_ref()?;
    f.large.get(&base).map(|&pfn| (base, pfn))
}

/// `filemap_fault()`: the frame of page `index` of file `id`, read into
/// the page cache first if it is not there (`page_cache_sync_ra()` from
/// `do_sync_mmap_readahead()`, see [`read_around`]).
async fn filemap_fault(ctx: &Ctx, id: ShmemId, index: u64) -> Pfn {
    if let Some(pfn) = cached(&ctx.w, id, index) {
        return pfn;
    }
    let _f = ctx.func(crate::label!("filemap_fault"));
    read_around(ctx, id, index).await;
    cached(&ctx.w, id, index).expect("read-around reads the missing page")
}

/// The read-around of a page-cache miss at `index` of file `id`. With
/// `file_large_folios = "pmd"`, a PMD-sized folio of the aligned
/// `PMD_SIZE` of the file where the file covers it whole and none of its
/// pages is cached (`page_cache_ra_order()` with a PMD order; the cost of
/// allocating and clearing a huge page, `thp_fault_ns`, or
/// `HPAGE_PMD_NR` x `page_alloc_ns` on a profile without it). Otherwise
/// order-0 folios for the uncached pages of `read_ahead_kb` centred on
/// `index` (`ra->start = pgoff - ra_pages / 2`, `ra->size = ra_pages`,
/// clipped to the file; at least the missing page), `page_alloc_ns` each.
async fn read_around(ctx: &Ctx, id: ShmemId, index: u64) {
    let w = &ctx.w;
    let step = index_step(w);
    let nr = w.granule.hpage_pmd_nr();
    let size_idx = {
        let k = w.k.borrow();
        let f = k.shmem[id as usize]
            .regular
            .as_ref()
            .expect("a regular file");
        f.size.div_ceil(PGOFF_UNIT)
    };
    if w.kcfg.file_large_folios == FileLargeFolios::Pmd {
        let span = nr * step;
        let base = index - index % span;
        let free = {
            let k = w.k.borrow();
            k.shmem[id as usize]
                .pages
                .range(base..base + span)
                .next()
                .is_none()
        };
        if base + span <= size_idx && free {
            let cost = w
                .profile
                .kernel
                .thp_fault_ns
                .unwrap_or(w.profile.kernel.page_alloc_ns * nr);
            ctx.work(cost).await;
            let pfn = w.hw.borrow_mut().mem.alloc_huge();
            let mut k = w.k.borrow_mut();
            let inode = &mut k.shmem[id as usize];
            for i in 0..nr {
                inode
                    .pages
                    .insert(base + i * step, ShmemEntry::Folio(pfn + i));
            }
            inode
                .regular
                .as_mut()
                .expect("a regular file")
                .large
                .insert(base, pfn);
            return;
        }
    }
    let ra_pages = (w.kcfg.read_ahead_kb << 10) / w.granule.page_size();
    let start = index.saturating_sub(ra_pages / 2 * step);
    let end = (start + ra_pages * step).min(size_idx).max(index + step);
    let missing: Vec<u64> = {
        let k = w.k.borrow();
        let pages = &k.shmem[id as usize].pages;
        (start / step..end.div_ceil(step))
            .map(|i| i * step)
            .filter(|i| !pages.contains_key(i))
            .collect()
    };
    ctx.work(w.profile.kernel.page_alloc_ns * missing.len() as u64)
        .await;
    for i in missing {
        let pfn = w.hw.borrow_mut().mem.alloc_frame();
        w.k.borrow_mut().shmem[id as usize]
            .pages
            .insert(i, ShmemEntry::Folio(pfn));
    }
}

/// May a PMD map the PMD-sized folio at `base` in `v`
/// (`thp_vma_suitable_order()` in `do_set_pmd()`): the aligned `PMD_SIZE`
/// lies inside the VMA and the file offset is aligned as the address is.
pub(crate) fn pmd_suitable(w: &World, v: &Vma, base: u64) -> bool {
    let pmd = w.granule.pmd_size();
    let s = v.shmem.expect("a file VMA");
    base >= v.start
        && base + pmd <= v.end
        && (v.start.wrapping_sub(s.pgoff * PGOFF_UNIT)).is_multiple_of(pmd)
}

/// `do_set_pmd()`: maps the PMD-sized folio of page `va` with one PMD
/// leaf (read-only, or writable for a write to a shared mapping), taking
/// a reference on each of its frames, if the PMD is still empty. False
/// (nothing mapped: the caller maps a PTE) if the folio is not PMD-sized
/// or the VMA cannot hold the PMD.
async fn do_set_pmd(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) -> bool {
    let w = &ctx.w;
    let pmd = w.granule.pmd_size();
    let base = va & !(pmd - 1);
    let (id, index) = v.shmem_index(va).expect("a file VMA");
    let Some((_, pfn)) = large_folio(w, id, index) else {
        return false;
    };
    if !pmd_suitable(w, v, base) {
        return false;
    }
    ctx.ptl_lock(mm, base).await;
    let mapped = pmd_none(w, mm, base);
    if mapped {
        let perms = if write { v.perms } else { read_only(v.perms) };
        for i in 0..w.granule.hpage_pmd_nr() {
            w.hw.borrow_mut().mem.get_frame(pfn + i);
        }
        let (_, tables) = set_huge(w, ctx.cpu(), mm, base, Some((pfn, perms)));
        ctx.work(
            w.profile.kernel.pte_update_ns + w.profile.kernel.page_alloc_ns * u64::from(tables),
        )
        .await;
    }
    ctx.ptl_unlock(mm, base).await;
    mapped
}

/// `perms` without write permission: a clean or copy-on-write PTE.
pub(crate) fn read_only(perms: Perms) -> Perms {
    Perms(perms.0 & !(Perms::RW.0 & !Perms::R.0))
}

/// `finish_fault()`: with the PMD empty and the page in a PMD-sized
/// folio, `do_set_pmd()` maps the whole folio; otherwise, under the PTE
/// lock, the page's PTE is set (writable for a write) unless it was
/// filled meanwhile.
async fn finish_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, pfn: Pfn, write: bool) {
    let w = &ctx.w;
    if pmd_none(w, mm, va) && do_set_pmd(ctx, mm, v, va, write).await {
        return;
    }
    ctx.ptl_lock(mm, va).await;
    if pte_none(w, mm, va) && huge_leaves(w, mm, va, va + w.granule.page_size()).is_empty() {
        let perms = if write { v.perms } else { read_only(v.perms) };
        w.hw.borrow_mut().mem.get_frame(pfn);
        let (_, tables) = set_pte(w, ctx.cpu(), mm, va, Some((pfn, perms)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    }
    ctx.ptl_unlock(mm, va).await;
}

/// `do_fault_around()`: the window of `fault_around_bytes` around `va`,
/// aligned down to its size and clipped to the VMA and to the PTE table
/// (`from_pte`/`to_pte`), is handed to `filemap_map_pages()`. Returns
/// whether the faulting page got mapped (`VM_FAULT_NOPAGE`).
async fn do_fault_around(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) -> bool {
    let w = &ctx.w;
    let page = w.granule.page_size();
    let nr = w.kcfg.fault_around_bytes / page;
    let ptrs = w.granule.pmd_size() / page;
    let pte_off = (va / page) % ptrs;
    let vma_off = (va - v.start) / page;
    let vma_pages = (v.end - v.start) / page;
    let from = (pte_off - pte_off % nr).max(pte_off - pte_off.min(vma_off));
    let to = (from + nr).min(ptrs).min(pte_off + vma_pages - vma_off) - 1;
    let table = va - pte_off * page;
    filemap_map_pages(ctx, mm, v, va, table + from * page, table + to * page).await
}

/// `filemap_map_pages()` over the pages of `[first, last]` (inclusive,
/// one PTE table): if the PMD is empty and the first cached folio of the
/// window is PMD-sized, `filemap_map_pmd()` maps it with a PMD
/// (`do_set_pmd()`); otherwise, under the PTE lock, every cached page
/// whose PTE is empty is mapped read-only (`filemap_map_folio_range()` →
/// `set_pte_range()`, `pte_update_ns` each), the walk costing
/// `fault_around_page_ns` per page of the window. Pages not cached are left
/// alone (fault-around never reads). Returns whether `va`'s page is
/// mapped.
async fn filemap_map_pages(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, first: u64, last: u64) -> bool {
    let _f = ctx.func(crate::label!("filemap_map_pages"));
    let w = &ctx.w;
    let page = w.granule.page_size();
    let (id, _) = v.shmem_index(va).expect("a file VMA");
    let index_of = |a: u64| v.shmem_index(a).expect("inside the VMA").1;
    let first_cached = (first..=last)
        .step_by(page as usize)
        .find(|&a| cached(w, id, index_of(a)).is_some());
    let Some(first_cached) = first_cached else {
        return false;
    };
    if !huge_leaves(w, mm, va, va + page).is_empty() {
        return true; // "Huge page is mapped? No need to proceed."
    }
    if pmd_none(w, mm, va) && large_folio(w, id, index_of(first_cached)).is_some() {
        // The window lies in one PMD, which the folio covers whole.
        if do_set_pmd(ctx, mm, v, first_cached, false).await {
            return true;
        }
    }
    ctx.ptl_lock(mm, va).await;
    let mut mapped = BTreeSet::new();
    let cpu = ctx.cpu();
    let mut tables = 0;
    for a in (first..=last).step_by(page as usize) {
        let Some(pfn) = cached(w, id, index_of(a)) else {
            continue;
        };
        if !pte_none(w, mm, a) || !huge_leaves(w, mm, a, a + page).is_empty() {
            continue;
        }
        w.hw.borrow_mut().mem.get_frame(pfn);
        tables += set_pte(w, cpu, mm, a, Some((pfn, read_only(v.perms)))).1;
        mapped.insert(a);
    }
    let k = &w.profile.kernel;
    let window = (last - first) / page + 1;
    let walk = k.fault_around_page_ns.unwrap_or(0).saturating_mul(window);
    ctx.work(walk + k.pte_update_ns * mapped.len() as u64 + k.page_alloc_ns * u64::from(tables))
        .await;
    ctx.ptl_unlock(mm, va).await;
    mapped.contains(&va) || get_pte(w, mm, va).is_some()
}

/// `__split_huge_pmd_locked()` for a file VMA (mm/huge_memory.c): the
/// PMD mapping a page-cache folio at `base` is cleared and its
/// `PMD_SIZE` flushed (`pmdp_huge_clear_flush()`), and the mapping's
/// references dropped (`folio_remove_rmap_pmd()`, `folio_put()`); no PTE
/// table replaces it (the pages stay in the page cache, and the next
/// access faults them in again). The caller holds the PMD lock and saw
/// the leaf `pfn` there.
pub(crate) async fn split_file_pmd_locked(ctx: &Ctx, mm: MmId, base: u64, pfn: Pfn) {
    let w = &ctx.w;
    let pmd = w.granule.pmd_size();
    set_huge(w, ctx.cpu(), mm, base, None);
    flush_tlb_range(ctx, mm, base, base + pmd, pmd, true).await;
    w.put_huge(ctx.cpu(), pfn, mm, base);
}

#[cfg(test)]
mod tests {
    use super::start_round_up;

    #[test]
    fn round_up_aligns_only_unaligned_starts() {
        let pmd = 2 << 20;
        assert_eq!(start_round_up(4 << 20, pmd), 4 << 20);
        assert_eq!(start_round_up((4 << 20) + 4096, pmd), 6 << 20);
    }
}
