//! `arm64-cpumask-tracking`: the alternative the seed-000 reviewers asked
//! for, in the style of x86's `mm_cpumask`: a CPU sets its bit in the mm's
//! `mm_cpumask` before it first loads the mm's ASID, and bits are only
//! cleared when the mm receives a fresh ASID (the one point where every
//! earlier translation of the mm is known to be unusable). A flush is
//! broadcast if any other CPU's bit is set, local if only this CPU's is, and
//! skipped if the mask is empty.
//!
//! Ordering: the switch-in sets its bit (an atomic RMW, full barrier) before
//! loading TTBR0; the flusher has written the PTE before it reads the mask.
//! Either the flusher sees the bit, or the new CPU's walks see the new PTE.

use super::stock::switch_mm;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, PolicyEntry};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;

/// The tracking policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpumaskTracking;

impl CpumaskTracking {
    /// Where a flush of `mm` goes: to every CPU if another is in
    /// `mm_cpumask(mm)`, local if only this one is (`arm64-affinity-mm`
    /// decides the same way).
    pub async fn tlb_flush_check(&self, ctx: &Ctx, mm: MmId) -> FlushScope {
        let _f = ctx.func(crate::label!("tlb_flush_check"));
        let cpu = ctx.cpu();
        ctx.smp_mb().await;
        let m = ctx.mm_cpumask(mm);
        if m.any_other_than(cpu) {
            FlushScope::Broadcast
        } else if m.test(cpu) {
            FlushScope::Local
        } else {
            FlushScope::Skip
        }
    }
}

impl TlbPolicy for CpumaskTracking {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Box::pin(switch_mm(ctx, prev, next))
    }

    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let cpu = ctx.cpu();
            // cpumask_set_cpu(); smp_mb__after_atomic(), in the same step.
            ctx.cpumask_set_cpu(cpu, mm).await;
        })
    }

    fn on_new_context(&self, w: &crate::kernel::World, mm: MmId) {
        w.cpumask_clear(mm);
    }

    super::tlbflush::flush_after_tlb_flush_check!();
}

/// The registry entry of `arm64-cpumask-tracking`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-cpumask-tracking",
    description: "reviewers' alternative: mm_cpumask = CPUs that used the ASID; broadcast only if another CPU is in it",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: None,
    new: || Box::new(CpumaskTracking),
};
