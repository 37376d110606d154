//! The mmu_gather (include/asm-generic/tlb.h, mm/mmu_gather.c): what an
//! unmap clears (`zap_pte_range()` and `free_pgtables()` of mm/memory.c,
//! here methods of the gather) is batched and turned into one flush
//! before its pages and page-table pages are freed; and
//! `mm->tlb_flush_pending` (`inc_tlb_flush_pending()`,
//! `dec_tlb_flush_pending()`), which counts the flushes under way.

use super::anon::{free_swap_and_cache, free_swap_cache};
use super::huge_memory::put_huge_zero_page;
use super::huge_memory::split_huge_pmd;
use super::hugetlb::{is_vm_hugetlb_page, unmap_hugepage_range_final};
use super::pgtable::{
    clip_table, detach_empty_tables, huge_leaves, pmd_clear_pgtable, present_ptes, pte_tables,
    set_huge, set_pte, set_swp_entry, swp_entries,
};
use super::tlbbatch::flush_tlb_batched_pending;
use crate::config::{HugetlbUnshareFlush, PgtableFreeTlbi};
use crate::hw::mem::{Granule, Pfn, SwpEntry, TableId};
use crate::hw::tlb::MmId;
use crate::kernel::tlbflush::{flush_tlb_mm, flush_tlb_range};
use crate::kernel::{Ctx, Vma};
use crate::observe::Event;

/// `struct mmu_gather`.
#[derive(Debug)]
pub struct MmuGather {
    mm: MmId,
    fullmm: bool,
    start: u64,
    end: u64,
    freed_tables: bool,
    /// Base-page PTEs were cleared (arm64 `tlb->cleared_ptes`).
    cleared_ptes: bool,
    /// PMD-sized leaves were cleared (arm64 `tlb->cleared_pmds`).
    cleared_pmds: bool,
    /// The kernel's granule (`PAGE_SIZE`, `PMD_SIZE`).
    g: Granule,
    /// Frames to release after the flush, with the VA they were mapped at.
    frames: Vec<(Pfn, u64)>,
    /// Huge pages to release after the flush: first frame and VA.
    huge: Vec<(Pfn, u64)>,
    tables: Vec<TableId>,
    /// Addresses where the huge zero page was unmapped, its reference to
    /// drop after the flush (`tlb_remove_page()` of it, since
    /// aa88b68c3b1d).
    huge_zero: Vec<u64>,
    /// The range the caller passes to `tlb_finish_mmu(tlb, start, end)`
    /// in 4.20-5.1: the union of the ranges zapped.
    call: Option<(u64, u64)>,
    /// A hugetlb unshare asked for a flush before the unmap of its VMA
    /// returns (`force_flush` of `__unmap_hugepage_range()`).
    force_flush: bool,
    /// hugetlb PMD tables were unshared (`tlb->unshared_tables`, 6.19+).
    unshared_tables: bool,
    /// An unshared table has no sharer left but one
    /// (`tlb->fully_unshared_tables`, 6.19+).
    fully_unshared_tables: bool,
}

impl MmuGather {
    /// `tlb_gather_mmu()`: counts this gather in `mm->tlb_flush_pending`
    /// (since 4.13; not with `[kernel] gather_ignores_nested`).
    pub async fn begin(ctx: &Ctx, mm: MmId, fullmm: bool) -> Self {
        if !ctx.w.kcfg.gather_ignores_nested {
            inc_tlb_flush_pending(ctx, mm).await;
        }
        Self {
            g: ctx.w.granule,
            mm,
            fullmm,
            start: u64::MAX,
            end: 0,
            freed_tables: false,
            cleared_ptes: false,
            cleared_pmds: false,
            frames: Vec::new(),
            huge: Vec::new(),
            tables: Vec::new(),
            huge_zero: Vec::new(),
            call: None,
            force_flush: false,
            unshared_tables: false,
            fully_unshared_tables: false,
        }
    }

    /// The address space the gather unmaps from.
    pub fn mm(&self) -> MmId {
        self.mm
    }

