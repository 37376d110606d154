//! Collapsing a PTE-mapped, PMD-sized page-cache folio into one PMD
//! mapping (mm/khugepaged.c), as `madvise(MADV_COLLAPSE)` (Linux 6.1+)
//! does for a file mapping whose folio is already PMD-sized:
//! `madvise_collapse()` → `hpage_collapse_scan_file()` finds
//! `SCAN_PTE_MAPPED_HUGEPAGE` → `collapse_pte_mapped_thp(mm, addr,
//! install_pmd = true)` under the mmap_lock held for writing (6.1-6.5).
//! The PTE table it retracts is freed right after `pmdp_collapse_flush()`
//! (`pte_free()`; 6.6's `pte_free_defer()` waits for an RCU grace period,
//! which no hardware walk cache heeds either).
//!
//! `pmdp_collapse_flush()` is the generic `flush_tlb_range()` over the
//! PMD's range. arm64's invalidates every level; x86's macro passed
//! `freed_tables = false` from 016c4d92cd16 (4.20) until 3ef938c35035
//! ("x86/mm: Fix flush_tlb_range() when used for zapping normal PMDs",
//! 6.15, CVE-2025-22045), so lazy CPUs were not interrupted and kept the
//! freed table in their paging-structure caches (`[kernel]
//! flush_tlb_range_leaf_only`).
//!
//! Where that flush interrupts no CPU (arm64's broadcast TLBIs), a GUP-fast
//! walk (`kernel/mm/gup.rs`) may still be reading the table: since
//! 2ba99c5e0881 ("mm/khugepaged: fix GUP-fast interaction by sending IPI",
//! 6.1) `tlb_remove_table_sync_one()` waits for it before the table is
//! freed (`[kernel] khugepaged_no_table_sync` is the kernel before).

use super::filemap::{large_folio, pmd_suitable, read_only};
use super::mmap::{find_vma, page_align};
use super::mmu_gather::{free_pgtable_page, tlb_remove_table_sync_one};
use super::pgtable::{huge_leaves, pmd_clear_pgtable, present_ptes, set_huge, set_pte};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::Ctx;

/// `madvise(addr, len, MADV_COLLAPSE)` on a file mapping: each PMD of the
/// range whose page-cache folio is PMD-sized is mapped by one PMD leaf.
/// Returns how many were collapsed.
pub async fn sys_madvise_collapse(ctx: &Ctx, addr: u64, len: u64) -> u64 {
    let _f = ctx.func(crate::label!("madvise_collapse"));
    syscall_enter(ctx, "madvise").await;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    let pmd = ctx.w.granule.pmd_size();
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.madvise_ns).await;
    let mut collapsed = 0;
    let mut base = addr.next_multiple_of(pmd);
    while base + pmd <= end {
        collapsed += u64::from(collapse_pte_mapped_thp(ctx, mm, base).await);
        base += pmd;
    }
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "madvise").await;
    collapsed
}

/// `collapse_pte_mapped_thp(mm, haddr, install_pmd = true)`: if every
/// present PTE of the table at `base` maps its page of the PMD-sized
/// folio there, clears them, retracts the table (`pmdp_collapse_flush()`),
/// frees it and maps the folio with one PMD leaf. False if the VMA is not
/// a file mapping that can hold the PMD, the folio is not PMD-sized, the
/// PMD is not a PTE table, or a PTE maps something else.
async fn collapse_pte_mapped_thp(ctx: &Ctx, mm: MmId, base: u64) -> bool {
    let w = &ctx.w;
    let (pmd, page) = (w.granule.pmd_size(), w.granule.page_size());
    let Some(v) = find_vma(w, mm, base).filter(|v| v.file_backed()) else {
        return false;
    };
    let (id, index) = v.shmem_index(base).expect("a file VMA");
    let Some((_, pfn)) = large_folio(w, id, index) else {
        return false;
    };
    if !pmd_suitable(w, &v, base) || !huge_leaves(w, mm, base, base + pmd).is_empty() {
        return false;
    }
    // Steps 1-3: under the PTE lock, every PTE maps its page; clear them.
    ctx.ptl_lock(mm, base).await;
    let ptes = present_ptes(w, mm, base, base + pmd);
    if ptes.iter().any(|(va, p)| p.pfn != pfn + (va - base) / page) {
        ctx.ptl_unlock(mm, base).await;
        return false;
    }
    let cpu = ctx.cpu();
    for (va, p) in &ptes {
        set_pte(w, cpu, mm, *va, None);
        w.put_frame(cpu, p.pfn, mm, *va);
    }
    ctx.work(w.profile.kernel.pte_update_ns * ptes.len() as u64)
        .await;
    // Step 4: pmdp_collapse_flush() under the PMD lock, then the table
    // goes.
    let Some(table) = pmd_clear_pgtable(w, mm, base) else {
        ctx.ptl_unlock(mm, base).await;
        return false;
    };
    let last_level = w.arch() == crate::config::Arch::X86 && w.kcfg.flush_tlb_range_leaf_only;
    flush_tlb_range(ctx, mm, base, base + pmd, page, last_level).await;
    // 2ba99c5e0881: wait out GUP-fast walks where the flush sends no IPI
    // (MMU_GATHER_RCU_TABLE_FREE: arm64, and x86 when it frees tables by
    // RCU); before it, khugepaged freed the table at once
    // (`[kernel] khugepaged_no_table_sync`).
    let rcu_style = w.arch() == crate::config::Arch::Arm64 || w.policy.rcu_table_free();
    if rcu_style && !w.kcfg.khugepaged_no_table_sync {
        tlb_remove_table_sync_one(ctx).await;
    }
    free_pgtable_page(ctx, mm, table);
    // Step 5: install the PMD (clean: read-only until written).
    for i in 0..w.granule.hpage_pmd_nr() {
        w.hw.borrow_mut().mem.get_frame(pfn + i);
    }
    set_huge(w, cpu, mm, base, Some((pfn, read_only(v.perms))));
    ctx.work(w.profile.kernel.pte_update_ns).await;
    ctx.ptl_unlock(mm, base).await;
    true
}
