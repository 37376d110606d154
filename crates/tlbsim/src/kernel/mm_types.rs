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
}
