//! NUMA balancing's hinting faults (kernel/sched/fair.c
//! `task_numa_work()`, mm/mempolicy.c `change_prot_numa()`, mm/mprotect.c
//! `change_protection_range()`, mm/memory.c `do_numa_page()`; Linux
//! 5.15): a task's scan makes the present PTEs of its address space
//! `PROT_NONE` (under `mmap_lock` for reading, so scans of one mm by two
//! of its threads overlap), flushes each range once after its PTEs
//! changed, with `mm->tlb_flush_pending` raised meanwhile; the next
//! access takes a hinting fault that makes the PTE accessible again.
//!
//! Between a scan's PTE change and its flush, other CPUs may still use
//! their old translations. Anything that moves the page meanwhile
//! (migration's `try_to_migrate()` → `ptep_clear_flush()`) must flush
//! although the PTE grants nothing: `pte_accessible()` says so while a
//! flush is pending (20841405940e, 3.13). Two kernels got this wrong:
//! 3.8-3.12 (`[kernel] pte_accessible_ignores_pending`) and 3.13-4.12,
//! whose pending flag was a bool that the first scan to finish cleared
//! (`[kernel] tlb_flush_pending_bool`, 16af97dc5a89).
//!
//! What the model leaves out (docs/model.md, "NUMA-hinting faults"): the
//! scan's trigger (the scheduler tick's `task_tick_numa()` queueing the
//! work; workloads call [`task_numa_work`] themselves), its period and
//! size limits, `mmap_read_trylock()` (the scan waits for the lock),
//! huge PMDs (left as they are), and the fault's migration of a misplaced
//! page (`numa_migrate_prep()` never finds one: the page stays). The
//! fault restores the PTE read-only; a write then takes a write fault
//! (Linux keeps the write bit through `pte_savedwrite()`).

use super::hugetlb::is_vm_hugetlb_page;
use super::mmu_gather::{dec_tlb_flush_pending, inc_tlb_flush_pending};
use super::pgtable::{clip_table, get_pte, present_ptes, pte_tables, set_pte};
use super::tlbbatch::flush_tlb_batched_pending;
use crate::hw::mem::{Perms, ZERO_PFN};
use crate::hw::tlb::MmId;
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::{Ctx, Vma};
use crate::observe::Event;

/// `task_numa_work()` of the current task: under its mm's `mmap_lock` for
/// reading, `change_prot_numa()` over every VMA it may scan
/// (`vma_migratable()`, accessible, not a read-only file mapping, not
/// hugetlb). Returns the PTEs made `PROT_NONE`.
///
/// For the checker the scan is a call (`CallEnter`/`CallExit`
/// "task_numa_work"), as task work run on the way back to user space:
/// what it made `PROT_NONE` must be gone from every CPU when it returns,
/// and until then its flush is owed.
pub async fn task_numa_work(ctx: &Ctx) -> u64 {
    let _f = ctx.func(crate::label!("task_numa_work"));
    let (cpu, task) = (ctx.cpu(), ctx.task);
    ctx.emit(Event::CallEnter {
        cpu,
        task,
        call: "task_numa_work",
    });
    let mm = ctx.mm().expect("user task");
    ctx.mmap_read_lock(mm).await;
    let vmas: Vec<Vma> = ctx.w.k.borrow().mms[mm]
        .vmas
        .values()
        .filter(|v| {
            // Not a read-only file mapping (shared library text).
            v.perms.read() && !is_vm_hugetlb_page(v) && (!v.file_backed() || v.perms.write())
        })
        .copied()
        .collect();
    let mut pages = 0;
    for v in vmas {
        pages += change_prot_numa(ctx, mm, v.start, v.end).await;
    }
    ctx.mmap_read_unlock(mm).await;
    ctx.emit(Event::CallExit {
        cpu: ctx.cpu(),
        task,
        call: "task_numa_work",
    });
    pages
}

/// `change_prot_numa()` → `change_protection(vma, addr, end, PAGE_NONE,
/// MM_CP_PROT_NUMA)` → `change_protection_range()` (5.15): with
/// `mm->tlb_flush_pending` raised, each PTE table under its lock
/// (`change_pte_range()`: `flush_tlb_batched_pending()` first) has its
/// present PTEs made `PROT_NONE`, except those already so and the zero
/// page's; then, if any changed, one `flush_tlb_range()` of the range,
/// and the pending count dropped. Returns the PTEs changed.
pub async fn change_prot_numa(ctx: &Ctx, mm: MmId, start: u64, end: u64) -> u64 {
    let _f = ctx.func(crate::label!("change_prot_numa"));
    let w = &ctx.w;
    inc_tlb_flush_pending(ctx, mm).await;
    let mut pages = 0;
    for table_va in pte_tables(w, mm, start, end) {
        let (lo, hi) = clip_table(w.granule, table_va, start, end);
        ctx.ptl_lock(mm, table_va).await;
        flush_tlb_batched_pending(ctx, mm).await;
        let mut ptes = present_ptes(w, mm, lo, hi);
        // "Avoid TLB flush if possible": already PROT_NONE; and the zero
        // page is never migrated.
        ptes.retain(|(_, p)| p.perms != Perms::NONE && p.pfn != ZERO_PFN);
        let cpu = ctx.cpu();
        for &(va, p) in &ptes {
            set_pte(w, cpu, mm, va, Some((p.pfn, Perms::NONE)));
        }
        ctx.work(w.profile.kernel.pte_update_ns * ptes.len() as u64)
            .await;
        ctx.ptl_unlock(mm, table_va).await;
        pages += ptes.len() as u64;
    }
    if pages > 0 {
        flush_tlb_range(ctx, mm, start, end, w.granule.page_size(), true).await;
    }
    dec_tlb_flush_pending(ctx, mm).await;
    pages
}

/// `do_numa_page()` at `va` of `v` (an accessible VMA whose PTE is
/// `PROT_NONE`: `pte_protnone() && vma_is_accessible()`): under the PTE
/// lock, if the PTE is still that one, `out_map:` makes it accessible
/// again (`pte_modify(old_pte, vma->vm_page_prot)`, read-only: see the
/// module doc). No page is found misplaced.
pub(super) async fn do_numa_page(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) {
    let _f = ctx.func(crate::label!("do_numa_page"));
    let w = &ctx.w;
    ctx.ptl_lock(mm, va).await;
    if let Some(p) = get_pte(w, mm, va).filter(|p| p.perms == Perms::NONE) {
        set_pte(w, ctx.cpu(), mm, va, Some((p.pfn, v.perms.wrprotect())));
        ctx.work(w.profile.kernel.pte_update_ns).await;
    }
    ctx.ptl_unlock(mm, va).await;
}
