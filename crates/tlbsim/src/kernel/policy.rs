//! The seams where architecture policies plug in, and the registries that
//! choose them by name. Adding a policy = one file + one line here.

use super::arm64::asid::{AsidMutant, ReservedAsid};
use super::arm64::stock::{decided_flush_mm, decided_flush_range};
use super::tlbflush::FlushScope;
use super::{Ctx, World};
use crate::engine::exec::KFuture;
use crate::hw::tlb::{Asid, MmId};

/// arm64 `switch_mm` and TLB-flush primitives (arch/arm64/include/asm/
/// tlbflush.h and mmu_context.h). Every method runs on the calling CPU.
pub trait TlbPolicy {
    /// The architecture whose kernel this policy is (the profile must match).
    fn arch(&self) -> crate::config::Arch {
        crate::config::Arch::Arm64
    }
    /// One-time setup once CPUs exist (e.g. registering IPI handlers).
    fn init(&self, w: &World) {
        let _ = w;
    }
    /// `switch_mm(prev, next)`: make `next` the CPU's user address space.
    /// `prev` is the previous `active_mm` (may equal `next`).
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()>;
    /// `enter_lazy_tlb(mm, tsk)`: the CPU keeps `mm` as its `active_mm`
    /// while running a task without an mm. `to_idle` is true when that task
    /// is the CPU's idle task (`is_idle_task(tsk)`); false for kernel threads
    /// and for a task in `exit_mm()`.
    fn enter_lazy_tlb<'a>(&'a self, ctx: &'a Ctx, mm: MmId, to_idle: bool) -> KFuture<'a, ()> {
        let _ = (ctx, mm, to_idle);
        Box::pin(async {})
    }
    /// Runs inside `check_and_switch_context(mm)` once `mm` holds a valid
    /// ASID on this CPU and before TTBR0 is loaded with it (the
    /// `switch_mm_fastpath:` label of arch/arm64/mm/context.c). Seed 000
    /// flushes a stale ASID locally here.
    fn before_ttbr0_load<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        let _ = (ctx, mm);
        Box::pin(async {})
    }
    /// Where this CPU's next flush of `mm` goes (seed 000's
    /// `tlb_flush_check`). Used by the provided `flush_tlb_mm` and
    /// `flush_tlb_range`; the default always broadcasts (stock arm64).
    fn flush_scope<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, FlushScope> {
        let _ = (ctx, mm);
        Box::pin(async { FlushScope::Broadcast })
    }
    /// `flush_tlb_mm(mm)`: invalidate every translation of `mm`.
    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        decided_flush_mm(ctx, mm, self.flush_scope(ctx, mm))
    }
    /// `__flush_tlb_range(vma, start, end, stride, last_level)`: `stride` is
    /// the size in bytes of the level cleared; `last_level` is false when
    /// page-table pages were freed (walk caches must be invalidated too).
    fn flush_tlb_range<'a>(
        &'a self,
        ctx: &'a Ctx,
        mm: MmId,
        start: u64,
        end: u64,
        stride: u64,
        last_level: bool,
    ) -> KFuture<'a, ()> {
        let scope = self.flush_scope(ctx, mm);
        decided_flush_range(ctx, mm, (start, end), stride, last_level, scope)
    }
    /// `flush_tlb_page(vma, va)`.
    fn flush_tlb_page<'a>(&'a self, ctx: &'a Ctx, mm: MmId, va: u64) -> KFuture<'a, ()> {
        self.flush_tlb_range(
            ctx,
            mm,
            va,
            va + crate::hw::mem::PAGE_SIZE,
            crate::hw::mem::PAGE_SIZE,
            true,
        )
    }
    /// Hook called by the ASID allocator, under its lock, when `mm`
    /// receives a fresh ASID number (not when it keeps its number into a
    /// new generation). Seed 000 clears mm_cpumask there.
    fn on_new_context(&self, w: &World, mm: MmId) {
        let _ = (w, mm);
    }
}

