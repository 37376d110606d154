//! `x86-tlb-gen`: seed 004's lazy TLB mode with `tlb_gen` freshness
//! tracking (Linux 4.13+, arch/x86/mm/tlb.c as of 5.x; reference
//! ../shared/reference/linux-tlb-algorithms.md §4).
//!
//! Every flush bumps the mm's `tlb_gen`; each CPU records, per loaded
//! context, the generation its TLB is known to be fresh at (`ctxs[]`). A
//! lazy CPU (kernel thread or idle on a user mm) is not sent flush IPIs for
//! ordinary flushes: when it switches back to the mm it compares
//! generations and flushes if it missed one. Flushes that free page-table
//! pages still IPI lazy CPUs, which then switch to init_mm: their
//! paging-structure caches could otherwise walk freed tables (the fix of
//! commit b956575bed91 to seed 004's first version, which skipped them;
//! that version is the policy `x86-tlb-gen-before-b956575`).
//!
//! The same file serves `x86-pcid` (six dynamic PCIDs per CPU, see
//! `pcid.rs`) and `x86-invlpgb` (global ASIDs and broadcast flushes, see
//! `invlpgb.rs`), whose differences are options of [`TlbGen`]. A historical
//! kernel or a mutant that changes one function of arch/x86/mm/tlb.c
//! implements [`TlbGenFns`], overriding that function only.

use super::{flush_tlb_info_local, load_cr3, FlushInfo, NR_DYN_ASIDS, TLB_FLUSH_ALL};
use crate::config::Arch;
use crate::engine::exec::KFuture;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, MmId};
use crate::kernel::policy::TlbPolicy;
use crate::kernel::registry::{Allocators, PolicyEntry};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::{Ctx, World};
use crate::engine::state::{PerCpu, PerMm, State, Var};
use crate::kernel::percpu::{per_cpu, this_cpu, this_cpu_mut};
use std::rc::Rc;

mod fns;
pub use fns::{flush_is_known_6_0, set_cpumask_then_read_gen, Linux, TlbGenFns, TLB_GENERATION_INVALID};

/// Options distinguishing the policies built on this file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Use [`NR_DYN_ASIDS`] PCIDs per CPU (else one untagged context, and
    /// every CR3 write flushes).
    pub pcid: bool,
    /// Give multi-CPU mms a global ASID and flush them with INVLPGB.
    pub invlpgb: bool,
}

impl Options {
    /// PCIDs, no INVLPGB (`x86-pcid` and the policies built on it).
    pub const PCID: Options = Options {
        pcid: true,
        invlpgb: false,
    };
}

/// One entry of `cpu_tlbstate.ctxs[]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlbContext {
    /// `ctx_id` of the mm whose entries the PCID holds (mm ids are never
    /// reused, as `ctx_id`s).
    pub ctx_id: Option<MmId>,
    /// Generation the PCID is fresh at.
    pub tlb_gen: u64,
}

/// `cpu_tlbstate` of one CPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuState {
    /// `loaded_mm` (`None`: init_mm).
    pub loaded_mm: Option<MmId>,
    /// `loaded_mm_asid`: a dynamic slot, or a global ASID (INVLPGB).
    pub loaded_asid: Asid,
    /// `is_lazy`.
    pub is_lazy: bool,
    /// `next_asid`: round-robin victim.
    pub next_asid: usize,
    /// `ctxs[]`.
    pub ctxs: [TlbContext; NR_DYN_ASIDS],
}

/// Per-mm state (`mm->context`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MmState {
    /// `tlb_gen`.
    pub tlb_gen: u64,
    /// Global ASID (INVLPGB), if assigned.
    pub global_asid: Option<Asid>,
    /// CPUs may still run the mm under a dynamic ASID.
    pub asid_transition: bool,
    /// `next_trim_cpumask` ([`TlbGenFns::lazy_mm_cpumask`]), in simulated
    /// time: set a second after the mm is first switched to.
    pub next_trim_ns: Option<crate::engine::Ns>,
}

