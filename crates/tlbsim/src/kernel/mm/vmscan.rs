//! Page reclaim (`mm/vmscan.c`): `shrink_folio_list()` unmaps each folio
//! of a list from everyone mapping it, writes the dirty ones to swap and
//! frees them, as `madvise(MADV_PAGEOUT)` drives it (`reclaim_pages()`,
//! with `ignore_references`).

use super::folio::{folio_trylock, folio_unlock, Folio, Mapping};
use super::rmap::try_to_unmap;
use super::shmem::ShmemEntry;
use super::swap::{zram_write, SwapSlot};
use super::tlbbatch::{try_to_unmap_flush, try_to_unmap_flush_dirty};
use crate::hw::mem::Pfn;
use crate::hw::tlb::MmId;
use crate::kernel::Ctx;

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

/// `PAGEVEC_SIZE`: the folios of a `folio_batch`.
pub const PAGEVEC_SIZE: usize = 31;

/// `shrink_folio_list()`: per folio, its lock, `try_to_unmap()`,
/// `pageout()` of a dirty one to zram (synchronous, so it is clean and
/// off the swap cache at once), then the free. The frames are freed after
/// the task's deferred flush (`try_to_unmap_flush()`; nothing to do when
/// every unmap flushed at once): each time a batch of [`PAGEVEC_SIZE`]
/// fills (6.9+, bc2ff4cbc329: `folio_batch_add()` returning 0, where the
/// policy says so, [`TlbPolicy::reclaim_frees_in_batches`]) and at the
/// end (before 6.9, only there). Returns the folios freed.
///
/// [`TlbPolicy::reclaim_frees_in_batches`]: crate::kernel::policy::TlbPolicy::reclaim_frees_in_batches
pub async fn shrink_folio_list(ctx: &Ctx, folios: &[Isolated]) -> u64 {
    let _f = ctx.func(crate::label!("shrink_folio_list"));
    let batched = ctx.w.policy.reclaim_frees_in_batches();
    let mut free = Vec::new();
    let mut n = 0;
    for f in folios {
        match shrink_folio(ctx, *f).await {
            Outcome::Free(pfn, at) => {
                free.push((pfn, at));
                if batched && free.len() == PAGEVEC_SIZE {
                    n += free_unref_folios(ctx, &mut free).await;
                }
            }
            Outcome::Keep => {
                // putback_lru_page(): back on the list, youngest, and the
                // isolation's reference dropped.
                ctx.w.k.borrow_mut().folios.putback(f.pfn);
                let (mm, va) = f.found_at;
                ctx.w.put_frame(ctx.cpu(), f.pfn, mm, va);
                ctx.w.stats.borrow_mut().reclaim.kept += 1;
            }
        }
    }
    n += free_unref_folios(ctx, &mut free).await;
    ctx.w.stats.borrow_mut().reclaim.pgsteal += n;
    n
}

