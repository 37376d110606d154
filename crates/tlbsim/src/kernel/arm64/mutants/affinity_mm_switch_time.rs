//! `mutant-affinity-mm-switch-time`: `arm64-affinity-mm` that loads the
//! broadcast-affinity register with `mm_cpumask(mm)` when it switches to
//! the mm, as KVM loads a VM's on vCPU load, and never at flush time. A
//! CPU that joins the mm later is missing from the registers other CPUs
//! loaded before: their flushes do not reach it, and it keeps the old
//! translation (the window issue 15 asks about, between a mask change
//! and every CPU having reloaded its register).

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::arm64::cpumask_tracking::CpumaskTracking;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Breaks, Feature, PolicyEntry, Search, Strategy};
use crate::kernel::Ctx;

/// The mutant.
#[derive(Debug, Clone, Copy)]
pub struct SwitchTime;

impl TlbPolicy for SwitchTime {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        CpumaskTracking.switch_mm(ctx, prev, next)
    }

    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            CpumaskTracking.before_ttbr0_load(ctx, mm).await;
            // The bug: the register is loaded here, once.
            ctx.write_dvm_affinity(Some(ctx.mm_cpumask(mm))).await;
            ctx.isb().await;
        })
    }

    fn on_new_context(&self, w: &crate::kernel::World, mm: MmId) {
        CpumaskTracking.on_new_context(w, mm)
    }

    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        // cpumask tracking's flush, with whatever the register holds.
        CpumaskTracking.flush_tlb_mm(ctx, mm)
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
        CpumaskTracking.flush_tlb_range(ctx, mm, start, end, stride, last_level)
    }
}

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-affinity-mm-switch-time",
    description: "MUTANT: TLBI by affinity per process, the register loaded at context switch only",
    arch: Arch::Arm64,
    requires: &[Feature::TlbiAffinity],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: Search::Explore {
            experiment: crate::experiment_file!("experiments/seed003-affinity-race.toml"),
            strategy: Strategy::Random,
            schedules: 3_000,
            seed: 1,
            max_actions: 200_000,
            speculation: 2,
        },
    }),
    new: || Box::new(SwitchTime),
};