/// Shared state of the policy (with the IPI handler), each field
/// recording its own accesses.
#[derive(Debug)]
pub struct Inner {
    /// Options: what this kernel version has.
    pub opts: Options,
    /// What it uses once booted: [`Inner::opts`] less what the command
    /// line turned off (`nopcid` clears PCIDs, and since 44126343d58c
    /// INVLPGB with them; set by `init`).
    // untracked: written once by `init()` at boot, before any step; read-only after.
    pub booted: std::cell::Cell<Options>,
    /// The functions this kernel has of its own.
    pub fns: &'static dyn TlbGenFns,
    /// `DEFINE_PER_CPU(struct tlb_state, cpu_tlbstate)`.
    pub cpus: State<PerCpu<CpuState>>,
    /// Per mm (`mm->context`), by mm id; an mm beyond the table has the
    /// default state.
    pub mms: State<PerMm<MmState>>,
    /// Flush IPIs and the `flush_tlb_info` they carry.
    pub ipi: super::FlushIpi,
    /// Next global ASID to hand out (INVLPGB).
    pub next_global: State<Var<u32>>,
}

/// The policy. See the module doc.
#[derive(Debug)]
pub struct TlbGen {
    /// Shared with the IPI handler.
    pub inner: Rc<Inner>,
}

impl Default for TlbGen {
    fn default() -> Self {
        Self::new(Options::default())
    }
}

impl TlbGen {
    /// Today's Linux with `opts`.
    pub fn new(opts: Options) -> Self {
        Self::with_fns(opts, &Linux)
    }

    /// A kernel with `opts` whose [`TlbGenFns`] are `fns`.
    pub fn with_fns(opts: Options, fns: &'static dyn TlbGenFns) -> Self {
        Self {
            inner: Rc::new(Inner {
                opts,
                // untracked: see the field.
                booted: std::cell::Cell::new(opts),
                fns,
                cpus: State::new(PerCpu::new()),
                mms: State::new(PerMm::new()),
                ipi: super::FlushIpi::default(),
                next_global: State::new(Var::new(0)),
            }),
        }
    }
}

/// `HZ` jiffies, the period of `should_trim_cpumask()`: one second.
pub const TRIM_CPUMASK_PERIOD_NS: crate::engine::Ns = 1_000_000_000;

/// First global ASID number: above the dynamic PCID tags (1..=6).
pub const FIRST_GLOBAL_ASID: u32 = NR_DYN_ASIDS as u32 + 2;

impl Inner {
    /// The per-mm state of `mm`, growing the table as mms appear.
    pub fn mm(&self, mm: MmId) -> MmState {
        self.mms.borrow().get_or_default(mm)
    }

    /// Updates the per-mm state of `mm`.
    pub fn mm_mut(&self, mm: MmId, f: impl FnOnce(&mut MmState)) {
        f(self.mms.borrow_mut().grow_mut(mm));
    }

    /// The TLB tag of a loaded ASID: 0 without PCIDs (`build_cr3()` puts
    /// none in CR3), else the global ASID itself or `kern_pcid()` (asid +
    /// 1).
    pub fn tag(&self, asid: Asid) -> Asid {
        if !self.booted.get().pcid {
            0
        } else if asid as u32 >= FIRST_GLOBAL_ASID {
            asid
        } else {
            asid + 1
        }
    }

    /// `choose_new_asid(next, next_tlb_gen)`: (asid, need_flush).
    fn choose_new_asid(&self, ctx: &Ctx, next: MmId, gen: u64) -> (Asid, bool) {
        if !self.booted.get().pcid {
            return (0, true);
        }
        if let Some(g) = self.mm(next).global_asid {
            // Kept fresh everywhere by INVLPGB broadcasts.
            return (g, false);
        }
        let mut c = this_cpu_mut(ctx, &self.cpus);
        for (a, x) in c.ctxs.iter().enumerate() {
            if x.ctx_id == Some(next) {
                return (a as Asid, x.tlb_gen < gen);
            }
        }
        let a = c.next_asid;
        c.next_asid = (a + 1) % NR_DYN_ASIDS;
        (a as Asid, true)
    }

