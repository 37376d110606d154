//! `x86-invlpgb`: AMD broadcast TLB invalidation (Linux 6.15,
//! arch/x86/mm/tlb.c). An mm seen active on more than 3 CPUs at once (checked
//! about once every 32 ticks per task, `consider_global_asid()`) gets a
//! global ASID, the same on every CPU; its flushes become `INVLPGB`s (up to
//! `invlpgb_max_pages` pages each) followed by one `TLBSYNC`, instead of
//! IPIs. While some CPU still runs the mm under a per-CPU ASID (the
//! transition), the flush also IPIs the cpumask; the IPI moves that CPU to
//! the global ASID. Global ASIDs are not reused in the model (Linux reuses
//! them after a flush of every non-global ASID; the pool is far larger than
//! any modelled workload's mm count).

use super::tlb_gen::{Inner, Options, TlbGen, FIRST_GLOBAL_ASID};
use super::{FlushInfo, TLB_FLUSH_ALL};
use crate::config::Arch;
// x86 has one base page size, 4 KiB (`kernel.page_size_kib = 64` is
// refused for x86 profiles).
use crate::hw::mem::PAGE_SHIFT_4K as PAGE_SHIFT;
use crate::hw::tlb::{Asid, MmId, TlbiScope};
use crate::kernel::registry::{Allocators, Feature, PolicyEntry};
use crate::kernel::tlbflush::FlushScope;
use crate::kernel::percpu::per_cpu;
use crate::kernel::Ctx;

/// The `x86-invlpgb` policy (PCIDs for single-CPU mms, as Linux).
pub fn new() -> TlbGen {
    TlbGen::new(Options {
        pcid: true,
        invlpgb: true,
    })
}

/// `invlpgb_flush_single_pcid_nosync(pcid)`: every entry of `pcid` on
/// every CPU; completes at the next [`tlbsync`].
pub async fn invlpgb_flush_single_pcid_nosync(ctx: &Ctx, pcid: Asid) {
    ctx.tlbi(TlbiScope::Asid(pcid), true).await;
}

/// `invlpgb_flush_user_nr_nosync(pcid, addr, nr, pmd_stride)`: `pages`
/// 4 KiB pages of `pcid` from `addr` on every CPU (their paging-structure
/// caches too unless `last_level`); completes at the next [`tlbsync`].
pub async fn invlpgb_flush_user_nr_nosync(
    ctx: &Ctx,
    pcid: Asid,
    addr: u64,
    pages: u64,
    last_level: bool,
) {
    let scope = TlbiScope::Range {
        asid: pcid,
        va: addr,
        pages,
        last_level,
    };
    ctx.tlbi(scope, true).await;
}

/// `invlpgb_flush_all_nonglobals()` then `__tlbsync()` (reclaim's batch
/// flush, 6.15+): every non-global entry of every PCID on every CPU (the
/// model has no global user entries), completed before it returns.
pub async fn invlpgb_flush_all_nonglobals(ctx: &Ctx) {
    super::count(ctx, FlushScope::Broadcast);
    ctx.tlbi(TlbiScope::All, true).await;
    tlbsync(ctx).await;
}

/// `tlbsync()` (the `TLBSYNC` instruction, `__tlbsync()`): waits until
/// every INVLPGB this CPU issued has completed on every CPU (the model's
/// `DSB ISH`).
pub async fn tlbsync(ctx: &Ctx) {
    ctx.dsb_ish().await;
}

/// `broadcast_tlb_flush(info)` for an mm with a global ASID.
pub async fn broadcast_tlb_flush(g: &Inner, ctx: &Ctx, info: FlushInfo) {
    let mm = info.mm.expect("user mm");
    let asid = g.mm(mm).global_asid.expect("global ASID");
    super::count(ctx, FlushScope::Broadcast);
    if info.end == TLB_FLUSH_ALL {
        invlpgb_flush_single_pcid_nosync(ctx, asid).await;
    } else {
        let max = ctx.w.profile.x86().invlpgb_max_pages.max(1);
        let shift = info.stride_shift;
        let mut addr = info.start;
        while addr < info.end {
            let nr = ((info.end - addr) >> shift).clamp(1, max);
            let pages = nr << (shift - PAGE_SHIFT);
            invlpgb_flush_user_nr_nosync(ctx, asid, addr, pages, !info.freed_tables).await;
            addr += nr << shift;
        }
    }
    g.fns.finish_asid_transition(g, ctx, info).await;
    tlbsync(ctx).await;
}

/// `finish_asid_transition()` (Linux's [`TlbGenFns`](super::tlb_gen::TlbGenFns)
/// default): while a CPU of the cpumask still runs the
/// mm under a per-CPU ASID, flush by IPI (which moves it over).
pub async fn finish_asid_transition(g: &Inner, ctx: &Ctx, info: FlushInfo) {
    let mm = info.mm.expect("user mm");
    let st = g.mm(mm);
    if !st.asid_transition {
        return;
    }
    let global = st.global_asid.expect("global ASID");
    let straggler = {
        let mask = ctx.mm_cpumask(mm);
        let any = mask.iter().any(|c| {
            let s = per_cpu(&g.cpus, c);
            s.loaded_mm == Some(mm) && s.loaded_asid != global
        });
        any
    };
    if straggler {
        g.native_flush_tlb_multi(ctx, info).await;
    } else {
        g.mm_mut(mm, |m| m.asid_transition = false);
    }
}

/// `consider_global_asid(mm)`: once every 32 ticks per task, give `mm` a
/// global ASID if more than 3 CPUs have it loaded.
pub async fn consider_global_asid(g: &Inner, ctx: &Ctx, mm: MmId) {
    let tick = ctx.w.profile.kernel.time_slice_ns.max(1);
    let jiffies = ctx.now() / tick;
    if (ctx.task.index() as u64 & 0x1f) != (jiffies & 0x1f) || g.mm(mm).global_asid.is_some() {
        return;
    }
    let active = {
        let mask = ctx.mm_cpumask(mm);
        let n = mask
            .iter()
            .filter(|&c| per_cpu(&g.cpus, c).loaded_mm == Some(mm))
            .count();
        n
    };
    if active <= 3 {
        return;
    }
    ctx.atomic().await; // global_asid_lock
    let n = **g.next_global.borrow();
    let avail = ctx.w.profile.x86().global_asids;
    if n >= FIRST_GLOBAL_ASID + avail || n > u32::from(u16::MAX) {
        return; // out of global ASIDs: stay on IPIs
    }
    **g.next_global.borrow_mut() = n + 1;
    g.mm_mut(mm, |m| {
        m.global_asid = Some(n as u16);
        m.asid_transition = true;
    });
}

/// The registry entry of `x86-invlpgb`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "x86-invlpgb",
    description: "x86-pcid plus AMD INVLPGB: global ASIDs for mms active on 4+ CPUs, flushed by INVLPGB + TLBSYNC (Linux 6.15)",
    arch: Arch::X86,
    requires: &[Feature::Pcid, Feature::Invlpgb],
    allocators: Allocators::PicksOwnTags,
    breaks: None,
    new: || Box::new(new()),
};
