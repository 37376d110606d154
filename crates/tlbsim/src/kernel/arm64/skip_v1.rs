//! `arm64-skip-broadcast-v1`: seed 000's first posting ("\[RFC\] arm64: tlb:
//! skip tlbi broadcast for single threaded TLB flushes", 3 Feb 2020, code as
//! quoted in the thread's replies). The flush is local when the caller is
//! the mm's only user (`current->mm == mm && mm_users <= 1`, re-checked
//! after the mask is written); every other CPU is then marked stale in
//! `mm_cpumask` and flushes the ASID locally when it next switches to the
//! mm — in `check_and_switch_context`, or in `switch_mm` itself when
//! `prev == next` (a CPU coming back from a kernel thread or idle). v1 has
//! no active-CPU count and no lazy state: a lazy CPU keeps the user TTBR0,
//! which is Catalin Marinas's objection (speculative walks by a CPU running
//! a kernel thread on the old tables).

use super::skip_v2::flush_if_stale;
use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Strategy};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;

/// The v1 policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct SkipV1;

impl SkipV1 {
    /// `tlb_flush_check(mm, cpu)` of v1.
    async fn tlb_flush_check(&self, ctx: &Ctx, mm: MmId) -> FlushScope {
        let _f = ctx.func(crate::label!("tlb_flush_check"));
        let w = &ctx.w;
        let cpu = ctx.cpu();
        let mm_users = || w.k.borrow().mms[mm].users;
        let users = ctx.atomic_read(mm_users).await;
        if ctx.mm() != Some(mm) || users > 1 {
            return FlushScope::Broadcast;
        }
        // cpumask_setall(); cpumask_clear_cpu(cpu): one step.
        ctx.atomic().await;
        ctx.cpumask_setall(mm);
        ctx.__cpumask_clear_cpu(cpu, mm);
        ctx.smp_mb().await;
        if mm_users() <= 1 {
            // atomic_read(&mm->mm_users), in the step of smp_mb()
            FlushScope::Local
        } else {
            FlushScope::Broadcast
        }
    }
}

impl TlbPolicy for SkipV1 {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            if prev != Some(next) {
                ctx.w.asid.check_and_switch_context(ctx, next).await;
            } else {
                // cpumask_test_and_clear_cpu() → local_flush_tlb_asid()
                flush_if_stale(ctx, next).await;
            }
        })
    }

    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(flush_if_stale(ctx, mm))
    }

    fn on_new_context(&self, w: &crate::kernel::World, mm: MmId) {
        w.cpumask_clear(mm);
    }

    super::tlbflush::flush_after_tlb_flush_check!();
}

/// The registry entry of `arm64-skip-broadcast-v1`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-skip-broadcast-v1",
    description:
        "seed 000 v1: local TLBI when current->mm == mm and mm_users <= 1, stale CPUs in mm_cpumask",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    // Catalin Marinas's objection to v1 (docs/validation.md): a CPU the
    // process left keeps its TTBR0 and walk-cache entries, and a local-only
    // flush frees a page-table page they point to.
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleWalk,
        search: Search::Explore {
            experiment: crate::experiment_file!("experiments/seed000-safety.toml"),
            strategy: Strategy::Random,
            schedules: 100,
            seed: 1,
            max_actions: 200_000,
            speculation: 2,
        },
    }),
    new: || Box::new(SkipV1),
};
