//! `mm->tlb_flush_batched` as the `bool` of Linux 4.13 to 5.16
//! (`[kernel] tlb_flush_batched_bool = true`): 3ea277194daa ("mm, mprotect:
//! flush TLB if potentially racing with a parallel reclaim leaving stale
//! TLB entries") added it, 5ee2fa2f0636 ("mm/rmap: fix potential batched
//! TLB flush race", 5.17) replaced it with the pending/flushed pair of
//! [`super::tlbbatch`].
//!
//! The race the fix closes: reclaim on one CPU stores `true` (for a PTE it
//! cleared under one PTE lock) between another CPU's `flush_tlb_mm()` in
//! [`flush_tlb_batched_pending`] (under a different PTE lock) and that
//! CPU's store of `false`. The second deferral is forgotten: a later
//! `flush_tlb_batched_pending()` of the mm flushes nothing while a
//! translation of the second PTE, cached after the first flush, is still
//! live (the commit: it matters "only if a TLB entry is inserted before
//! the unmapping in the race window").
//!
//! Both stores are plain in C; each is its own step here, so that other
//! CPUs' steps can come between it and what precedes it.

use crate::hw::tlb::MmId;
use crate::kernel::Ctx;

/// The tail of 4.13-5.16's `set_tlb_ubc_flush_pending()`: after
/// `tlb_ubc->flush_required = true`, `barrier();
/// mm->tlb_flush_batched = true;`.
pub async fn set_tlb_flush_batched(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    // mm->tlb_flush_batched = true;
    ctx.atomic_set(|| w.k.borrow_mut().mms[mm].tlb_flush_batched = 1)
        .await;
}

/// 4.13-5.16's `flush_tlb_batched_pending(mm)`, called under a PTE lock
/// of `mm`:
///
/// ```c
/// if (data_race(mm->tlb_flush_batched)) {
///         flush_tlb_mm(mm);
///         barrier();
///         mm->tlb_flush_batched = false;
/// }
/// ```
pub async fn flush_tlb_batched_pending(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    // A plain load: it happens with the step before it (the PTE lock's
    // acquisition), as in the 5.17 form.
    if w.k.borrow().mms[mm].tlb_flush_batched == 0 {
        return;
    }
    w.policy.arch_flush_tlb_batched_pending(ctx, mm).await;
    // barrier(); mm->tlb_flush_batched = false;
    ctx.atomic_set(|| w.k.borrow_mut().mms[mm].tlb_flush_batched = 0)
        .await;
}
