//! `arm64-affinity-mm`: TLBI by affinity for host processes, seed 003's
//! TODO ("Extend the TLBI by affinity to per process/thread granularity"),
//! which nobody has built. It assumes hardware whose broadcast-affinity
//! register (HiSilicon's `LSUDVMBM_EL2`, [`crate::hw::dvm_affinity`]) also
//! limits the kernel's own broadcasts, not only a guest's.
//!
//! Tracking is `arm64-cpumask-tracking`'s: a CPU sets its bit in
//! `mm_cpumask(mm)` before it first loads the mm's ASID, and bits are
//! cleared only when the mm gets a fresh ASID. A flush that another CPU's
//! bit makes shareable writes the register with the mask **read at flush
//! time**, after the PTE write and a full barrier, then broadcasts, then
//! puts the register back to "everyone" for the other broadcast paths
//! (reclaim's batches, other policies' code). Either the flusher sees a
//! joining CPU's bit, or that CPU's walks see the new PTE: the register
//! cannot miss a CPU that holds the old translation.
//!
//! Loading the register once per context switch instead is unsafe: a CPU
//! that joins the mm later is missing from the registers other CPUs
//! loaded earlier (`mutant-affinity-mm-switch-time`, which the checker
//! catches).

use super::cpumask_tracking::CpumaskTracking;
use super::tlbflush::{__flush_tlb_range, flush_tlb_mm};
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Feature, PolicyEntry};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;

/// The per-process affinity policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct AffinityMm;

/// Where a flush of `mm` goes, as `arm64-cpumask-tracking` decides: to
/// the CPUs of `mm_cpumask(mm)` if another CPU is in it, local if only
/// this one is, nowhere if none is.
pub async fn tlb_flush_check(ctx: &Ctx, mm: MmId) -> FlushScope {
    CpumaskTracking.tlb_flush_check(ctx, mm).await
}

/// Runs `flush` (a primitive already told where it goes) with this CPU's
/// broadcasts limited to `mm_cpumask(mm)`, read now, when `scope` is
/// shareable; the register is "everyone" again afterwards.
async fn scoped<F: std::future::Future<Output = ()>>(
    ctx: &Ctx,
    mm: MmId,
    scope: FlushScope,
    flush: F,
) {
    if scope != FlushScope::Broadcast {
        return flush.await;
    }
    let _f = ctx.inline_func(crate::label!("tlbi_affinity_set"));
    // write_sysreg(mask, LSUDVMBM_EL2); isb(): later TLBIs see it.
    ctx.write_dvm_affinity(Some(ctx.mm_cpumask(mm))).await;
    ctx.isb().await;
    flush.await;
    ctx.write_dvm_affinity(None).await;
    ctx.isb().await;
}

impl TlbPolicy for AffinityMm {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        CpumaskTracking.switch_mm(ctx, prev, next)
    }

    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        CpumaskTracking.before_ttbr0_load(ctx, mm)
    }

    fn on_new_context(&self, w: &crate::kernel::World, mm: MmId) {
        CpumaskTracking.on_new_context(w, mm)
    }

    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let scope = tlb_flush_check(ctx, mm).await;
            scoped(ctx, mm, scope, flush_tlb_mm(ctx, mm, scope)).await;
        })
    }

    fn flush_tlb_range<'a>(
        &'a self,
        ctx: &'a Ctx,
        mm: MmId,
        start: u64,
        end: u64,
        stride: u64,
        last_level: bool,
    ) -> KFuture<'a, ()> {
        Box::pin(async move {
            let scope = tlb_flush_check(ctx, mm).await;
            let range = (start, end);
            let flush = __flush_tlb_range(ctx, mm, range, stride, last_level, scope);
            scoped(ctx, mm, scope, flush).await;
        })
    }
}

/// The registry entry of `arm64-affinity-mm`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-affinity-mm",
    description: "seed 003's TODO: TLBI by affinity per process; broadcasts reach mm_cpumask, read at flush time",
    arch: Arch::Arm64,
    requires: &[Feature::TlbiAffinity],
    allocators: Allocators::OfArch,
    breaks: None,
    new: || Box::new(AffinityMm),
};