    /// `switch_mm_irqs_off()` when `prev == next` (`n`, loaded under
    /// `prev_asid`): a CPU leaving lazy mode, or moving to the mm's global
    /// ASID, rejoins the mask and checks its TLB's freshness. The (asid,
    /// need_flush, tlb_gen) to load, or `None` when the TLB is fresh.
    async fn revalidate(
        &self,
        ctx: &Ctx,
        n: MmId,
        prev_asid: Asid,
        was_lazy: bool,
    ) -> Option<(Asid, bool, u64)> {
        let cpu = ctx.cpu();
        let needs_global = self.mm(n).global_asid.is_some_and(|g| g != prev_asid);
        if !was_lazy && !needs_global {
            return None;
        }
        if !ctx.cpumask_test_cpu(cpu, n) {
            ctx.cpumask_set_cpu(cpu, n).await;
        }
        ctx.smp_mb().await;
        let gen = self.mm(n).tlb_gen; // atomic64_read(), same step
        if needs_global {
            let (a, f) = self.choose_new_asid(ctx, n, gen);
            return Some((a, f, gen));
        }
        let fresh = prev_asid as u32 >= FIRST_GLOBAL_ASID
            || this_cpu(ctx, &self.cpus).ctxs[prev_asid as usize].tlb_gen == gen;
        (!fresh).then_some((prev_asid, true, gen))
    }

    /// `switch_mm_irqs_off(prev, next)`; `next == None` switches to init_mm.
    pub async fn switch_mm_irqs_off(&self, ctx: &Ctx, next: Option<MmId>) {
        let _f = ctx.func(crate::label!("switch_mm_irqs_off"));
        let cpu = ctx.cpu();
        let (real_prev, prev_asid, was_lazy) = {
            let mut s = this_cpu_mut(ctx, &self.cpus);
            let r = (s.loaded_mm, s.loaded_asid, s.is_lazy);
            s.is_lazy = false;
            r
        };
        let (asid, need_flush, gen) = if real_prev == next {
            let Some(n) = next else {
                return;
            };
            match self.revalidate(ctx, n, prev_asid, was_lazy).await {
                Some(x) => x,
                None => return,
            }
        } else {
            match real_prev {
                // Leave this CPU in prev's mask: it is removed at the
                // next flush IPI it takes for prev.
                Some(_) if self.fns.lazy_mm_cpumask() => {}
                // Stop remote flushes for the previous mm.
                Some(p) => ctx.cpumask_clear_cpu(cpu, p).await,
                None => {}
            }
            match next {
                None => {
                    // init_mm has no user mappings; without PCIDs the CR3
                    // write flushes everything.
                    this_cpu_mut(ctx, &self.cpus).loaded_mm = None;
                    load_cr3(ctx, None, 0, !self.booted.get().pcid).await;
                    return;
                }
                Some(n) => {
                    if self.fns.switching_skips_flush() {
                        // this_cpu_write(cpu_tlbstate.loaded_mm, LOADED_MM_SWITCHING)
                        this_cpu_mut(ctx, &self.cpus).loaded_mm = None;
                    }
                    if self.fns.lazy_mm_cpumask() && self.mm(n).next_trim_ns.is_none() {
                        // init_new_context(): jiffies + HZ.
                        let at = ctx.now().saturating_add(TRIM_CPUMASK_PERIOD_NS);
                        self.mm_mut(n, |m| m.next_trim_ns = Some(at));
                    }
                    let gen = self.fns.set_cpumask_then_read_gen(self, ctx, n).await;
                    let (a, f) = self.choose_new_asid(ctx, n, gen);
                    (a, f, gen)
                }
            }
        };
        let n = next.expect("a user mm");
        let after_cr3 = real_prev != next && self.fns.switching_skips_flush();
        {
            let mut s = this_cpu_mut(ctx, &self.cpus);
            if (asid as usize) < NR_DYN_ASIDS {
                s.ctxs[asid as usize] = TlbContext {
                    ctx_id: Some(n),
                    tlb_gen: gen,
                };
            }
            if !after_cr3 {
                s.loaded_mm = Some(n);
            }
            s.loaded_asid = asid;
        }
        load_cr3(ctx, Some(n), self.tag(asid), need_flush).await;
        if after_cr3 {
            // barrier(); this_cpu_write(cpu_tlbstate.loaded_mm, next)
            this_cpu_mut(ctx, &self.cpus).loaded_mm = Some(n);
        }
    }

