//! The seams where architecture policies plug in. Each policy declares its
//! entry in its own file; `registry.rs` lists them.

use super::registry::{find_allocator, find_policy, AllocatorEntry};
use super::{Ctx, World};
use crate::engine::exec::KFuture;
use crate::hw::tlb::{Asid, MmId};

/// An architecture's `switch_mm` and TLB-flush entry points (include/linux/
/// mmu_context.h, asm-generic/tlbflush.h); each policy implements them with
/// its architecture's primitives (`kernel/arm64/tlbflush.rs`,
/// `kernel/x86/`). Every method runs on the calling CPU.
pub trait TlbPolicy {
    /// One-time setup once CPUs exist (e.g. registering IPI handlers).
    fn init(&self, w: &World) {
        let _ = w;
    }
    /// `switch_mm(prev, next)`: make `next` the CPU's user address space.
    /// `prev` is the previous `active_mm` (may equal `next`).
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()>;
    /// `enter_lazy_tlb(mm, tsk)`: the CPU keeps `mm` as its `active_mm`
    /// while running a task without an mm. `to_idle` is true when that task
    /// is the CPU's idle task (`is_idle_task(tsk)`); false for kernel threads
    /// and for a task in `exit_mm()`.
    fn enter_lazy_tlb<'a>(&'a self, ctx: &'a Ctx, mm: MmId, to_idle: bool) -> KFuture<'a, ()> {
        let _ = (ctx, mm, to_idle);
        Box::pin(async {})
    }
    /// Runs inside `check_and_switch_context(mm)` once `mm` holds a valid
    /// ASID on this CPU and before TTBR0 is loaded with it (the
    /// `switch_mm_fastpath:` label of arch/arm64/mm/context.c). Seed 000
    /// flushes a stale ASID locally here.
    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        let _ = (ctx, mm);
        Box::pin(async {})
    }
    /// `flush_tlb_mm(mm)`: invalidate every translation of `mm`.
    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()>;
    /// `flush_tlb_range(vma, start, end)` (arm64 `__flush_tlb_range(vma,
    /// start, end, stride, last_level)`): `stride` is the size in bytes of
    /// the level cleared; `last_level` is false when page-table pages were
    /// freed (walk caches must be invalidated too).
    fn flush_tlb_range<'a>(
        &'a self,
        ctx: &'a Ctx,
        mm: MmId,
        start: u64,
        end: u64,
        stride: u64,
        last_level: bool,
    ) -> KFuture<'a, ()>;
    /// `flush_tlb_page(vma, va)`.
    fn flush_tlb_page<'a>(&'a self, ctx: &'a Ctx, mm: MmId, va: u64) -> KFuture<'a, ()> {
        let page_size = ctx.w.granule.page_size();
        self.flush_tlb_range(ctx, mm, va, va + page_size, page_size, true)
    }
    /// `arch_tlbbatch_should_defer(mm)`: may reclaim defer the flush of a
    /// PTE of `mm` it clears (`TTU_BATCH_FLUSH`) to one flush per batch?
    /// Default: no, every unmap flushes at once (`ptep_clear_flush`).
    fn arch_tlbbatch_should_defer(&self, ctx: &Ctx, mm: MmId) -> bool {
        let _ = (ctx, mm);
        false
    }
    /// `arch_tlbbatch_add_pending(&current->tlb_ubc.arch, mm, va)`: the
    /// PTE of `mm` at `va` was cleared; start its invalidation (the
    /// batch's state is the task's `tlb_ubc.arch`). Called only if
    /// [`TlbPolicy::arch_tlbbatch_should_defer`] said yes; the default
    /// flushes the page at once.
    fn arch_tlbbatch_add_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId, va: u64) -> KFuture<'a, ()> {
        Box::pin(crate::kernel::tlbflush::flush_tlb_page(ctx, mm, va))
    }
    /// `arch_tlbbatch_flush(&current->tlb_ubc.arch)`: complete every
    /// invalidation the task's batch started.
    fn arch_tlbbatch_flush<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        let _ = ctx;
        Box::pin(async {})
    }
    /// What `flush_tlb_batched_pending(mm)` does when a reclaim flush of
    /// `mm` may still be outstanding: `flush_tlb_mm(mm)` (x86 always;
    /// arm64 since v6.16), or, in arm64 v6.6-v6.15,
    /// `arch_flush_tlb_batched_pending()`'s bare `DSB ISH`.
    fn arch_flush_tlb_batched_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(crate::kernel::tlbflush::flush_tlb_mm(ctx, mm))
    }
    /// Does this kernel free page-table pages after an RCU grace period
    /// (`MMU_GATHER_RCU_TABLE_FREE`, `kernel/rcu.rs`)? Default: no, right
    /// after the flush.
    fn rcu_table_free(&self) -> bool {
        false
    }
    /// Does this kernel's `shrink_folio_list()` flush and free each time
    /// its batch of [`PAGEVEC_SIZE`](crate::kernel::mm::vmscan::PAGEVEC_SIZE)
    /// folios fills (Linux 6.9+, bc2ff4cbc329 "mm: free folios in a batch
    /// in shrink_folio_list()")? Default: no, once for the whole list, as
    /// every kernel before.
    fn reclaim_frees_in_batches(&self) -> bool {
        false
    }
    /// `pte_dirty(pte)` of a PTE reclaim or migration just cleared: was
    /// the page written through it? It decides `folio_mark_dirty()` in
    /// `try_to_unmap_one()` and whether the task's batch must be flushed
    /// before the page is written out (`tlb_ubc->writable`,
    /// `try_to_unmap_flush_dirty()`). Default: a writable PTE is dirty (the
    /// model maps a page writable only at a write fault, and has no
    /// hardware dirty-bit management).
    fn pte_dirty(&self, pte: crate::hw::mem::Pte) -> bool {
        pte_dirty(pte)
    }
    /// Hook called by the ASID allocator, under its lock, when `mm`
    /// receives a fresh ASID number (not when it keeps its number into a
    /// new generation). Seed 000 clears mm_cpumask there.
    fn on_new_context(&self, w: &World, mm: MmId) {
        let _ = (w, mm);
    }
}

