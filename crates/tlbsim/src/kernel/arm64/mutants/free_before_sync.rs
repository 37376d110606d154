//! `mutant-free-before-sync`: `arm64-stock` whose table-freeing flushes
//! return before their `DSB ISH`.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::arm64::stock::Stock;
use crate::kernel::arm64::tlbflush::{
    __flush_tlb_range_limit_excess, __flush_tlb_range_op, __tlbi_aside1, round_range,
};
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Source, Strategy};
use crate::kernel::Ctx;

/// `mutant-free-before-sync`: when page-table pages were freed
/// (`!last_level`, or a whole-mm flush), the flush returns after issuing its
/// broadcast TLBIs but before `DSB ISH`, so the caller frees the pages while
/// walk caches may still point at them (breaks "no stale walk").
#[derive(Debug, Clone, Copy)]
pub struct FreeBeforeSync;

impl TlbPolicy for FreeBeforeSync {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Stock.switch_mm(ctx, prev, next)
    }
    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            // flush_tlb_mm() without its dsb(ish)
            let asid = ctx.w.asid.asid_of(&ctx.w, mm);
            ctx.dsb_ishst().await;
            __tlbi_aside1(ctx, asid, true).await;
            // missing: dsb(ish)
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
            if last_level {
                return Stock
                    .flush_tlb_range(ctx, mm, start, end, stride, last_level)
                    .await;
            }
            // __flush_tlb_range() without its dsb(ish)
            let (start, end) = round_range(start, end, stride);
            if __flush_tlb_range_limit_excess(ctx, start, end, stride) {
                return self.flush_tlb_mm(ctx, mm).await;
            }
            ctx.dsb_ishst().await;
            let pages = (end - start) >> ctx.w.granule.page_shift();
            __flush_tlb_range_op(ctx, mm, start, pages, stride, last_level, true).await;
            // missing: dsb(ish)
        })
    }
}

/// Two threads on 2 CPUs, thread 0 munmapping (freeing the PTE table).
pub const THREADS_MUNMAP: &str = "[experiment]\nname = \"threads-munmap\"\nprofile = \"ampere-32\"\n[machine]\ncpus = 2\n[kernel]\ntlb_policy = \"arm64-stock\"\n[workload]\nname = \"threads\"\nthreads = 2\niterations = 3\nop = \"munmap\"\n";

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-free-before-sync",
    description: "MUTANT: table-freeing flushes return before their DSB ISH",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleWalk,
        search: Search::Explore {
            experiment: Source::Inline(THREADS_MUNMAP),
            strategy: Strategy::Exhaustive(2),
            schedules: 100_000,
            seed: 1,
            max_actions: 50_000,
            speculation: 2,
        },
    }),
    new: || Box::new(FreeBeforeSync),
};