    /// `flush_tlb_func()`: runs in the IPI handler and for local flushes.
    pub async fn flush_tlb_func(&self, ctx: &Ctx, f: FlushInfo) {
        let _f = ctx.func(crate::label!("flush_tlb_func"));
        let cpu = ctx.cpu();
        let st = *this_cpu(ctx, &self.cpus);
        if let Some(mm) = f.mm.filter(|&m| st.loaded_mm != Some(m)) {
            if self.fns.lazy_mm_cpumask() {
                // The CPU was left in the mask of an mm it no longer
                // runs: it leaves it (trace reason TLB_REMOTE_WRONG_CPU;
                // also on the local CPU since 6.13's "Also remove local
                // CPU from mm_cpumask if stale").
                ctx.cpumask_clear_cpu(cpu, mm).await;
            }
            return;
        }
        let Some(loaded) = st.loaded_mm else {
            return;
        };
        if st.is_lazy {
            // Only flushes that freed page tables reach lazy CPUs: stop
            // using the tables at all.
            self.switch_mm_irqs_off(ctx, None).await;
            return;
        }
        if self.booted.get().invlpgb
            && self
                .mm(loaded)
                .global_asid
                .is_some_and(|g| g != st.loaded_asid)
        {
            // Transition to the mm's global ASID.
            self.switch_mm_irqs_off(ctx, Some(loaded)).await;
            return;
        }
        if st.loaded_asid as u32 >= FIRST_GLOBAL_ASID {
            return; // INVLPGB keeps a global ASID fresh
        }
        let slot = st.loaded_asid as usize;
        let local_gen = this_cpu(ctx, &self.cpus).ctxs[slot].tlb_gen;
        if self.fns.flush_is_known(f.new_tlb_gen, local_gen) {
            return;
        }
        let mm_gen = ctx.atomic_read(|| self.mm(loaded).tlb_gen).await;
        if local_gen == mm_gen {
            super::count(ctx, FlushScope::Skip);
            return;
        }
        let tag = self.tag(st.loaded_asid);
        super::count(ctx, FlushScope::Local);
        if f.end != TLB_FLUSH_ALL && f.new_tlb_gen == local_gen + 1 && f.new_tlb_gen == mm_gen {
            flush_tlb_info_local(ctx, tag, &f).await;
        } else {
            let all = FlushInfo {
                start: 0,
                end: TLB_FLUSH_ALL,
                ..f
            };
            flush_tlb_info_local(ctx, tag, &all).await;
        }
        this_cpu_mut(ctx, &self.cpus).ctxs[slot].tlb_gen = mm_gen;
    }

    /// `native_flush_tlb_multi(mm_cpumask(mm), info)`: flushes this CPU if
    /// it is in the mask and IPIs the other CPUs of the mask (lazy ones only
    /// when tables were freed), waiting for them.
    pub async fn native_flush_tlb_multi(&self, ctx: &Ctx, info: FlushInfo) {
        let mm = info.mm.expect("user mm");
        self.flush_tlb_multi(ctx, ctx.mm_cpumask(mm), info).await;
    }

    /// `native_flush_tlb_multi(mask, info)`: as above, for the CPUs of
    /// `mask`; with `info.mm` `None` (reclaim's batch) each flushes
    /// whatever mm it has loaded.
    pub async fn flush_tlb_multi(&self, ctx: &Ctx, mask: CpuMask, info: FlushInfo) {
        let _f = ctx.func(crate::label!("native_flush_tlb_multi"));
        let cpu = ctx.cpu();
        // on_each_cpu_cond_mask(tlb_is_not_lazy unless tables were freed):
        // the condition applies to this CPU too.
        let include_lazy = self.fns.flush_reaches_lazy(&info);
        let here = *this_cpu(ctx, &self.cpus);
        let loaded = here.loaded_mm.is_some() && (info.mm.is_none() || here.loaded_mm == info.mm);
        if mask.test(cpu) && loaded && (include_lazy || !here.is_lazy) {
            ctx.irq_save();
            self.flush_tlb_func(ctx, info).await;
            ctx.irq_restore();
        }
        let mut targets = mask;
        targets.clear(cpu);
        if !include_lazy {
            for t in targets.clone().iter() {
                if !self.should_flush_tlb(&per_cpu(&self.cpus, t), &info) {
                    targets.clear(t);
                }
            }
        }
        if targets.is_empty() {
            return;
        }
        self.ipi.send(ctx, targets, info).await;
    }

