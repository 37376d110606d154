//! `x86-lazy-legacy`: x86 TLB maintenance before seed 004 (Linux 4.12,
//! arch/x86/mm/tlb.c). No PCIDs: every CR3 write flushes the whole
//! (non-global) TLB. A CPU that runs a kernel thread or idle keeps the last
//! user mm loaded (`TLBSTATE_LAZY`) and stays in its `mm_cpumask`, so it
//! keeps receiving that mm's flush IPIs; the first one makes it `leave_mm()`:
//! leave the cpumask and load `swapper_pg_dir` (a CR3 write). Coming back to
//! the same mm reloads CR3 only if `leave_mm()` ran meanwhile.

use super::{flush_tlb_info_local, load_cr3, CeilingUnit, FlushInfo};
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::tlb::MmId;
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, Breaks, PolicyEntry, Search, Strategy};
use crate::observe::Invariant;
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::{Ctx, World};
use crate::engine::state::{PerCpu, State};
use crate::kernel::percpu::{this_cpu, this_cpu_mut};
use std::rc::Rc;

/// `cpu_tlbstate` of one CPU (Linux 4.12).
#[derive(Debug, Clone, Copy, Default)]
struct CpuState {
    /// `cpu_tlbstate.active_mm`: the mm switch_mm last installed.
    active_mm: Option<MmId>,
    /// `cpu_tlbstate.state == TLBSTATE_LAZY`.
    lazy: bool,
}

/// The policy's state.
#[derive(Debug)]
struct Inner {
    /// `DEFINE_PER_CPU(struct tlb_state, cpu_tlbstate)`.
    cpus: State<PerCpu<CpuState>>,
    /// Flush IPIs and the `flush_tlb_info` they carry.
    ipi: super::FlushIpi,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            cpus: State::new(PerCpu::new()),
            ipi: super::FlushIpi::default(),
        }
    }
}

/// What `flush_tlb_batched_pending(mm)` does when reclaim's flush of `mm`
/// may be outstanding.
pub type BatchedPendingFn = for<'a> fn(&'a Ctx, MmId) -> KFuture<'a, ()>;

/// Linux 4.12: nothing (`flush_tlb_batched_pending()` came with
/// 3ea277194daa in 4.13).
fn no_batched_pending(_ctx: &Ctx, _mm: MmId) -> KFuture<'_, ()> {
    Box::pin(async {})
}

/// Linux 4.13 (3ea277194daa, mm/rmap.c): `flush_tlb_mm(mm)`.
pub fn flush_tlb_batched_pending_4_13(ctx: &Ctx, mm: MmId) -> KFuture<'_, ()> {
    Box::pin(crate::kernel::tlbflush::flush_tlb_mm(ctx, mm))
}

/// The policy. See the module doc.
#[derive(Debug)]
pub struct Legacy {
    inner: Rc<Inner>,
    batched_pending: BatchedPendingFn,
    /// `switch_mm()` clears this CPU from the previous mm's `mm_cpumask`
    /// before it loads the next mm's CR3, as before 831d52bc1539
    /// (`x86-lazy-before-831d52b`).
    clear_prev_first: bool,
}

impl Default for Legacy {
    /// Linux 4.12.
    fn default() -> Self {
        Legacy {
            inner: Rc::default(),
            batched_pending: no_batched_pending,
            clear_prev_first: false,
        }
    }
}

impl Legacy {
    /// 4.13's lazy TLB code with `switch_mm()` in the order before
    /// 831d52bc1539 (`x86-lazy-before-831d52b`).
    pub fn clearing_prev_first() -> Self {
        Legacy {
            clear_prev_first: true,
            ..Legacy::with_batched_pending(flush_tlb_batched_pending_4_13)
        }
    }

    /// The same lazy TLB code with `flush_tlb_batched_pending()` doing
    /// `f`.
    pub fn with_batched_pending(f: BatchedPendingFn) -> Self {
        Legacy {
            batched_pending: f,
            ..Legacy::default()
        }
    }
}