    /// `unmap_vmas()` of `vmas` (detached or about to be) over `[start,
    /// end)`: a hugetlb VMA's part goes through
    /// `__unmap_hugepage_range_final()` (kernel/mm/hugetlb.rs), the rest
    /// through [`Self::zap`], in address order.
    pub async fn unmap_vmas(&mut self, ctx: &Ctx, vmas: &[Vma], start: u64, end: u64) {
        let hugetlb: Vec<Vma> = vmas
            .iter()
            .filter(|v| v.start < end && start < v.end && is_vm_hugetlb_page(v))
            .copied()
            .collect();
        let mut at = start;
        for v in &hugetlb {
            let (lo, hi) = (v.start.max(start), v.end.min(end));
            if at < lo {
                self.zap(ctx, at, lo).await;
            }
            unmap_hugepage_range_final(self, ctx, v, lo, hi).await;
            at = hi;
        }
        if at < end {
            self.zap(ctx, at, end).await;
        }
    }

    /// `tlb_remove_huge_tlb_entry()` of a PMD-sized hugetlb page at `va`
    /// (`tlb_flush_pmd_range(tlb, va, PMD_SIZE)`).
    pub fn remove_huge_tlb_entry(&mut self, va: u64) {
        self.add_range(va, va + self.g.pmd_size());
        self.cleared_pmds = true;
    }

    /// `tlb_remove_page_size()` of the hugetlb page from `pfn` mapped at
    /// `va`: its mapping's references are dropped after the flush.
    pub fn remove_page_size(&mut self, pfn: Pfn, va: u64) {
        self.huge.push((pfn, va));
    }

    /// `__unmap_hugepage_range()` unshared the PMD table of `[start,
    /// end)` (one `PUD_SIZE`), leaving it to `sharers_left` other
    /// address spaces: what the kernel's version records for its flush
    /// (`[kernel] hugetlb_unshare_flush`). Before a4a118f2eead nothing;
    /// then `tlb_flush_pmd_range(tlb, start, PUD_SIZE)` and `force_flush`;
    /// since 8ce720d5bd91 `tlb_unshare_pmd_ptdesc()`: the same range,
    /// `unshared_tables`, and `fully_unshared_tables` if the last other
    /// sharer now has the table to itself. [`Self::hugetlb_unmap_end`]
    /// flushes before `i_mmap_rwsem` is released.
    pub fn hugetlb_unshared(&mut self, ctx: &Ctx, (start, end): (u64, u64), sharers_left: usize) {
        match ctx.w.kcfg.hugetlb_unshare_flush {
            HugetlbUnshareFlush::None => return,
            HugetlbUnshareFlush::ForceFlush => self.force_flush = true,
            HugetlbUnshareFlush::UnsharedTables => {
                self.unshared_tables = true;
                self.fully_unshared_tables |= sharers_left < 2;
            }
        }
        self.add_range(start, end);
        self.cleared_pmds = true;
    }

    /// The end of `__unmap_hugepage_range()`: `tlb_end_vma()` (nothing
    /// for the flush in the modelled versions: the gather's range is
    /// flushed at [`Self::finish`]) and, if an unshare forced it
    /// (a4a118f2eead), the flush of what was gathered
    /// (`tlb_flush_mmu_tlbonly()`); since 8ce720d5bd91
    /// `huge_pmd_unshare_flush()`: that flush if tables were unshared,
    /// then `tlb_remove_table_sync_one()` if one was fully unshared.
    pub async fn hugetlb_unmap_end(&mut self, ctx: &Ctx) {
        if std::mem::take(&mut self.force_flush) || self.unshared_tables {
            self.tlb_flush_mmu_tlbonly(ctx).await;
        }
        if std::mem::take(&mut self.fully_unshared_tables) {
            tlb_remove_table_sync_one(ctx).await;
        }
    }

    /// `tlb_remove_tlb_entry()`: the PTE at `va` changed in place (made
    /// old): its translation is flushed with the rest at [`Self::finish`].
    pub fn remove_tlb_entry(&mut self, va: u64) {
        self.add_range(va, va + self.g.page_size());
        self.cleared_ptes = true;
    }

    fn add_range(&mut self, start: u64, end: u64) {
        self.start = self.start.min(start);
        self.end = self.end.max(end);
    }

