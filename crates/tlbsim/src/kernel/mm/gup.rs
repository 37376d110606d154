//! GUP-fast (mm/gup.c, `get_user_pages_fast()` → `lockless_pages_from_mm()`):
//! a software walk of the caller's page tables with interrupts off and no
//! lock, as direct I/O, futexes on shared memory or io_uring's buffer
//! registration pin user pages. It reads the PMD (`pmdp_get_lockless()`),
//! then a PTE in the table the PMD pointed to (`ptep_get_lockless()`), and
//! rechecks both before pinning the page (70cbc3cc78a99). Between the two
//! reads the table must not be freed: a kernel that frees page tables
//! after a TLB flush that interrupts every CPU (x86) or after
//! `tlb_remove_table_sync_one()`'s IPI or an RCU grace period keeps it
//! alive, since this CPU takes neither an interrupt nor a quiescent state
//! until it is done. The checker sees the PTE read as
//! `Event::SoftwareWalk`.

use super::pgtable::{get_pte, pmd_pgtable};
use crate::kernel::Ctx;
use crate::observe::Event;

/// `get_user_pages_fast(va, 1, 0, &page)` on the caller's mm: whether the
/// page at `va` was found present (and would be pinned; the model takes
/// no reference). A huge PMD or an empty one needs no PTE read (the slow
/// path, `get_user_pages()`, is not modelled: the caller gets false).
pub async fn get_user_pages_fast(ctx: &Ctx, va: u64) -> bool {
    let _f = ctx.func(crate::label!("lockless_pages_from_mm"));
    let w = &ctx.w;
    let mm = ctx.mm().expect("user task");
    ctx.irq_save(); // local_irq_save()
                    // gup_pmd_range(): pmd = pmdp_get_lockless(pmdp).
    let pmd = ctx.atomic_read(|| pmd_pgtable(w, mm, va)).await;
    let mut found = false;
    if let Some((table, instance)) = pmd {
        // gup_pte_range(): pte = ptep_get_lockless(ptep) in that table.
        ctx.atomic_read(|| ()).await;
        ctx.emit(Event::SoftwareWalk {
            cpu: ctx.cpu(),
            mm,
            va,
            table,
            instance,
        });
        // The recheck: the PMD still points at the table, the PTE is
        // present.
        found = pmd_pgtable(w, mm, va) == Some((table, instance)) && get_pte(w, mm, va).is_some();
    }
    ctx.irq_restore(); // local_irq_restore()
    found
}