    /// The condition of `on_each_cpu_cond_mask()` for a flush that freed
    /// no tables, on a CPU of the mask in state `s`: `tlb_is_not_lazy()`;
    /// with a lazy `mm_cpumask`, `should_flush_tlb()`: not lazy, and
    /// running the mm (or the flush trims the mask).
    pub(super) fn should_flush_tlb(&self, s: &CpuState, info: &FlushInfo) -> bool {
        if s.is_lazy {
            return false;
        }
        if !self.fns.lazy_mm_cpumask() || info.mm.is_none() {
            return true;
        }
        s.loaded_mm == info.mm || info.trim_cpumask
    }

    /// `should_trim_cpumask(mm)` (Linux 6.13+): true at most once per
    /// [`TRIM_CPUMASK_PERIOD_NS`] per mm, restarting the period.
    fn should_trim_cpumask(&self, ctx: &Ctx, mm: MmId) -> bool {
        let now = ctx.now();
        let due = self.mm(mm).next_trim_ns.is_some_and(|t| now > t);
        if due {
            let next = now.saturating_add(TRIM_CPUMASK_PERIOD_NS);
            self.mm_mut(mm, |m| m.next_trim_ns = Some(next));
        }
        due
    }

    /// `flush_tlb_mm_range()`.
    pub async fn flush_tlb_mm_range(&self, ctx: &Ctx, info: FlushInfo) {
        let _f = ctx.func(crate::label!("flush_tlb_mm_range"));
        let mm = info.mm.expect("user mm");
        // inc_mm_tlb_gen(): atomic64_inc_return(), a full barrier.
        let gen = ctx
            .atomic_inc_return(|| {
                let mut gen = 0;
                self.mm_mut(mm, |m| {
                    m.tlb_gen += 1;
                    gen = m.tlb_gen;
                });
                gen
            })
            .await;
        let mut info = FlushInfo {
            new_tlb_gen: gen,
            ..info
        }
        .clamp(self.fns.ceiling_unit());
        if self.fns.lazy_mm_cpumask() {
            let mut others = ctx.mm_cpumask(mm);
            others.clear(ctx.cpu());
            info.trim_cpumask = !others.is_empty() && self.should_trim_cpumask(ctx, mm);
        }
        if self.booted.get().invlpgb && self.mm(mm).global_asid.is_some() {
            super::invlpgb::broadcast_tlb_flush(self, ctx, info).await;
            return;
        }
        self.native_flush_tlb_multi(ctx, info).await;
        if self.booted.get().invlpgb {
            super::invlpgb::consider_global_asid(self, ctx, mm).await;
        }
    }
}

impl TlbPolicy for TlbGen {
    fn init(&self, w: &World) {
        let n = w.ncpus();
        // x86_nopcid_setup(): `nopcid` clears X86_FEATURE_PCID; since
        // 44126343d58c (7.1) X86_FEATURE_INVLPGB goes with it.
        let mut on = self.inner.opts;
        if w.kcfg.nopcid {
            on.pcid = false;
            on.invlpgb &= w.kcfg.nopcid_keeps_invlpgb;
        }
        self.inner.booted.set(on);
        // setup_pcid(): cr4_set_bits(X86_CR4_PCIDE) on each CPU.
        {
            let mut hw = w.hw.borrow_mut();
            for c in crate::hw::CpuId::all(n) {
                hw.cpus[w.pcpu(c)].cr4_pcide = on.pcid;
            }
        }
        self.inner.cpus.borrow_mut().fill(n, CpuState::default());
        **self.inner.next_global.borrow_mut() = FIRST_GLOBAL_ASID;
        super::FlushIpi::register(
            |i: &Inner| &i.ipi,
            &self.inner,
            w,
            |i, ctx, f| Box::pin(i.flush_tlb_func(ctx, f)),
        );
    }

    fn switch_mm<'a>(&'a self, ctx: &'a Ctx, prev: Option<MmId>, next: MmId) -> KFuture<'a, ()> {
        let _ = prev; // the CPU's own loaded_mm is authoritative
        Box::pin(async move {
            ctx.irq_save(); // switch_mm_irqs_off()
            self.inner.switch_mm_irqs_off(ctx, Some(next)).await;
            ctx.irq_restore();
        })
    }

