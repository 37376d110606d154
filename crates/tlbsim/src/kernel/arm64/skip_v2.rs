//! `arm64-skip-broadcast-v2`: seed 000 as posted in v2 (Andrea Arcangeli,
//! "arm64: tlb: skip tlbi broadcast", linux-arm-kernel, Feb 2020; never
//! merged). See shared/reference/linux-tlb-algorithms.md §6.
//!
//! - `nr_active_mm` counts the CPUs running the mm; an idle CPU leaves the
//!   count (and loads the reserved TTBR0) when it enters lazy mode, a kernel
//!   thread does not.
//! - `mm_cpumask` bit set = this CPU's TLB may hold stale entries for the
//!   mm's ASID. It is cleared when the mm gets a fresh ASID.
//! - A flush of an mm that at most this CPU runs is local (`TLBI ...E1`,
//!   `DSB NSH`) and marks every other CPU stale; with nobody running it the
//!   flush is skipped. A CPU flushes the ASID locally when it switches to the
//!   mm with its own bit set.
//! - The count is re-read after the mask is written (`smp_mb()` between):
//!   with the switch-in's increment, test and flush this is a Dekker pair.
//!   (The posted code wrote the re-check as `likely(atomic_read(..)) <= 1`,
//!   which is always true; `arm64-skip-broadcast-v2-posted` models that.)
//! - The idle CPU's reserved TTBR0 leaves the mm's ASID in TTBR1 (arm64
//!   since v4.15). Whether its cached walks of that ASID stay usable is the
//!   hardware's walk-cache reading: under the Arm ARM's (`asid-tagged`)
//!   a local-only flush that frees page tables leaves them in that CPU's
//!   walk cache (Catalin Marinas's objection, 9 Mar 2020); v2 is safe only
//!   where the reserved TTBR0 write drops them (`flush-on-ttbr-change`).
//!   docs/validation.md, "Walk cache after the reserved TTBR0".

use super::mmu_context::cpu_set_reserved_ttbr0;
use super::tlbflush::local_flush_tlb_asid;
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::cpumask::CpuMask;
use crate::hw::CpuId;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, PolicyEntry};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::Ctx;
use crate::engine::state::{PerCpu, PerMm, State};

/// The v2 policy, with the re-check of the design or of another posting.
#[derive(Debug)]
pub struct SkipV2 {
    /// `mm->context.nr_active_mm`, indexed by mm id (0 beyond the table).
    nr_active: State<PerMm<i64>>,
    /// `DEFINE_PER_CPU(bool, cpu_not_lazy_tlb)` (false at boot: CPUs
    /// start in idle; false beyond the table).
    not_lazy: State<PerCpu<bool>>,
    /// The re-check of `nr_active_mm` after the mask is written: given the
    /// count read, may the flush stay local (or be skipped)?
    recheck: fn(i64) -> bool,
}

impl Default for SkipV2 {
    fn default() -> Self {
        Self::with_recheck(design_recheck)
    }
}

/// The design's re-check: `atomic_read(&mm->context.nr_active_mm) <= 1`.
pub fn design_recheck(nr_active_mm: i64) -> bool {
    nr_active_mm <= 1
}

impl SkipV2 {
    /// v2 whose re-check after `smp_mb()` is `recheck(nr_active_mm)`.
    pub fn with_recheck(recheck: fn(i64) -> bool) -> Self {
        Self {
            nr_active: State::new(PerMm::new()),
            not_lazy: State::new(PerCpu::new()),
            recheck,
        }
    }

    fn nr(&self, mm: MmId) -> i64 {
        self.nr_active.borrow().get_or_default(mm)
    }

    fn add(&self, mm: MmId, d: i64) {
        let mut t = self.nr_active.borrow_mut();
        let n = t.grow_mut(mm);
        *n += d;
        debug_assert!(*n >= 0, "nr_active_mm < 0 for mm {mm}");
    }

    fn is_not_lazy(&self, ctx: &Ctx) -> bool {
        self.not_lazy.borrow().get_or_default(ctx.cpu())
    }

    fn set_not_lazy(&self, ctx: &Ctx, v: bool) {
        *self.not_lazy.borrow_mut().grow_mut(ctx.cpu()) = v;
    }

    /// `tlb_flush_check(mm, cpu)`.
    async fn tlb_flush_check(&self, ctx: &Ctx, mm: MmId) -> FlushScope {
        let _f = ctx.func(crate::label!("tlb_flush_check"));
        let w = &ctx.w;
        let cpu = ctx.cpu();
        if ctx.atomic_read(|| self.nr(mm)).await > 1 {
            return FlushScope::Broadcast;
        }
        let is_local = {
            let k = w.k.borrow();
            k.tasks[ctx.task].active_mm == Some(mm)
        } && self.is_not_lazy(ctx);
        // Scan the stale mask; mark every CPU stale unless all others are
        // (cpumask_next_zero(), cpumask_setall(): one step).
        ctx.atomic().await;
        let local_is_clear = mark_stale(
            &mut w.k.borrow_mut().mms[mm].cpumask,
            cpu,
            is_local,
        );
        ctx.smp_mb().await;
        let n = self.nr(mm); // atomic_read(&mm->context.nr_active_mm), same step
        if (self.recheck)(n) {
            if is_local {
                if !local_is_clear {
                    // cpumask_clear_cpu(), in the step of smp_mb()
                    ctx.__cpumask_clear_cpu(cpu, mm);
                }
                return FlushScope::Local;
            }
            if n == 0 {
                return FlushScope::Skip;
            }
        }
        FlushScope::Broadcast
    }
}

