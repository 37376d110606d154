//! Shared anonymous memory (`mm/shmem.c`): `mmap(MAP_SHARED |
//! MAP_ANONYMOUS)` creates a shmem object whose pages live in its page
//! cache (resident folios) or in swap. A fault maps the object's page
//! (`shmem_fault()`, swapping it in first if it was swapped out); reclaim
//! writes it out (`shmem_writeout()`, [`super::vmscan`]); when no VMA maps
//! the object any more its pages are freed (`shmem_evict_inode()`).
//!
//! Frame references: the page cache holds one on each resident folio,
//! each mapping PTE one more (so a folio's mapcount is its references
//! less one).

use super::folio::{folio_lock, folio_lock_new, folio_unlock, Folio, Mapping};
use super::mm_types::{ShmemId, ShmemMap};
use super::pgtable::{get_pte, set_pte};
use super::swap::{zram_read, PageData, SwapSlot};
use crate::hw::mem::{Perms, Pfn};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::{Ctx, Vma, World};
use std::collections::{BTreeMap, BTreeSet};

/// One page of a shmem object (an entry of its `i_pages` xarray).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShmemEntry {
    /// Resident in this frame.
    Folio(Pfn),
    /// Swapped out to this slot.
    Swap(SwapSlot),
}

/// A shmem object (`struct shmem_inode_info` and its mapping).
#[derive(Debug, Clone, Default)]
pub struct ShmemInode {
    /// Its pages by index; a missing index has never been touched (reads
    /// as zeroes).
    pub pages: BTreeMap<u64, ShmemEntry>,
    /// What its pages hold once written (the model has no data).
    pub data: PageData,
    /// The address spaces that were given a VMA of it (the `i_mmap` tree,
    /// by mm): the reverse map visits their VMAs.
    pub mms: BTreeSet<MmId>,
    /// Not yet evicted.
    pub live: bool,
    /// A regular file's page cache (kernel/mm/filemap.rs), not a shmem
    /// object: its pages are never swapped, and stay cached when no VMA
    /// maps the file any more.
    pub regular: Option<super::filemap::RegularFile>,
    /// A hugetlbfs file (kernel/mm/hugetlb.rs), not a shmem object: its
    /// pages are huge pages of its own, never swapped, kept when no VMA
    /// maps the file any more.
    pub hugetlbfs: Option<super::hugetlb::HugetlbfsInode>,
}

/// The NUMA node of `cpu` (node 0 without a `[numa]` profile section):
/// CPUs are split among nodes in order.
pub fn cpu_node(w: &World, cpu: crate::hw::CpuId) -> u32 {
    w.profile.numa.as_ref().map_or(0, |n| {
        (u64::from(cpu.get()) * u64::from(n.nodes) / w.ncpus() as u64) as u32
    })
}

/// Adds page-cache object `inode` (a shmem object, a regular file or a
/// hugetlbfs file) to `k`; returns its id.
pub(crate) fn add_inode(k: &mut crate::kernel::KState, inode: ShmemInode) -> ShmemId {
    let id = ShmemId::try_from(k.shmem.len()).expect("fewer than 2^32 page-cache objects");
    k.shmem.push(inode);
    id
}

/// `mmap(NULL, len, prot, MAP_SHARED | MAP_ANONYMOUS)`: a new shmem object
/// of `len` bytes whose pages, once written, hold `data`; returns the
/// address.
pub async fn sys_mmap_shared(ctx: &Ctx, len: u64, perms: Perms, data: PageData) -> u64 {
    let _f = ctx.func(crate::label!("do_mmap"));
    syscall_enter(ctx, "mmap").await;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.mmap_ns).await;
    let addr = {
        let mut k = ctx.w.k.borrow_mut();
        let id = add_inode(
            &mut k,
            ShmemInode {
                data,
                mms: BTreeSet::from([mm]),
                live: true,
                ..Default::default()
            },
        );
        let m = &mut k.mms[mm];
        let g = ctx.w.granule;
        let len = g.page_align(len.max(1));
        let shmem = Some(ShmemMap {
            id,
            pgoff: 0,
            shared: true,
            hugetlb: false,
        });
        super::mmap::insert_vma(&mut m.vmas, m.mmap_base, len, perms, shmem, None, g)
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mmap").await;
    addr
}

