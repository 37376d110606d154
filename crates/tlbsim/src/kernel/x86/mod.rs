//! x86 policies (arch/x86/mm/tlb.c): remote flushes by function-call IPI,
//! lazy TLB mode, `tlb_gen` freshness tracking, PCIDs, and AMD INVLPGB.
//!
//! The hardware operations map onto the model's steps as follows:
//! `INVLPG` is a local [`TlbiScope::Va`] (it also drops the paging-structure
//! caches covering the address); a full flush of one PCID (`INVPCID`
//! single-context, or a CR3 write without NOFLUSH) is a local
//! [`TlbiScope::Asid`]; a CR3 write is [`Op::LoadCr3`]; `INVLPGB` is a
//! broadcast TLBI and `TLBSYNC` the completion barrier (`Ctx::dsb_ish`).
//! A PCID tag in the model's TLB is `asid + 1` with PCIDs (Linux's
//! `kern_pcid()`), 0 without; global ASIDs (INVLPGB) use their own numbers.

pub mod mutants;

crate::kernel::registry::entries! {
    /// The x86 TLB policies (historical kernels included).
    pub POLICIES: crate::kernel::registry::PolicyEntry = [
        legacy,
        lazy_4_13,
        lazy_before_831d52b,
        tlb_gen,
        pcid,
        invlpgb,
        tlb_gen_before_b956575,
        lazy_cpumask,
        lazy_cpumask_6_14,
        pcid_6_0,
        pcid_aa44284,
    ];
}

use crate::hw::cpumask::CpuMask;
// x86 has one base page size, 4 KiB (`kernel.page_size_kib = 64` is
// refused for x86 profiles).
use crate::engine::state::{PerCpu, State};
use crate::hw::mem::PAGE_SHIFT_4K as PAGE_SHIFT;
use crate::hw::tlb::{Asid, MmId, TlbiScope};
use crate::hw::CpuId;
use crate::kernel::percpu::{per_cpu, per_cpu_mut};
use crate::kernel::{Ctx, Op, World};
use std::cell::Cell;
use std::rc::Rc;

/// The x86 policy of the Linux kernel `release` (`uname -r`, e.g.
/// `6.18.44-fc`): `x86-lazy-cpumask` from 6.13, `x86-tlb-gen` before (and
/// for a release that does not start with a version number).
pub fn policy_of_release(release: &str) -> &'static str {
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    match (v.next().flatten(), v.next().flatten()) {
        (Some(major), Some(minor)) if (major, minor) >= (6, 13) => "x86-lazy-cpumask",
        _ => "x86-tlb-gen",
    }
}

/// `TLB_FLUSH_ALL`: the end of a flush of the whole address space.
pub const TLB_FLUSH_ALL: u64 = u64::MAX;

/// `tlb_single_page_flush_ceiling`: above this many pages a range flush
/// becomes a full flush (arch/x86/mm/tlb.c, 33 since Linux 3.16).
pub const FLUSH_CEILING_PAGES: u64 = 33;

/// `TLB_NR_DYN_ASIDS`: dynamic PCIDs per CPU.
pub const NR_DYN_ASIDS: usize = 6;

/// `struct flush_tlb_info`: what a flush asks of every CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushInfo {
    /// The address space (`None`: every address space, not used here).
    pub mm: Option<MmId>,
    /// First byte.
    pub start: u64,
    /// One past the last byte, or [`TLB_FLUSH_ALL`].
    pub end: u64,
    /// log2 of the stride.
    pub stride_shift: u32,
    /// The mm's `tlb_gen` this flush brings CPUs to.
    pub new_tlb_gen: u64,
    /// Page-table pages were freed (walk caches must go too).
    pub freed_tables: bool,
    /// Also IPI the CPUs of the mask that no longer run the mm, so that
    /// they leave it (`trim_cpumask`, Linux 6.13+: once a second per mm).
    pub trim_cpumask: bool,
}

impl FlushInfo {
    /// `flush_tlb_mm(mm)`: the whole address space, tables included.
    pub fn whole_mm(mm: MmId) -> Self {
        Self {
            mm: Some(mm),
            start: 0,
            end: TLB_FLUSH_ALL,
            stride_shift: PAGE_SHIFT,
            new_tlb_gen: 0,
            freed_tables: true,
            trim_cpumask: false,
        }
    }

    /// The full flush of reclaim's batch (`arch_tlbbatch_flush()`): no
    /// mm, `TLB_FLUSH_ALL`, no generation (each CPU catches up with the mm
    /// it has loaded).
    pub fn batch() -> Self {
        Self {
            mm: None,
            start: 0,
            end: TLB_FLUSH_ALL,
            stride_shift: PAGE_SHIFT,
            new_tlb_gen: 0,
            freed_tables: false,
            trim_cpumask: false,
        }
    }