/// The deferred flush (`try_to_unmap_flush()`: no page is freed while a
/// translation of it may be live), then `free_unref_folios()` of `free`,
/// which it empties. Returns how many it freed.
async fn free_unref_folios(ctx: &Ctx, free: &mut Vec<(Pfn, (MmId, u64))>) -> u64 {
    try_to_unmap_flush(ctx).await;
    let cpu = ctx.cpu();
    let n = free.len() as u64;
    for (pfn, (mm, va)) in free.drain(..) {
        // The isolation's reference, then the page cache's.
        ctx.w.put_frame(cpu, pfn, mm, va);
        ctx.w.put_frame(cpu, pfn, mm, va);
    }
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
    // An anonymous folio needs a slot first (add_to_swap()), unless
    // MADV_FREE made it lazily freeable.
    let anon_unswapped =
        w.k.borrow()
            .folios
            .get(&f.pfn)
            .is_some_and(|x| x.anon() && x.swap.is_none() && !x.lazyfree);
    if anon_unswapped {
        super::anon::add_to_swap(w, f.pfn);
    }
    let mut at = f.found_at;
    if let Some(last) = try_to_unmap(ctx, f.pfn, true).await {
        at = last;
    }
    // folio_mapped(), and __remove_mapping()'s reference freeze: only the
    // cache (page cache, or swap cache for an anonymous folio) and the
    // isolation may still hold it. A fault that found it before we locked
    // it holds a reference (and waits for the lock): keep it. (Linux
    // writes it out first and then keeps it in the cache; the model keeps
    // it before the write.)
    let folio = w.k.borrow().folios.get(&f.pfn).copied();
    let Some(folio) = folio.filter(|x| w.hw.borrow().mem.frame_refs(f.pfn) == x.cache_refs() + 1)
    else {
        folio_unlock(ctx, f.pfn).await;
        return Outcome::Keep;
    };
    if folio.dirty {
        // No write-out while a writable translation may be live.
        try_to_unmap_flush_dirty(ctx).await;
        // pageout() → shmem_writeout() / swap_writepage(): the page moves
        // to a swap slot (an anonymous folio has one since add_to_swap()).
        ctx.emit(crate::observe::Event::CopyOut {
            cpu: ctx.cpu(),
            pfn: f.pfn,
        });
        let slot = folio.swap.unwrap_or_else(|| w.k.borrow_mut().swap.alloc());
        zram_write(ctx, slot, folio.data).await;
        remove_mapping(w, f.pfn, folio, Some(slot));
    } else {
        // A clean shmem page was never written: it reads as zeroes, and
        // dropping it loses nothing; a clean anonymous folio's copy is in
        // its swap slot (__remove_mapping()).
        remove_mapping(w, f.pfn, folio, None);
    }
    folio_unlock(ctx, f.pfn).await;
    Outcome::Free(f.pfn, at)
}

/// `__remove_mapping()`: takes the written or clean folio `pfn` out of its
/// cache (the caller drops the cache's frame reference): a shmem page's
/// index then holds the swap slot it was `written` to, or nothing; an
/// anonymous folio leaves the swap cache (its slot stays while swap PTEs
/// refer to it).
fn remove_mapping(w: &crate::kernel::World, pfn: Pfn, folio: Folio, written: Option<SwapSlot>) {
    if folio.anon() {
        super::anon::delete_from_swap_cache(w, pfn);
    }
    let mut k = w.k.borrow_mut();
    if let Mapping::Shmem { id, index } = folio.mapping {
        let pages = &mut k.shmem[id as usize].pages;
        match written {
            Some(s) => pages.insert(index, ShmemEntry::Swap(s)),
            None => pages.remove(&index),
        };
    }
    k.folios.remove(&pfn);
}

/// Folios `kswapd` isolates per round (`SWAP_CLUSTER_MAX`).
pub const SWAP_CLUSTER_MAX: usize = 32;

/// Are the resident folios above `[kernel] memory_limit_pages` (kswapd's
/// wake-up point), and by how many are they above 15/16 of it (where
/// kswapd stops)?
fn over_limit(w: &crate::kernel::World) -> Option<u64> {
    let limit = w.kcfg.memory_limit_pages?;
    let resident = w.k.borrow().folios.len() as u64;
    let high = limit - limit / 16;
    (resident > high).then(|| resident - high)
}

/// `wakeup_kswapd()`: after a folio was added above the limit, wakes
/// kswapd if it sleeps.
pub async fn wakeup_kswapd(ctx: &Ctx) {
    let w = &ctx.w;
    let (Some(limit), Some(t)) = (w.kcfg.memory_limit_pages, *w.k.borrow().kswapd) else {
        return;
    };
    if w.k.borrow().folios.len() as u64 > limit {
        crate::kernel::sched::wake_up(ctx, t).await;
    }
}

