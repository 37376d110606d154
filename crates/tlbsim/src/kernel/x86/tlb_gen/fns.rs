//! The functions of arch/x86/mm/tlb.c that a historical kernel or a
//! mutant of `x86-tlb-gen` replaces ([`TlbGenFns`]), and today's Linux,
//! which takes them all ([`Linux`]).

use super::Inner;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::x86::{CeilingUnit, FlushInfo};
use crate::kernel::Ctx;

/// The functions of arch/x86/mm/tlb.c that a historical kernel or a mutant
/// replaces. Each default is today's Linux; [`Linux`] takes them all.
pub trait TlbGenFns: std::fmt::Debug {
    /// The condition `native_flush_tlb_multi()` puts on lazy CPUs: does
    /// this flush reach them? Since commit b956575bed91, when page-table
    /// pages were freed (their walk caches could reach the freed tables).
    fn flush_reaches_lazy(&self, info: &FlushInfo) -> bool {
        info.freed_tables
    }

    /// What `flush_tlb_mm_range()` counts against the ceiling: the flush's
    /// stride since Linux 4.20 (a31acd3ee8f7), 4 KiB pages before.
    fn ceiling_unit(&self) -> CeilingUnit {
        CeilingUnit::Stride
    }

    /// The part of `switch_mm_irqs_off()` that starts remote flushes to
    /// this CPU: `cpumask_set_cpu(cpu, mm_cpumask(next))`, then (after the
    /// full barrier the flush side pairs with) `atomic64_read(&next->
    /// context.tlb_gen)`. Returns the generation read.
    fn set_cpumask_then_read_gen<'a>(
        &'a self,
        g: &'a Inner,
        ctx: &'a Ctx,
        next: MmId,
    ) -> KFuture<'a, u64> {
        Box::pin(set_cpumask_then_read_gen(g, ctx, next))
    }

    /// Is `mm_cpumask` updated lazily (Linux 6.13+, 209954cbc7d0 "x86/mm/
    /// tlb: Update mm_cpumask lazily")? Then `switch_mm_irqs_off()` leaves
    /// this CPU in the previous mm's mask; a CPU leaves it at the first
    /// flush IPI it takes for an mm it no longer runs; ordinary flushes
    /// reach only the CPUs that run the mm (`should_flush_tlb()`), except
    /// once a second per mm (`should_trim_cpumask()`, 6db2526c1d69).
    /// Before: the bit is cleared at every switch away from the mm.
    fn lazy_mm_cpumask(&self) -> bool {
        false
    }

    /// Does `should_flush_tlb()` skip a CPU that is switching to the mm?
    /// Every kernel since 4.15 marks the switch by storing
    /// `LOADED_MM_SWITCHING` in `loaded_mm` before `cpumask_set_cpu()` and
    /// stores `next` only after `load_new_mm_cr3()`. Since fea4e317f9e7
    /// ("x86/mm: Eliminate window where TLB flushes may be inadvertently
    /// skipped", 6.15) `should_flush_tlb()` flushes a switching CPU; the
    /// flush IPI then waits for the switch to finish (IRQs are off), so the
    /// model, by default, stores `next` in the step that reads `tlb_gen`,
    /// with the same verdicts and fewer steps. Kernels with the lazy mask
    /// before that fix (CVE-2025-37964) answered "no flush" for the marker:
    /// a CPU that read the old `tlb_gen` and chose not to flush its PCID
    /// got no IPI for the newer generation. `true` models them: `loaded_mm`
    /// reads as no user mm (the marker) from the start of the switch until
    /// after the CR3 write.
    fn switching_skips_flush(&self) -> bool {
        false
    }

    /// Does `flush_tlb_func()` return before reading the mm's `tlb_gen`,
    /// the flush being one this CPU's `local_gen` already covers? Since
    /// aa44284960d5 ("x86/mm/tlb: Avoid reading mm_tlb_gen when possible",
    /// 6.0) when `new_tlb_gen <= local_gen`, except for a flush without a
    /// generation (`TLB_GENERATION_INVALID`, 0: reclaim's batch), which
    /// 8f1d56f64f8d excepted before 6.0 ([`flush_is_known_6_0`]). Before
    /// 6.0 never.
    fn flush_is_known(&self, new_tlb_gen: u64, local_gen: u64) -> bool {
        let _ = (new_tlb_gen, local_gen);
        false
    }

    /// `finish_asid_transition()` (INVLPGB).
    fn finish_asid_transition<'a>(
        &'a self,
        g: &'a Inner,
        ctx: &'a Ctx,
        info: FlushInfo,
    ) -> KFuture<'a, ()> {
        Box::pin(crate::kernel::x86::invlpgb::finish_asid_transition(g, ctx, info))
    }
}

/// `flush_tlb_func()`'s early return of Linux 6.0+
/// ([`TlbGenFns::flush_is_known`]): `f->new_tlb_gen !=
/// TLB_GENERATION_INVALID && f->new_tlb_gen <= local_tlb_gen`.
pub fn flush_is_known_6_0(new_tlb_gen: u64, local_gen: u64) -> bool {
    new_tlb_gen != TLB_GENERATION_INVALID && new_tlb_gen <= local_gen
}

/// `TLB_GENERATION_INVALID`: the generation of a flush that has none
/// (`arch_tlbbatch_flush()`'s).
pub const TLB_GENERATION_INVALID: u64 = 0;

/// Today's arch/x86/mm/tlb.c.
#[derive(Debug, Clone, Copy, Default)]
pub struct Linux;

impl TlbGenFns for Linux {}

/// Linux's [`TlbGenFns::set_cpumask_then_read_gen`].
pub async fn set_cpumask_then_read_gen(g: &Inner, ctx: &Ctx, next: MmId) -> u64 {
    // Start remote flushes and then read tlb_gen.
    ctx.cpumask_set_cpu(ctx.cpu(), next).await;
    ctx.atomic_read(|| g.mm(next).tlb_gen).await
}