    /// `flush_tlb_range()`: `[start, end)` rounded out to `stride` bytes
    /// (at least a page); `last_level` false when tables were freed.
    pub fn range(mm: MmId, start: u64, end: u64, stride: u64, last_level: bool) -> Self {
        let stride = stride.max(1 << PAGE_SHIFT);
        Self {
            mm: Some(mm),
            start: start & !(stride - 1),
            end: end.div_ceil(stride) * stride,
            stride_shift: stride.trailing_zeros(),
            new_tlb_gen: 0,
            freed_tables: !last_level,
            trim_cpumask: false,
        }
    }

    /// Rounds a range flush of more than [`FLUSH_CEILING_PAGES`] entries up
    /// to a full flush, as `flush_tlb_mm_range()` does, counting entries in
    /// `unit`.
    pub fn clamp(mut self, unit: CeilingUnit) -> Self {
        let shift = match unit {
            CeilingUnit::BasePages => PAGE_SHIFT,
            CeilingUnit::Stride => self.stride_shift,
        };
        if self.end != TLB_FLUSH_ALL && (self.end - self.start) >> shift > FLUSH_CEILING_PAGES {
            self.start = 0;
            self.end = TLB_FLUSH_ALL;
        }
        self
    }
}

/// What `flush_tlb_mm_range()` compares with `tlb_single_page_flush_ceiling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingUnit {
    /// 4 KiB pages whatever the stride (`(end - start) >> PAGE_SHIFT`):
    /// every kernel before a31acd3ee8f7 ("x86/mm: Page size aware
    /// flush_tlb_mm_range()", Linux 4.20), so flushing one 2 MiB THP mapping
    /// (512 pages) is a full flush.
    BasePages,
    /// Entries of the flush's stride (`(end - start) >> stride_shift`):
    /// Linux 4.20 and later, so a 2 MiB THP mapping is one `INVLPG`.
    Stride,
}

/// `invlpg(addr)` under PCID tag `tag` (`flush_tlb_one_user()`): drops
/// the entry for `va` and the paging-structure caches covering it unless
/// `last_level`.
pub async fn invlpg(ctx: &Ctx, tag: Asid, va: u64, last_level: bool) {
    let scope = TlbiScope::Va {
        asid: tag,
        va,
        last_level,
    };
    ctx.tlbi(scope, false).await;
}

/// `flush_tlb_local()`: drops every entry of PCID tag `tag` on this CPU
/// (`INVPCID` single-context, or a CR3 write without NOFLUSH).
pub async fn flush_tlb_local(ctx: &Ctx, tag: Asid) {
    ctx.tlbi(TlbiScope::Asid(tag), false).await;
}

/// The flush `flush_tlb_func()` performs on this CPU under PCID tag `tag`:
/// `flush_tlb_one_user()` ([`invlpg`]) per stride of `info`'s range, or
/// [`flush_tlb_local`] for [`TLB_FLUSH_ALL`].
pub async fn flush_tlb_info_local(ctx: &Ctx, tag: Asid, info: &FlushInfo) {
    if info.end == TLB_FLUSH_ALL {
        return flush_tlb_local(ctx, tag).await;
    }
    let stride = 1u64 << info.stride_shift.max(PAGE_SHIFT);
    let mut va = info.start;
    while va < info.end {
        invlpg(ctx, tag, va, !info.freed_tables).await;
        va += stride;
    }
}

/// A CR3 write installing `mm` (or init_mm for `None`) under `tag`,
/// flushing that tag's entries when `flush`.
pub async fn load_cr3(ctx: &Ctx, mm: Option<MmId>, tag: Asid, flush: bool) {
    let cr3 = mm.map(|m| crate::hw::Ttbr0 {
        mm: m,
        pgd: ctx.w.k.borrow().mms[m].pgd,
        asid: tag,
    });
    ctx.step(Op::LoadCr3 {
        cr3,
        flush: flush.then_some(tag),
    })
    .await;
}

/// Counts a flush decision (`flush.local` for a flush done on this CPU,
/// `flush.broadcast` for a flush that had to reach other CPUs, and
/// `flush.skipped` for one that found the TLB already fresh).
pub fn count(ctx: &Ctx, what: crate::kernel::tlbflush::FlushScope) {
    crate::kernel::tlbflush::count_flush(ctx, what);
}

/// The flush-IPI plumbing both x86 policies share: the per-CPU
/// `flush_tlb_info` each sender publishes, and the registered handler that
/// reads the sender's info and runs the policy's `flush_tlb_func()`.
#[derive(Debug)]
pub struct FlushIpi {
    /// `DEFINE_PER_CPU_SHARED_ALIGNED(struct flush_tlb_info, flush_tlb_info)`:
    /// the flush each CPU is sending, while it sends it.
    infos: State<PerCpu<Option<FlushInfo>>>,
    handler: Cell<usize>, // untracked: set once at init: not state an action changes
}

