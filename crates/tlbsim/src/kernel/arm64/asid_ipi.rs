//! `arm-asid-ipi-rollover`: the ARM ASID allocator that seed 002 replaced
//! (arch/arm/mm/context.c, Linux 3.5 and before), ported to the model.
//!
//! - `cpu_last_asid` is a global counter; a context whose generation is old
//!   takes `cpu_asid_lock` and is given `++cpu_last_asid`.
//! - When the low bits wrap, the CPU flushes its own TLB, and broadcasts an
//!   IPI (`smp_call_function(reset_context, wait = 1)`) while holding the
//!   lock: every other CPU flushes its TLB and gives the mm it is running
//!   the ASID `cpu_last_asid + cpu + 1` of the new generation. The first
//!   `NR_CPUS` numbers of a generation belong to the running mms.
//! - `set_mm_context` takes the mm's `id_lock` (with interrupts off) so
//!   that two CPUs renewing the same mm agree on one ASID.
//! - A context switch runs with interrupts off, and `__new_context` sends
//!   IPIs, so a switch to an mm of an old generation loads the reserved
//!   TTBR0 and defers the allocation to `finish_arch_post_lock_switch()`,
//!   once interrupts are on (Linux 3.5, 7fec1b57b8a9). `exec`'s
//!   `activate_mm`, with interrupts on, allocates at once.
//!
//! Not ported: `mm_cpumask` bookkeeping (the model's TLB maintenance is
//! broadcast), the VIVT instruction-cache flush. The allocator does not
//! support KPTI (ARMv7 had none).

use crate::engine::exec::KFuture;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, MmId, TlbiScope};
use crate::hw::Ttbr0;
use crate::kernel::policy::AsidAllocator;
use crate::kernel::registry::AllocatorEntry;
use crate::kernel::{Ctx, LockId, Op, World};
use crate::engine::state::{PerCpu, State, Var};
use crate::kernel::percpu::{per_cpu, per_cpu_mut};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// The allocator's state, each field recording its own accesses (the
/// per-CPU ones by CPU).
#[derive(Debug)]
struct Inner {
    bits: u8,
    /// `cpu_last_asid` (generation in the high bits).
    last: State<Var<u64>>,
    /// `DEFINE_PER_CPU(struct mm_struct *, current_mm)`.
    current_mm: State<PerCpu<Option<MmId>>>,
    /// `cpu_asid_lock`.
    lock: Cell<LockId>, // untracked: set once at init: not state an action changes
    /// Per mm `context.id_lock`, created on first use.
    id_locks: State<Var<BTreeMap<MmId, LockId>>>,
    /// The `reset_context` IPI handler.
    handler: Cell<usize>, // untracked: set once at init: not state an action changes
    /// Per CPU: the mm whose new context a switch deferred (`TIF_SWITCH_MM`).
    deferred: State<PerCpu<Option<MmId>>>,
}

impl Inner {
    fn first_version(&self) -> u64 {
        1 << self.bits
    }

    /// `cpu_last_asid`.
    fn last(&self) -> u64 {
        **self.last.borrow()
    }

    /// `cpu_last_asid = v`.
    fn set_last(&self, v: u64) {
        **self.last.borrow_mut() = v;
    }

    fn stale(&self, id: u64) -> bool {
        (id ^ self.last()) >> self.bits != 0
    }

    fn id_lock(&self, w: &World, mm: MmId) -> LockId {
        *self
            .id_locks
            .borrow_mut()
            .entry(mm)
            .or_insert_with(|| w.new_lock("mm_context_id_lock"))
    }

    /// `flush_context()`: `cpu_set_reserved_ttbr0()`, then
    /// `local_flush_tlb_all()`.
    async fn flush_context(&self, ctx: &Ctx) {
        let _f = ctx.func(crate::label!("flush_context"));
        cpu_set_reserved_ttbr0(ctx).await;
        local_flush_tlb_all(ctx).await;
    }

