//! Private anonymous folios: their reverse map (`anon_vma`, mm/rmap.c),
//! the swap cache (mm/swap_state.c) and swap-in (`do_swap_page()`,
//! mm/memory.c).
//!
//! A private anonymous page that reclaim writes out leaves a swap entry in
//! every PTE that mapped it (`try_to_unmap_one()`); a fault on one reads
//! the page back. The folio sits in the swap cache from `add_to_swap()`
//! until its reclaim finishes, so that a fault meanwhile finds it there
//! instead of reading the slot. The swap device is zram, which Linux
//! drives synchronously (`SWP_SYNCHRONOUS_IO`): a fault whose PTE was the
//! slot's only user reads the page and frees the slot at once, so the
//! page is written out again at its next reclaim; a slot still shared with
//! another address space (after fork) keeps its folio in the swap cache.

use super::folio::{folio_lock, folio_lock_new, folio_unlock, Folio, Mapping};
use super::pgtable::{get_swap_pte, set_pte, set_swap_pte};
use super::shmem::cpu_node;
use super::swap::{zram_read, SwapSlot};
use crate::hw::mem::{Perms, Pfn};
use crate::hw::tlb::MmId;
use crate::kernel::{Ctx, Vma, World};

/// The (mm, address) pairs whose PTE may map anonymous page `index` of
/// anon id `anon` in the fork tree of `family` (`rmap_walk_anon()`): every
/// VMA of a live address space of the tree that carries the anon id and
/// covers the page, by mm, and within one mm in rmap order
/// (`rmap_ordered()`: `Vma::rmap_order`, then address).
pub fn anon_mappers(w: &World, family: MmId, anon: super::AnonId, index: u64) -> Vec<(MmId, u64)> {
    let k = w.k.borrow();
    let mut out = Vec::new();
    for m in k.mms.iter().skip(family.index()) {
        if !m.live || m.family != family {
            continue;
        }
        out.extend(
            super::mm_types::rmap_ordered(m.vmas.values())
                .filter_map(|v| v.anon_address_of(anon, index))
                .map(|va| (m.id, va)),
        );
    }
    out
}

/// `folio_add_new_anon_rmap()` and `folio_add_lru()`: frame `pfn`, newly
/// allocated for `va` of `mm`'s private VMA `v`, becomes an anonymous
/// folio on the LRU, on the NUMA node of `cpu`.
pub fn new_anon_folio(w: &World, cpu: crate::hw::CpuId, mm: MmId, v: &Vma, va: u64, pfn: Pfn) {
    let Some((anon, index)) = v.anon_index(va) else {
        return;
    };
    let data = v.anon.map(|a| a.data).unwrap_or_default();
    let family = w.k.borrow().mms[mm].family;
    let node = cpu_node(w, cpu);
    let f = Folio::new(
        Mapping::Anon {
            family,
            anon,
            index,
        },
        node,
        data,
    );
    w.k.borrow_mut().folios.add(pfn, f);
}

/// `add_to_swap()`: gives anonymous folio `pfn` a swap slot and puts it in
/// the swap cache (which holds a reference on the frame and one on the
/// slot), dirty: it has not been written there yet. Returns the slot.
pub fn add_to_swap(w: &World, pfn: Pfn) -> SwapSlot {
    let mut k = w.k.borrow_mut();
    let slot = k.swap.alloc();
    k.swap.cache.insert(slot, pfn);
    let f = k.folios.get_mut(&pfn).expect("an anonymous folio");
    f.swap = Some(slot);
    f.dirty = true;
    drop(k);
    w.hw.borrow_mut().mem.get_frame(pfn);
    slot
}

/// `__delete_from_swap_cache()` of anonymous folio `pfn` (locked): the
/// cache drops its slot reference (the slot is freed if no swap PTE holds
/// it) and returns its frame reference to the caller, which drops it.
pub fn delete_from_swap_cache(w: &World, pfn: Pfn) {
    let mut k = w.k.borrow_mut();
    let Some(slot) = k.folios.get_mut(&pfn).and_then(|f| f.swap.take()) else {
        return;
    };
    k.swap.cache.remove(&slot);
    k.swap.put(slot);
}