    /// Clears the PTEs of `[start, end)` (`zap_pte_range`), queueing frames.
    /// Each PTE table's entries are cleared under its own lock.
    pub async fn zap(&mut self, ctx: &Ctx, start: u64, end: u64) {
        let _f = ctx.func(crate::label!("unmap_page_range"));
        self.call = Some(
            self.call
                .map_or((start, end), |(a, b)| (a.min(start), b.max(end))),
        );
        let per = ctx.w.profile.kernel.pte_update_ns;
        let (page_size, pmd_size) = (self.g.page_size(), self.g.pmd_size());
        // zap_pmd_range(): a huge page the range covers whole is cleared at
        // its PMD (zap_huge_pmd); one it covers in part is split first.
        for (base, _) in huge_leaves(&ctx.w, self.mm, start, end) {
            if base >= start && base + pmd_size <= end {
                ctx.ptl_lock(self.mm, base).await;
                // Re-check under the lock (zap_huge_pmd runs under
                // pmd_trans_huge_lock): a concurrent madvise may have
                // split or zapped it, or a fault mapped another one.
                if !huge_leaves(&ctx.w, self.mm, base, base + pmd_size).is_empty() {
                    let (old, _) = set_huge(&ctx.w, ctx.cpu(), self.mm, base, None);
                    let old = old.expect("huge leaf present under its lock");
                    // The huge zero page is not freed (zap_huge_pmd()'s
                    // is_huge_zero_pmd() branch) but flushed all the same,
                    // and its reference dropped after the flush
                    // (aa88b68c3b1d; before it, at once).
                    if !ctx.w.hw.borrow().mem.is_huge_zero_pfn(old.pfn) {
                        self.huge.push((old.pfn, base));
                    } else if ctx.w.kcfg.huge_zero_put_before_flush {
                        put_huge_zero_page(&ctx.w, self.mm, base);
                    } else {
                        self.huge_zero.push(base);
                    }
                    self.cleared_pmds = true;
                    self.add_range(base, base + pmd_size);
                    ctx.work(per).await;
                }
                ctx.ptl_unlock(self.mm, base).await;
            } else {
                split_huge_pmd(ctx, self.mm, base).await;
            }
        }
        for table_va in pte_tables(&ctx.w, self.mm, start, end) {
            let (lo, hi) = clip_table(ctx.w.granule, table_va, start, end);
            ctx.ptl_lock(self.mm, table_va).await;
            flush_tlb_batched_pending(ctx, self.mm).await;
            let ptes = present_ptes(&ctx.w, self.mm, lo, hi);
            let cpu = ctx.cpu();
            for &(va, p) in &ptes {
                set_pte(&ctx.w, cpu, self.mm, va, None);
                self.frames.push((p.pfn, va));
                self.add_range(va, va + page_size);
                self.cleared_ptes = true;
            }
            // Swap and migration entries: no translation to flush; a swap
            // entry's slot reference to drop (zap_nonpresent_ptes()).
            let swapped = swp_entries(&ctx.w, self.mm, lo, hi);
            for &(va, e) in &swapped {
                set_swp_entry(&ctx.w, self.mm, va, None);
                if let SwpEntry::Swap(slot) = e {
                    free_swap_and_cache(&ctx.w, cpu, slot, self.mm, va);
                }
            }
            ctx.work(per * (ptes.len() + swapped.len()) as u64).await;
            ctx.ptl_unlock(self.mm, table_va).await;
        }
    }

    /// `free_pgtables()` over `[floor, ceiling)`: detaches empty tables; they
    /// are freed after the flush. With `[kernel] pgtable_free_tlbi =
    /// "sync-per-table"` (arm64 4.0-4.19) each table's walk-cache entries
    /// are invalidated at once instead (`__flush_tlb_pgtable()`); with
    /// `table_free_single_user_at_once` a single-user mm's table is freed
    /// at once (`tlb_remove_table()` before 4.19).
    pub async fn free_pgtables(&mut self, ctx: &Ctx, floor: u64, ceiling: u64) {
        let _f = ctx.func(crate::label!("free_pgtables"));
        let detached = detach_empty_tables(&ctx.w, self.mm, floor, ceiling);
        ctx.work(ctx.w.profile.kernel.pte_update_ns * detached.len() as u64)
            .await;
        for (t, va) in detached {
            // pte_free_tlb(): __tlb_adjust_range(tlb, address, PAGE_SIZE)
            // in every version (4.18's last-level tlb_flush() covers it).
            self.add_range(va, va + self.g.page_size());
            if ctx.w.kcfg.pgtable_free_tlbi == PgtableFreeTlbi::SyncPerTable {
                self.__flush_tlb_pgtable(ctx, va).await;
            } else {
                self.freed_tables = true;
            }
            self.tlb_remove_table(ctx, t).await;
        }
    }

