//! Page faults (mm/memory.c; the arch entry `do_page_fault()` is
//! arch/*/mm/fault.c): demand paging, copy-on-write, and the flushes a
//! fault makes (`ptep_clear_flush()`, `flush_tlb_fix_spurious_fault()`,
//! `ptep_set_access_flags()`). Huge-page faults are in
//! [`super::huge_memory`], swap-ins in [`super::anon`], file faults in
//! [`super::filemap`].

use super::anon::{do_swap_page, new_anon_folio, wp_free_swap};
use super::huge_memory::{
    do_huge_pmd_anonymous_page, do_huge_pmd_wp_zero_alloc, split_huge_pmd, thp_fits,
};
use super::mmap::find_vma;
use super::pgtable::{get_pte, get_swp_entry, huge_leaves, pte_none, set_pte};
use crate::hw::mem::{Perms, Pte, SwpEntry, ZERO_PFN};
use crate::hw::tlb::MmId;
use crate::hw::Fault;
use crate::kernel::tlbflush::flush_tlb_page;
use crate::kernel::{Ctx, Vma};
use crate::observe::Event;

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

/// `handle_mm_fault()` with the mmap_lock held for reading: finds the VMA
/// (`lock_mm_and_find_vma()`), checks the access against it
/// (`access_error()`), and handles the fault. False: SIGSEGV.
pub(crate) async fn handle_mm_fault(ctx: &Ctx, mm: MmId, va: u64, write: bool) -> bool {
    let _f = ctx.func(crate::label!("handle_mm_fault"));
    match find_vma(&ctx.w, mm, va) {
        Some(v) if v.perms.read() && (!write || v.perms.write()) => {
            if super::hugetlb::is_vm_hugetlb_page(&v) {
                super::hugetlb::hugetlb_fault(ctx, mm, &v, va).await;
            } else {
                handle_pte_fault(ctx, mm, &v, va, write).await;
            }
            true
        }
        _ => false,
    }
}

/// `__handle_mm_fault()` and `handle_pte_fault()`: what the entry for `va`
/// calls for. No entry in a regular file's VMA: `do_fault()`
/// (kernel/mm/filemap.rs); a write to its read-only PMD splits it
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
        // pte_protnone() in an accessible VMA: a NUMA-hinting fault.
        Some(p) if p.perms == crate::hw::mem::Perms::NONE => {
            super::numa_balancing::do_numa_page(ctx, mm, v, va).await;
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
    match ctx.w.arch() {
        crate::config::Arch::Arm64 => flush_tlb_page(ctx, mm, va).await,
        crate::config::Arch::X86 => {}
    }
}
