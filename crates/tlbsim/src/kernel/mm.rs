//! Memory-management system calls and page faults: mmap, munmap, mprotect,
//! madvise(MADV_DONTNEED), demand paging with copy-on-write, fork's
//! `dup_mmap`, and teardown (`exit_mmap`), with the mmu_gather batching
//! (include/asm-generic/tlb.h, mm/mmu_gather.c) that turns them into flushes.

use super::anon::{
    copy_swap_pte, do_swap_page, free_swap_and_cache, free_swap_cache, new_anon_folio, wp_free_swap,
};
use super::mm_types::{AnonId, AnonMap, ShmemMap};
use super::pgtable::{
    detach_empty_tables, get_pte, get_swp_entry, huge_leaves, pmd_none, present_ptes, pte_none,
    pte_tables, set_huge, set_pte, set_swp_entry, swp_entries,
};
use super::swap::PageData;
use super::tlbbatch::flush_tlb_batched_pending;
use super::{sched, Ctx, Vma};
use crate::hw::mem::{Granule, Perms, Pfn, Pte, SwpEntry, TableId, ZERO_PFN};
use crate::hw::tlb::MmId;
use crate::hw::Fault;
use crate::observe::Event;

/// Kernel call bracket: statistics, observer events and the return-to-user
/// preemption point.
pub async fn syscall_enter(ctx: &Ctx, name: &'static str) {
    let _f = ctx.func(crate::label!("el0_svc_common"));
    let cpu = ctx.cpu();
    ctx.w.stats.borrow_mut().cpu[ctx.w.pcpu(cpu)].syscalls += 1;
    ctx.emit(Event::CallEnter {
        cpu,
        task: ctx.task,
        call: name,
    });
    ctx.work(ctx.w.profile.kernel.syscall_ns / 2).await;
}

/// Returns from a kernel call to user space.
pub async fn syscall_exit(ctx: &Ctx, name: &'static str) {
    {
        let _f = ctx.func(crate::label!("el0_svc_common"));
        ctx.work(ctx.w.profile.kernel.syscall_ns - ctx.w.profile.kernel.syscall_ns / 2)
            .await;
    }
    ctx.emit(Event::CallExit {
        cpu: ctx.cpu(),
        task: ctx.task,
        call: name,
    });
    sched::maybe_preempt(ctx).await;
}

/// Calls the policy's `flush_tlb_range`, timing it. Like the two below, a
/// macro or `static inline` in Linux: the profile gives its time to the
/// caller ([`Ctx::inline_func`]).
pub async fn flush_tlb_range(
    ctx: &Ctx,
    mm: MmId,
    start: u64,
    end: u64,
    stride: u64,
    last_level: bool,
) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_range"));
    let t0 = ctx.now();
    ctx.w
        .policy
        .flush_tlb_range(ctx, mm, start, end, stride, last_level)
        .await;
    ctx.w
        .stats
        .borrow_mut()
        .flush_latency_ns
        .record(ctx.now().saturating_sub(t0));
}

/// Calls the policy's `flush_tlb_mm`, timing it.
pub async fn flush_tlb_mm(ctx: &Ctx, mm: MmId) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_mm"));
    let t0 = ctx.now();
    ctx.w.policy.flush_tlb_mm(ctx, mm).await;
    ctx.w
        .stats
        .borrow_mut()
        .flush_latency_ns
        .record(ctx.now().saturating_sub(t0));
}

/// Calls the policy's `flush_tlb_page`, timing it.
pub async fn flush_tlb_page(ctx: &Ctx, mm: MmId, va: u64) {
    let _f = ctx.inline_func(crate::label!("flush_tlb_page"));
    let t0 = ctx.now();
    ctx.w.policy.flush_tlb_page(ctx, mm, va).await;
    ctx.w
        .stats
        .borrow_mut()
        .flush_latency_ns
        .record(ctx.now().saturating_sub(t0));
}

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
}