    /// `set_mm_context(mm, asid)`.
    async fn set_mm_context(&self, ctx: &Ctx, mm: MmId, asid: u64) {
        let w = &ctx.w;
        let l = self.id_lock(w, mm);
        ctx.irq_save(); // raw_spin_lock_irqsave(&mm->context.id_lock)
        ctx.spin_lock(l).await;
        let id = w.k.borrow().mms[mm].context_id;
        if self.stale(id) {
            w.k.borrow_mut().mms[mm].context_id = asid;
            w.policy.on_new_context(w, mm);
        }
        ctx.spin_unlock(l).await;
        ctx.irq_restore();
    }

    /// `cpu_switch_mm(mm->pgd, mm)`, with interrupts off: Linux 3.2-3.5
    /// calls it under `local_irq_save()` (`finish_arch_post_lock_switch()`,
    /// commit 7fec1b57b8a9), so no `reset_context` IPI lands between its
    /// read of `mm->context.id` and the write of the ASID register.
    async fn cpu_switch_mm(&self, ctx: &Ctx, mm: MmId) {
        let w = &ctx.w;
        ctx.irq_save();
        let pgd = w.k.borrow().mms[mm].pgd;
        let asid = w.user_asid(mm);
        ctx.step(Op::SetTtbr0(Some(Ttbr0 { mm, pgd, asid }))).await;
        ctx.isb().await;
        ctx.irq_restore();
    }

    /// `reset_context()`: the IPI handler on every other CPU at rollover.
    async fn reset_context(&self, ctx: &Ctx) {
        let cpu = ctx.cpu();
        ctx.smp_rmb().await;
        let Some(mm) = *per_cpu(&self.current_mm, cpu) else {
            return;
        };
        let asid = self.last() + u64::from(cpu.get()) + 1;
        self.flush_context(ctx).await;
        self.set_mm_context(ctx, mm, asid).await;
        self.cpu_switch_mm(ctx, mm).await;
    }

    /// `__new_context(mm)`.
    async fn new_context(&self, ctx: &Ctx, mm: MmId) {
        let _f = ctx.func(crate::label!("new_context"));
        let w = &ctx.w;
        let cpu = ctx.cpu();
        ctx.spin_lock(self.lock.get()).await;
        // The change may have been broadcast before we got the lock.
        if !self.stale(w.k.borrow().mms[mm].context_id) {
            ctx.spin_unlock(self.lock.get()).await;
            return;
        }
        ctx.atomic().await; // asid = ++cpu_last_asid (under cpu_asid_lock)
        let mut asid = self.last() + 1;
        self.set_last(asid);
        if asid & (self.first_version() - 1) == 0 {
            // All ASIDs of this generation used: a new one, and every CPU
            // resets its context through an IPI.
            w.stats.borrow_mut().asid_rollovers += 1;
            asid = self.last() + u64::from(cpu.get()) + 1;
            self.flush_context(ctx).await;
            let mut targets = CpuMask::full(w.ncpus());
            targets.clear(cpu);
            ctx.step(Op::CallFunction {
                targets,
                handler: self.handler.get(),
                arg: 0,
            })
            .await;
            self.set_last(self.last() + w.ncpus() as u64);
        }
        self.set_mm_context(ctx, mm, asid).await;
        ctx.spin_unlock(self.lock.get()).await;
    }
}

/// `cpu_set_reserved_ttbr0()` of 32-bit ARM with LPAE (arch/arm/mm/
/// context.c, Linux 3.5): TTBR0 <- `swapper_pg_dir`, "which contains only
/// global entries. The ASID is set to 0." (LPAE keeps the ASID in TTBR0),
/// then `isb()`. Without LPAE it copies TTBR1 into TTBR0 and leaves the
/// ASID in CONTEXTIDR, as arm64 does since v4.15; the model takes the LPAE
/// form (docs/model.md, "Walk cache after the reserved TTBR0").
pub(super) async fn cpu_set_reserved_ttbr0(ctx: &Ctx) {
    ctx.step(Op::SetTtbr0(None)).await;
    ctx.isb().await;
}