/// `folio_free_swap()` on a locked anonymous folio that no swap PTE refers
/// to any more: out of the swap cache, its slot freed, its frame reference
/// dropped. False (nothing done) if a swap PTE still holds the slot.
fn folio_free_swap(ctx: &Ctx, pfn: Pfn, mm: MmId, va: u64) -> bool {
    let w = &ctx.w;
    let slot = w.k.borrow().folios.get(&pfn).and_then(|f| f.swap);
    let Some(slot) = slot else {
        return false;
    };
    if w.k.borrow().swap.refs(slot) > 1 {
        return false;
    }
    delete_from_swap_cache(w, pfn);
    w.put_frame(ctx.cpu(), pfn, mm, va);
    true
}

/// `free_swap_and_cache()` for a zapped swap PTE of `mm` at `va`: drops
/// its reference to the slot; a folio of the slot left in the swap cache
/// with no other user goes too ([`free_swap_cache`]).
pub fn free_swap_and_cache(w: &World, cpu: crate::hw::CpuId, slot: SwapSlot, mm: MmId, va: u64) {
    let cached = {
        let mut k = w.k.borrow_mut();
        k.swap.put(slot);
        k.swap.cache.get(&slot).copied()
    };
    if let Some(pfn) = cached {
        free_swap_cache(w, cpu, pfn, mm, va);
    }
}

/// `free_swap_cache()` (after a zap released a mapping of `pfn`, last
/// mapped by `mm` at `va`): an anonymous folio in the swap cache that
/// nobody maps or holds any more and no swap PTE refers to leaves the
/// cache and is freed. (Linux takes the folio lock with a trylock; in the
/// model whoever holds the lock holds a reference too, so a folio only
/// the cache holds is unlocked.)
pub fn free_swap_cache(w: &World, cpu: crate::hw::CpuId, pfn: Pfn, mm: MmId, va: u64) {
    let Some(slot) = w.k.borrow().folios.get(&pfn).and_then(|f| f.swap) else {
        return;
    };
    let unused = w.hw.borrow().mem.frame_refs(pfn) == 1 && w.k.borrow().swap.refs(slot) == 1;
    if unused {
        delete_from_swap_cache(w, pfn);
        w.put_frame(cpu, pfn, mm, va);
    }
}

/// `copy_nonpresent_pte()` for a swap entry: the child's PTE refers to
/// the same slot (`swap_duplicate()`).
pub fn copy_swap_pte(w: &World, dst: MmId, va: u64, slot: SwapSlot) -> u32 {
    w.k.borrow_mut().swap.dup(slot);
    set_swap_pte(w, dst, va, Some(slot)).1
}

