//! The address-space structures (`include/linux/mm_types.h`): `struct
//! mm_struct` and `struct vm_area_struct`.

use crate::hw::cpumask::CpuMask;
use crate::hw::mem::{Perms, TableId};
use crate::hw::tlb::MmId;
use crate::kernel::LockId;
use std::collections::BTreeMap;

/// A virtual memory area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Protection.
    pub perms: Perms,
    /// A mapping of an object with a page cache (`vm_file`, `vm_pgoff`):
    /// a `MAP_SHARED | MAP_ANONYMOUS` shmem object, or a regular file
    /// mapped `MAP_SHARED` or `MAP_PRIVATE` ([`ShmemMap::shared`]).
    /// `None`: anonymous memory (`vma_is_anonymous()`).
    pub shmem: Option<ShmemMap>,
    /// Private memory (anonymous, or a private file mapping's
    /// copy-on-write pages): its `anon_vma` and the linear page index of
    /// `start` (see [`AnonMap`]). `None` for shared mappings.
    pub anon: Option<AnonMap>,
    /// Where reverse-map walks visit it among the VMAs of its mm that map
    /// the same pages (the `i_mmap` and `anon_vma` interval trees order
    /// equal page offsets by insertion): 0 for a VMA made by `mmap`,
    /// `brk` or `exec`; `copy_vma()` links the VMA `mremap` moves to
    /// after the old one (its order + 1), which `move_page_tables()`
    /// relies on when it skips the rmap locks (`kernel/mm/mremap.rs`).
    pub rmap_order: u32,
}

/// `vmas` (in address order) in the order reverse-map walks visit them
/// ([`Vma::rmap_order`], then address).
pub fn rmap_ordered<'a>(vmas: impl Iterator<Item = &'a Vma>) -> impl Iterator<Item = &'a Vma> {
    let mut v: Vec<&Vma> = vmas.collect();
    v.sort_by_key(|v| v.rmap_order); // stable: address order within one
    v.into_iter()
}

/// The bytes one unit of a page index (`vm_pgoff`, a folio's index)
/// stands for: 4 KiB whatever the granule. Linux counts these indices in
/// `PAGE_SIZE` pages; the model's are keys compared only with each other
/// and turned back into addresses by the same unit, so with 64 KiB pages
/// each page's index is 16 times Linux's and nothing else differs
/// (docs/model.md, Kernel: base page size).
pub const PGOFF_UNIT: u64 = crate::hw::mem::PAGE_SIZE_4K;

impl Vma {
    /// Is this a shared mapping (`VM_SHARED`)?
    pub fn shared(&self) -> bool {
        self.shmem.is_some_and(|s| s.shared)
    }

    /// Does it map an object with a page cache (`!vma_is_anonymous()`):
    /// a shmem object or a regular file, shared or private?
    pub fn file_backed(&self) -> bool {
        self.shmem.is_some()
    }

    /// The object page mapped at `va` (inside the VMA), if shared.
    pub fn shmem_index(&self, va: u64) -> Option<(ShmemId, u64)> {
        self.shmem
            .map(|s| (s.id, s.pgoff + (va - self.start) / PGOFF_UNIT))
    }

    /// The address mapping object page `index` of `id`, if this VMA maps
    /// it (`vma_address()`).
    pub fn address_of(&self, id: ShmemId, index: u64) -> Option<u64> {
        let s = self.shmem.filter(|s| s.id == id)?;
        self.page_address(s.pgoff, index)
    }

    /// The address of anonymous page `index` of anon id `anon`, if this
    /// VMA maps it (`vma_address()` for an anonymous folio).
    pub fn anon_address_of(&self, anon: AnonId, index: u64) -> Option<u64> {
        let a = self.anon.filter(|a| a.id == anon)?;
        self.page_address(a.pgoff, index)
    }

    /// The linear page index of `va` (inside the VMA) in its anon mapping.
    pub fn anon_index(&self, va: u64) -> Option<(AnonId, u64)> {
        self.anon
            .map(|a| (a.id, a.pgoff + (va - self.start) / PGOFF_UNIT))
    }

    fn page_address(&self, pgoff: u64, index: u64) -> Option<u64> {
        let pages = (self.end - self.start) / PGOFF_UNIT;
        (index >= pgoff && index - pgoff < pages).then(|| self.start + (index - pgoff) * PGOFF_UNIT)
    }

    /// The VMA from `addr` on (inside it), its page offsets advanced.
    pub fn tail_from(&self, addr: u64) -> Vma {
        let pages = (addr - self.start) / PGOFF_UNIT;
        Vma {
            start: addr,
            shmem: self.shmem.map(|m| ShmemMap {
                pgoff: m.pgoff + pages,
                ..m
            }),
            anon: self.anon.map(|a| AnonMap {
                pgoff: a.pgoff + pages,
                ..a
            }),
            ..*self
        }
    }

