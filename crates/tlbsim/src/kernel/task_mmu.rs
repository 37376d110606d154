//! `/proc/PID/clear_refs` (fs/proc/task_mmu.c, `clear_refs_write()`):
//! writing "4" (`CLEAR_REFS_SOFT_DIRTY`) write-protects every present PTE
//! of the mm and clears its soft-dirty bit, so that the next write to each
//! page faults and marks it dirty again (CRIU's incremental dumps track
//! memory that way). The model has no soft-dirty bit: what it keeps is the
//! write-protection and its TLB invalidation.
//!
//! Since 912efa17e512 ("mm: proc: Invalidate TLB after clearing soft-dirty
//! page state", 5.12) the walk runs between `inc_tlb_flush_pending()` and
//! `dec_tlb_flush_pending()` and ends with `flush_tlb_mm()`, as mprotect
//! does. From b3a81d0841a9 (4.15) it ran inside a full-mm `mmu_gather`
//! whose `tlb_finish_mmu()`, since 0758cd830494 ("asm-generic/tlb: avoid
//! potential double flush", 5.5), flushes nothing when no entry was
//! removed or table freed: a CPU keeps its writable translation of a page
//! whose PTE is now read-only (`[kernel] clear_refs_gather`, 5.5-5.11).

use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::mm::mmu_gather::{dec_tlb_flush_pending, inc_tlb_flush_pending, MmuGather};
use crate::kernel::mm::pgtable::{present_ptes, pte_tables, set_pte};
use crate::kernel::mm::TASK_SIZE;
use crate::kernel::tlbflush::flush_tlb_mm;
use crate::kernel::Ctx;

/// `write(/proc/self/clear_refs, "4")`: clears the soft-dirty state of
/// the caller's mm.
pub async fn sys_clear_refs_soft_dirty(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("clear_refs_write"));
    syscall_enter(ctx, "clear_refs").await;
    let w = &ctx.w;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_read_lock(mm).await;
    if w.kcfg.clear_refs_gather {
        // tlb_gather_mmu(&tlb, mm, 0, -1): a full-mm gather.
        let g = MmuGather::begin(ctx, mm, true).await;
        clear_soft_dirty_range(ctx).await;
        // Nothing was added to the gather: tlb_finish_mmu() flushes
        // nothing (0758cd830494).
        g.finish(ctx).await;
    } else {
        inc_tlb_flush_pending(ctx, mm).await;
        clear_soft_dirty_range(ctx).await;
        flush_tlb_mm(ctx, mm).await;
        dec_tlb_flush_pending(ctx, mm).await;
    }
    ctx.mmap_read_unlock(mm).await;
    syscall_exit(ctx, "clear_refs").await;
}

/// `walk_page_range(mm, 0, mm->highest_vm_end, &clear_refs_walk_ops)` for
/// `CLEAR_REFS_SOFT_DIRTY`: `clear_soft_dirty()` on every present PTE,
/// under its table's lock (`ptep_modify_prot_start()`, `pte_wrprotect()`,
/// `ptep_modify_prot_commit()`; no `tlb_remove_tlb_entry()`). Huge
/// mappings are not modelled here (`clear_soft_dirty_pmd()`).
async fn clear_soft_dirty_range(ctx: &Ctx) {
    let w = &ctx.w;
    let mm = ctx.mm().expect("user task");
    let per = w.profile.kernel.pte_update_ns;
    for table_va in pte_tables(w, mm, 0, TASK_SIZE) {
        let hi = table_va.saturating_add(w.granule.pmd_size());
        ctx.ptl_lock(mm, table_va).await;
        let ptes = present_ptes(w, mm, table_va, hi);
        let cpu = ctx.cpu();
        for (va, p) in &ptes {
            set_pte(w, cpu, mm, *va, Some((p.pfn, p.perms.wrprotect())));
        }
        ctx.work(per * ptes.len() as u64).await;
        ctx.ptl_unlock(mm, table_va).await;
    }
}
