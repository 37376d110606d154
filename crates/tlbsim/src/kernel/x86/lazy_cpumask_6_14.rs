//! `x86-lazy-cpumask-6.14`: the kernels that shipped CVE-2025-37964
//! (Linux 6.14 to 6.14.6, 6.13.4 and later 6.13, and the stable kernels
//! 6.12.16-6.12.28, 6.6.79-6.6.90, 6.1.129-6.1.138, 5.15.179-5.15.182,
//! per the CVE record): `x86-lazy-cpumask` before fea4e317f9e7 ("x86/mm:
//! Eliminate window where TLB flushes may be inadvertently skipped").
//!
//! The bug came with 6db2526c1d69 ("x86/mm/tlb: Only trim the mm_cpumask
//! once a second"): `should_flush_tlb()` sends a flush to a CPU only if its
//! `loaded_mm` is the flushed mm. `switch_mm_irqs_off()` stores
//! `LOADED_MM_SWITCHING` there, sets its bit, reads `tlb_gen`, chooses a
//! PCID (no flush if that PCID's generation is current), writes CR3, and
//! only then stores `next`. A flush that bumps `tlb_gen` after the read
//! and looks at the CPU before the store skips it: the CPU runs the mm
//! with the PCID's old translations and no flush is on its way. The fix
//! makes `should_flush_tlb()` flush a CPU whose `loaded_mm` is
//! `LOADED_MM_SWITCHING`; `x86-lazy-cpumask` is the fixed kernel.

use super::lazy_cpumask::LazyCpumask;
use super::tlb_gen::{Inner, Options, TlbGen, TlbGenFns};
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::registry::{Allocators, Feature, Breaks, PolicyEntry, Search, Strategy};
use crate::kernel::Ctx;
use crate::observe::Invariant;

/// The lazy mask of 6.14, whose `should_flush_tlb()` skips a switching CPU.
#[derive(Debug, Clone, Copy)]
pub struct LazyCpumask614;

impl TlbGenFns for LazyCpumask614 {
    fn lazy_mm_cpumask(&self) -> bool {
        true
    }

    fn flush_is_known(&self, new_tlb_gen: u64, local_gen: u64) -> bool {
        super::tlb_gen::flush_is_known_6_0(new_tlb_gen, local_gen)
    }

    fn set_cpumask_then_read_gen<'a>(
        &'a self,
        g: &'a Inner,
        ctx: &'a Ctx,
        next: MmId,
    ) -> KFuture<'a, u64> {
        LazyCpumask.set_cpumask_then_read_gen(g, ctx, next)
    }

    fn switching_skips_flush(&self) -> bool {
        true
    }
}

/// The registry entry of `x86-lazy-cpumask-6.14`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-lazy-cpumask-6.14",
    description: "x86-lazy-cpumask before fea4e317f9e7 (CVE-2025-37964; 6.14-6.14.6, 6.13.4+, stable): should_flush_tlb() skips a CPU between its CR3 write and its loaded_mm store",
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
            max_actions: 200_000,
            speculation: 2,
        },
    }),
    new: || Box::new(TlbGen::with_fns(Options::PCID, &LazyCpumask614)),
};