/// ASID allocation (arch/arm64/mm/context.c).
pub trait AsidAllocator {
    /// One-time setup once CPUs exist.
    fn init(&self, w: &World);
    /// `check_and_switch_context(mm)`: give `mm` a valid ASID on this CPU and
    /// load TTBR0. Called with interrupts off from a context switch, with
    /// them on from `exec` (`activate_mm`).
    fn check_and_switch_context<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()>;
    /// The (kernel) ASID currently assigned to `mm`.
    fn asid_of(&self, w: &World, mm: MmId) -> Asid;
    /// `finish_arch_post_lock_switch()`: runs in the task that a context
    /// switch resumed, once interrupts are back on (ARM Linux 3.5 allocates
    /// a deferred new context here). Default: nothing.
    fn finish_arch_post_lock_switch<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        let _ = ctx;
        Box::pin(async {})
    }
    /// Can it hand out KPTI pairs (even ASIDs with odd user twins)?
    fn supports_kpti(&self) -> bool {
        true
    }
}

/// The allocator of x86 kernels: there is none (the TLB policy picks a
/// PCID on every switch). Calling it is a configuration error caught at
/// build time (`asid_allocator = "none"` only with x86 policies).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAllocator;

impl AsidAllocator for NoAllocator {
    fn init(&self, _w: &World) {}

    fn check_and_switch_context<'a>(&'a self, _ctx: &'a Ctx, _mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async { unreachable!("asid_allocator \"none\" is only built with x86 policies") })
    }

    fn asid_of(&self, _w: &World, _mm: MmId) -> Asid {
        0
    }

    fn supports_kpti(&self) -> bool {
        false
    }
}

type TlbCtor = fn() -> Box<dyn TlbPolicy>;
type AsidCtor = fn(&crate::config::KernelConfig, u8) -> Box<dyn AsidAllocator>;

/// Registered TLB-flush policies: name, one-line description, constructor.
pub const TLB_POLICIES: &[(&str, &str, TlbCtor)] = &[
    (
        "arm64-stock",
        "Linux arm64 flush primitives: always broadcast (TLBI ...IS; DSB ISH)",
        || Box::new(super::arm64::stock::Stock),
    ),
    (
        "arm64-skip-broadcast-v2",
        "seed 000 v2: local TLBI when at most this CPU runs the mm (nr_active_mm), stale CPUs in mm_cpumask",
        || Box::new(super::arm64::skip_v2::SkipV2::default()),
    ),
    (
        "arm64-skip-broadcast-v1",
        "seed 000 v1: local TLBI when current->mm == mm and mm_users <= 1, stale CPUs in mm_cpumask",
        || Box::new(super::arm64::skip_v1::SkipV1),
    ),
    (
        "arm64-cpumask-tracking",
        "reviewers' alternative: mm_cpumask = CPUs that used the ASID; broadcast only if another CPU is in it",
        || Box::new(super::arm64::cpumask_tracking::CpumaskTracking),
    ),
    (
        "x86-lazy-legacy",
        "x86 before seed 004 (Linux 4.12): lazy CPUs stay in mm_cpumask, the first flush IPI makes them leave_mm; no PCID",
        || Box::new(super::x86::legacy::Legacy::default()),
    ),
    (
        "x86-tlb-gen",
        "seed 004: tlb_gen freshness tracking, lazy CPUs get no flush IPIs unless page tables were freed; no PCID",
        || Box::new(super::x86::tlb_gen::TlbGen::default()),
    ),
    (
        "x86-pcid",
        "x86-tlb-gen plus 6 dynamic PCIDs per CPU (Linux 4.14+)",
        || Box::new(super::x86::pcid::new()),
    ),
    (
        "x86-invlpgb",
        "x86-pcid plus AMD INVLPGB: global ASIDs for mms active on 4+ CPUs, flushed by INVLPGB + TLBSYNC (Linux 6.15)",
        || Box::new(super::x86::invlpgb::new()),
    ),
    (
        "mutant-x86-lazy-skip-freed",
        "MUTANT: x86-tlb-gen that skips lazy CPUs even when page tables were freed (seed 004 before commit b956575bed91)",
        || {
            Box::new(super::x86::tlb_gen::TlbGen::new(super::x86::tlb_gen::Options {
                lazy_skip_freed: true,
                ..Default::default()
            }))
        },
    ),
    (
        "mutant-x86-gen-before-mask",
        "MUTANT: x86-pcid whose switch_mm reads tlb_gen before setting its mm_cpumask bit",
        || {
            Box::new(super::x86::tlb_gen::TlbGen::new(super::x86::tlb_gen::Options {
                pcid: true,
                gen_before_mask: true,
                ..Default::default()
            }))
        },
    ),
    (
        "mutant-x86-invlpgb-no-transition",
        "MUTANT: x86-invlpgb whose broadcast flushes skip the CPUs still on a per-CPU ASID",
        || {
            Box::new(super::x86::tlb_gen::TlbGen::new(super::x86::tlb_gen::Options {
                pcid: true,
                invlpgb: true,
                skip_transition: true,
                ..Default::default()
            }))
        },
    ),
    (
        "mutant-range-no-broadcast",
        "MUTANT: flush_tlb_range issues local TLBIs only",
        || Box::new(crate::check::mutants::RangeNoBroadcast),
    ),
    (
        "mutant-v2-likely-recheck",
        "MUTANT: seed 000 v2 as posted, whose nr_active_mm re-check `likely(atomic_read(..)) <= 1` is always true",
        || Box::new(super::arm64::skip_v2::SkipV2::new(false)),
    ),
    (
        "mutant-free-before-sync",
        "MUTANT: table-freeing flushes return before their DSB ISH",
        || Box::new(crate::check::mutants::FreeBeforeSync),
    ),
];

