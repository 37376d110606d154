//! `mutant-range-no-broadcast`: `arm64-stock` whose `flush_tlb_range` uses
//! the local TLBI forms and `DSB NSH`, so other CPUs keep stale entries.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::arm64::stock::Stock;
use crate::kernel::arm64::tlbflush::__flush_tlb_range;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Source, Strategy};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;

/// `mutant-range-no-broadcast`: `flush_tlb_range` uses the local TLBI forms
/// and `DSB NSH`, so other CPUs keep stale entries (breaks "no stale use/hold").
#[derive(Debug, Clone, Copy)]
pub struct RangeNoBroadcast;

impl TlbPolicy for RangeNoBroadcast {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Stock.switch_mm(ctx, prev, next)
    }
    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Stock.flush_tlb_mm(ctx, mm)
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
            let flush = FlushScope::Local;
            __flush_tlb_range(ctx, mm, (start, end), stride, last_level, flush).await;
        })
    }
}

/// Two threads on 2 CPUs, thread 0 mprotecting a page the other reads.
pub const THREADS_MPROTECT: &str = "[experiment]\nname = \"threads-mprotect\"\nprofile = \"ampere-32\"\n[machine]\ncpus = 2\n[kernel]\ntlb_policy = \"arm64-stock\"\n[workload]\nname = \"threads\"\nthreads = 2\niterations = 3\nop = \"mprotect\"\n";

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-range-no-broadcast",
    description: "MUTANT: flush_tlb_range issues local TLBIs only",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: Search::Explore {
            experiment: Source::Inline(THREADS_MPROTECT),
            strategy: Strategy::Exhaustive(2),
            schedules: 100_000,
            seed: 1,
            max_actions: 50_000,
            speculation: 2,
        },
    }),
    new: || Box::new(RangeNoBroadcast),
};