/// The default [`TlbPolicy::pte_dirty`]: a writable PTE is dirty.
pub fn pte_dirty(pte: crate::hw::mem::Pte) -> bool {
    pte.perms.write()
}

/// ASID allocation (arch/arm64/mm/context.c).
pub trait AsidAllocator {
    /// One-time setup once CPUs exist.
    fn init(&self, w: &World);
    /// `check_and_switch_context(mm)`: give `mm` a valid ASID on this CPU and
    /// load TTBR0. Called with interrupts off from a context switch, with
    /// them on from `exec` (`activate_mm`).
    fn check_and_switch_context<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()>;
    /// The (kernel) ASID currently assigned to `mm`.
    fn asid_of(&self, w: &World, mm: MmId) -> Asid;
    /// `finish_arch_post_lock_switch()`: runs in the task that a context
    /// switch resumed, once interrupts are back on (ARM Linux 3.5 allocates
    /// a deferred new context here). Default: nothing.
    fn finish_arch_post_lock_switch<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        let _ = ctx;
        Box::pin(async {})
    }
    /// Can it hand out KPTI pairs (even ASIDs with odd user twins)?
    fn supports_kpti(&self) -> bool {
        true
    }
}

/// The allocator of x86 kernels: there is none (the TLB policy picks a
/// PCID on every switch). Calling it is a configuration error caught at
/// build time (`asid_allocator = "none"` only with x86 policies).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAllocator;

impl AsidAllocator for NoAllocator {
    fn init(&self, _w: &World) {}

    fn check_and_switch_context<'a>(&'a self, _ctx: &'a Ctx, _mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async { unreachable!("asid_allocator \"none\" is only built with x86 policies") })
    }

    fn asid_of(&self, _w: &World, _mm: MmId) -> Asid {
        0
    }

    fn supports_kpti(&self) -> bool {
        false
    }
}

/// `asid_allocator = "none"`.
pub const NO_ALLOCATOR: AllocatorEntry = AllocatorEntry {
    name: "none",
    description: "no ASID allocator: x86 policies choose PCIDs per CPU themselves",
    arch: None,
    breaks: None,
    new: |_, _| Box::new(NoAllocator),
};

/// Builds the TLB policy named `name`; the error lists the known names.
pub fn tlb_policy(name: &str) -> Result<Box<dyn TlbPolicy>, String> {
    find_policy(name).map(|e| (e.new)())
}

/// Builds the ASID allocator named `name` for `k` and `bits`-bit ASIDs.
pub fn asid_allocator(
    name: &str,
    k: &crate::config::KernelConfig,
    bits: u8,
) -> Result<Box<dyn AsidAllocator>, String> {
    find_allocator(name).map(|e| (e.new)(k, bits))
}