/// Registered ASID allocators.
pub const ASID_ALLOCATORS: &[(&str, &str, AsidCtor)] = &[
    (
        "none",
        "no ASID allocator: x86 policies choose PCIDs per CPU themselves",
        |_, _| Box::new(NoAllocator),
    ),
    (
        "arm64-asid-reserved",
        "Linux arm64 allocator: generations, reserved ASIDs, lockless fast path, no IPIs",
        |k, bits| Box::new(super::arm64::asid::ReservedAsid::new(bits, k.kpti)),
    ),
    (
        "arm-asid-ipi-rollover",
        "ARM before 2012: global counter under cpu_asid_lock, IPI to every CPU at rollover",
        |_, bits| Box::new(super::arm64::asid_ipi::IpiRollover::new(bits)),
    ),
    (
        "mutant-asid-no-reserve",
        "MUTANT: rollover does not reserve the ASIDs running on other CPUs",
        |k, bits| Box::new(ReservedAsid::mutant(bits, k.kpti, AsidMutant::NoReserve)),
    ),
    (
        "mutant-asid-plain-store",
        "MUTANT: the fast path publishes the ASID with a plain store, not a cmpxchg",
        |k, bits| Box::new(ReservedAsid::mutant(bits, k.kpti, AsidMutant::PlainStore)),
    ),
    (
        "mutant-asid-forget-cpu",
        "MUTANT: rollover leaves the last CPU out of tlb_flush_pending",
        |k, bits| Box::new(ReservedAsid::mutant(bits, k.kpti, AsidMutant::ForgetCpu)),
    ),
];

/// Looks up a TLB policy by name; the error lists the known names.
pub fn tlb_policy(name: &str) -> Result<Box<dyn TlbPolicy>, String> {
    TLB_POLICIES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, f)| f())
        .ok_or_else(|| {
            let names: Vec<_> = TLB_POLICIES.iter().map(|(n, _, _)| *n).collect();
            format!(
                "unknown tlb_policy \"{name}\" (known: {})",
                names.join(", ")
            )
        })
}

/// Looks up an ASID allocator by name.
pub fn asid_allocator(
    name: &str,
    k: &crate::config::KernelConfig,
    bits: u8,
) -> Result<Box<dyn AsidAllocator>, String> {
    ASID_ALLOCATORS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, f)| f(k, bits))
        .ok_or_else(|| {
            let names: Vec<_> = ASID_ALLOCATORS.iter().map(|(n, _, _)| *n).collect();
            format!(
                "unknown asid_allocator \"{name}\" (known: {})",
                names.join(", ")
            )
        })
}
