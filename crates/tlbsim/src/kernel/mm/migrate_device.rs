//! Migration to device memory (mm/migrate_device.c, Linux 5.18+; in
//! mm/migrate.c from 4.14): `migrate_vma_setup()`, `migrate_vma_pages()`
//! and `migrate_vma_finalize()`, as a device driver calls them to move a
//! range of private anonymous memory into memory of its own. The driver
//! is lib/test_hmm.c's `dmirror_migrate()` (the `HMM_DMIRROR_MIGRATE`
//! ioctl, 5.7+) with device coherent memory (`MEMORY_DEVICE_COHERENT`,
//! 6.0): the CPU maps such a page as it maps RAM, so finalizing puts a
//! present PTE back (`remove_migration_ptes()`).
//!
//! `migrate_vma_collect_pmd()` takes each page it can lock at once
//! (`trylock_page()`), clears its PTE (`ptep_get_and_clear()`), leaves a
//! migration entry and drops the mapping, all under the PTE table's lock,
//! then flushes the table's range. From 4.14 (8c3328f1f36a) to 6.0 the
//! flush came after `pte_unmap_unlock()` (`[kernel]
//! migrate_vma_flush_unlocked`): a `MADV_DONTNEED` on another CPU could
//! take the lock in between, find no present PTE, flush nothing and
//! return while a CPU still held the translation. 60bae7370896
//! ("mm/migrate_device.c: flush TLB while holding PTL", 6.0) flushes
//! before the unlock.
//!
//! Not modelled (docs/model.md): empty PTEs and the zero page (Linux may
//! fill them with device pages, `migrate_vma_insert_page()`), huge PMDs
//! (Linux splits them first), device private memory (a CPU access faults
//! it back with `migrate_to_ram()`), the MMU notifiers, and folios in the
//! swap cache (skipped, as Linux's reference check would refuse them).

use super::anon::anon_mappers;
use super::folio::{folio_lock_new, folio_trylock, folio_unlock, Folio, Mapping};
use super::migrate::remove_migration_entries;
use super::mmap::find_vma;
use super::pgtable::{clip_table, get_pte, present_ptes, pte_tables, set_pte, set_swp_entry};
use super::rmap::{folio_mappers, try_to_migrate};
use crate::hw::mem::{Pfn, SwpEntry};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::tlbflush::flush_tlb_range;
use crate::kernel::Ctx;
use crate::observe::Event;

/// `ioctl(fd, HMM_DMIRROR_MIGRATE, {addr, npages})` on the test_hmm
/// device (`dmirror_migrate()`): under the mmap_lock for reading, moves
/// the pages of `[addr, addr + len)` that lie in the private anonymous
/// VMA containing `addr` into device memory. Returns the pages moved (0
/// when `addr` is in no such VMA: Linux's -EINVAL).
pub async fn sys_dmirror_migrate(ctx: &Ctx, addr: u64, len: u64) -> u64 {
    let _f = ctx.func(crate::label!("dmirror_migrate"));
    syscall_enter(ctx, "ioctl").await;
    let mm = ctx.mm().expect("user task");
    let g = ctx.w.granule;
    let start = g.page_down(addr);
    let mut moved = 0;
    ctx.mmap_read_lock(mm).await;
    let vma = find_vma(&ctx.w, mm, start)
        .filter(|v| v.start <= start && v.end > start && !v.file_backed() && v.anon.is_some());
    if let Some(v) = vma {
        let end = addr.saturating_add(len).min(v.end);
        let collected = migrate_vma_setup(ctx, mm, start, end).await;
        let pairs = dmirror_migrate_alloc_and_copy(ctx, &collected).await;
        moved = migrate_vma_pages(ctx, &pairs).await;
    }
    ctx.mmap_read_unlock(mm).await;
    syscall_exit(ctx, "ioctl").await;
    moved
}