/// Direct reclaim before a page allocation of a fault
/// (`__alloc_pages_direct_reclaim()` → `try_to_free_pages()` →
/// `shrink_inactive_list()`): if the resident folios are above `[kernel]
/// memory_min_pages`, the allocating task isolates up to
/// [`SWAP_CLUSTER_MAX`] of the oldest folios, as many as bring it back to
/// the min, and reclaims them itself, batched (`TTU_BATCH_FLUSH`, its own
/// `tlb_ubc`). The caller holds no PTE or folio lock.
pub async fn direct_reclaim(ctx: &Ctx) {
    let w = &ctx.w;
    let Some(min) = w.kcfg.memory_min_pages else {
        return;
    };
    let resident = w.k.borrow().folios.len() as u64;
    if resident < min {
        return;
    }
    // The allocation about to happen counts too.
    let excess = resident + 1 - min;
    let batch = isolate_lru_folios(w, (excess as usize).min(SWAP_CLUSTER_MAX));
    if batch.is_empty() {
        return;
    }
    let _f = ctx.func(crate::label!("try_to_free_pages"));
    w.stats.borrow_mut().reclaim.allocstall += 1;
    shrink_folio_list(ctx, &batch).await;
}

/// Starts `kswapd0` on the last CPU (with `[kernel] memory_limit_pages`).
pub fn start_kswapd(w: &std::rc::Rc<crate::kernel::World>) {
    let cpu = crate::hw::CpuId::from_index(w.ncpus() - 1);
    let t = crate::kernel::fork::spawn_kthread(
        w,
        "kswapd0",
        cpu,
        Box::new(|ctx: Ctx| Box::pin(async move { kswapd(&ctx).await })),
    );
    *w.k.borrow_mut().kswapd = Some(t);
}

/// `kswapd()` → `balance_pgdat()` → `shrink_inactive_list()`: while the
/// resident folios are above 15/16 of the limit, isolates up to
/// [`SWAP_CLUSTER_MAX`] of the oldest resident folios and reclaims them
/// (batched, `TTU_BATCH_FLUSH`); then sleeps until woken. Each round is a
/// "call" for the checker: what it unmapped must be gone from every CPU
/// when the round's batch flush is done.
async fn kswapd(ctx: &Ctx) {
    let w = &ctx.w;
    loop {
        let Some(excess) = over_limit(w) else {
            w.k.borrow_mut().tasks[ctx.task].state = crate::kernel::TaskState::Blocked;
            crate::kernel::sched::schedule(ctx).await;
            continue;
        };
        let batch = isolate_lru_folios(w, (excess as usize).min(SWAP_CLUSTER_MAX));
        if batch.is_empty() {
            w.k.borrow_mut().tasks[ctx.task].state = crate::kernel::TaskState::Blocked;
            crate::kernel::sched::schedule(ctx).await;
            continue;
        }
        let (cpu, task) = (ctx.cpu(), ctx.task);
        ctx.emit(crate::observe::Event::CallEnter {
            cpu,
            task,
            call: "kswapd",
        });
        let _f = ctx.func(crate::label!("balance_pgdat"));
        shrink_folio_list(ctx, &batch).await;
        // shrink_slab(): the huge zero page's shrinker.
        super::huge_memory::shrink_huge_zero_page(ctx).await;
        ctx.emit(crate::observe::Event::CallExit {
            cpu: ctx.cpu(),
            task,
            call: "kswapd",
        });
        crate::kernel::sched::maybe_preempt(ctx).await;
    }
}

/// `isolate_lru_folios()`: up to `n` of the oldest resident folios not
/// already isolated, taken off the list (stale entries dropped), each with
/// a mapping for reports (its first mapper, if any).
fn isolate_lru_folios(w: &crate::kernel::World, n: usize) -> Vec<Isolated> {
    let mut out = Vec::new();
    while out.len() < n {
        let Some(pfn) = w.k.borrow_mut().folios.isolate_oldest() else {
            break;
        };
        w.hw.borrow_mut().mem.get_frame(pfn); // the isolation's reference
        let found_at = super::rmap::folio_mappers(w, pfn).first().copied();
        out.push(Isolated {
            pfn,
            found_at: found_at.unwrap_or((MmId::new(0), 0)),
        });
    }
    out
}
