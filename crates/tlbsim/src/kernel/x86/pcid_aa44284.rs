//! `x86-pcid-aa44284`: `x86-pcid-6.0` as aa44284960d5 ("x86/mm/tlb: Avoid
//! reading mm_tlb_gen when possible") first had it in tip's x86/mm branch
//! and linux-next (June-July 2022), before 8f1d56f64f8d ("x86/mm/tlb:
//! Ignore f->new_tlb_gen when zero"); both reached Linux together in 6.0,
//! so no release shipped the bug. `flush_tlb_func()` returned early when
//! `f->new_tlb_gen <= local_tlb_gen`, and `arch_tlbbatch_flush()` passes
//! generation 0 (`TLB_GENERATION_INVALID`): every CPU skipped reclaim's
//! batched flush. Hugh Dickins found it ("try_to_unmap_one() would not
//! perform any TLB flushes").

use super::tlb_gen::{Options, TlbGen, TlbGenFns};
use crate::config::Arch;
use crate::kernel::registry::{Allocators, Breaks, Feature, PolicyEntry, Search, Strategy};
use crate::observe::Invariant;

/// aa44284960d5's early return, without the exception for 0.
#[derive(Debug, Clone, Copy)]
pub struct Aa44284;

impl TlbGenFns for Aa44284 {
    /// `if (unlikely(f->new_tlb_gen <= local_tlb_gen)) return;`
    fn flush_is_known(&self, new_tlb_gen: u64, local_gen: u64) -> bool {
        new_tlb_gen <= local_gen
    }
}

/// The registry entry of `x86-pcid-aa44284`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-pcid-aa44284",
    description: "x86-pcid-6.0 before 8f1d56f64f8d (tip x86/mm, 2022): flush_tlb_func() skips reclaim's batched flush, whose generation is 0",
    arch: Arch::X86,
    requires: &[Feature::Pcid],
    allocators: Allocators::PicksOwnTags,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: Search::Explore {
            experiment: crate::experiment_file!("experiments/seed001-explore-x86.toml"),
            strategy: Strategy::Random,
            schedules: 2_000,
            seed: 1,
            max_actions: 200_000,
            speculation: 2,
        },
    }),
    new: || Box::new(TlbGen::with_fns(Options::PCID, &Aa44284)),
};