/// `local_flush_tlb_all()` of 32-bit ARM (arch/arm/include/asm/tlbflush.h,
/// Linux 3.5, ARMv7 SMP): `dsb()` before the TLBI when the page tables are
/// written back (`TLB_WB`), the TLBI, then `dsb(); isb()`. On an SMP
/// ARMv7 kernel the TLBI is the `TLB_V7_UIS_FULL` op, `TLBIALLIS`: inner
/// shareable, so it invalidates every CPU's TLB despite the name (Linux
/// 3.10 made the local flushes local). The model's `dsb(ish)` stands for
/// the full-system `dsb()`: it waits for the broadcast to complete.
pub(super) async fn local_flush_tlb_all(ctx: &Ctx) {
    ctx.dsb_ishst().await;
    ctx.tlbi(TlbiScope::All, true).await;
    ctx.dsb_ish().await;
    ctx.isb().await;
}

/// The allocator. See the module doc.
#[derive(Debug)]
pub struct IpiRollover {
    inner: Rc<Inner>,
}

impl IpiRollover {
    /// An allocator for `bits`-bit ASIDs.
    pub fn new(bits: u8) -> Self {
        Self {
            inner: Rc::new(Inner {
                bits,
                last: State::new(Var::new(1 << bits)),
                current_mm: State::new(PerCpu::new()),
                lock: Cell::new(0), // untracked: set once at init: not state an action changes
                id_locks: State::new(Var::new(BTreeMap::new())),
                handler: Cell::new(0), // untracked: set once at init: not state an action changes
                deferred: State::new(PerCpu::new()),
            }),
        }
    }
}

impl AsidAllocator for IpiRollover {
    fn init(&self, w: &World) {
        self.inner.current_mm.borrow_mut().fill(w.ncpus(), None);
        self.inner.deferred.borrow_mut().fill(w.ncpus(), None);
        self.inner.lock.set(w.new_lock("cpu_asid_lock"));
        let inner = Rc::clone(&self.inner);
        let h = w.register_ipi_handler(Rc::new(move |ctx: Ctx, _arg: usize| {
            let inner = Rc::clone(&inner);
            Box::pin(async move { inner.reset_context(&ctx).await })
        }));
        self.inner.handler.set(h);
    }

    fn asid_of(&self, w: &World, mm: MmId) -> Asid {
        (w.k.borrow().mms[mm].context_id & (self.inner.first_version() - 1)) as Asid
    }

    fn supports_kpti(&self) -> bool {
        false
    }

    fn finish_arch_post_lock_switch<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            let Some(mm) = per_cpu_mut(&inner.deferred, ctx.cpu()).take() else {
                return;
            };
            // switch_new_context(current->mm), interrupts on.
            inner.new_context(ctx, mm).await;
            ctx.w.policy.before_ttbr0_load(ctx, mm).await;
            inner.cpu_switch_mm(ctx, mm).await;
        })
    }

    fn check_and_switch_context<'a>(&'a self, ctx: &'a Ctx, mm: MmId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            let cpu = ctx.cpu();
            ctx.atomic().await; // per_cpu(current_mm) = next
            *per_cpu_mut(&inner.current_mm, cpu) = Some(mm);
            let id = ctx.w.k.borrow().mms[mm].context_id;
            if inner.stale(id) {
                if ctx.irqs_disabled() {
                    // From a context switch: cpu_set_reserved_ttbr0(), and
                    // TIF_SWITCH_MM for finish_arch_post_lock_switch().
                    cpu_set_reserved_ttbr0(ctx).await;
                    *per_cpu_mut(&inner.deferred, cpu) = Some(mm);
                    return;
                }
                // switch_new_context(), interrupts on: an IPI may renew the
                // context between the test and the switch.
                inner.new_context(ctx, mm).await;
            }
            ctx.w.policy.before_ttbr0_load(ctx, mm).await;
            inner.cpu_switch_mm(ctx, mm).await;
        })
    }
}

/// The registry entry of `arm-asid-ipi-rollover`.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm-asid-ipi-rollover",
    description:
        "ARM before 2012: global counter under cpu_asid_lock, IPI to every CPU at rollover",
    arch: Some(crate::config::Arch::Arm64),
    breaks: None,
    new: |_, bits| Box::new(IpiRollover::new(bits)),
};
