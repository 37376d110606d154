//! The reverse map (`mm/rmap.c`): from a folio to the PTEs that map it,
//! and unmapping it from all of them (`try_to_unmap()`), which is where
//! page reclaim flushes TLBs on behalf of address spaces that may be
//! running on other CPUs.
//!
//! A shmem folio's mappers are found as Linux's `rmap_walk_file()` finds
//! them, through the object's VMAs (the `i_mmap` tree); an anonymous
//! folio's through its `anon_vma` ([`super::anon`]). Both are visited in
//! (mm, address) order so that runs are deterministic.

use super::anon::anon_mappers;
use super::folio::Mapping;
use super::pgtable::{
    get_pte, pmd_pgtable, pte_accessible, pte_in_table, set_pte, set_swap_pte, set_swp_entry,
};
use super::tlbbatch::{set_tlb_ubc_flush_pending, should_defer_flush};
use crate::hw::mem::{Pfn, Pte, SwpEntry};
use crate::hw::tlb::MmId;
use crate::kernel::tlbflush::flush_tlb_page;
use crate::kernel::{Ctx, LockId, ShmemId, Vma, World};

/// What the reverse map of a folio hangs from, and what an rmap walk
/// locks: an anonymous folio's root `anon_vma` (one per fork tree in the
/// model: `anon_vma->root`, named by the tree's first mm) or a file's
/// `address_space` (its `i_mmap` tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RmapRoot {
    /// The root `anon_vma` of the fork tree of this mm.
    Anon(MmId),
    /// The `address_space` of this file or shmem object.
    File(ShmemId),
}

/// The rwsem of `root`: `anon_vma->root->rwsem` or `mapping->i_mmap_rwsem`
/// (a hugetlbfs file's own, `kernel/mm/hugetlb.rs`). Created on first use.
pub fn rmap_lock(w: &World, root: RmapRoot) -> LockId {
    if let RmapRoot::File(id) = root {
        if let Some(h) = &w.k.borrow().shmem[id as usize].hugetlbfs {
            return h.i_mmap_rwsem;
        }
    }
    if let Some(&l) = w.k.borrow().rmap_locks.get(&root) {
        return l;
    }
    let l = w.new_lock(match root {
        RmapRoot::Anon(_) => "anon_vma",
        RmapRoot::File(_) => "i_mmap_rwsem",
    });
    w.k.borrow_mut().rmap_locks.insert(root, l);
    l
}

/// The reverse maps VMA `v` of `mm` is linked into: its file's and its
/// `anon_vma`'s (a private file mapping has both), in the order
/// `take_rmap_locks()` locks them (the file's `i_mmap_rwsem` first).
pub fn vma_rmap_roots(w: &World, mm: MmId, v: &Vma) -> Vec<RmapRoot> {
    let family = w.k.borrow().mms[mm].family;
    let file = v.shmem.map(|s| RmapRoot::File(s.id));
    let anon = v.anon.map(|_| RmapRoot::Anon(family));
    file.into_iter().chain(anon).collect()
}

/// The reverse map folio `pfn` is found through, if it is a mapped folio.
fn folio_rmap_root(w: &World, pfn: Pfn) -> Option<RmapRoot> {
    match w.k.borrow().folios.get(&pfn)?.mapping {
        Mapping::Shmem { id, .. } => Some(RmapRoot::File(id)),
        Mapping::Anon { family, .. } => Some(RmapRoot::Anon(family)),
    }
}

/// `rmap_walk()` of folio `pfn`: takes its reverse map's lock for
/// reading (`anon_vma_lock_read()`, `i_mmap_lock_read()`), which keeps
/// the VMAs it visits linked and in their order, and returns it with the
/// (mm, address) pairs to visit ([`folio_mappers`]). Release with
/// [`rmap_walk_done`].
async fn rmap_walk_begin(ctx: &Ctx, pfn: Pfn) -> (Option<LockId>, Vec<(MmId, u64)>) {
    let l = folio_rmap_root(&ctx.w, pfn).map(|r| rmap_lock(&ctx.w, r));
    if let Some(l) = l {
        ctx.down(l, true).await;
    }
    (l, folio_mappers(&ctx.w, pfn))
}

/// Ends an rmap walk begun by [`rmap_walk_begin`].
async fn rmap_walk_done(ctx: &Ctx, l: Option<LockId>) {
    if let Some(l) = l {
        ctx.up(l, true).await;
    }
}

