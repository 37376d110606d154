//! The batched, deferred TLB flush of reclaim (mm/rmap.c,
//! `CONFIG_ARCH_WANT_BATCHED_UNMAP_TLB_FLUSH`, Linux 4.3+; arm64 since
//! 6.6). With `TTU_BATCH_FLUSH`, `try_to_unmap_one()` clears a PTE and
//! only *starts* its invalidation ([`set_tlb_ubc_flush_pending`]); the
//! task completes all of them at once later ([`try_to_unmap_flush`]),
//! before any freed page is reused and before a dirty page's write-out
//! ([`try_to_unmap_flush_dirty`]).
//!
//! Meanwhile another CPU may change the same mm's page tables and find
//! nothing left to flush (the PTE is already clear) while the old
//! translation is still live: every such path calls
//! [`flush_tlb_batched_pending`] under its PTE lock, which flushes the mm
//! if a deferred flush may be outstanding. `mm->tlb_flush_batched` tells:
//! the pending/flushed generation pair of Linux 5.17 (5ee2fa2f0636), or
//! with `[kernel] tlb_flush_batched_bool` the bool of 4.13-5.16
//! ([`super::tlbbatch_bool`]).
//!
//! The architecture's part is in [`crate::kernel::policy::TlbPolicy`]
//! (`arch_tlbbatch_*`), whose defaults flush every page at once.

use crate::hw::cpumask::CpuMask;
use crate::hw::mem::Pte;
use crate::hw::tlb::MmId;
use crate::kernel::Ctx;

/// `TLB_FLUSH_BATCH_FLUSHED_SHIFT`: the flushed count's position.
pub const TLB_FLUSH_BATCH_FLUSHED_SHIFT: u32 = 16;
/// `TLB_FLUSH_BATCH_PENDING_MASK`: the pending count's bits.
pub const TLB_FLUSH_BATCH_PENDING_MASK: u32 = (1 << (TLB_FLUSH_BATCH_FLUSHED_SHIFT - 1)) - 1;
/// `TLB_FLUSH_BATCH_PENDING_LARGE`: past this the pair is reset to
/// (pending 1, flushed 0), so that pending never wraps round to flushed.
pub const TLB_FLUSH_BATCH_PENDING_LARGE: u32 = TLB_FLUSH_BATCH_PENDING_MASK / 2;

/// `struct arch_tlbflush_unmap_batch`: empty on arm64 (the hardware
/// broadcasts); on x86 the CPUs to flush and whether pages were unmapped.
#[derive(Debug, Clone, Default)]
pub struct ArchBatch {
    /// x86: the union of the `mm_cpumask`s of the mms added.
    pub cpumask: Option<CpuMask>,
    /// x86 6.15+: a PTE was cleared since the last flush.
    pub unmapped_pages: bool,
}

/// `struct tlbflush_unmap_batch` (`current->tlb_ubc`).
#[derive(Debug, Clone, Default)]
pub struct TlbUbc {
    /// The architecture's batch.
    pub arch: ArchBatch,
    /// A flush is owed.
    pub flush_required: bool,
    /// A dirty (possibly writable) PTE was cleared: flush before the
    /// page's write-out.
    pub writable: bool,
}

/// `should_defer_flush(mm, flags)`: the caller passed `TTU_BATCH_FLUSH`
/// (`batch`) and the architecture defers flushes of `mm`.
pub fn should_defer_flush(ctx: &Ctx, mm: MmId, batch: bool) -> bool {
    batch && ctx.w.policy.arch_tlbbatch_should_defer(ctx, mm)
}