impl Default for FlushIpi {
    fn default() -> Self {
        FlushIpi {
            infos: State::new(PerCpu::new()),
            handler: Cell::new(0), // untracked: set once at init: not state an action changes
        }
    }
}

impl FlushIpi {
    /// Registers the handler on `policy`, whose `FlushIpi` is `this(p)`;
    /// `func(p, ctx, info)` is the policy's `flush_tlb_func()`.
    pub fn register<P: 'static>(
        this: fn(&P) -> &FlushIpi,
        policy: &Rc<P>,
        w: &World,
        func: for<'a> fn(&'a P, &'a Ctx, FlushInfo) -> crate::engine::exec::KFuture<'a, ()>,
    ) {
        this(policy).infos.borrow_mut().fill(w.ncpus(), None);
        let p = Rc::clone(policy);
        let h = w.register_ipi_handler(Rc::new(move |ctx: Ctx, sender: usize| {
            let p = Rc::clone(&p);
            Box::pin(async move {
                let sender = CpuId::from_index(sender);
                let f = per_cpu(&this(&p).infos, sender).expect("sender published its flush");
                func(&p, &ctx, f).await;
            })
        }));
        this(policy).handler.set(h);
    }

    /// `smp_call_function_many(targets, flush_tlb_func, info, wait = 1)`:
    /// publishes `info` as this CPU's, IPIs `targets` and waits for them.
    pub async fn send(&self, ctx: &Ctx, targets: CpuMask, info: FlushInfo) {
        let _f = ctx.func(crate::label!("smp_call_function_many"));
        let cpu = ctx.cpu();
        count(ctx, crate::kernel::tlbflush::FlushScope::Broadcast);
        *per_cpu_mut(&self.infos, cpu) = Some(info);
        ctx.step(Op::CallFunction {
            targets,
            handler: self.handler.get(),
            arg: cpu.index(),
        })
        .await;
        *per_cpu_mut(&self.infos, cpu) = None;
    }
}

/// x86 `arch_tlbbatch_should_defer(mm)` (mm/rmap.c before 6.6): another
/// CPU is in `mm_cpumask(mm)`; a flush only this CPU needs is done at once.
pub fn batch_should_defer(ctx: &Ctx, mm: MmId) -> bool {
    let mut others = ctx.mm_cpumask(mm);
    others.clear(ctx.cpu());
    !others.is_empty()
}

/// The part of x86 `arch_tlbbatch_add_pending()` every version has:
/// `cpumask_or(&batch->cpumask, mm_cpumask(mm))` into the task's batch.
pub fn batch_add_mm_cpumask(ctx: &Ctx, mm: MmId) {
    let add = ctx.mm_cpumask(mm);
    let mut k = ctx.w.k.borrow_mut();
    let arch = &mut k.tasks[ctx.task].tlb_ubc.arch;
    let mask = arch
        .cpumask
        .get_or_insert_with(|| crate::hw::cpumask::CpuMask::new(ctx.w.ncpus()));
    for c in add.iter() {
        mask.set(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flush_ceiling_counts_4k_pages_before_linux_4_20_and_strides_since() {
        const THP: u64 = 2 << 20;
        let one_thp = FlushInfo::range(MmId::new(1), 8 * THP, 9 * THP, THP, true);
        // 4.20+: one 2 MiB entry, well under 33.
        let since = one_thp.clamp(CeilingUnit::Stride);
        assert_eq!((since.start, since.end), (8 * THP, 9 * THP));
        // Before: 512 pages of 4 KiB, over the ceiling: a full flush.
        assert_eq!(one_thp.clamp(CeilingUnit::BasePages).end, TLB_FLUSH_ALL);
        // 33 pages stay a range flush under both counts, 34 do not.
        for unit in [CeilingUnit::BasePages, CeilingUnit::Stride] {
            let small = FlushInfo::range(MmId::new(1), 0, 33 << PAGE_SHIFT, 1 << PAGE_SHIFT, true);
            assert_eq!(small.clamp(unit).end, 33 << PAGE_SHIFT);
            let big = FlushInfo::range(MmId::new(1), 0, 34 << PAGE_SHIFT, 1 << PAGE_SHIFT, true);
            assert_eq!(big.clamp(unit).end, TLB_FLUSH_ALL);
        }
    }

    #[test]
    fn the_release_picks_the_mm_cpumask_of_its_kernel() {
        assert_eq!(policy_of_release("6.18.44-fc-v669"), "x86-lazy-cpumask");
        assert_eq!(policy_of_release("6.13.0"), "x86-lazy-cpumask");
        assert_eq!(policy_of_release("7.0-rc1"), "x86-lazy-cpumask");
        assert_eq!(policy_of_release("6.12.9-arch1"), "x86-tlb-gen");
        assert_eq!(policy_of_release("5.15.0-91-generic"), "x86-tlb-gen");
        assert_eq!(policy_of_release("unknown"), "x86-tlb-gen");
    }
}
