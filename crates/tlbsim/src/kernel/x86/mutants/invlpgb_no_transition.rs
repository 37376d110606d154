//! `mutant-x86-invlpgb-no-transition`: `x86-invlpgb` whose broadcast
//! flushes skip `finish_asid_transition()`: CPUs still running the mm under
//! a per-CPU ASID are not IPIed, so INVLPGB (which flushes the global ASID
//! only) leaves their entries stale.

use crate::observe::Invariant;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::kernel::registry::{Allocators, Breaks, Feature, PolicyEntry, Search, Source};
use crate::kernel::x86::tlb_gen::{Inner, Options, TlbGen, TlbGenFns};
use crate::kernel::x86::FlushInfo;
use crate::kernel::Ctx;

/// The mutant's functions.
#[derive(Debug, Clone, Copy)]
pub struct NoTransition;

impl TlbGenFns for NoTransition {
    /// Does nothing.
    fn finish_asid_transition<'a>(
        &'a self,
        _g: &'a Inner,
        _ctx: &'a Ctx,
        _info: FlushInfo,
    ) -> KFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// will-it-scale tlb_flush2, 8 threads on a 128-CPU EPYC with INVLPGB: the
/// mm gets a global ASID while threads still run it under per-CPU ASIDs.
pub const TLB_FLUSH_EPYC: &str = "[experiment]\nname = \"invlpgb-transition\"\nprofile = \"epyc-2s\"\n[machine]\ncpus = 128\n[kernel]\ntlb_policy = \"x86-invlpgb\"\nasid_allocator = \"none\"\n[workload]\nname = \"tlb-flush\"\nvariant = 2\nmode = \"threads\"\ntasks = 8\niterations = 300\nwarmup_ns = 33000000\n[checker]\nspeculative_walks = true\n";

/// The registry entry.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "mutant-x86-invlpgb-no-transition",
    description:
        "MUTANT: x86-invlpgb whose broadcast flushes skip the CPUs still on a per-CPU ASID",
    arch: Arch::X86,
    requires: &[Feature::Pcid, Feature::Invlpgb],
    allocators: Allocators::PicksOwnTags,
    breaks: Some(Breaks {
        invariant: Invariant::NoUseAfterFree,
        search: Search::Runs {
            experiment: Source::Inline(TLB_FLUSH_EPYC),
            seeds: &[1],
        },
    }),
    new: || {
        let opts = Options {
            pcid: true,
            invlpgb: true,
        };
        Box::new(TlbGen::with_fns(opts, &NoTransition))
    },
};