/// `migrate_vma_setup()`: collects the range's pages
/// ([`migrate_vma_collect_pmd`] per PTE table), then isolates and checks
/// each (`migrate_vma_unmap()`), restoring the ones it cannot move.
/// Returns the frames left to migrate, each locked and held by one
/// reference of the migration's.
async fn migrate_vma_setup(ctx: &Ctx, mm: MmId, start: u64, end: u64) -> Vec<Pfn> {
    let _f = ctx.func(crate::label!("migrate_vma_setup"));
    let mut collected = Vec::new();
    for table_va in pte_tables(&ctx.w, mm, start, end) {
        let (lo, hi) = clip_table(ctx.w.granule, table_va, start, end);
        migrate_vma_collect_pmd(ctx, mm, (table_va, lo, hi), &mut collected).await;
    }
    let mut out = Vec::with_capacity(collected.len());
    for pfn in collected {
        if migrate_vma_unmap_one(ctx, pfn).await {
            out.push(pfn);
        }
    }
    out
}

/// `migrate_vma_collect_pmd()` over `[lo, hi)` of the PTE table at
/// `table_va`: under the table's lock, each present PTE mapping a private
/// anonymous folio off the swap cache whose lock it gets at once is
/// cleared and replaced by a migration entry, the mapping's reference
/// dropped and one taken for the migration (pushed to `out`). The range
/// is flushed if a PTE was cleared: before the unlock (6.0+, 60bae7370896)
/// or, with `[kernel] migrate_vma_flush_unlocked` (4.14-6.0), after it.
async fn migrate_vma_collect_pmd(
    ctx: &Ctx,
    mm: MmId,
    (table_va, lo, hi): (u64, u64, u64),
    out: &mut Vec<Pfn>,
) {
    let _f = ctx.func(crate::label!("migrate_vma_collect_pmd"));
    let w = &ctx.w;
    let cpu = ctx.cpu();
    ctx.ptl_lock(mm, table_va).await;
    let mut unmapped = 0;
    for (va, p) in present_ptes(w, mm, lo, hi) {
        // vm_normal_page(); the zero page is not taken.
        let movable =
            w.k.borrow()
                .folios
                .get(&p.pfn)
                .is_some_and(|f| f.anon() && f.swap.is_none());
        if !movable {
            continue;
        }
        // get_page(); then trylock_page(), or give up on the page.
        w.hw.borrow_mut().mem.get_frame(p.pfn);
        if !folio_trylock(ctx, p.pfn).await {
            w.put_frame(cpu, p.pfn, mm, va);
            continue;
        }
        // ptep_get_and_clear(), make_migration_entry(), set_pte_at().
        set_pte(w, cpu, mm, va, None);
        set_swp_entry(w, mm, va, Some(SwpEntry::Migration(p)));
        // page_remove_rmap(), put_page(): the mapping's reference.
        w.put_frame(cpu, p.pfn, mm, va);
        ctx.work(w.profile.kernel.pte_update_ns).await;
        out.push(p.pfn);
        unmapped += 1;
    }
    let page = w.granule.page_size();
    let unlocked = w.kcfg.migrate_vma_flush_unlocked;
    // "Only flush the TLB if we actually modified any entries".
    if unmapped > 0 && !unlocked {
        flush_tlb_range(ctx, mm, lo, hi, page, true).await;
    }
    ctx.ptl_unlock(mm, table_va).await;
    if unmapped > 0 && unlocked {
        flush_tlb_range(ctx, mm, lo, hi, page, true).await;
    }
}

