//! Memory management, laid out as Linux's mm/: each file models the
//! functions of the Linux file of the same name.
//!
//! | File | Linux | What |
//! |---|---|---|
//! | `mm_types.rs` | include/linux/mm_types.h | `struct mm_struct`, `struct vm_area_struct` |
//! | `mmap.rs` | mm/mmap.c, mm/vma.c | `mmap()`, `munmap()`, placing, finding, splitting and merging VMAs |
//! | `mprotect.rs` | mm/mprotect.c | `mprotect()`, `change_protection()` |
//! | `madvise.rs` | mm/madvise.c | `madvise()`: `MADV_DONTNEED`, `MADV_PAGEOUT`, `MADV_FREE`, `MADV_COLD` |
//! | `mremap.rs` | mm/mremap.c | `mremap()`, `move_page_tables()` |
//! | `brk.rs` | mm/mmap.c (`brk()`) | the heap |
//! | `memory.rs` | mm/memory.c | page faults, copy-on-write |
//! | `huge_memory.rs` | mm/huge_memory.c | transparent huge pages, the huge zero page, `__split_huge_pmd()` |
//! | `hugetlb.rs` | mm/hugetlb.c, fs/hugetlbfs | hugetlbfs files, their faults and unmaps, PMD table sharing |
//! | `mmu_gather.rs` | mm/mmu_gather.c, include/asm-generic/tlb.h | the mmu_gather: zap, free page tables, flush, free |
//! | `pgtable.rs` | include/linux/pgtable.h | the kernel's software page-table walks and writes |
//! | `anon.rs` | mm/rmap.c (`anon_vma`), mm/swap_state.c | private anonymous folios, the swap cache, swap-in |
//! | `shmem.rs` | mm/shmem.c | shared anonymous memory |
//! | `filemap.rs` | mm/filemap.c | a regular file's page cache and its mappings |
//! | `folio.rs` | include/linux/mm_types.h (`struct folio`) | the pages reclaim and migration can take |
//! | `rmap.rs` | mm/rmap.c | the reverse map, `try_to_unmap()` |
//! | `tlbbatch.rs` | mm/rmap.c (`CONFIG_ARCH_WANT_BATCHED_UNMAP_TLB_FLUSH`) | reclaim's batched, deferred flush |
//! | `vmscan.rs` | mm/vmscan.c | page reclaim, kswapd |
//! | `swap.rs` | mm/swapfile.c, drivers/block/zram | swap slots on a zram device |
//! | `migrate.rs` | mm/migrate.c, mm/mempolicy.c | page migration between NUMA nodes |
//! | `numa_balancing.rs` | kernel/sched/fair.c, mm/mempolicy.c, mm/memory.c | NUMA-hinting scans (`task_numa_work()`, `change_prot_numa()`) and faults (`do_numa_page()`) |
//! | `migrate_device.rs` | mm/migrate_device.c, lib/test_hmm.c | migration into a device's memory (`migrate_vma_*()`) |
//!
//! What Linux keeps elsewhere is elsewhere here too: `dup_mmap()`,
//! `mmput()` and `mmdrop()` in `kernel/fork.rs` (kernel/fork.c),
//! `flush_tlb_range()` and the like in `kernel/tlbflush.rs`, the system
//! call bracket in `kernel/entry.rs`, exec's stack in `kernel/exec.rs`.

pub mod anon;
pub mod brk;
pub mod filemap;
pub mod folio;
pub mod gup;
pub mod huge_memory;
pub mod hugetlb;
pub mod khugepaged;
pub mod madvise;
pub mod memory;
pub mod migrate;
pub mod migrate_device;
pub(super) mod mm_types;
pub mod mmap;
pub mod mmu_gather;
pub mod mprotect;
pub mod mremap;
pub mod numa_balancing;
pub mod pgtable;
pub mod rmap;
pub mod shmem;
pub mod swap;
pub mod tlbbatch;
pub mod tlbbatch_bool;
pub mod vmscan;

pub use madvise::sys_madvise_dontneed;
pub use memory::handle_page_fault;
pub use mm_types::{AnonId, AnonMap, Mm, ShmemId, ShmemMap, Vma};
pub use mmap::{sys_mmap, sys_mmap_private, sys_munmap, TASK_SIZE};
pub use mmu_gather::MmuGather;
pub use mprotect::sys_mprotect;
