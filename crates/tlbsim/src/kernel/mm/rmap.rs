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
use super::pgtable::{get_pte, pte_accessible, set_pte, set_swap_pte, set_swp_entry};
use super::tlbbatch::{set_tlb_ubc_flush_pending, should_defer_flush};
use crate::hw::mem::{Pfn, Pte, SwpEntry};
use crate::hw::tlb::MmId;
use crate::kernel::tlbflush::flush_tlb_page;
use crate::kernel::{Ctx, World};

/// The (mm, address) pairs whose PTE may map folio `pfn`, in (mm,
/// address) order: for a shmem folio every VMA of a live address space
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
            m.vmas
                .values()
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
    for (mm, va) in folio_mappers(&ctx.w, pfn) {
        match try_to_unmap_one(ctx, (mm, va), pfn, batch, Ttu::Reclaim).await {
            Unmap::Cleared(_) => last = Some((mm, va)),
            Unmap::NotMapped => {}
            Unmap::Kept => break, // a lazily freeable folio in use: kept
        }
    }
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
    for (mm, va) in folio_mappers(&ctx.w, pfn) {
        if let Unmap::Cleared(p) = try_to_unmap_one(ctx, (mm, va), pfn, batch, Ttu::Migrate).await {
            out.push((mm, va, p));
        }
    }
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
    ctx.ptl_lock(mm, va).await;
    let unmapped = match get_pte(w, mm, va) {
        Some(p) if p.pfn == pfn => {
            if should_defer_flush(ctx, mm, batch) {
                set_pte(w, ctx.cpu(), mm, va, None);
                set_tlb_ubc_flush_pending(ctx, mm, p, va).await;
            } else {
                ptep_clear_flush(ctx, mm, va).await;
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
            if why == Ttu::Reclaim && lazyfree_keep(w, ctx.cpu(), (mm, va), p) {
                Unmap::Kept
            } else {
                if why == Ttu::Migrate && anon {
                    set_swp_entry(w, mm, va, Some(SwpEntry::Migration(p)));
                } else if let Some(slot) = swap {
                    w.k.borrow_mut().swap.dup(slot);
                    set_swap_pte(w, mm, va, Some(slot));
                }
                w.put_frame(ctx.cpu(), pfn, mm, va);
                Unmap::Cleared(p)
            }
        }
        _ => Unmap::NotMapped,
    };
    ctx.ptl_unlock(mm, va).await;
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
    /// Cleared this PTE (its old value).
    Cleared(Pte),
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
    let _f = ctx.func(crate::label!("ptep_clear_flush"));
    let (old, _) = set_pte(&ctx.w, ctx.cpu(), mm, va, None);
    // if (pte_accessible(mm, pte)) flush_tlb_page(vma, address);
    if old.is_some_and(|p| pte_accessible(&ctx.w, mm, p)) {
        flush_tlb_page(ctx, mm, va).await;
    }
    old
}
