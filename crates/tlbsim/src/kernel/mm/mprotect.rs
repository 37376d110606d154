//! `mprotect()` (mm/mprotect.c): gives a range a new protection,
//! splitting and merging VMAs, and rewrites and flushes its PTEs
//! (`change_protection()`).

use super::huge_memory::split_huge_range;
use super::mmap::{merge, page_align, split_at};
use super::mmu_gather::{dec_tlb_flush_pending, inc_tlb_flush_pending};
use super::pgtable::{clip_table, present_ptes, pte_tables, set_pte};
use super::tlbbatch::flush_tlb_batched_pending;
use crate::hw::mem::Perms;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::Ctx;

/// `mprotect(addr, len, prot)`: returns false (EINVAL/ENOMEM) if the range
/// is not fully mapped. Private writable mappings keep PTEs read-only
/// (written on the next write fault), as Linux before 6.0 does.
pub async fn sys_mprotect(ctx: &Ctx, addr: u64, len: u64, perms: Perms) -> bool {
    let _f = ctx.func(crate::label!("do_mprotect_pkey"));
    syscall_enter(ctx, "mprotect").await;
    let w = &ctx.w;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    ctx.mmap_write_lock(mm).await;
    ctx.work(w.profile.kernel.mprotect_vma_ns).await;
    let ok = {
        let mut k = w.k.borrow_mut();
        let vmas = &mut k.mms[mm].vmas;
        let mut covered = addr;
        for v in vmas.values() {
            if v.start <= covered && v.end > covered {
                covered = v.end;
            }
        }
        if covered < end {
            false
        } else {
            split_at(vmas, addr);
            split_at(vmas, end);
            for (_, v) in vmas.range_mut(addr..end) {
                v.perms = perms;
            }
            merge(vmas);
            true
        }
    };
    if ok {
        // change_protection(): rewrite every present PTE, flush if any, with
        // mm->tlb_flush_pending raised around it.
        inc_tlb_flush_pending(ctx, mm).await;
        split_huge_range(ctx, mm, addr, end).await;
        let pte_perms = Perms(perms.0 & !(Perms::RW.0 & !Perms::R.0));
        let mut changed = 0;
        for table_va in pte_tables(w, mm, addr, end) {
            let (lo, hi) = clip_table(ctx.w.granule, table_va, addr, end);
            ctx.ptl_lock(mm, table_va).await;
            flush_tlb_batched_pending(ctx, mm).await;
            let ptes = present_ptes(w, mm, lo, hi);
            let cpu = ctx.cpu();
            for (va, p) in &ptes {
                set_pte(w, cpu, mm, *va, Some((p.pfn, pte_perms)));
            }
            ctx.work(w.profile.kernel.pte_update_ns * ptes.len() as u64)
                .await;
            ctx.ptl_unlock(mm, table_va).await;
            changed += ptes.len();
        }
        if changed > 0 {
            flush_tlb_range(ctx, mm, addr, end, w.granule.page_size(), true).await;
        }
        dec_tlb_flush_pending(ctx, mm).await;
    }
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mprotect").await;
    ok
}