/// The (mm, address) pairs whose PTE may map folio `pfn`, by mm, and
/// within one mm in rmap order (`Vma::rmap_order`, then address): for a shmem folio every VMA of a live address space
/// mapping the folio's page of its object (`rmap_walk_file()`;
/// `vma_address()`), for an anonymous one every VMA of its fork tree that
/// covers its page ([`anon_mappers`]).
pub fn folio_mappers(w: &World, pfn: Pfn) -> Vec<(MmId, u64)> {
    let Some(mapping) = w.k.borrow().folios.get(&pfn).map(|f| f.mapping) else {
        return Vec::new();
    };
    let (id, index) = match mapping {
        Mapping::Shmem { id, index } => (id, index),
        Mapping::Anon {
            family,
            anon,
            index,
        } => return anon_mappers(w, family, anon, index),
    };
    let k = w.k.borrow();
    let mut out = Vec::new();
    for &mm in &k.shmem[id as usize].mms {
        let m = &k.mms[mm];
        if !m.live {
            continue;
        }
        out.extend(
            super::mm_types::rmap_ordered(m.vmas.values())
                .filter_map(|v| v.address_of(id, index))
                .map(|va| (mm, va)),
        );
    }
    out
}

/// `try_to_unmap(folio, flags)`: unmaps folio `pfn` from every PTE mapping
/// it (`try_to_unmap_one()` per mapper); `batch` is `TTU_BATCH_FLUSH`
/// (the flushes may be deferred: `kernel/mm/tlbbatch.rs`). Returns the last
/// (mm, address) it was unmapped from, if any.
pub async fn try_to_unmap(ctx: &Ctx, pfn: Pfn, batch: bool) -> Option<(MmId, u64)> {
    let _f = ctx.func(crate::label!("try_to_unmap"));
    let mut last = None;
    let (lock, mappers) = rmap_walk_begin(ctx, pfn).await;
    for (mm, va) in mappers {
        match try_to_unmap_one(ctx, (mm, va), pfn, batch, Ttu::Reclaim).await {
            Unmap::Cleared(at, _) => last = Some((mm, at)),
            Unmap::NotMapped => {}
            Unmap::Kept => break, // a lazily freeable folio in use: kept
        }
    }
    rmap_walk_done(ctx, lock).await;
    last
}

/// `try_to_migrate(folio, flags)`: as [`try_to_unmap`], for migration
/// (`try_to_migrate_one()`): an anonymous folio leaves a migration entry
/// in each PTE, on which a fault waits for the folio's lock; a shmem
/// folio's PTE is left clear (the model's stand-in: a fault there finds
/// the page-cache folio locked and waits the same way). Returns every
/// (mm, address, old PTE) it unmapped, for `remove_migration_ptes()`.
pub async fn try_to_migrate(ctx: &Ctx, pfn: Pfn, batch: bool) -> Vec<(MmId, u64, Pte)> {
    let _f = ctx.func(crate::label!("try_to_migrate"));
    let mut out = Vec::new();
    let (lock, mappers) = rmap_walk_begin(ctx, pfn).await;
    for (mm, va) in mappers {
        if let Unmap::Cleared(at, p) =
            try_to_unmap_one(ctx, (mm, va), pfn, batch, Ttu::Migrate).await
        {
            out.push((mm, at, p));
        }
    }
    rmap_walk_done(ctx, lock).await;
    out
}

/// `try_to_unmap_one()`: under the PTE lock (`page_vma_mapped_walk()`),
/// clears the PTE of `mm` at `va` if it maps `pfn` and flushes it, at once
/// ([`ptep_clear_flush`]) or deferred to the task's batch
/// (`ptep_get_and_clear()`, [`set_tlb_ubc_flush_pending`]) when
/// [`should_defer_flush`]; a dirty PTE (`pte_dirty()`) marks the
/// folio dirty; an anonymous folio in the swap cache leaves its swap
/// entry in the PTE (`swap_duplicate()`, `set_pte_at(swp_pte)`); the
/// mapping's frame reference is dropped (`folio_remove_rmap_pte()`).
/// Returns the PTE it cleared, or that it put the PTE back (a lazily
/// freeable folio still in use: [`lazyfree_keep`]), or that the PTE did
/// not map the folio.
///
/// For migration (`try_to_migrate_one()`), an anonymous folio leaves a
/// migration entry instead (`make_migration_entry()`), and `MADV_FREE`'s
/// lazy freeing plays no part.
async fn try_to_unmap_one(
    ctx: &Ctx,
    (mm, va): (MmId, u64),
    pfn: Pfn,
    batch: bool,
    why: Ttu,
) -> Unmap {
    let _f = ctx.func(crate::label!("try_to_unmap_one"));
    let w = &ctx.w;
    // page_vma_mapped_walk(): the PMD is read without a lock, then the
    // lock of the PTE table it points to is taken, and the PTE read
    // through that table. If mremap moved the table meanwhile
    // (`move_normal_pmd()`, which takes no PTE lock), the PTE is the one
    // of the table's new place (`at`), while the flush is of `va`.
    let table = pmd_pgtable(w, mm, va);
    let ptl = ctx.pte_lockptr(mm, va);
    ctx.spin_lock(ptl).await;
    let at = table.and_then(|t| pte_in_table(w, mm, t, va));
    let unmapped = match at.and_then(|at| get_pte(w, mm, at).map(|p| (at, p))) {
        Some((at, p)) if p.pfn == pfn => {
            if should_defer_flush(ctx, mm, batch) {
                set_pte(w, ctx.cpu(), mm, at, None);
                set_tlb_ubc_flush_pending(ctx, mm, p, va).await;
            } else {
                clear_flush(ctx, mm, at, va).await;
            }
            if w.policy.pte_dirty(p) {
                // folio_mark_dirty()
                if let Some(f) = w.k.borrow_mut().folios.get_mut(&pfn) {
                    f.dirty = true;
                }
            }
            ctx.work(w.profile.kernel.pte_update_ns).await;
            let (anon, swap) =
                w.k.borrow()
                    .folios
                    .get(&pfn)
                    .map_or((false, None), |f| (f.anon(), f.swap));
            if why == Ttu::Reclaim && lazyfree_keep(w, ctx.cpu(), (mm, at), p) {
                Unmap::Kept
            } else {
                if why == Ttu::Migrate && anon {
                    set_swp_entry(w, mm, at, Some(SwpEntry::Migration(p)));
                } else if let Some(slot) = swap {
                    w.k.borrow_mut().swap.dup(slot);
                    set_swap_pte(w, mm, at, Some(slot));
                }
                w.put_frame(ctx.cpu(), pfn, mm, at);
                Unmap::Cleared(at, p)
            }
        }
        _ => Unmap::NotMapped,
    };
    ctx.spin_unlock(ptl).await;
    unmapped
}