    fn enter_lazy_tlb<'a>(&'a self, ctx: &'a Ctx, mm: MmId, to_idle: bool) -> KFuture<'a, ()> {
        let _ = (mm, to_idle);
        Box::pin(async move {
            let mut c = this_cpu_mut(ctx, &self.inner.cpus);
            if c.loaded_mm.is_some() {
                c.is_lazy = true;
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

    /// 6.15 made RCU table freeing unconditional on x86, with INVLPGB.
    fn rcu_table_free(&self) -> bool {
        self.inner.opts.invlpgb
    }

    /// The kernels of 6.9+ (bc2ff4cbc329): those with 6.13's lazy
    /// `mm_cpumask` and 6.15's INVLPGB.
    fn reclaim_frees_in_batches(&self) -> bool {
        self.inner.fns.lazy_mm_cpumask() || self.inner.opts.invlpgb
    }

    /// x86 `arch_tlbbatch_should_defer()`: another CPU is in
    /// `mm_cpumask(mm)` (a flush only this CPU needs is done at once).
    fn arch_tlbbatch_should_defer(&self, ctx: &Ctx, mm: MmId) -> bool {
        super::batch_should_defer(ctx, mm)
    }

    /// x86 `arch_tlbbatch_add_pending()`: `inc_mm_tlb_gen(mm)` (so the
    /// batch's full flush finds every CPU of the mm behind) and the mm's
    /// CPUs join the batch's mask; nothing is flushed yet.
    fn arch_tlbbatch_add_pending<'a>(&'a self, ctx: &'a Ctx, mm: MmId, _va: u64) -> KFuture<'a, ()> {
        Box::pin(async move {
            let g = &self.inner;
            ctx.atomic_inc_return(|| g.mm_mut(mm, |m| m.tlb_gen += 1))
                .await;
            super::batch_add_mm_cpumask(ctx, mm);
            ctx.w.k.borrow_mut().tasks[ctx.task]
                .tlb_ubc
                .arch
                .unmapped_pages = true;
        })
    }

    /// x86 `arch_tlbbatch_flush()`: one full flush (`TLB_FLUSH_ALL`, no
    /// generation: each CPU catches up with its loaded mm's `tlb_gen`) on
    /// the batch's CPUs, by IPIs if any is not this one; then the mask is
    /// cleared. With INVLPGB (6.15+, 72a920eacd8a, 0b7eb55cb706), if pages
    /// were unmapped: one broadcast `INVLPGB` of every non-global entry
    /// and a `TLBSYNC` instead, no IPIs.
    fn arch_tlbbatch_flush<'a>(&'a self, ctx: &'a Ctx) -> KFuture<'a, ()> {
        Box::pin(async move {
            let (mask, unmapped) = {
                let mut k = ctx.w.k.borrow_mut();
                let arch = &mut k.tasks[ctx.task].tlb_ubc.arch;
                let unmapped = std::mem::take(&mut arch.unmapped_pages);
                (arch.cpumask.take(), unmapped)
            };
            if self.inner.booted.get().invlpgb && unmapped {
                super::invlpgb::invlpgb_flush_all_nonglobals(ctx).await;
                return;
            }
            let Some(mask) = mask else { return };
            let cpu = ctx.cpu();
            let info = FlushInfo::batch();
            let mut others = mask.clone();
            others.clear(cpu);
            if !others.is_empty() {
                self.inner.flush_tlb_multi(ctx, mask, info).await;
            } else if mask.test(cpu) {
                ctx.irq_save();
                self.inner.flush_tlb_func(ctx, info).await;
                ctx.irq_restore();
            }
        })
    }
}

/// The registry entry of `x86-tlb-gen`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-tlb-gen",
    description: "seed 004: tlb_gen freshness tracking, lazy CPUs get no flush IPIs unless page tables were freed; no PCID",
    arch: Arch::X86,
    requires: &[],
    allocators: Allocators::PicksOwnTags,
    breaks: None,
    new: || Box::new(TlbGen::default()),
};
