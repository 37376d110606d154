//! `mutant-tlbbatch-no-batch-sync`: `arm64-tlbbatch` whose
//! `arch_tlbbatch_flush()` omits its `DSB ISH`: reclaim frees the pages it
//! unmapped while their `TLBI`s may still be on their way, so another CPU
//! can keep using a translation of a frame handed to someone else (the
//! ordering 72b252aed506 put first: flush, then `free_unref_folios()`).

use crate::check::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::arm64::tlbbatch::TlbBatch;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Source, Strategy};
use crate::kernel::Ctx;

/// The mutant.
#[derive(Debug, Clone, Copy)]
pub struct NoBatchSync;

impl TlbPolicy for NoBatchSync {
    fn arch(&self) -> Arch {
        Arch::Arm64
    }
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        TlbBatch.switch_mm(ctx, prev, next)
    }
    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        TlbBatch.flush_tlb_mm(ctx, mm)
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
        TlbBatch.flush_tlb_range(ctx, mm, start, end, stride, last_level)
    }
    fn arch_tlbbatch_should_defer(&self, ctx: &Ctx, mm: MmId) -> bool {
        TlbBatch.arch_tlbbatch_should_defer(ctx, mm)
    }
    fn arch_tlbbatch_add_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId, va: u64) -> KFuture<'a, ()> {
        TlbBatch.arch_tlbbatch_add_pending(ctx, mm, va)
    }
    fn arch_tlbbatch_flush<'a>(&'a self, _ctx: &'a Ctx) -> KFuture<'a, ()> {
        Box::pin(async {}) // missing: dsb(ish)
    }
}

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-tlbbatch-no-batch-sync",
    description: "arm64-tlbbatch whose batch flush omits its DSB ISH: pages freed before their TLBIs complete",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoUseAfterFree,
        search: Search::Explore {
            experiment: Source::File("experiments/seed001-explore.toml"),
            strategy: Strategy::Random,
            schedules: 2_000,
            seed: 1,
            max_actions: 200_000,
        },
    }),
    new: || Box::new(NoBatchSync),
};