impl MmuGather {
    /// `tlb_gather_mmu()`: counts this gather in `mm->tlb_flush_pending`.
    pub async fn begin(ctx: &Ctx, mm: MmId, fullmm: bool) -> Self {
        inc_tlb_flush_pending(ctx, mm).await;
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
                    // is_huge_zero_pmd() branch) but flushed all the same.
                    if !ctx.w.hw.borrow().mem.is_huge_zero_pfn(old.pfn) {
                        self.huge.push((old.pfn, base));
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
    /// "sync-per-table"` (arm64 before 4.20) each table's walk-cache entries
    /// are invalidated at once instead (`__flush_tlb_pgtable()`).
    pub async fn free_pgtables(&mut self, ctx: &Ctx, floor: u64, ceiling: u64) {
        let _f = ctx.func(crate::label!("free_pgtables"));
        let detached = detach_empty_tables(&ctx.w, self.mm, floor, ceiling);
        ctx.work(ctx.w.profile.kernel.pte_update_ns * detached.len() as u64)
            .await;
        let sync = !ctx.w.kcfg.pgtable_free_tlbi.is_deferred();
        for (t, va) in detached {
            self.tables.push(t);
            // pte_free_tlb(): __tlb_adjust_range(tlb, address, PAGE_SIZE)
            // in every version (4.18's last-level tlb_flush() covers it).
            self.add_range(va, va + self.g.page_size());
            if sync {
                self.__flush_tlb_pgtable(ctx, va).await;
            } else {
                self.freed_tables = true;
            }
        }
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
        let nested = || w.k.borrow().mms[self.mm as usize].tlb_flush_pending > 1;
        let nested = ctx.atomic_read(nested).await;
        if w.kcfg.pgtable_free_tlbi.is_deferred() {
            if nested {
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
        for t in self.tables.drain(..) {
            if w.policy.rcu_table_free() {
                w.rcu_free_table(self.mm, t);
                continue;
            }
            let instance = w.hw.page_tables().table(t).instance;
            w.hw.page_tables_mut().free_table(t);
            w.stats.borrow_mut().tables_freed += 1;
            w.emit(Event::TableFree {
                cpu,
                mm: self.mm,
                table: t,
                instance,
            });
        }
        for (f, va) in std::mem::take(&mut self.frames) {
            w.put_frame(cpu, f, self.mm, va);
            free_swap_cache(w, cpu, f, self.mm, va);
        }
        for (f, va) in std::mem::take(&mut self.huge) {
            w.put_huge(cpu, f, self.mm, va);
        }
        dec_tlb_flush_pending(ctx, self.mm).await;
    }

    /// arm64 `tlb_flush()` (Linux 4.20+; x86's `flush_tlb_mm_range()`
    /// takes the same range): a full-mm teardown flushes the ASID only if
    /// tables were freed; otherwise the range, by the size of the level
    /// cleared, all levels if tables were freed.
    async fn tlb_flush(&self, ctx: &Ctx) {
        if self.end <= self.start {
            return;
        }
        if self.fullmm {
            if self.freed_tables {
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
        let last_level = !self.freed_tables;
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

/// `inc_tlb_flush_pending(mm)`: a flush of `mm` is under way (its page
/// tables may change before it completes; `mm_tlb_flush_nested()` reads it).
pub async fn inc_tlb_flush_pending(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm as usize].tlb_flush_pending += 1)
        .await;
}

/// `dec_tlb_flush_pending(mm)`.
pub async fn dec_tlb_flush_pending(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    ctx.atomic_dec(|| w.k.borrow_mut().mms[mm as usize].tlb_flush_pending -= 1)
        .await;
}

/// `__split_huge_pmd()` of the anonymous huge page at `base`, under its
/// PMD lock: the PMD is invalidated and the 2 MiB flushed
/// (`pmdp_invalidate`), then a PTE table maps the same 512 frames with the
/// same permissions. The huge zero page is split into 512 read-only
/// PTEs of the 4 KiB zero page (`__split_huge_zero_page_pmd()`, whose
/// `pmdp_huge_clear_flush()` flushes the same 2 MiB). Callers then work
/// on 4 KiB PTEs. A file VMA's PMD (a page-cache folio) is cleared and
/// flushed without a PTE table in its place
/// (`filemap::split_file_pmd_locked()`).
pub async fn split_huge_pmd(ctx: &Ctx, mm: MmId, base: u64) {
    let _f = ctx.func(crate::label!("__split_huge_pmd"));
    let w = &ctx.w;
    let g = w.granule;
    ctx.ptl_lock(mm, base).await;
    let file = find_vma(w, mm, base).is_some_and(|v| v.file_backed());
    if let Some(&(_, p)) = huge_leaves(w, mm, base, base + g.pmd_size()).first() {
        w.stats.borrow_mut().thp_split_pmd += 1;
        if file {
            super::filemap::split_file_pmd_locked(ctx, mm, base, p.pfn).await;
            ctx.ptl_unlock(mm, base).await;
            return;
        }
        set_huge(w, ctx.cpu(), mm, base, None);
        flush_tlb_range(ctx, mm, base, base + g.pmd_size(), g.pmd_size(), true).await;
        let cpu = ctx.cpu();
        let zero = w.hw.borrow().mem.is_huge_zero_pfn(p.pfn);
        let mut tables = 0;
        for i in 0..g.hpage_pmd_nr() {
            let new = if zero {
                (ZERO_PFN, Perms::R)
            } else {
                (p.pfn + i, p.perms)
            };
            let (_, t) = set_pte(w, cpu, mm, base + i * g.page_size(), Some(new));
            tables += t;
        }
        ctx.work(
            w.profile.kernel.pte_update_ns * g.hpage_pmd_nr()
                + w.profile.kernel.page_alloc_ns * u64::from(tables),
        )
        .await;
    }
    ctx.ptl_unlock(mm, base).await;
}

/// Splits every huge page of `mm` overlapping `[start, end)` (callers that
/// only handle 4 KiB PTEs: mprotect and fork; docs/model.md).
pub(crate) async fn split_huge_range(ctx: &Ctx, mm: MmId, start: u64, end: u64) {
    for (base, _) in huge_leaves(&ctx.w, mm, start, end) {
        split_huge_pmd(ctx, mm, base).await;
    }
}

/// `[start, end)` clipped to the `PMD_SIZE` a PTE table at `table_va`
/// maps in granule `g`.
fn clip_table(g: Granule, table_va: u64, start: u64, end: u64) -> (u64, u64) {
    let span = g.pmd_size();
    (start.max(table_va), end.min(table_va + span))
}

/// Declares the range contract of the call in progress (`Event::CallRange`).
pub(crate) fn call_range(ctx: &Ctx, mm: MmId, start: u64, end: u64) {
    ctx.emit(Event::CallRange {
        cpu: ctx.cpu(),
        mm,
        start,
        end,
    });
}

/// Top of the user address space (48-bit VA).
pub const TASK_SIZE: u64 = 1 << 48;

/// `PAGE_ALIGN(x)` in the kernel's granule.
pub(crate) fn page_align(ctx: &Ctx, x: u64) -> u64 {
    ctx.w.granule.page_align(x)
}

/// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS)`: returns the
/// address. Its pages, once written, hold compressible data (see
/// [`sys_mmap_private`]).
pub async fn sys_mmap(ctx: &Ctx, len: u64, perms: Perms) -> u64 {
    sys_mmap_private(ctx, len, perms, PageData::Compressible).await
}

/// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS)` of memory whose
/// pages, once written, hold `data` (the model has no contents; swap
/// costs depend on it). Returns the address.
pub async fn sys_mmap_private(ctx: &Ctx, len: u64, perms: Perms, data: PageData) -> u64 {
    let _f = ctx.func(crate::label!("do_mmap"));
    syscall_enter(ctx, "mmap").await;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.mmap_ns).await;
    let len = page_align(ctx, len.max(1));
    let addr = {
        let mut k = ctx.w.k.borrow_mut();
        *k.anon_ids += 1;
        let anon = Some((*k.anon_ids, data));
        let m = &mut k.mms[mm as usize];
        insert_vma(
            &mut m.vmas,
            m.mmap_base,
            len,
            perms,
            None,
            anon,
            ctx.w.granule,
        )
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mmap").await;
    addr
}

/// Places a new VMA of `len` bytes below `ceiling` (top-down, see
/// [`unmapped_area_topdown`]) and inserts it, mapping `shmem` or, for
/// private memory, the anon id and data in `anon` (its `vm_pgoff` is the
/// page number of its start); returns its start.
pub(crate) fn insert_vma(
    vmas: &mut std::collections::BTreeMap<u64, Vma>,
    ceiling: u64,
    len: u64,
    perms: Perms,
    shmem: Option<ShmemMap>,
    anon: Option<(AnonId, PageData)>,
    g: Granule,
) -> u64 {
    let start = unmapped_area_topdown(vmas, ceiling, len, g);
    vmas.insert(
        start,
        Vma {
            start,
            end: start + len,
            perms,
            shmem,
            anon: anon.map(|(id, data)| AnonMap {
                id,
                pgoff: start / crate::kernel::mm_types::PGOFF_UNIT,
                data,
            }),
        },
    );
    start
}

/// Lowest address `mmap` hands out.
pub(crate) const MMAP_MIN_ADDR: u64 = 0x1000_0000;

/// `unmapped_area_topdown()`: the start of the highest free range of `len`
/// bytes below `ceiling` (`mm->mmap_base`), so that ranges freed by munmap
/// are reused as in Linux. A free page (of granule `g`) is kept above and
/// below each mapping so that separate mappings never merge into one VMA.
pub(crate) fn unmapped_area_topdown(
    vmas: &std::collections::BTreeMap<u64, Vma>,
    ceiling: u64,
    len: u64,
    g: Granule,
) -> u64 {
    let page = g.page_size();
    let mut hi = ceiling;
    for v in vmas.range(..ceiling).rev().map(|(_, v)| v) {
        let fits = hi
            .checked_sub(page + len)
            .is_some_and(|start| start >= v.end + page);
        if fits {
            return hi - page - len;
        }
        hi = hi.min(v.start);
    }
    hi.checked_sub(page + len)
        .filter(|&start| start >= MMAP_MIN_ADDR)
        .expect("the model's 47-bit user address space is not exhausted")
}

/// Splits VMAs at `addr` so that a VMA boundary falls there.
fn split_at(vmas: &mut std::collections::BTreeMap<u64, Vma>, addr: u64) {
    let hit = vmas
        .range(..addr)
        .next_back()
        .filter(|(_, v)| v.end > addr)
        .map(|(s, v)| (*s, *v));
    if let Some((s, v)) = hit {
        vmas.insert(s, Vma { end: addr, ..v });
        vmas.insert(addr, v.tail_from(addr));
    }
}

/// Merges adjacent VMAs with equal protection, in place (`vma_merge()`):
/// a VMA that starts where the one before it ends, with the same
/// protection and the next pages of the same object or `anon_vma`
/// ([`Vma::continued_by`]), is folded into it.
fn merge(vmas: &mut std::collections::BTreeMap<u64, Vma>) {
    use std::ops::Bound::{Excluded, Unbounded};
    let Some(mut cur) = vmas.keys().next().copied() else {
        return;
    };
    loop {
        let c = vmas[&cur];
        let Some((&next, &n)) = vmas.range((Excluded(cur), Unbounded)).next() else {
            return;
        };
        if c.perms == n.perms && c.continued_by(&n) {
            vmas.remove(&next);
            vmas.get_mut(&cur).expect("just read").end = n.end;
        } else {
            cur = next;
        }
    }
}

/// `mprotect(addr, len, prot)`: returns false (EINVAL/ENOMEM) if the range
/// is not fully mapped. Private writable mappings keep PTEs read-only
/// (written on the next write fault), as Linux before 6.0 does.
pub async fn sys_mprotect(ctx: &Ctx, addr: u64, len: u64, perms: Perms) -> bool {
    let _f = ctx.func(crate::label!("do_mprotect_pkey"));
    syscall_enter(ctx, "mprotect").await;
    let w = &ctx.w;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    ctx.mmap_write_lock(mm).await;
    ctx.work(w.profile.kernel.mprotect_vma_ns).await;
    let ok = {
        let mut k = w.k.borrow_mut();
        let vmas = &mut k.mms[mm as usize].vmas;
        let mut covered = addr;
        for v in vmas.values() {
            if v.start <= covered && v.end > covered {
                covered = v.end;
            }
        }
        if covered < end {
            false
        } else {
            split_at(vmas, addr);
            split_at(vmas, end);
            for (_, v) in vmas.range_mut(addr..end) {
                v.perms = perms;
            }
            merge(vmas);
            true
        }
    };
    if ok {
        // change_protection(): rewrite every present PTE, flush if any, with
        // mm->tlb_flush_pending raised around it.
        inc_tlb_flush_pending(ctx, mm).await;
        split_huge_range(ctx, mm, addr, end).await;
        let pte_perms = Perms(perms.0 & !(Perms::RW.0 & !Perms::R.0));
        let mut changed = 0;
        for table_va in pte_tables(w, mm, addr, end) {
            let (lo, hi) = clip_table(ctx.w.granule, table_va, addr, end);
            ctx.ptl_lock(mm, table_va).await;
            flush_tlb_batched_pending(ctx, mm).await;
            let ptes = present_ptes(w, mm, lo, hi);
            let cpu = ctx.cpu();
            for (va, p) in &ptes {
                set_pte(w, cpu, mm, *va, Some((p.pfn, pte_perms)));
            }
            ctx.work(w.profile.kernel.pte_update_ns * ptes.len() as u64)
                .await;
            ctx.ptl_unlock(mm, table_va).await;
            changed += ptes.len();
        }
        if changed > 0 {
            flush_tlb_range(ctx, mm, addr, end, w.granule.page_size(), true).await;
        }
        dec_tlb_flush_pending(ctx, mm).await;
    }
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mprotect").await;
    ok
}

/// Removes `[addr, end)` from the VMA tree; returns the removed VMAs.
pub(crate) fn remove_vmas(ctx: &Ctx, mm: MmId, addr: u64, end: u64) -> Vec<Vma> {
    let mut k = ctx.w.k.borrow_mut();
    let vmas = &mut k.mms[mm as usize].vmas;
    split_at(vmas, addr);
    split_at(vmas, end);
    let starts: Vec<u64> = vmas.range(addr..end).map(|(s, _)| *s).collect();
    starts.iter().filter_map(|s| vmas.remove(s)).collect()
}

/// `munmap(addr, len)`: zaps the PTEs, frees empty page tables, flushes.
pub async fn sys_munmap(ctx: &Ctx, addr: u64, len: u64) {
    let _f = ctx.func(crate::label!("do_vmi_munmap"));
    syscall_enter(ctx, "munmap").await;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.munmap_ns).await;
    do_munmap(ctx, mm, addr, end).await;
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "munmap").await;
}

/// `do_munmap()` of `[addr, end)` (page aligned) with the mmap_lock held
/// for writing: removes the VMAs, zaps their PTEs, frees empty page
/// tables and flushes (`unmap_region()` through an mmu_gather).
pub(crate) async fn do_munmap(ctx: &Ctx, mm: MmId, addr: u64, end: u64) {
    let removed = remove_vmas(ctx, mm, addr, end);
    let mut g = MmuGather::begin(ctx, mm, false).await;
    g.zap(ctx, addr, end).await;
    g.free_pgtables(ctx, addr, end).await;
    g.finish(ctx).await;
    super::shmem::release_unmapped(ctx, mm, &removed);
}

/// `madvise(addr, len, MADV_DONTNEED)`: zaps PTEs, keeps VMAs and tables.
pub async fn sys_madvise_dontneed(ctx: &Ctx, addr: u64, len: u64) {
    let _f = ctx.func(crate::label!("do_madvise"));
    syscall_enter(ctx, "madvise").await;
    let mm = ctx.mm().expect("user task");
    let end = addr + page_align(ctx, len);
    call_range(ctx, mm, addr, end);
    ctx.mmap_read_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.madvise_ns).await;
    let mut g = MmuGather::begin(ctx, mm, false).await;
    g.zap(ctx, addr, end).await;
    if ctx.w.kcfg.zap_flush_always {
        // Linux 4.14-4.18: flush_tlb_range() per VMA inside zap_page_range().
        let page_size = ctx.w.granule.page_size();
        flush_tlb_range(ctx, mm, addr, end, page_size, true).await;
    }
    g.finish(ctx).await;
    ctx.mmap_read_unlock(mm).await;
    syscall_exit(ctx, "madvise").await;
}

/// Page-fault handler (`do_page_fault` → `handle_mm_fault`). Returns false
/// when the access is not permitted (SIGSEGV).
pub async fn handle_page_fault(ctx: &Ctx, va: u64, write: bool, _f: Fault) -> bool {
    let _f = ctx.func(crate::label!("do_page_fault"));
    let w = &ctx.w;
    let cpu = ctx.cpu();
    w.stats.borrow_mut().cpu[w.pcpu(cpu)].page_faults += 1;
    ctx.emit(Event::CallEnter {
        cpu,
        task: ctx.task,
        call: "fault",
    });
    ctx.work(w.profile.kernel.page_fault_ns).await;
    let ok = match ctx.mm() {
        Some(mm) => {
            ctx.mmap_read_lock(mm).await;
            let ok = handle_mm_fault(ctx, mm, w.granule.page_down(va), write).await;
            ctx.mmap_read_unlock(mm).await;
            ok
        }
        None => false,
    };
    ctx.emit(Event::CallExit {
        cpu: ctx.cpu(),
        task: ctx.task,
        call: "fault",
    });
    ok
}

/// `vma_lookup(mm, addr)`: the VMA of `mm` containing `addr`, if any.
pub(crate) fn find_vma(w: &crate::kernel::World, mm: MmId, addr: u64) -> Option<Vma> {
    let k = w.k.borrow();
    k.mms[mm as usize]
        .vmas
        .range(..=addr)
        .next_back()
        .map(|(_, v)| *v)
        .filter(|v| v.end > addr)
}

/// `handle_mm_fault()` with the mmap_lock held for reading: finds the VMA
/// (`lock_mm_and_find_vma()`), checks the access against it
/// (`access_error()`), and handles the fault. False: SIGSEGV.
pub(crate) async fn handle_mm_fault(ctx: &Ctx, mm: MmId, va: u64, write: bool) -> bool {
    let _f = ctx.func(crate::label!("handle_mm_fault"));
    match find_vma(&ctx.w, mm, va) {
        Some(v) if v.perms.read() && (!write || v.perms.write()) => {
            handle_pte_fault(ctx, mm, &v, va, write).await;
            true
        }
        _ => false,
    }
}

/// `__handle_mm_fault()` and `handle_pte_fault()`: what the entry for `va`
/// calls for. No entry in a regular file's VMA: `do_fault()`
/// (kernel/filemap.rs); a write to its read-only PMD splits it
/// (`wp_huge_pmd()`) and goes on as `do_fault()` (`VM_FAULT_FALLBACK`).
/// A swap entry: [`do_swap_page`]; a migration entry: wait
/// for the migration (`migration_entry_wait()`). No entry: a new page, huge where it fits
/// ([`do_huge_pmd_anonymous_page`]; for a read, only with
/// `thp_huge_zero_page` other than `"off"`) or not ([`do_anonymous_page`]); a
/// write to a read-only huge page ([`wp_huge_pmd`]) or page
/// ([`do_wp_page`]); anything else was spurious (the retry walks the
/// current entry).
async fn handle_pte_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) {
    let w = &ctx.w;
    let regular = super::filemap::is_regular(w, v);
    match get_pte(w, mm, va) {
        None if v.shared() && !regular => super::shmem::shmem_fault(ctx, mm, v, va, write).await,
        None if !v.shared() && get_swp_entry(w, mm, va).is_some() => {
            match get_swp_entry(w, mm, va).expect("just read") {
                SwpEntry::Swap(slot) => do_swap_page(ctx, mm, v, va, slot, write).await,
                SwpEntry::Migration(old) => {
                    super::migrate::migration_entry_wait(ctx, mm, va, old).await;
                }
            }
        }
        None if regular => super::filemap::do_fault(ctx, mm, v, va, write).await,
        None if (write || !w.kcfg.thp_huge_zero_page.is_off()) && thp_fits(ctx, mm, v, va) => {
            do_huge_pmd_anonymous_page(ctx, mm, v, va, write).await;
        }
        None => do_anonymous_page(ctx, mm, v, va, write).await,
        Some(p)
            if write
                && !p.perms.write()
                && !huge_leaves(w, mm, va, va + w.granule.page_size()).is_empty() =>
        {
            wp_huge_pmd(ctx, mm, v, va).await;
            if regular {
                // VM_FAULT_FALLBACK: the split left the PMD empty; the
                // same fault goes on at the PTE level (do_fault()).
                super::filemap::do_fault(ctx, mm, v, va, write).await;
            }
        }
        Some(p) if write && !p.perms.write() => do_wp_page(ctx, mm, v, va, p).await,
        Some(_) if write => flush_tlb_fix_spurious_fault(ctx, mm, va).await,
        Some(_) => {}
    }
}

/// `flush_tlb_fix_spurious_fault(vma, address)`: a write fault found the
/// PTE already writable (`ptep_set_access_flags()` changed nothing), so
/// this CPU's TLB may hold an older read-only entry. arm64 Linux 3.7-5.9
/// used the generic `flush_tlb_page()` (`[kernel] spurious_fault_flush`);
/// arm64 5.10+ (Will Deacon, "arm64: mm: Make flush_tlb_fix_spurious_fault()
/// a no-op": the faulting access is retried and a fault's entry is never
/// cached) and x86 do nothing.
async fn flush_tlb_fix_spurious_fault(ctx: &Ctx, mm: MmId, va: u64) {
    if ctx.w.kcfg.spurious_fault_flush {
        flush_tlb_page(ctx, mm, va).await;
    }
}

/// `do_huge_pmd_anonymous_page()`: allocate, clear and map 2 MiB; back off
/// if the PMD was filled meanwhile (the retry then faults the 4 KiB way or
/// finds the page). A read fault maps the huge zero page instead where
/// it is on ([`set_huge_zero_page`]), and allocates like a write with
/// `thp_huge_zero_page = "alloc-on-read"`.
async fn do_huge_pmd_anonymous_page(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) {
    let _f = ctx.func(crate::label!("do_huge_pmd_anonymous_page"));
    let w = &ctx.w;
    let base = va & !(w.granule.pmd_size() - 1);
    if !write && w.kcfg.thp_huge_zero_page.maps_huge_zero_page() {
        set_huge_zero_page(ctx, mm, base).await;
        return;
    }
    let cost = w.profile.kernel.thp_fault_ns.unwrap_or(0);
    ctx.work(cost).await;
    let pfn = w.hw.borrow_mut().mem.alloc_huge();
    ctx.ptl_lock(mm, base).await;
    if pmd_none(w, mm, base) {
        w.stats.borrow_mut().thp_fault_alloc += 1;
        let (_, tables) = set_huge(w, ctx.cpu(), mm, base, Some((pfn, v.perms)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    } else {
        w.put_huge(ctx.cpu(), pfn, mm, base);
    }
    ctx.ptl_unlock(mm, base).await;
}

/// `do_anonymous_page()`: a write maps a new zeroed page (an anonymous
/// folio, after direct reclaim if memory is low, waking kswapd if above
/// its limit), a read the zero page read-only.
async fn do_anonymous_page(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, write: bool) {
    let _f = ctx.func(crate::label!("do_anonymous_page"));
    let w = &ctx.w;
    let pfn = if write {
        super::vmscan::direct_reclaim(ctx).await;
        ctx.work(w.profile.kernel.page_alloc_ns).await;
        w.hw.borrow_mut().mem.alloc_frame()
    } else {
        ZERO_PFN
    };
    // Under the PT lock: another CPU may have faulted the page in meanwhile
    // (`if (!pte_none(*vmf->pte))` → back off).
    ctx.ptl_lock(mm, va).await;
    if pte_none(w, mm, va) {
        let perms = if write { v.perms } else { Perms::R };
        if pfn != ZERO_PFN {
            new_anon_folio(w, ctx.cpu(), mm, v, va, pfn);
        }
        let (_, tables) = set_pte(w, ctx.cpu(), mm, va, Some((pfn, perms)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    } else if pfn != ZERO_PFN {
        w.put_frame(ctx.cpu(), pfn, mm, va);
    }
    ctx.ptl_unlock(mm, va).await;
    if write {
        super::vmscan::wakeup_kswapd(ctx).await;
    }
}

/// The read-fault branch of `do_huge_pmd_anonymous_page()` with
/// `transparent_hugepage/use_zero_page` (Linux 3.8+): under the PMD lock,
/// if the PMD is still empty, map the huge zero page read-only at it
/// (`mm_get_huge_zero_page()`, `set_huge_zero_page()`). Nothing is
/// allocated or cleared: the fault costs `page_fault_ns` plus any upper
/// table it allocates (the deposited PTE table is not modelled, as for
/// a THP).
async fn set_huge_zero_page(ctx: &Ctx, mm: MmId, base: u64) {
    let w = &ctx.w;
    let zero = w.hw.borrow_mut().mem.get_huge_zero_page();
    ctx.ptl_lock(mm, base).await;
    if pmd_none(w, mm, base) {
        let (_, tables) = set_huge(w, ctx.cpu(), mm, base, Some((zero, Perms::R)));
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
    }
    ctx.ptl_unlock(mm, base).await;
}

/// `wp_huge_pmd()` → `do_huge_pmd_wp_page()` on a write-protected huge
/// page. The huge zero page, by `[kernel] thp_huge_zero_page`: Linux
/// 3.8-5.7 copy it into a new huge page ([`do_huge_pmd_wp_zero_alloc`]);
/// 5.8+ split it (`goto fallback`). Any other anonymous huge page (none
/// is made today: mprotect and fork split them) is split; after a split
/// the retry takes the 4 KiB write-protect fault. A file VMA's PMD
/// (a page-cache folio) is split (mm/memory.c `wp_huge_pmd()`, 6.18:
/// no `huge_fault`, so "COW or write-notify handled on pte level") and
/// the caller goes on with `do_fault()`.
async fn wp_huge_pmd(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) {
    let w = &ctx.w;
    let pmd_size = w.granule.pmd_size();
    let base = va & !(pmd_size - 1);
    if v.file_backed() {
        // Not vma_is_anonymous(), no ->huge_fault (ext4's is DAX only):
        // "COW or write-notify handled on pte level: split pmd."
        split_huge_pmd(ctx, mm, base).await;
        return;
    }
    let leaf = huge_leaves(w, mm, base, base + pmd_size)
        .first()
        .map(|&(_, p)| p);
    if let Some(orig) = leaf {
        if w.kcfg.thp_huge_zero_page == crate::config::ThpZeroPage::CowAlloc
            && w.hw.borrow().mem.is_huge_zero_pfn(orig.pfn)
        {
            do_huge_pmd_wp_zero_alloc(ctx, mm, v, base, orig).await;
            return;
        }
    }
    split_huge_pmd(ctx, mm, base).await;
}

/// `do_huge_pmd_wp_page()`'s `alloc:` path for the huge zero page (Linux
/// 3.8-5.7, here as in 4.14): allocate and clear a huge page
/// (`thp_fault_ns`), then under the PMD lock, if the PMD is still
/// `orig` (`pmd_same()`), clear it and flush its 2 MiB
/// (`pmdp_huge_clear_flush_notify()` → `flush_tlb_range(vma, haddr,
/// haddr + HPAGE_PMD_SIZE)`) and map the new page writable; otherwise
/// free the new page (the retry finds whatever is there).
async fn do_huge_pmd_wp_zero_alloc(ctx: &Ctx, mm: MmId, v: &Vma, base: u64, orig: Pte) {
    let _f = ctx.func(crate::label!("do_huge_pmd_wp_page"));
    let w = &ctx.w;
    ctx.work(w.profile.kernel.thp_fault_ns.unwrap_or(0)).await;
    let pfn = w.hw.borrow_mut().mem.alloc_huge();
    ctx.ptl_lock(mm, base).await;
    let pmd_size = w.granule.pmd_size();
    let same = huge_leaves(w, mm, base, base + pmd_size)
        .first()
        .map(|&(_, p)| p)
        == Some(orig);
    if same {
        w.stats.borrow_mut().thp_fault_alloc += 1;
        set_huge(w, ctx.cpu(), mm, base, None);
        flush_tlb_range(ctx, mm, base, base + pmd_size, pmd_size, true).await;
        set_huge(w, ctx.cpu(), mm, base, Some((pfn, v.perms)));
    } else {
        w.put_huge(ctx.cpu(), pfn, mm, base);
    }
    ctx.ptl_unlock(mm, base).await;
}

/// `do_wp_page()`: a write to the read-only PTE `p`. A page someone else
/// maps too (or the zero page) is copied ([`wp_page_copy`]); one only this
/// mapping holds is made writable in place ([`wp_page_reuse`]), after
/// leaving the swap cache if it can ([`wp_free_swap`]).
async fn do_wp_page(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, p: Pte) {
    let _f = ctx.func(crate::label!("do_wp_page"));
    if v.shared() {
        // wp_page_shared(): a shared page is written in place, after the
        // filesystem's page_mkwrite for a regular file.
        if super::filemap::is_regular(&ctx.w, v) {
            super::filemap::do_page_mkwrite(ctx).await;
        }
        wp_page_reuse(ctx, mm, v, va, p).await;
        super::shmem::fault_dirty_shared_page(&ctx.w, p.pfn);
        return;
    }
    if p.pfn != ZERO_PFN {
        wp_free_swap(ctx, mm, va, p).await;
    }
    let shared = p.pfn == ZERO_PFN || ctx.w.hw.borrow().mem.frame_refs(p.pfn) > 1;
    if shared {
        wp_page_copy(ctx, mm, v, va, p).await;
    } else {
        wp_page_reuse(ctx, mm, v, va, p).await;
    }
}

/// `wp_page_copy()`: a new frame, `ptep_clear_flush()`, the new PTE; back
/// off if the PTE changed meanwhile (`pte_same()` failed).
async fn wp_page_copy(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, p: Pte) {
    let _f = ctx.func(crate::label!("wp_page_copy"));
    let w = &ctx.w;
    super::vmscan::direct_reclaim(ctx).await;
    // A copy of the zero page is a zeroed page (`vma_alloc_zeroed_movable_folio()`).
    let k = &w.profile.kernel;
    let cost = if p.pfn == ZERO_PFN {
        k.page_alloc_ns
    } else {
        k.page_copy_ns.unwrap_or(k.page_alloc_ns)
    };
    ctx.work(cost).await;
    let pfn = w.hw.borrow_mut().mem.alloc_frame();
    ctx.ptl_lock(mm, va).await;
    if get_pte(w, mm, va) == Some(p) {
        set_pte(w, ctx.cpu(), mm, va, None);
        flush_tlb_page(ctx, mm, va).await;
        new_anon_folio(w, ctx.cpu(), mm, v, va, pfn);
        set_pte(w, ctx.cpu(), mm, va, Some((pfn, v.perms)));
        w.put_frame(ctx.cpu(), p.pfn, mm, va);
    } else {
        w.put_frame(ctx.cpu(), pfn, mm, va);
    }
    ctx.ptl_unlock(mm, va).await;
    super::vmscan::wakeup_kswapd(ctx).await;
}

/// `wp_page_reuse()`: make the PTE writable and dirty
/// (`ptep_set_access_flags()`, then its flush where the architecture has
/// one: [`access_flags_flush`]).
async fn wp_page_reuse(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, p: Pte) {
    let w = &ctx.w;
    ctx.ptl_lock(mm, va).await;
    ctx.work(w.profile.kernel.pte_update_ns).await;
    if get_pte(w, mm, va) == Some(p) {
        set_pte(w, ctx.cpu(), mm, va, Some((p.pfn, v.perms)));
        access_flags_flush(ctx, mm, va).await;
    }
    ctx.ptl_unlock(mm, va).await;
}

/// The flush of `ptep_set_access_flags()` after a write fault made a
/// present PTE writable (`wp_page_reuse`), which differs by architecture:
/// arm64 invalidates the stale read-only entry (`flush_tlb_page`,
/// arch/arm64/mm/fault.c, v5.x); x86 never flushes
/// (arch/x86/mm/pgtable.c): a CPU still holding the read-only entry takes
/// a spurious fault, which drops it, and retries.
async fn access_flags_flush(ctx: &Ctx, mm: MmId, va: u64) {
    match ctx.w.policy.arch() {
        crate::config::Arch::Arm64 => flush_tlb_page(ctx, mm, va).await,
        crate::config::Arch::X86 => {}
    }
}

/// Would a fault at `va` in `v` map a transparent huge page (a write
/// fault) or the huge zero page (a read fault, when it is on)? With
/// `thp = "always"`, when the aligned `PMD_SIZE` around `va` (2 MiB, or
/// 512 MiB with 64 KiB pages) lies inside the VMA and no PTE table (or
/// huge page) is there yet (`pmd_none`).
fn thp_fits(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) -> bool {
    let pmd_size = ctx.w.granule.pmd_size();
    let base = va & !(pmd_size - 1);
    ctx.w.kcfg.thp == crate::config::Thp::Always
        && !v.file_backed()
        && base >= v.start
        && base + pmd_size <= v.end
        && pmd_none(&ctx.w, mm, base)
}

/// `dup_mmap()`: copies VMAs and PTEs into a new address space of the
/// same fork tree, write-protecting private writable pages in both
/// (copy-on-write) and sharing swap entries, then `flush_tlb_mm(oldmm)`.
pub async fn dup_mmap(ctx: &Ctx, old: MmId) -> MmId {
    let _f = ctx.func(crate::label!("dup_mmap"));
    let w = &ctx.w;
    let new = w.new_mm();
    ctx.mmap_write_lock(old).await;
    let vmas = {
        let mut k = w.k.borrow_mut();
        let vmas = k.mms[old as usize].vmas.clone();
        let base = k.mms[old as usize].mmap_base;
        let (start_brk, brk) = (k.mms[old as usize].start_brk, k.mms[old as usize].brk);
        let family = k.mms[old as usize].family;
        let child = &mut k.mms[new as usize];
        child.vmas = vmas.clone();
        child.mmap_base = base;
        child.start_brk = start_brk;
        child.brk = brk;
        child.family = family;
        for s in vmas.values().filter_map(|v| v.shmem) {
            k.shmem[s.id as usize].mms.insert(new);
        }
        vmas
    };
    // vma_needs_copy(): a shared VMA's PTEs are not copied; the child
    // faults its pages in from the object.
    let shared = |va: u64| {
        vmas.range(..=va)
            .next_back()
            .is_some_and(|(_, v)| v.end > va && v.shared())
    };
    split_huge_range(ctx, old, 0, TASK_SIZE).await;
    // copy_pte_range() takes each source table's lock in turn; one lock
    // over the copy is modelled (the child is not yet visible).
    ctx.ptl_lock(old, 0).await;
    let mut ptes = present_ptes(w, old, 0, TASK_SIZE);
    ptes.retain(|&(va, _)| !shared(va));
    let cpu = ctx.cpu();
    for &(va, p) in &ptes {
        let ro = Perms(p.perms.0 & !2);
        if p.perms.write() {
            set_pte(w, cpu, old, va, Some((p.pfn, ro)));
        }
        w.hw.borrow_mut().mem.get_frame(p.pfn);
        set_pte(w, cpu, new, va, Some((p.pfn, ro)));
    }
    // copy_nonpresent_pte(): swap entries are shared with the child; a
    // migration entry (a page another task is migrating) is copied,
    // read-only in both (the migration's reverse-map walk finds the
    // child's too).
    let mut swapped = swp_entries(w, old, 0, TASK_SIZE);
    swapped.retain(|&(va, _)| !shared(va));
    for &(va, e) in &swapped {
        match e {
            SwpEntry::Swap(slot) => {
                copy_swap_pte(w, new, va, slot);
            }
            SwpEntry::Migration(p) => {
                let ro = SwpEntry::Migration(Pte {
                    perms: Perms(p.perms.0 & !2),
                    ..p
                });
                set_swp_entry(w, old, va, None);
                set_swp_entry(w, old, va, Some(ro));
                set_swp_entry(w, new, va, Some(ro));
            }
        }
    }
    ctx.work(w.profile.kernel.fork_per_pte_ns * (ptes.len() + swapped.len()) as u64)
        .await;
    ctx.ptl_unlock(old, 0).await;
    // Unconditional in every Linux version, even when no PTE was
    // write-protected (kernel/fork.c, `out:` of dup_mmap()).
    flush_tlb_mm(ctx, old).await;
    ctx.mmap_write_unlock(old).await;
    new
}

/// `mmput()`: drops a user; the last one tears the address space down
/// (`exit_mmap`: zap everything, free the tables, flush the ASID).
pub async fn mmput(ctx: &Ctx, mm: MmId) {
    let _f = ctx.func(crate::label!("mmput"));
    let w = &ctx.w;
    let last = ctx
        .atomic_dec_and_test(|| {
            let mut k = w.k.borrow_mut();
            let m = &mut k.mms[mm as usize];
            m.users -= 1;
            m.users == 0
        })
        .await;
    if !last {
        return;
    }
    let mut g = MmuGather::begin(ctx, mm, true).await;
    g.zap(ctx, 0, TASK_SIZE).await;
    let removed: Vec<Vma> = std::mem::take(&mut w.k.borrow_mut().mms[mm as usize].vmas)
        .into_values()
        .filter(Vma::shared)
        .collect();
    g.free_pgtables(ctx, 0, TASK_SIZE).await;
    g.finish(ctx).await;
    super::shmem::release_unmapped(ctx, mm, &removed);
    mmdrop(ctx, mm).await;
}

/// `mmdrop()`: drops a reference to the structure; the last frees the PGD.
pub async fn mmdrop(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    let last = ctx
        .atomic_dec_and_test(|| {
            let mut k = w.k.borrow_mut();
            let m = &mut k.mms[mm as usize];
            m.count -= 1;
            m.count == 0
        })
        .await;
    if last {
        let pgd = w.k.borrow().mms[mm as usize].pgd;
        let instance = w.hw.borrow().mem.table(pgd).instance;
        w.hw.borrow_mut().mem.free_table(pgd);
        w.k.borrow_mut().mms[mm as usize].live = false;
        w.emit(Event::TableFree {
            cpu: ctx.cpu(),
            mm,
            table: pgd,
            instance,
        });
        w.emit(Event::MmFree { mm });
    }
}

#[cfg(test)]
mod tests {
    use super::{insert_vma, Vma};
    use crate::hw::mem::{Granule, Perms};
    use std::collections::BTreeMap;

    fn map_in(g: Granule, vmas: &mut BTreeMap<u64, Vma>, ceiling: u64, len: u64) -> u64 {
        insert_vma(vmas, ceiling, len, Perms::RW, None, None, g)
    }

    fn map(vmas: &mut BTreeMap<u64, Vma>, ceiling: u64, len: u64) -> u64 {
        map_in(Granule::K4, vmas, ceiling, len)
    }

    #[test]
    fn with_64k_pages_the_guard_gap_is_one_64k_page() {
        let (g, top) = (Granule::K64, 0x7f00_0000_0000);
        let mut vmas = BTreeMap::new();
        let a = map_in(g, &mut vmas, top, 65536);
        assert_eq!(a, top - 2 * 65536);
        let b = map_in(g, &mut vmas, top, 2 * 65536);
        assert_eq!(b, a - 3 * 65536);
    }

    #[test]
    fn mmap_is_top_down_with_guard_pages_and_reuses_freed_ranges() {
        const PAGE_SIZE: u64 = crate::hw::mem::PAGE_SIZE_4K;
        let top = 0x7f00_0000_0000;
        let mut vmas = BTreeMap::new();
        let a = map(&mut vmas, top, 4 * PAGE_SIZE);
        assert_eq!(a, top - 5 * PAGE_SIZE, "one free page below the ceiling");
        let b = map(&mut vmas, top, 2 * PAGE_SIZE);
        assert_eq!(b, a - 3 * PAGE_SIZE, "one free page between mappings");
        let c = map(&mut vmas, top, PAGE_SIZE);
        // munmap(a): its range is handed out again, highest first.
        vmas.remove(&a);
        assert_eq!(map(&mut vmas, top, 4 * PAGE_SIZE), a);
        // b's hole (its 2 pages and the free pages around them) fits b
        // again, but not 3 pages: those go below c.
        vmas.remove(&b);
        let d = map(&mut vmas, top, 3 * PAGE_SIZE);
        assert_eq!(d, c - 4 * PAGE_SIZE);
        assert_eq!(map(&mut vmas, top, 2 * PAGE_SIZE), b);
    }
}
