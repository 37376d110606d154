//! Page reclaim (`mm/vmscan.c`): `shrink_folio_list()` unmaps each folio
//! of a list from everyone mapping it, writes the dirty ones to swap and
//! frees them, as `madvise(MADV_PAGEOUT)` drives it (`reclaim_pages()`,
//! with `ignore_references`).

use super::rmap::try_to_unmap;
use super::shmem::{folio_trylock, folio_unlock, ShmemEntry};
use super::swap::zram_write;
use super::tlbbatch::{try_to_unmap_flush, try_to_unmap_flush_dirty};
use super::Ctx;
use crate::hw::mem::Pfn;
use crate::hw::tlb::MmId;

/// A folio isolated for reclaim, with the (mm, address) it was found
/// mapped at: the mapping a free of it reports if no other is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isolated {
    /// The folio's frame.
    pub pfn: Pfn,
    /// Where it was found mapped.
    pub found_at: (MmId, u64),
}

/// `reclaim_pages()`: reclaims the isolated folios (one node in the
/// model), ignoring their references; returns how many were freed.
pub async fn reclaim_pages(ctx: &Ctx, folios: &[Isolated]) -> u64 {
    let _f = ctx.func(crate::label!("reclaim_pages"));
    shrink_folio_list(ctx, folios).await
}

/// What became of one folio in [`shrink_folio_list`].
enum Outcome {
    /// Freed, its last mapping at (mm, address).
    Free(Pfn, (MmId, u64)),
    /// Kept (locked by someone, or mapped again).
    Keep,
}

/// `shrink_folio_list()`: per folio, its lock, `try_to_unmap()`,
/// `pageout()` of a dirty one to zram (synchronous, so it is clean and
/// off the swap cache at once), then the free; the frames are freed
/// together at the end, after the list's deferred flush
/// (`try_to_unmap_flush()`; nothing to do when every unmap flushed at
/// once). Returns the folios freed.
pub async fn shrink_folio_list(ctx: &Ctx, folios: &[Isolated]) -> u64 {
    let _f = ctx.func(crate::label!("shrink_folio_list"));
    let mut free = Vec::new();
    for f in folios {
        match shrink_folio(ctx, *f).await {
            Outcome::Free(pfn, at) => free.push((pfn, at)),
            Outcome::Keep => {
                // putback_lru_page()
                if let Some(x) = ctx.w.k.borrow_mut().folios.get_mut(&f.pfn) {
                    x.isolated = false;
                }
                ctx.w.stats.borrow_mut().reclaim.kept += 1;
            }
        }
    }
    // No page is freed while a translation of it may be live.
    try_to_unmap_flush(ctx).await;
    // free_unref_folios()
    let n = free.len() as u64;
    let cpu = ctx.cpu();
    for (pfn, (mm, va)) in free {
        ctx.w.put_frame(cpu, pfn, mm, va);
    }
    ctx.w.stats.borrow_mut().reclaim.pgsteal += n;
    n
}

/// One folio of [`shrink_folio_list`]. Frees it from its object's page
/// cache (the caller frees the frame) unless it is kept.
async fn shrink_folio(ctx: &Ctx, f: Isolated) -> Outcome {
    let w = &ctx.w;
    ctx.work(w.swap_costs().reclaim_folio_ns).await;
    if !folio_trylock(ctx, f.pfn).await {
        return Outcome::Keep;
    }
    let mut at = f.found_at;
    if let Some(last) = try_to_unmap(ctx, f.pfn, true).await {
        at = last;
    }
    // folio_mapped(), and __remove_mapping()'s reference freeze: only the
    // page cache may still hold it. A fault that found it before we locked
    // it holds a reference (and waits for the lock): keep it. (Linux
    // writes it out first and then keeps it in the swap cache; the model
    // keeps it before the write.)
    if w.hw.borrow().mem.frame_refs(f.pfn) != 1 {
        folio_unlock(ctx, f.pfn).await;
        return Outcome::Keep;
    }
    let folio = w.k.borrow().folios.get(&f.pfn).copied();
    let Some(folio) = folio else {
        folio_unlock(ctx, f.pfn).await;
        return Outcome::Keep;
    };
    let (id, index) = folio.owner;
    let entry = if folio.dirty {
        // No write-out while a writable translation may be live.
        try_to_unmap_flush_dirty(ctx).await;
        // pageout() → shmem_writeout() → swap_writepage(): the page moves
        // to a swap slot.
        let data = w.k.borrow().shmem[id as usize].data;
        Some(ShmemEntry::Swap(zram_write(ctx, data).await))
    } else {
        // A clean shmem page was never written: it reads as zeroes, and
        // dropping it loses nothing (__remove_mapping()).
        None
    };
    {
        let mut k = w.k.borrow_mut();
        let pages = &mut k.shmem[id as usize].pages;
        match entry {
            Some(e) => pages.insert(index, e),
            None => pages.remove(&index),
        };
        k.folios.remove(&f.pfn);
    }
    folio_unlock(ctx, f.pfn).await;
    Outcome::Free(f.pfn, at)
}