/// Why [`try_to_unmap_one`] unmaps (`TTU_*` flags and the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ttu {
    /// Reclaim (`try_to_unmap()`).
    Reclaim,
    /// Migration (`try_to_migrate()`).
    Migrate,
}

/// What [`try_to_unmap_one`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unmap {
    /// Cleared the PTE now at this address (its table may have moved
    /// since the walk found it), with its old value.
    Cleared(u64, Pte),
    /// Put the PTE back: the folio stays (the walk stops).
    Kept,
    /// The PTE did not map the folio.
    NotMapped,
}

/// `try_to_unmap_one()` on a folio `MADV_FREE` made lazily freeable,
/// after clearing its PTE `p` at `va` of `mm`: if the folio was written
/// since (a dirty PTE or folio) it is swap-backed again
/// (`folio_set_swapbacked()`); if so, or if anyone holds it besides the
/// reclaimer and its mappings (`ref_count != 1 + map_count`: a migration,
/// a fault waiting for it), the PTE is put back (`set_pte_at(pteval)`)
/// and the walk stops. Otherwise the clean page is dropped as it is (no
/// swap entry). Returns whether it was put back.
fn lazyfree_keep(w: &World, cpu: crate::hw::CpuId, (mm, va): (MmId, u64), p: Pte) -> bool {
    let Some(f) = w.k.borrow().folios.get(&p.pfn).copied() else {
        return false;
    };
    if !f.lazyfree {
        return false;
    }
    // Mappings left besides the one just cleared (whose reference is not
    // yet dropped).
    let others = folio_mappers(w, p.pfn)
        .into_iter()
        .filter(|&(m, v)| get_pte(w, m, v).is_some_and(|q| q.pfn == p.pfn))
        .count() as u32;
    let extra = w.hw.borrow().mem.frame_refs(p.pfn) != 2 + others;
    if !(f.dirty || extra) {
        return false;
    }
    if f.dirty {
        if let Some(x) = w.k.borrow_mut().folios.get_mut(&p.pfn) {
            x.lazyfree = false;
        }
    }
    set_pte(w, cpu, mm, va, Some((p.pfn, p.perms)));
    true
}

/// `ptep_clear_flush()` (mm/pgtable-generic.c): clears the PTE and, if a
/// TLB may hold it (`pte_accessible()`, [`super::pgtable::pte_accessible`]),
/// flushes its translation from every CPU before returning
/// (arm64 `flush_tlb_page()`: `DSB ISHST; TLBI VALE1IS; DSB ISH`, inlined
/// here as in the kernel). Returns the old PTE.
pub async fn ptep_clear_flush(ctx: &Ctx, mm: MmId, va: u64) -> Option<Pte> {
    clear_flush(ctx, mm, va, va).await
}

/// [`ptep_clear_flush`] of the PTE now at `at` (in a PTE table found at
/// `address`, which mremap may have moved since), flushing `address`.
async fn clear_flush(ctx: &Ctx, mm: MmId, at: u64, address: u64) -> Option<Pte> {
    let _f = ctx.func(crate::label!("ptep_clear_flush"));
    let (old, _) = set_pte(&ctx.w, ctx.cpu(), mm, at, None);
    // if (pte_accessible(mm, pte)) flush_tlb_page(vma, address);
    if old.is_some_and(|p| pte_accessible(&ctx.w, mm, p)) {
        flush_tlb_page(ctx, mm, address).await;
    }
    old
}