    /// `CONFIG_PT_RECLAIM` (x86, Linux 6.14+; `[kernel] pt_reclaim`): a
    /// `MADV_DONTNEED` whose range covers a PTE table's whole `PMD_SIZE`
    /// frees the table if the zap left it empty (`zap_pte_table_if_empty()`
    /// in `zap_pte_range()`): under the table's lock the PMD is cleared,
    /// then `pte_free_tlb(tlb, table, addr)` widens the gather's range by
    /// a page at `addr` (the address the walk-cache invalidation is aimed
    /// at) and queues the table. From 7.0 to 7.1.8 `addr` is one past the
    /// table's range (`[kernel] pt_reclaim_flush_past_end`; fixed by
    /// 478a1c3abebf, CVE-2026-74674): when the zap cleared nothing else,
    /// the flush misses the freed table.
    pub async fn reclaim_empty_pte_tables(&mut self, ctx: &Ctx, start: u64, end: u64) {
        let pmd = self.g.pmd_size();
        for table_va in pte_tables(&ctx.w, self.mm, start, end) {
            if table_va < start || table_va + pmd > end {
                continue;
            }
            ctx.ptl_lock(self.mm, table_va).await;
            let w = &ctx.w;
            let empty = present_ptes(w, self.mm, table_va, table_va + pmd).is_empty()
                && swp_entries(w, self.mm, table_va, table_va + pmd).is_empty();
            let table = empty
                .then(|| pmd_clear_pgtable(w, self.mm, table_va))
                .flatten();
            ctx.ptl_unlock(self.mm, table_va).await;
            let Some(t) = table else { continue };
            let at = if w.kcfg.pt_reclaim_flush_past_end {
                table_va + pmd
            } else {
                table_va
            };
            self.add_range(at, at + self.g.page_size());
            self.freed_tables = true;
            self.tlb_remove_table(ctx, t).await;
        }
    }

    /// `tlb_remove_table(tlb, table)`: queues page-table page `t` on the
    /// gather, to be freed after its flush. Before 4.19 a single-user mm's
    /// table was freed at once (`[kernel] table_free_single_user_at_once`).
    /// When the batch page cannot be allocated (`[kernel]
    /// table_batch_alloc_fails`), `tlb_remove_table_one()` frees the table
    /// at once after an IPI to every other CPU; since 4.19
    /// (d86564a2f085) `tlb_table_invalidate()` flushes the gathered range
    /// first, before it only the IPI came first
    /// (`table_free_one_without_invalidate`).
    async fn tlb_remove_table(&mut self, ctx: &Ctx, t: TableId) {
        let kcfg = &ctx.w.kcfg;
        // "if (atomic_read(&tlb->mm->mm_users) < 2) { __tlb_remove_table(table);
        // return; }" (before 4.19).
        if kcfg.table_free_single_user_at_once && ctx.w.k.borrow().mms[self.mm].users < 2 {
            self.free_table(ctx, t);
            return;
        }
        // *batch = __get_free_page(GFP_NOWAIT | __GFP_NOWARN) failed:
        if kcfg.table_batch_alloc_fails {
            if !kcfg.table_free_one_without_invalidate {
                self.tlb_flush_mmu_tlbonly(ctx).await;
            }
            // tlb_remove_table_one(): tlb_remove_table_sync_one(), then
            // __tlb_remove_table().
            tlb_remove_table_sync_one(ctx).await;
            self.free_table(ctx, t);
            return;
        }
        self.tables.push(t);
    }

    /// `tlb_flush_mmu_tlbonly()` (as `tlb_table_invalidate()` calls it):
    /// flushes what the gather holds so far and resets its range
    /// (`__tlb_reset_range()`); pages and tables stay queued.
    async fn tlb_flush_mmu_tlbonly(&mut self, ctx: &Ctx) {
        if ctx.w.kcfg.pgtable_free_tlbi == PgtableFreeTlbi::SyncPerTable {
            self.tlb_flush_4_18(ctx, false).await;
        } else {
            self.tlb_flush(ctx).await;
        }
        self.reset_range();
    }