/// `do_swap_page()`: the PTE of `mm` at `va` (in private VMA `v`) holds
/// swap entry `slot`. The page is found in the swap cache (waiting for
/// its lock) or read into a new folio put in the swap cache; then, under
/// the PTE lock and if the PTE still holds the entry, it is mapped
/// (writable only for a write by the slot's only user) and the PTE's slot
/// reference dropped; a slot nobody else refers to leaves the swap cache
/// (zram's synchronous path). If the PTE changed meanwhile nothing is
/// mapped and the access retries.
pub async fn do_swap_page(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, slot: SwapSlot, write: bool) {
    let _f = ctx.func(crate::label!("do_swap_page"));
    let w = &ctx.w;
    let cached = w.k.borrow().swap.cache.get(&slot).copied();
    // One reference on the folio, ours until the PTE takes it over.
    let pfn = match cached {
        Some(pfn) => {
            // swap_cache_get_folio(), folio_lock_or_retry()
            w.hw.borrow_mut().mem.get_frame(pfn);
            folio_lock(ctx, pfn).await;
            let still = w.k.borrow().folios.get(&pfn).and_then(|f| f.swap) == Some(slot);
            if !still {
                folio_unlock(ctx, pfn).await;
                w.put_frame(ctx.cpu(), pfn, mm, va);
                return;
            }
            pfn
        }
        None => match swapin_folio(ctx, mm, v, va, slot).await {
            Some(pfn) => pfn,
            None => return,
        },
    };
    ctx.ptl_lock(mm, va).await;
    if get_swap_pte(w, mm, va) == Some(slot) {
        // This PTE's reference and the swap cache's: nobody else's.
        let exclusive = w.k.borrow().swap.refs(slot) == 2;
        let perms = if write && exclusive {
            v.perms
        } else {
            Perms(v.perms.0 & !(Perms::RW.0 & !Perms::R.0))
        };
        set_swap_pte(w, mm, va, None);
        let (_, tables) = set_pte(w, ctx.cpu(), mm, va, Some((pfn, perms)));
        w.k.borrow_mut().swap.put(slot); // swap_free()
        if exclusive {
            folio_free_swap(ctx, pfn, mm, va);
        }
        // As finish_fault() for a shmem page: the tables it allocated.
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(tables))
            .await;
        // Unlocked before the PTE lock is dropped: from then on only the
        // mapping holds the folio, and a zap may free it.
        folio_unlock(ctx, pfn).await;
        ctx.ptl_unlock(mm, va).await;
    } else {
        ctx.ptl_unlock(mm, va).await;
        folio_unlock(ctx, pfn).await;
        w.put_frame(ctx.cpu(), pfn, mm, va);
    }
}

/// `swapin_readahead()` of one page: a new anonymous folio for `va`,
/// locked before anyone can see it and put in the swap cache, filled from
/// `slot`. Returns it locked, with one reference for the caller (and the
/// cache's); `None` if the PTE no longer holds the entry once memory was
/// found (direct reclaim may sleep).
async fn swapin_folio(ctx: &Ctx, mm: MmId, v: &Vma, va: u64, slot: SwapSlot) -> Option<Pfn> {
    let w = &ctx.w;
    super::vmscan::direct_reclaim(ctx).await;
    let raced =
        get_swap_pte(w, mm, va) != Some(slot) || w.k.borrow().swap.cache.contains_key(&slot);
    if raced {
        return None; // the retry finds the page
    }
    let pfn = w.hw.borrow_mut().mem.alloc_frame();
    new_anon_folio(w, ctx.cpu(), mm, v, w.granule.page_down(va), pfn);
    folio_lock_new(ctx, pfn);
    {
        let mut k = w.k.borrow_mut();
        k.swap.dup(slot); // the swap cache's reference
        k.swap.cache.insert(slot, pfn);
        k.folios.get_mut(&pfn).expect("just added").swap = Some(slot);
    }
    w.hw.borrow_mut().mem.get_frame(pfn); // the swap cache's
    ctx.work(w.swap_costs().swapin_ns).await;
    zram_read(ctx, slot).await;
    super::vmscan::wakeup_kswapd(ctx).await;
    Some(pfn)
}

/// A write fault found anonymous folio `p.pfn` mapped read-only by `p` at
/// `va` of `mm`, in the swap cache: frees its swap copy if no other swap
/// PTE refers to it and its lock is free (`wp_can_reuse_anon_folio()`
/// → `folio_free_swap()`), so the page may be reused in place. The
/// caller read `p` without the PTE lock: the folio is used only if the
/// PTE still maps it, and a reference is held across the lock.
pub async fn wp_free_swap(ctx: &Ctx, mm: MmId, va: u64, p: crate::hw::mem::Pte) {
    let w = &ctx.w;
    let in_cache =
        w.k.borrow()
            .folios
            .get(&p.pfn)
            .is_some_and(|f| f.swap.is_some());
    if !in_cache || super::pgtable::get_pte(w, mm, va) != Some(p) {
        return;
    }
    w.hw.borrow_mut().mem.get_frame(p.pfn);
    if super::folio::folio_trylock(ctx, p.pfn).await {
        folio_free_swap(ctx, p.pfn, mm, va);
        folio_unlock(ctx, p.pfn).await;
    }
    w.put_frame(ctx.cpu(), p.pfn, mm, va);
}
