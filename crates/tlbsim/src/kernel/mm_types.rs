//! The address-space structures (`include/linux/mm_types.h`): `struct
//! mm_struct` and `struct vm_area_struct`.

use super::LockId;
use crate::hw::cpumask::CpuMask;
use crate::hw::mem::{Perms, TableId};
use crate::hw::tlb::MmId;
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
    /// A `MAP_SHARED | MAP_ANONYMOUS` mapping: the shmem object it maps
    /// and the page of the object at `start` (`vm_file`, `vm_pgoff`).
    /// `None`: private anonymous memory.
    pub shmem: Option<ShmemMap>,
}

impl Vma {
    /// Is this a shared mapping (`VM_SHARED`)?
    pub fn shared(&self) -> bool {
        self.shmem.is_some()
    }

    /// The object page mapped at `va` (inside the VMA), if shared.
    pub fn shmem_index(&self, va: u64) -> Option<(ShmemId, u64)> {
        self.shmem.map(|s| {
            (
                s.id,
                s.pgoff + (va - self.start) / crate::hw::mem::PAGE_SIZE,
            )
        })
    }

    /// The address mapping object page `index` of `id`, if this VMA maps
    /// it (`vma_address()`).
    pub fn address_of(&self, id: ShmemId, index: u64) -> Option<u64> {
        let s = self.shmem.filter(|s| s.id == id)?;
        let pages = (self.end - self.start) / crate::hw::mem::PAGE_SIZE;
        (index >= s.pgoff && index - s.pgoff < pages)
            .then(|| self.start + (index - s.pgoff) * crate::hw::mem::PAGE_SIZE)
    }
}

/// Index of a shmem object (`struct shmem_inode_info`) in [`super::KState`].
pub type ShmemId = u32;

/// What a shared VMA maps: an object and the page of it at the VMA's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmemMap {
    /// The object.
    pub id: ShmemId,
    /// Page offset in the object of the VMA's first page (`vm_pgoff`).
    pub pgoff: u64,
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
    /// (flushed); see `kernel/tlbbatch.rs`.
    pub tlb_flush_batched: u32,
}