/// `shmem_fault()` then `finish_fault()`: maps the object's page at `va`
/// of the shared VMA `v`, allocating it (zeroed) if it was never touched
/// and swapping it in if it was swapped out. A read maps it read-only: a
/// clean PTE is read-only in the model (arm64 without hardware dirty-bit
/// management marks it `PTE_RDONLY` until the first write faults), so a
/// PTE is dirty exactly when it is writable; a write marks the folio dirty
/// (`fault_dirty_shared_page()`).
pub async fn shmem_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) {
    let _f = ctx.func(crate::label!("shmem_fault"));
    let w = &ctx.w;
    let (id, index) = v.shmem_index(va).expect("a shared VMA");
    loop {
        let entry = w.k.borrow().shmem[id as usize].pages.get(&index).copied();
        match entry {
            None => {
                // shmem_alloc_and_add_folio(): a new zeroed page.
                super::vmscan::direct_reclaim(ctx).await;
                ctx.work(w.profile.kernel.page_alloc_ns).await;
                if w.k.borrow().shmem[id as usize].pages.contains_key(&index) {
                    continue; // another fault added it meanwhile
                }
                let pfn = add_folio(w, id, index, false, cpu_node(w, ctx.cpu()));
                folio_lock_new(ctx, pfn);
                finish_fault(ctx, mm, v, va, pfn, write).await;
                if write {
                    fault_dirty_shared_page(w, pfn);
                }
                folio_unlock(ctx, pfn).await;
                super::vmscan::wakeup_kswapd(ctx).await;
                return;
            }
            Some(ShmemEntry::Folio(pfn)) => {
                // filemap_get_entry() takes a reference, so the folio is
                // not freed (nor its frame reused) while we wait for it.
                w.hw.borrow_mut().mem.get_frame(pfn);
                folio_lock(ctx, pfn).await;
                let still = w.k.borrow().shmem[id as usize].pages.get(&index).copied();
                let mapped = still == Some(ShmemEntry::Folio(pfn));
                if mapped {
                    finish_fault(ctx, mm, v, va, pfn, write).await;
                    if write {
                        fault_dirty_shared_page(w, pfn);
                    }
                }
                // Else reclaimed while we waited for the lock: look again.
                folio_unlock(ctx, pfn).await;
                w.put_frame(ctx.cpu(), pfn, mm, va);
                if mapped {
                    return;
                }
            }
            Some(ShmemEntry::Swap(slot)) => {
                super::vmscan::direct_reclaim(ctx).await;
                if w.k.borrow().shmem[id as usize].pages.get(&index)
                    != Some(&ShmemEntry::Swap(slot))
                {
                    continue; // swapped in by someone else meanwhile
                }
                shmem_swapin_folio(ctx, id, index, slot).await;
                super::vmscan::wakeup_kswapd(ctx).await;
            }
        }
    }
}

/// `shmem_swapin_folio()`: a new folio, locked before anyone can see it,
/// replaces the swap entry; it is read from the device, marked dirty (the
/// swap copy is dropped) and unlocked. The caller's next look finds it
/// resident.
async fn shmem_swapin_folio(ctx: &Ctx, id: ShmemId, index: u64, slot: SwapSlot) {
    let _f = ctx.func(crate::label!("shmem_swapin_folio"));
    let w = &ctx.w;
    let pfn = add_folio(w, id, index, true, cpu_node(w, ctx.cpu()));
    folio_lock_new(ctx, pfn);
    ctx.work(w.swap_costs().swapin_ns).await;
    zram_read(ctx, slot).await;
    w.k.borrow_mut().swap.put(slot);
    folio_unlock(ctx, pfn).await;
}

