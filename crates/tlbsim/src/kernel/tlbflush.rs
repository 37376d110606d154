//! What the architectures' flush code shares: the scope a policy gives one
//! flush of a user address space, and the counters of those decisions.
//! Neither `kernel/arm64/` nor `kernel/x86/` owns it (x86 imports nothing
//! from arm64).

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