    /// Does `next`, starting where `self` ends, continue the same object
    /// at the next page (so that the two may merge)?
    pub fn continued_by(&self, next: &Vma) -> bool {
        let pages = (self.end - self.start) / PGOFF_UNIT;
        let shmem = match (self.shmem, next.shmem) {
            (None, None) => true,
            (Some(a), Some(b)) => a.id == b.id && b.pgoff == a.pgoff + pages,
            _ => false,
        };
        let anon = match (self.anon, next.anon) {
            (None, None) => true,
            (Some(a), Some(b)) => a.id == b.id && b.pgoff == a.pgoff + pages,
            _ => false,
        };
        self.end == next.start && shmem && anon
    }
}

/// Id of an `anon_vma` (unique per run, never reused).
pub type AnonId = u64;

/// A private anonymous VMA's `anon_vma` and `vm_pgoff`. Linux gives each
/// VMA an `anon_vma` when it first faults (`anon_vma_prepare()`) and links
/// the child's VMAs to it on fork (`anon_vma_fork()`); a folio points at
/// the `anon_vma` it was faulted under and has the linear page index of
/// its address, which `mremap` keeps (it keeps `vm_pgoff`). The model
/// gives the id at `mmap` and shares it with every fork of the VMA, so the
/// reverse-map walk of a folio visits every VMA descended from the one it
/// was faulted in (Linux visits the same set, or fewer for folios faulted
/// after a fork: docs/model.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnonMap {
    /// The `anon_vma`.
    pub id: AnonId,
    /// Linear page index of the VMA's first page (`vm_pgoff`).
    pub pgoff: u64,
    /// What its pages hold once written (the model has no contents; the
    /// workload declares them at `mmap`).
    pub data: super::swap::PageData,
}

/// Index of a shmem object (`struct shmem_inode_info`) in [`crate::kernel::KState`].
pub type ShmemId = u32;

/// What a file-backed VMA maps: an object and the page of it at the
/// VMA's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmemMap {
    /// The object.
    pub id: ShmemId,
    /// Page offset in the object of the VMA's first page (`vm_pgoff`).
    pub pgoff: u64,
    /// `MAP_SHARED` (`VM_SHARED`): writes go to the object's pages.
    /// False for a `MAP_PRIVATE` file mapping, whose writes copy the
    /// page into a private anonymous one (the VMA then has an
    /// [`AnonMap`] too).
    pub shared: bool,
    /// A hugetlbfs file (`VM_HUGETLB`, `is_vm_hugetlb_page()`):
    /// kernel/mm/hugetlb.rs.
    pub hugetlb: bool,
}

/// An address space (`struct mm_struct`).
#[derive(Debug, Clone)]
pub struct Mm {
    /// Id (never reused).
    pub id: MmId,
    /// Top-level table page.
    pub pgd: TableId,
    /// VMAs by start address.
    pub vmas: BTreeMap<u64, Vma>,
    /// `mm_users`: tasks using the address space.
    pub users: u32,
    /// `mm_count`: references to the structure (users count as one, lazy
    /// borrowers one each).
    pub count: u32,
    /// `mm->context.id`: ASID generation and number (allocator-defined).
    pub context_id: u64,
    /// `mm_cpumask` (meaning is policy-defined).
    pub cpumask: CpuMask,
    /// Concurrent mmu_gathers on this mm (`mm->tlb_flush_pending`).
    pub tlb_flush_pending: u32,
    /// `mm->mmap_base`: mmap hands out the highest free range below it.
    pub mmap_base: u64,
    /// `mm->start_brk`: where the heap (`brk`) begins; `brk()` never goes
    /// below it.
    pub start_brk: u64,
    /// `mm->brk`: the current end of the heap (not page aligned).
    pub brk: u64,
    /// Not yet freed.
    pub live: bool,
    /// `mmap_lock` (reader-writer).
    pub mmap_lock: LockId,
    /// `mm->page_table_lock` (upper levels; unused by the modelled paths).
    pub ptl: LockId,
    /// Split PTE-table locks (`USE_SPLIT_PTE_PTLOCKS`): one per 2 MiB
    /// region that has a PTE table, by `va >> 21`, created on first use.
    pub pte_locks: BTreeMap<u64, LockId>,
    /// `mm->tlb_flush_batched` (Linux 5.17+): bits 0-14 count the
    /// reclaim flushes deferred for this mm (pending), bits 16-30 the
    /// pending count the last `flush_tlb_batched_pending()` caught up with
    /// (flushed); see `kernel/mm/tlbbatch.rs`.
    pub tlb_flush_batched: u32,
    /// The first address space of this one's fork tree (itself if it was
    /// not forked): anonymous folios' reverse map walks the tree.
    pub family: MmId,
}