/// `fault_dirty_shared_page()` (mm/memory.c, after a write fault on a
/// shared mapping, `do_shared_fault()` or `wp_page_shared()`): the folio
/// is dirty (`folio_mark_dirty()`), whatever later becomes of the PTE
/// (an mprotect to read-only keeps the page dirty).
pub(crate) fn fault_dirty_shared_page(w: &World, pfn: Pfn) {
    if let Some(f) = w.k.borrow_mut().folios.get_mut(&pfn) {
        f.dirty = true;
    }
}

/// Puts a new frame for page `index` of object `id` in its page cache
/// (holding the cache's reference); returns the frame.
pub(crate) fn add_folio(w: &World, id: ShmemId, index: u64, dirty: bool, node: u32) -> Pfn {
    let pfn = w.hw.borrow_mut().mem.alloc_frame();
    let mut k = w.k.borrow_mut();
    k.shmem[id as usize]
        .pages
        .insert(index, ShmemEntry::Folio(pfn));
    let data = k.shmem[id as usize].data;
    let mut f = Folio::new(Mapping::Shmem { id, index }, node, data);
    f.dirty = dirty;
    k.folios.add(pfn, f);
    pfn
}

/// `finish_fault()`: under the PTE lock, maps `pfn` at `va` unless the PTE
/// was filled meanwhile; the mapping takes a frame reference.
async fn finish_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, pfn: Pfn, write: bool) {
    let w = &ctx.w;
    ctx.ptl_lock(mm, va).await;
    if get_pte(w, mm, va).is_none() {
        let perms = if write {
            v.perms
        } else {
            Perms(v.perms.0 & !(Perms::RW.0 & !Perms::R.0))
        };
        w.hw.borrow_mut().mem.get_frame(pfn);
        let (_, tables) = set_pte(w, ctx.cpu(), mm, va, Some((pfn, perms)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    }
    ctx.ptl_unlock(mm, va).await;
}

/// After `mm` unmapped the shared VMAs `removed` (and flushed), frees
/// each object no live address space maps any more
/// (`shmem_evict_inode()`): its resident frames, reported as last mapped
/// by `mm` at the address the removed VMA gave them, and its swap slots.
pub fn release_unmapped(ctx: &Ctx, mm: MmId, removed: &[Vma]) {
    let w = &ctx.w;
    for v in removed {
        let Some(s) = v.shmem else { continue };
        let mapped = {
            let k = w.k.borrow();
            k.shmem[s.id as usize].live
                && k.shmem[s.id as usize].mms.iter().any(|&m| {
                    let m = &k.mms[m];
                    m.live
                        && m.vmas
                            .values()
                            .any(|x| x.shmem.is_some_and(|y| y.id == s.id))
                })
        };
        let keep = {
            let k = w.k.borrow();
            let inode = &k.shmem[s.id as usize];
            !inode.live || inode.regular.is_some() || inode.hugetlbfs.is_some()
        };
        if mapped || keep {
            continue;
        }
        let pages = {
            let mut k = w.k.borrow_mut();
            let inode = &mut k.shmem[s.id as usize];
            inode.live = false;
            inode.mms.clear();
            std::mem::take(&mut inode.pages)
        };
        for (index, e) in pages {
            match e {
                ShmemEntry::Folio(pfn) => {
                    w.k.borrow_mut().folios.remove(&pfn);
                    let va = v.start + index.saturating_sub(s.pgoff) * super::mm_types::PGOFF_UNIT;
                    w.put_frame(ctx.cpu(), pfn, mm, va);
                }
                ShmemEntry::Swap(slot) => {
                    w.k.borrow_mut().swap.put(slot);
                }
            }
        }
    }
}