impl Inner {
    /// `leave_mm(cpu)`: stop receiving flush IPIs for the lazy mm and load
    /// `swapper_pg_dir` (flushing everything).
    async fn leave_mm(&self, ctx: &Ctx) {
        let _f = ctx.func(crate::label!("leave_mm"));
        let cpu = ctx.cpu();
        let Some(mm) = this_cpu(ctx, &self.cpus).active_mm else {
            return;
        };
        if ctx.cpumask_test_cpu(cpu, mm) {
            ctx.cpumask_clear_cpu(cpu, mm).await;
            load_cr3(ctx, None, 0, true).await;
        }
    }

    /// `flush_tlb_func()`: the IPI handler.
    async fn flush_tlb_func(&self, ctx: &Ctx, f: FlushInfo) {
        let _f = ctx.func(crate::label!("flush_tlb_func"));
        let st = *this_cpu(ctx, &self.cpus);
        if f.mm.is_some() && f.mm != st.active_mm {
            return;
        }
        if !st.lazy {
            super::count(ctx, FlushScope::Local);
            flush_tlb_info_local(ctx, 0, &f).await;
        } else {
            self.leave_mm(ctx).await;
        }
    }

    /// `flush_tlb_mm_range()` (4.12): flush locally if this CPU runs `mm`
    /// (or leave it if lazy), then IPI every other CPU in `mm_cpumask`.
    async fn flush_tlb_mm_range(&self, ctx: &Ctx, info: FlushInfo) {
        let _f = ctx.func(crate::label!("flush_tlb_mm_range"));
        let cpu = ctx.cpu();
        let w = &ctx.w;
        let (cur_mm, active) = {
            let k = w.k.borrow();
            let t = &k.tasks[ctx.task];
            (t.mm, t.active_mm)
        };
        let info = info.clamp(CeilingUnit::BasePages);
        if active == info.mm {
            if cur_mm.is_none() {
                self.leave_mm(ctx).await;
            } else {
                super::count(ctx, FlushScope::Local);
                flush_tlb_info_local(ctx, 0, &info).await;
            }
        }
        ctx.smp_mb().await;
        let mut targets = ctx.mm_cpumask(info.mm.expect("user mm"));
        targets.clear(cpu); // cpumask_any_but(mm_cpumask(mm), cpu)
        if targets.is_empty() {
            return;
        }
        self.ipi.send(ctx, targets, info).await;
    }
}

impl TlbPolicy for Legacy {
    fn init(&self, w: &World) {
        let n = w.ncpus();
        self.inner.cpus.borrow_mut().fill(n, CpuState::default());
        super::FlushIpi::register(
            |i: &Inner| &i.ipi,
            &self.inner,
            w,
            |i, ctx, f| Box::pin(i.flush_tlb_func(ctx, f)),
        );
    }