    /// `__tlb_reset_range()`: an empty range, nothing cleared or freed.
    fn reset_range(&mut self) {
        self.start = u64::MAX;
        self.end = 0;
        self.freed_tables = false;
        self.unshared_tables = false;
        self.cleared_ptes = false;
        self.cleared_pmds = false;
    }

    /// Frees page-table page `t` ([`free_pgtable_page`]).
    fn free_table(&self, ctx: &Ctx, t: TableId) {
        free_pgtable_page(ctx, self.mm, t);
    }

    /// `__pte_free_tlb()` → `__flush_tlb_pgtable(tlb->mm, addr)` of arm64
    /// Linux 3.x-4.19: `TLBI VAE1IS` at the lowest address the freed table
    /// translated (all levels, so the walk caches drop the entry pointing
    /// at it), then `DSB ISH`, before the page goes on the gather's list.
    /// The model issues it as a one-page, non-last-level
    /// `flush_tlb_range()`, so a policy scopes it like its other flushes
    /// (seed 000's patch was posted for 5.6, which has no such function;
    /// a 4.18 port is assumed to have given it the same check as
    /// `flush_tlb_page()`, docs/model.md).
    async fn __flush_tlb_pgtable(&self, ctx: &Ctx, va: u64) {
        let page = self.g.page_size();
        flush_tlb_range(ctx, self.mm, va, va + page, page, false).await;
    }

    /// `tlb_finish_mmu()`: flush (arm64 `tlb_flush`), then free pages and
    /// page-table pages, then drop the pending count.
    pub async fn finish(mut self, ctx: &Ctx) {
        let _f = ctx.func(crate::label!("tlb_finish_mmu"));
        let w = &ctx.w;
        let counted = !w.kcfg.gather_ignores_nested;
        let nested = || w.k.borrow().mms[self.mm].tlb_flush_pending > 1;
        let nested = counted && ctx.atomic_read(nested).await;
        if w.kcfg.pgtable_free_tlbi != PgtableFreeTlbi::SyncPerTable {
            if nested && w.kcfg.gather_nested_reset_range {
                // 4.20-5.1: "__tlb_reset_range(tlb); __tlb_adjust_range(tlb,
                // start, end - start);": the call's range, and what it
                // freed forgotten (7a30df49f63a).
                self.reset_range();
                if let Some((a, b)) = self.call {
                    self.add_range(a, b);
                }
            } else if nested {
                // mm_tlb_flush_nested(): another gather may have cleared
                // PTEs we found none; like tlb_finish_mmu(), flush the
                // whole mm.
                self.fullmm = true;
                self.freed_tables = true;
                self.start = 0;
                self.end = crate::kernel::mm::TASK_SIZE;
            }
            self.tlb_flush(ctx).await;
        } else {
            self.tlb_flush_4_18(ctx, nested).await;
        }
        let cpu = ctx.cpu();
        // tlb_flush_mmu_free(): page-table pages, then pages.
        for t in std::mem::take(&mut self.tables) {
            self.free_table(ctx, t);
        }
        for (f, va) in std::mem::take(&mut self.frames) {
            w.put_frame(cpu, f, self.mm, va);
            free_swap_cache(w, cpu, f, self.mm, va);
        }
        for (f, va) in std::mem::take(&mut self.huge) {
            w.put_huge(cpu, f, self.mm, va);
        }
        for va in std::mem::take(&mut self.huge_zero) {
            put_huge_zero_page(w, self.mm, va);
        }
        if counted {
            dec_tlb_flush_pending(ctx, self.mm).await;
        }
    }

    /// arm64 `tlb_flush()` (Linux 4.20+; x86's `flush_tlb_mm_range()`
    /// takes the same range): a full-mm teardown flushes the ASID only if
    /// tables were freed; otherwise the range, by the size of the level
    /// cleared, all levels if tables were freed.
    async fn tlb_flush(&self, ctx: &Ctx) {
        if self.end <= self.start {
            return;
        }
        let all_levels = ctx.w.kcfg.pgtable_free_tlbi == PgtableFreeTlbi::GatherAllLevels;
        // arm64 (c2ff4764e03e): unshared tables are invalidated as freed
        // ones are; x86 passes `tlb->freed_tables` alone.
        let unshared = self.unshared_tables
            && ctx.w.arch() == crate::config::Arch::Arm64
            && !ctx.w.kcfg.arm64_tlb_flush_ignores_unshared;
        let freed_tables = self.freed_tables || unshared;
        if self.fullmm {
            if freed_tables || all_levels {
                flush_tlb_mm(ctx, self.mm).await;
            }
            return;
        }
        // tlb_get_unmap_size(): one invalidation per PMD_SIZE when only
        // huge pages were cleared.
        let stride = if !self.cleared_ptes && self.cleared_pmds {
            self.g.pmd_size()
        } else {
            self.g.page_size()
        };
        let last_level = !freed_tables && !all_levels;
        flush_tlb_range(ctx, self.mm, self.start, self.end, stride, last_level).await;
    }

