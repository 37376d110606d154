//! `x86-lazy-cpumask`: `x86-pcid` with the lazily updated `mm_cpumask`
//! of Linux 6.13 and later (arch/x86/mm/tlb.c), on a CPU with PCIDs (as
//! every x86 server CPU of these kernels' time has; Linux uses them when
//! the CPU does):
//!
//! - 209954cbc7d0 ("x86/mm/tlb: Update mm_cpumask lazily", 6.13):
//!   `switch_mm_irqs_off()` no longer clears this CPU from the previous
//!   mm's mask, and sets it in the next one's only if it is not set
//!   already; a CPU that takes a flush IPI for an mm it no longer runs
//!   clears itself in `flush_tlb_func()`;
//! - 6db2526c1d69 ("x86/mm/tlb: Only trim the mm_cpumask once a second",
//!   6.14, and the stable kernels 6.13.4, 6.12.16, 6.6.79, 6.1.129 and
//!   5.15.179 per CVE-2025-37964's record): a flush that frees no page
//!   tables reaches only the CPUs that run the mm and are not lazy
//!   (`should_flush_tlb()`), except once a second per mm
//!   (`should_trim_cpumask()`), when it reaches every CPU of the mask so
//!   that the stale ones leave it. A flush that freed page tables
//!   (`flush_tlb_mm()` at fork and exit, `munmap` of a whole table) still
//!   reaches every CPU of the mask, stale ones included. (6.13.0 to 6.13.3
//!   had the lazy mask without this: the model's 6.13 is 6.13.4.)
//! - fea4e317f9e7 ("x86/mm: Eliminate window where TLB flushes may be
//!   inadvertently skipped", 6.15, and 6.14.7, 6.12.29, 6.6.91, 6.1.139,
//!   5.15.183): `should_flush_tlb()` also flushes a CPU whose `loaded_mm`
//!   is `LOADED_MM_SWITCHING` (see [`TlbGenFns::switching_skips_flush`]).
//!   The kernels before it, which had CVE-2025-37964, are
//!   `x86-lazy-cpumask-6.14`.
//! - 83b0177a6c48 ("x86/mm: Fix SMP ordering in switch_mm_irqs_off()",
//!   6.18, and 6.17 stable): an `smp_mb()` where the bit was already set,
//!   so that the `tlb_gen` read is ordered after the `loaded_mm` store.
//!   The model's data memory is sequentially consistent, so the barrier
//!   changes nothing here (CVE-2025-40174 needs a weak memory model).
//!
//! **Which kernels this is**: 6.15 and later, and the stable kernels from
//! the fix on (6.14.7+, 6.12.29+, 6.6.91+, 6.1.139+, 5.15.183+).
//!
//! The hooks are [`TlbGenFns::lazy_mm_cpumask`] and
//! [`TlbGenFns::set_cpumask_then_read_gen`], and 6.0's early return
//! [`TlbGenFns::flush_is_known`]; the rest is `x86-pcid`.

use super::tlb_gen::{Inner, Options, TlbGen, TlbGenFns};
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::registry::{Allocators, Feature, PolicyEntry};
use crate::kernel::Ctx;

/// Linux 6.15+ (as of 6.18).
#[derive(Debug, Clone, Copy)]
pub struct LazyCpumask;

impl TlbGenFns for LazyCpumask {
    fn lazy_mm_cpumask(&self) -> bool {
        true
    }

    fn flush_is_known(&self, new_tlb_gen: u64, local_gen: u64) -> bool {
        super::tlb_gen::flush_is_known_6_0(new_tlb_gen, local_gen)
    }

    /// `if (next != &init_mm && !cpumask_test_cpu(cpu, mm_cpumask(next)))
    /// cpumask_set_cpu(cpu, mm_cpumask(next)); else smp_mb();` then
    /// `atomic64_read(&next->context.tlb_gen)`.
    fn set_cpumask_then_read_gen<'a>(
        &'a self,
        g: &'a Inner,
        ctx: &'a Ctx,
        next: MmId,
    ) -> KFuture<'a, u64> {
        Box::pin(async move {
            let cpu = ctx.cpu();
            if !ctx.cpumask_test_cpu(cpu, next) {
                ctx.cpumask_set_cpu(cpu, next).await;
            } else {
                ctx.smp_mb().await;
            }
            ctx.atomic_read(|| g.mm(next).tlb_gen).await
        })
    }
}

/// The registry entry of `x86-lazy-cpumask`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-lazy-cpumask",
    description: "x86-pcid with Linux 6.13+'s lazy mm_cpumask (as fixed for CVE-2025-37964: 6.15+, 6.14.7+): CPUs leave an mm's mask at its next flush IPI, trimmed once a second",
    arch: Arch::X86,
    requires: &[Feature::Pcid],
    allocators: Allocators::PicksOwnTags,
    breaks: None,
    new: || Box::new(TlbGen::with_fns(Options::PCID, &LazyCpumask)),
};

#[cfg(test)]
mod tests {
    use super::super::tlb_gen::{CpuState, Inner};
    use super::super::FlushInfo;
    use super::*;

    #[test]
    fn ordinary_flushes_skip_stale_cpus_unless_trimming() {
        let lazy = TlbGen::with_fns(Options::PCID, &LazyCpumask);
        let stock = TlbGen::new(Options::default());
        let mut info = FlushInfo::range(MmId::new(1), 0x1000, 0x2000, 4096, true);
        let running = CpuState {
            loaded_mm: Some(MmId::new(1)),
            ..CpuState::default()
        };
        let stale = CpuState {
            loaded_mm: Some(MmId::new(2)),
            ..CpuState::default()
        };
        let lazy_cpu = CpuState {
            is_lazy: true,
            ..running
        };
        let f = |g: &Inner, s: &CpuState, i: &FlushInfo| g.should_flush_tlb(s, i);
        assert!(f(&lazy.inner, &running, &info));
        assert!(!f(&lazy.inner, &stale, &info));
        assert!(!f(&lazy.inner, &lazy_cpu, &info));
        // Before 6.13 a CPU in the mask runs the mm or is lazy on it.
        assert!(f(&stock.inner, &stale, &info));
        info.trim_cpumask = true;
        assert!(f(&lazy.inner, &stale, &info));
        assert!(!f(&lazy.inner, &lazy_cpu, &info));
    }
}