    /// `switch_mm_irqs_off()` (4.12).
    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        let _ = prev; // cpu_tlbstate.active_mm is authoritative
        Box::pin(async move {
            ctx.irq_save(); // switch_mm_irqs_off()
            self.switch_mm_irqs_off(ctx, next).await;
            ctx.irq_restore();
        })
    }

    fn enter_lazy_tlb<'a>(&'a self, ctx: &'a Ctx, mm: MmId, to_idle: bool) -> KFuture<'a, ()> {
        let _ = (mm, to_idle);
        Box::pin(async move {
            let mut c = this_cpu_mut(ctx, &self.inner.cpus);
            if c.active_mm.is_some() {
                c.lazy = true;
            }
        })
    }

    fn flush_tlb_mm<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(self.inner.flush_tlb_mm_range(ctx, FlushInfo::whole_mm(mm)))
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
        let info = FlushInfo::range(mm, start, end, stride, last_level);
        Box::pin(self.inner.flush_tlb_mm_range(ctx, info))
    }

    /// 4.12 mm/rmap.c `should_defer_flush()`: another CPU is in
    /// `mm_cpumask(mm)`.
    fn arch_tlbbatch_should_defer(&self, ctx: &Ctx, mm: MmId) -> bool {
        super::batch_should_defer(ctx, mm)
    }

    /// 4.12 `set_tlb_ubc_flush_pending()`: `cpumask_or(&tlb_ubc->cpumask,
    /// mm_cpumask(mm))`; nothing is flushed yet.
    fn arch_tlbbatch_add_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId, _va: u64) -> KFuture<'a, ()> {
        Box::pin(async move { super::batch_add_mm_cpumask(ctx, mm) })
    }

    /// 4.12 `try_to_unmap_flush()`: `flush_tlb_others(&tlb_ubc->cpumask,
    /// NULL, 0, TLB_FLUSH_ALL)` and a local flush if this CPU is in it.
    fn arch_tlbbatch_flush<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        Box::pin(async move {
            let mask = ctx.w.k.borrow_mut().tasks[ctx.task].tlb_ubc.arch.cpumask.take();
            let Some(mut mask) = mask else { return };
            let cpu = ctx.cpu();
            let info = FlushInfo::batch();
            if mask.test(cpu) {
                super::count(ctx, FlushScope::Local);
                flush_tlb_info_local(ctx, 0, &info).await;
                mask.clear(cpu);
            }
            if !mask.is_empty() {
                self.inner.ipi.send(ctx, mask, info).await;
            }
        })
    }

    /// Linux 4.12 had no `flush_tlb_batched_pending()` (3ea277194daa added
    /// it in 4.13): an mprotect or munmap that finds a PTE reclaim already
    /// cleared, its flush deferred, flushes nothing for it
    /// (`x86-lazy-4.13` flushes the mm).
    fn arch_flush_tlb_batched_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        (self.batched_pending)(ctx, mm)
    }
}

impl Legacy {
    /// `switch_mm_irqs_off()` (4.12), interrupts already off.
    async fn switch_mm_irqs_off(&self, ctx: &Ctx, next: MmId) {
        let _f = ctx.func(crate::label!("switch_mm_irqs_off"));
        let cpu = ctx.cpu();
        let real_prev = this_cpu(ctx, &self.inner.cpus).active_mm;
        {
            let mut c = this_cpu_mut(ctx, &self.inner.cpus);
            c.lazy = false;
            c.active_mm = Some(next);
        }
        if real_prev != Some(next) {
            if self.clear_prev_first {
                if let Some(p) = real_prev {
                    // Before 831d52bc1539: stop flush IPIs for the
                    // previous mm while its tables are still loaded.
                    ctx.cpumask_clear_cpu(cpu, p).await;
                }
            }
            ctx.cpumask_set_cpu(cpu, next).await;
            load_cr3(ctx, Some(next), 0, true).await;
            if let Some(p) = real_prev.filter(|_| !self.clear_prev_first) {
                // Stop flush ipis for the previous mm.
                ctx.cpumask_clear_cpu(cpu, p).await;
            }
        } else if !ctx.cpumask_test_cpu(cpu, next) {
            // leave_mm() ran while lazy: reload CR3 so that no freed page
            // table is used.
            ctx.cpumask_set_cpu(cpu, next).await;
            load_cr3(ctx, Some(next), 0, true).await;
        }
    }
}

/// The registry entry of `x86-lazy-legacy`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-lazy-legacy",
    description: "x86 before seed 004 (Linux 4.12): lazy CPUs stay in mm_cpumask, the first flush IPI makes them leave_mm; no PCID; reclaim batches flushes but has no flush_tlb_batched_pending (4.13)",
    arch: Arch::X86,
    requires: &[],
    allocators: Allocators::PicksOwnTags,
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: MPROTECT_VS_RECLAIM,
    }),
    new: || Box::new(Legacy::default()),
};

/// Nadav Amit's race (fixed by 3ea277194daa): seed001-explore on
/// skylake-4c8t (a child's mprotect of a page its parent's page-out
/// already unmapped, the flush deferred), 3,000 random schedules of at
/// most 20,000 actions. Linux 4.13's `x86-lazy-4.13` passes it.
pub const MPROTECT_VS_RECLAIM: Search = Search::Explore {
    experiment: crate::experiment_file!("experiments/seed001-explore-x86.toml"),
    strategy: Strategy::Random,
    schedules: 3_000,
    seed: 1,
    max_actions: 20_000,
    speculation: 2,
};