/// The stale-mask update of `tlb_flush_check()`: `next_zero =
/// cpumask_next_zero(-1, mask)`, skipping this CPU's own clear bit when the
/// flush is local; if any clear bit remains, `cpumask_setall()` (this CPU's
/// bit included). Returns `local_is_clear`: the flush is local and only this
/// CPU's bit was clear, left so.
pub fn mark_stale(m: &mut CpuMask, cpu: CpuId, is_local: bool) -> bool {
    let own_clear = !m.test(cpu);
    // No clear bit but perhaps this CPU's (a popcount, word by word).
    let others_all_set = m.count() - usize::from(!own_clear) == m.ncpus() - 1;
    // The own clear bit is skipped only for a local flush.
    if others_all_set && (is_local || !own_clear) {
        is_local && own_clear
    } else {
        m.set_all();
        false
    }
}

/// The switch-in half shared by v1 and v2 (`switch_mm_fastpath:` in the
/// patched context.c): `smp_mb()`; if this CPU's stale bit is set, clear it
/// and flush the ASID locally (`local_flush_tlb_asid`).
pub async fn flush_if_stale(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    let cpu = ctx.cpu();
    ctx.smp_mb().await;
    if !ctx.cpumask_test_cpu(cpu, mm) {
        return;
    }
    ctx.cpumask_clear_cpu(cpu, mm).await;
    w.stats.borrow_mut().cpu[w.pcpu(cpu)].stale_switch_flushes += 1;
    local_flush_tlb_asid(ctx, w.asid.asid_of(w, mm)).await;
}

impl TlbPolicy for SkipV2 {
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            if !self.is_not_lazy(ctx) {
                self.set_not_lazy(ctx, true);
                ctx.atomic_inc(|| self.add(next, 1)).await;
                ctx.w.asid.check_and_switch_context(ctx, next).await;
            } else if prev != Some(next) {
                ctx.atomic_inc(|| self.add(next, 1)).await;
                ctx.w.asid.check_and_switch_context(ctx, next).await;
                if let Some(p) = prev {
                    ctx.atomic_dec(|| self.add(p, -1)).await;
                }
            }
        })
    }

    /// v2's `enter_lazy_tlb()`: an idle CPU loads the reserved TTBR0 and
    /// leaves `nr_active_mm`. v2 skips the reserved TTBR0 under SW PAN
    /// (`if (!system_uses_ttbr0_pan())`, which then has ASID 0 in TTBR1);
    /// the model is a kernel without SW PAN.
    fn enter_lazy_tlb<'a>(&'a self, ctx: &'a Ctx, mm: MmId, to_idle: bool) -> KFuture<'a, ()> {
        Box::pin(async move {
            if self.is_not_lazy(ctx) && to_idle {
                self.set_not_lazy(ctx, false);
                cpu_set_reserved_ttbr0(ctx).await;
                ctx.atomic_dec(|| self.add(mm, -1)).await;
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

/// The registry entry of `arm64-skip-broadcast-v2`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arm64-skip-broadcast-v2",
    description: "seed 000 v2: local TLBI when at most this CPU runs the mm (nr_active_mm), stale CPUs in mm_cpumask",
    arch: Arch::Arm64,
    requires: &[],
    allocators: Allocators::OfArch,
    breaks: None,
    new: || Box::new(SkipV2::default()),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;

    fn mask(bits: &[u32]) -> CpuMask {
        let mut m = CpuMask::new(4);
        for &b in bits {
            m.set(cpuid(b));
        }
        m
    }

    #[test]
    fn a_remote_flusher_with_every_other_cpu_stale_marks_itself_too() {
        // CPU 0 does not run the mm; CPUs 1-3 are already stale. Linux's
        // cpumask_next_zero() finds CPU 0's clear bit and setall()s.
        let mut m = mask(&[1, 2, 3]);
        assert!(!mark_stale(&mut m, cpuid(0), false));
        assert!(m.test(cpuid(0)), "the flusher's own bit is set");
    }

    #[test]
    fn a_local_flusher_keeps_its_own_bit_clear_when_only_it_is_clear() {
        let mut m = mask(&[1, 2, 3]);
        assert!(mark_stale(&mut m, cpuid(0), true));
        assert!(!m.test(cpuid(0)));
        // Another clear bit: everything is set, the caller clears its own.
        let mut m = mask(&[2, 3]);
        assert!(!mark_stale(&mut m, cpuid(0), true));
        assert!(CpuId::all(4).all(|c| m.test(c)));
        // All set already: nothing changes.
        let mut m = mask(&[0, 1, 2, 3]);
        assert!(!mark_stale(&mut m, cpuid(0), false));
        assert!(CpuId::all(4).all(|c| m.test(c)));
    }
}