    /// arm64 `tlb_flush()` of Linux 3.x-4.19 (`pgtable_free_tlbi =
    /// "sync-per-table"`): freed tables were invalidated as they were
    /// freed ([`Self::__flush_tlb_pgtable`]), so a range is flushed
    /// last-level only, one TLBI per base page (4.18 had no stride, even
    /// over huge pages), and a full-mm teardown not at all (the ASID is not
    /// handed out again before a rollover flushes it). A nested gather
    /// (`mm_tlb_flush_nested()`) forced 4.18's `arch_tlb_finish_mmu()` to
    /// flush the range of the call; the model does not keep that range
    /// and flushes the whole ASID instead (docs/model.md).
    async fn tlb_flush_4_18(&self, ctx: &Ctx, nested: bool) {
        if nested {
            flush_tlb_mm(ctx, self.mm).await;
        } else if !self.fullmm && self.end > self.start {
            let page = self.g.page_size();
            flush_tlb_range(ctx, self.mm, self.start, self.end, page, true).await;
        }
    }
}

/// Frees page-table page `t` of `mm`, already detached and flushed
/// (after an RCU grace period if the policy frees tables by RCU).
pub(crate) fn free_pgtable_page(ctx: &Ctx, mm: MmId, t: TableId) {
    let w = &ctx.w;
    if w.policy.rcu_table_free() {
        w.rcu_free_table(mm, t);
        return;
    }
    let instance = w.hw.page_tables().table(t).instance;
    w.hw.page_tables_mut().free_table(t);
    w.stats.borrow_mut().tables_freed += 1;
    w.emit(Event::TableFree {
        cpu: ctx.cpu(),
        mm,
        table: t,
        instance,
    });
}

/// `tlb_remove_table_sync_one()` (`smp_call_function(
/// tlb_remove_table_smp_sync, NULL, 1)`): interrupts every other CPU and
/// waits until each has run the empty handler, so that no lockless
/// software walk (IRQs off) still uses a table about to be freed. It
/// invalidates no TLB.
pub(crate) async fn tlb_remove_table_sync_one(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("tlb_remove_table_sync_one"));
    let mut targets = crate::hw::cpumask::CpuMask::full(ctx.w.ncpus());
    targets.clear(ctx.cpu());
    ctx.step(crate::kernel::op::Op::CallFunction {
        targets,
        handler: crate::kernel::world::IPI_HANDLER_NOOP,
        arg: 0,
    })
    .await;
}

/// `inc_tlb_flush_pending(mm)`: a flush of `mm` is under way (its page
/// tables may change before it completes; `mm_tlb_flush_nested()` reads it).
/// With `[kernel] tlb_flush_pending_bool`, 3.13-4.12's
/// `set_tlb_flush_pending()`: a store of true.
pub async fn inc_tlb_flush_pending(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    if w.kcfg.tlb_flush_pending_bool {
        return ctx
            .atomic_set(|| w.k.borrow_mut().mms[mm].tlb_flush_pending = 1)
            .await;
    }
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm].tlb_flush_pending += 1)
        .await;
}

/// `dec_tlb_flush_pending(mm)`. With `[kernel] tlb_flush_pending_bool`,
/// `clear_tlb_flush_pending()`: a store of false.
pub async fn dec_tlb_flush_pending(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    if w.kcfg.tlb_flush_pending_bool {
        return ctx
            .atomic_set(|| w.k.borrow_mut().mms[mm].tlb_flush_pending = 0)
            .await;
    }
    ctx.atomic_dec(|| w.k.borrow_mut().mms[mm].tlb_flush_pending -= 1)
        .await;
}