/// `migrate_vma_unmap()` for one collected folio: isolates it from the
/// LRU, unmaps whatever else maps it (`try_to_migrate()`: a fork's
/// mappings), and checks that nobody else holds it
/// (`migrate_vma_check_page()`: only the migration's reference is left).
/// If it cannot move (isolated by reclaim, still mapped, or referenced by
/// a fault waiting on its migration entry), its mappings are restored
/// (`migrate_vma_restore()` → `remove_migration_ptes()`), it is put back,
/// unlocked and released. Returns whether it goes on.
async fn migrate_vma_unmap_one(ctx: &Ctx, pfn: Pfn) -> bool {
    let w = &ctx.w;
    let isolated = w.k.borrow_mut().folios.isolate(pfn);
    let mapped = |w: &crate::kernel::World| {
        folio_mappers(w, pfn)
            .into_iter()
            .any(|(m, v)| get_pte(w, m, v).is_some_and(|q| q.pfn == pfn))
    };
    if isolated && mapped(w) {
        try_to_migrate(ctx, pfn, false).await;
    }
    let busy = !isolated || mapped(w) || w.hw.borrow().mem.frame_refs(pfn) != 1;
    if !busy {
        return true;
    }
    let mapping = w.k.borrow().folios.get(&pfn).map(|f| f.mapping);
    if let Some(m) = mapping {
        restore_mappings(ctx, m, pfn, pfn).await;
    }
    if isolated {
        w.k.borrow_mut().folios.putback(pfn);
    }
    folio_unlock(ctx, pfn).await;
    let (mm, va) = folio_mappers(w, pfn)
        .first()
        .copied()
        .unwrap_or((MmId::new(0), 0));
    w.put_frame(ctx.cpu(), pfn, mm, va);
    false
}

/// `remove_migration_ptes(src, dst)` for a private anonymous folio of
/// owner `mapping`: every migration entry of `src` its reverse map finds
/// becomes a PTE mapping `dst`.
async fn restore_mappings(ctx: &Ctx, mapping: Mapping, dst: Pfn, src: Pfn) {
    let Mapping::Anon {
        family,
        anon,
        index,
    } = mapping
    else {
        return;
    };
    let mappers = anon_mappers(&ctx.w, family, anon, index);
    remove_migration_entries(ctx, dst, src, &mappers).await;
}

/// `dmirror_migrate_alloc_and_copy()`: a device page for each source
/// (allocated and locked, `dmirror_devmem_alloc_page()`), the source
/// copied into it (`copy_highpage()`, costing as a copy-on-write copy).
/// Returns (source, destination) pairs.
async fn dmirror_migrate_alloc_and_copy(ctx: &Ctx, srcs: &[Pfn]) -> Vec<(Pfn, Pfn)> {
    let _f = ctx.func(crate::label!("dmirror_migrate_alloc_and_copy"));
    let w = &ctx.w;
    let k = &w.profile.kernel;
    let mut out = Vec::with_capacity(srcs.len());
    for &src in srcs {
        let dst = w.hw.borrow_mut().mem.alloc_frame();
        folio_lock_new(ctx, dst);
        ctx.emit(Event::CopyOut {
            cpu: ctx.cpu(),
            pfn: src,
        });
        ctx.work(k.page_copy_ns.unwrap_or(k.page_alloc_ns)).await;
        out.push((src, dst));
    }
    out
}

/// `migrate_vma_pages()` and `migrate_vma_finalize()`: each destination
/// takes its source's place (`migrate_folio()`: the folio's state moves
/// to the new frame), its migration entries become PTEs mapping it
/// (`remove_migration_ptes()`: none left if the range was unmapped
/// meanwhile), both are unlocked, and the migration's references are
/// dropped: the source is freed, the destination lives on in its PTEs.
/// Returns the pages moved.
async fn migrate_vma_pages(ctx: &Ctx, pairs: &[(Pfn, Pfn)]) -> u64 {
    let _f = ctx.func(crate::label!("migrate_vma_pages"));
    let w = &ctx.w;
    for &(src, dst) in pairs {
        let folio = w.k.borrow_mut().folios.remove(&src);
        if let Some(f) = folio {
            w.k.borrow_mut().folios.add(
                dst,
                Folio {
                    isolated: false,
                    ..f
                },
            );
            restore_mappings(ctx, f.mapping, dst, src).await;
        }
        let (mm, va) = folio_mappers(w, dst)
            .first()
            .copied()
            .unwrap_or((MmId::new(0), 0));
        folio_unlock(ctx, dst).await;
        folio_unlock(ctx, src).await;
        w.put_frame(ctx.cpu(), src, mm, va);
        w.put_frame(ctx.cpu(), dst, mm, va);
    }
    pairs.len() as u64
}
