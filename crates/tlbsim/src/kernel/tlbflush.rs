//! What the architectures' flush code shares: the scope a policy gives one
//! flush of a user address space, and the counters of those decisions.
//! Neither `kernel/arm64/` nor `kernel/x86/` owns it (x86 imports nothing
//! from arm64). And the calls generic mm code makes into the policy's
//! flushes (`flush_tlb_range()`, `flush_tlb_mm()`, `flush_tlb_page()` of
//! each architecture's asm/tlbflush.h), timed.

use crate::hw::tlb::MmId;
use crate::kernel::Ctx;

/// Where a policy sends one user-mm flush (seed 000's `tlb_flush_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushScope {
    /// `TLB_FLUSH_NO`: no CPU can hold the translations; issue nothing.
    Skip,
    /// `TLB_FLUSH_LOCAL`: non-shareable TLBIs completed by `DSB NSH`.
    Local,
    /// `TLB_FLUSH_BROADCAST`: inner-shareable TLBIs completed by `DSB ISH`.
    Broadcast,
}

/// Counts a policy's flush decision in the CPU's stats.
pub fn count_flush(ctx: &Ctx, scope: FlushScope) {
    let mut st = ctx.w.stats.borrow_mut();
    let c = &mut st.cpu[ctx.w.pcpu(ctx.cpu())];
    match scope {
        FlushScope::Skip => c.flushes_skipped += 1,
        FlushScope::Local => c.flushes_local += 1,
        FlushScope::Broadcast => c.flushes_broadcast += 1,
    }
}

/// Calls the policy's `flush_tlb_range`, timing it. Like the two below, a
/// macro or `static inline` in Linux: the profile gives its time to the
/// caller ([`Ctx::inline_func`]).
pub async fn flush_tlb_range(
    ctx: &Ctx,
    mm: MmId,
    start: u64,
    end: u64,
    stride: u64,
    last_level: bool,
) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_range"));
    let t0 = ctx.now();
    ctx.w
        .policy
        .flush_tlb_range(ctx, mm, start, end, stride, last_level)
        .await;
    ctx.w
        .stats
        .borrow_mut()
        .flush_latency_ns
        .record(ctx.now().saturating_sub(t0));
}

/// Calls the policy's `flush_tlb_mm`, timing it.
pub async fn flush_tlb_mm(ctx: &Ctx, mm: MmId) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_mm"));
    let t0 = ctx.now();
    ctx.w.policy.flush_tlb_mm(ctx, mm).await;
    ctx.w
        .stats
        .borrow_mut()
        .flush_latency_ns
        .record(ctx.now().saturating_sub(t0));
}

/// Calls the policy's `flush_tlb_page`, timing it.
pub async fn flush_tlb_page(ctx: &Ctx, mm: MmId, va: u64) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_page"));
    let t0 = ctx.now();
    ctx.w.policy.flush_tlb_page(ctx, mm, va).await;
    ctx.w
        .stats
        .borrow_mut()
        .flush_latency_ns
        .record(ctx.now().saturating_sub(t0));
}