/// `set_tlb_ubc_flush_pending(mm, pteval, uaddr)`: after clearing the PTE
/// `pteval` of `mm` at `va` (under its lock), starts its invalidation in
/// the task's batch and counts a pending flush in `mm->tlb_flush_batched`,
/// unless no TLB may hold it (`pte_accessible()`, Linux 6.4+).
pub async fn set_tlb_ubc_flush_pending(ctx: &Ctx, mm: MmId, pteval: Pte, va: u64) {
    let _f = ctx.func(crate::label!("set_tlb_ubc_flush_pending"));
    let w = &ctx.w;
    // 4d4b6d66db63 (6.4): "if (!pte_accessible(mm, pteval)) return;" (no
    // TLB may hold it; earlier kernels deferred a flush all the same).
    if !super::pgtable::pte_accessible(w, mm, pteval) {
        return;
    }
    let writable = w.policy.pte_dirty(pteval);
    w.stats.borrow_mut().reclaim.flush_deferred += 1;
    w.policy.arch_tlbbatch_add_pending(ctx, mm, va).await;
    w.k.borrow_mut().tasks[ctx.task].tlb_ubc.flush_required = true;
    if w.kcfg.tlb_flush_batched_bool {
        super::tlbbatch_bool::set_tlb_flush_batched(ctx, mm).await;
        if writable {
            w.k.borrow_mut().tasks[ctx.task].tlb_ubc.writable = true;
        }
        return;
    }
    // barrier(): the PTE is clear before the count goes up. atomic_read()
    // is a plain load: it happens with the step before it.
    let mut batch = w.k.borrow().mms[mm].tlb_flush_batched;
    loop {
        if batch & TLB_FLUSH_BATCH_PENDING_MASK > TLB_FLUSH_BATCH_PENDING_LARGE {
            // atomic_try_cmpxchg(&mm->tlb_flush_batched, &batch, 1)
            let seen = ctx
                .cmpxchg(|| {
                    let mut k = w.k.borrow_mut();
                    let b = &mut k.mms[mm].tlb_flush_batched;
                    let seen = *b;
                    if seen == batch {
                        *b = 1;
                    }
                    seen
                })
                .await;
            if seen != batch {
                batch = seen;
                continue;
            }
        } else {
            ctx.atomic_inc(|| w.k.borrow_mut().mms[mm].tlb_flush_batched += 1)
                .await;
        }
        break;
    }
    if writable {
        w.k.borrow_mut().tasks[ctx.task].tlb_ubc.writable = true;
    }
}

/// `try_to_unmap_flush()`: completes the task's deferred flushes, if any.
pub async fn try_to_unmap_flush(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("try_to_unmap_flush"));
    let w = &ctx.w;
    if !w.k.borrow().tasks[ctx.task].tlb_ubc.flush_required {
        return;
    }
    w.stats.borrow_mut().reclaim.batch_flushes += 1;
    w.policy.arch_tlbbatch_flush(ctx).await;
    let mut k = w.k.borrow_mut();
    let ubc = &mut k.tasks[ctx.task].tlb_ubc;
    ubc.flush_required = false;
    ubc.writable = false;
}

/// `try_to_unmap_flush_dirty()`: completes them if a dirty PTE was among
/// them (before a page goes to I/O).
pub async fn try_to_unmap_flush_dirty(ctx: &Ctx) {
    if ctx.w.k.borrow().tasks[ctx.task].tlb_ubc.writable {
        try_to_unmap_flush(ctx).await;
    }
}

/// `flush_tlb_batched_pending(mm)`, called with a PTE lock of `mm` held by
/// every path that changes its PTEs: if reclaim deferred a flush of `mm`
/// since the last call (pending != flushed), flushes the mm (the policy's
/// [`arch_flush_tlb_batched_pending`]) and records that it caught up,
/// unless another deferral raced in meanwhile.
///
/// [`arch_flush_tlb_batched_pending`]: crate::kernel::policy::TlbPolicy::arch_flush_tlb_batched_pending
pub async fn flush_tlb_batched_pending(ctx: &Ctx, mm: MmId) {
    let _f = ctx.func(crate::label!("flush_tlb_batched_pending"));
    let w = &ctx.w;
    if w.kcfg.tlb_flush_batched_bool {
        return super::tlbbatch_bool::flush_tlb_batched_pending(ctx, mm).await;
    }
    // atomic_read() is a plain load: it happens with the step before it
    // (the PTE lock's acquisition), so paths that never meet a deferred
    // flush take no extra step.
    let batch = w.k.borrow().mms[mm].tlb_flush_batched;
    let pending = batch & TLB_FLUSH_BATCH_PENDING_MASK;
    let flushed = batch >> TLB_FLUSH_BATCH_FLUSHED_SHIFT;
    if pending == flushed {
        return;
    }
    w.policy.arch_flush_tlb_batched_pending(ctx, mm).await;
    // atomic_cmpxchg(&mm->tlb_flush_batched, batch, pending | pending << 16)
    ctx.cmpxchg(|| {
        let mut k = w.k.borrow_mut();
        let b = &mut k.mms[mm].tlb_flush_batched;
        if *b == batch {
            *b = pending | (pending << TLB_FLUSH_BATCH_FLUSHED_SHIFT);
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generation_word_has_linux_layout() {
        assert_eq!(TLB_FLUSH_BATCH_PENDING_MASK, 0x7fff);
        assert_eq!(TLB_FLUSH_BATCH_PENDING_LARGE, 0x3fff);
        // pending 5, flushed 5: nothing outstanding.
        let caught_up = 5 | (5 << TLB_FLUSH_BATCH_FLUSHED_SHIFT);
        assert_eq!(
            caught_up & TLB_FLUSH_BATCH_PENDING_MASK,
            caught_up >> TLB_FLUSH_BATCH_FLUSHED_SHIFT
        );
    }
}
