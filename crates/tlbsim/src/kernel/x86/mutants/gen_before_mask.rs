//! `mutant-x86-gen-before-mask`: `x86-pcid` whose `switch_mm_irqs_off()`
//! reads `tlb_gen` before it sets its bit in `mm_cpumask`, the reverse of
//! the order the flush side relies on: a flush that bumps the generation
//! between the read and the set neither IPIs this CPU nor is seen by it.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::registry::{Allocators, Breaks, Feature, PolicyEntry, Search, Strategy};
use crate::kernel::x86::tlb_gen::{Inner, Options, TlbGen, TlbGenFns};
use crate::kernel::Ctx;

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct GenBeforeMask;

impl TlbGenFns for GenBeforeMask {
    /// Reads `tlb_gen`, then sets the cpumask bit.
    fn set_cpumask_then_read_gen<'a>(
        &'a self,
        g: &'a Inner,
        ctx: &'a Ctx,
        next: MmId,
    ) -> KFuture<'a, u64> {
        Box::pin(async move {
            let gen = ctx.atomic_read(|| g.mm(next).tlb_gen).await;
            ctx.cpumask_set_cpu(ctx.cpu(), next).await;
            gen
        })
    }
}

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-x86-gen-before-mask",
    description: "MUTANT: x86-pcid whose switch_mm reads tlb_gen before setting its mm_cpumask bit",
    arch: Arch::X86,
    requires: &[Feature::Pcid],
    allocators: Allocators::PicksOwnTags,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: Search::Explore {
            experiment: crate::experiment_file!("experiments/seed004-explore-switch.toml"),
            strategy: Strategy::Random,
            schedules: 2_000,
            seed: 1,
            max_actions: 50_000,
            speculation: 2,
        },
    }),
    new: || {
        let opts = Options {
            pcid: true,
            ..Options::default()
        };
        Box::new(TlbGen::with_fns(opts, &GenBeforeMask))
    },
};
