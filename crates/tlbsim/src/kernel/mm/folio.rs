//! Folios (`struct folio`, include/linux/mm_types.h): the pages reclaim
//! and migration can take, whose owner the reverse map knows (a shmem
//! object's page cache, or a private anonymous mapping's `anon_vma`), with
//! the LRU list they sit on (mm/swap.c, mm/vmscan.c) and their lock
//! (`folio_lock()`, mm/filemap.c).
//!
//! Frame references (`PhysMem::frame_refs`, the folio's refcount): each
//! mapping PTE holds one, the page cache or swap cache one more
//! ([`Folio::cache_refs`]), an isolation for reclaim or migration one, and
//! a fault that found the folio and waits for its lock one.

use super::mm_types::{AnonId, ShmemId};
use super::swap::{PageData, SwapSlot};
use crate::hw::mem::Pfn;
use crate::hw::tlb::MmId;
use crate::kernel::{Ctx, World};
use std::collections::{BTreeMap, VecDeque};

/// Whose page a folio is (`folio->mapping` and `folio->index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Page `index` of shmem object `id` (in its page cache).
    Shmem {
        /// The object.
        id: ShmemId,
        /// Page index in the object.
        index: u64,
    },
    /// A private anonymous page: linear page `index` of the mappings
    /// whose VMA carries anon id `anon`, in the address spaces forked
    /// from `family` (`folio_anon_vma()`, see [`super::mm_types::AnonMap`]).
    Anon {
        /// The first address space of the fork tree.
        family: MmId,
        /// The VMA's anon id.
        anon: AnonId,
        /// Linear page index (`linear_page_index()`).
        index: u64,
    },
}

/// A folio of one 4 KiB page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folio {
    /// Its owner.
    pub mapping: Mapping,
    /// `folio_test_dirty()`: its only up-to-date copy is in memory.
    pub dirty: bool,
    /// Taken off the LRU for reclaim or migration (`folio_isolate_lru()`):
    /// nobody else may isolate it until it is put back or freed.
    pub isolated: bool,
    /// The NUMA node of its frame.
    pub node: u32,
    /// What the page holds (the model has no contents; swap costs depend
    /// on it).
    pub data: PageData,
    /// An anonymous folio in the swap cache: its swap slot
    /// (`folio_test_swapcache()`, `folio->swap`).
    pub swap: Option<SwapSlot>,
    /// An anonymous folio `MADV_FREE` made lazily freeable (no longer
    /// `folio_test_swapbacked()`): reclaim drops it unless it was written
    /// again.
    pub lazyfree: bool,
}

impl Folio {
    /// A new clean folio of `mapping` holding `data`, on `node`, off the
    /// swap cache.
    pub fn new(mapping: Mapping, node: u32, data: PageData) -> Self {
        Self {
            mapping,
            dirty: false,
            isolated: false,
            node,
            data,
            swap: None,
            lazyfree: false,
        }
    }

    /// Is it a private anonymous folio (`folio_test_anon()`)?
    pub fn anon(&self) -> bool {
        matches!(self.mapping, Mapping::Anon { .. })
    }

    /// The references a cache holds on it: the page cache's on a shmem
    /// folio, the swap cache's on an anonymous one in it.
    pub fn cache_refs(&self) -> u32 {
        match self.mapping {
            Mapping::Shmem { .. } => 1,
            Mapping::Anon { .. } => u32::from(self.swap.is_some()),
        }
    }
}

/// The resident folios by frame, and the LRU list they are on (one
/// inactive list in the model, oldest first).
///
/// The list is a queue of (frame, generation): moving or removing a folio
/// gives it a new generation, which makes its older entries stale; stale
/// entries are skipped when met and dropped when they outnumber the
/// folios, so the list's memory stays proportional to the folios.
#[derive(Debug, Default)]
pub struct Folios {
    map: BTreeMap<Pfn, (Folio, u64)>,
    lru: VecDeque<(Pfn, u64)>,
    generation: u64,
}

impl Folios {
    /// The folio in frame `pfn`, if any.
    pub fn get(&self, pfn: &Pfn) -> Option<&Folio> {
        self.map.get(pfn).map(|(f, _)| f)
    }

    /// The folio in frame `pfn`, if any, to change.
    pub fn get_mut(&mut self, pfn: &Pfn) -> Option<&mut Folio> {
        self.map.get_mut(pfn).map(|(f, _)| f)
    }

    /// Resident folios.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no folio is resident.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds the new folio `f` in frame `pfn` at the tail of the LRU
    /// (`folio_add_lru()`).
    pub fn add(&mut self, pfn: Pfn, f: Folio) {
        self.generation += 1;
        self.map.insert(pfn, (f, self.generation));
        self.lru.push_back((pfn, self.generation));
        self.compact();
    }

    /// Removes the folio in frame `pfn` (and its place on the LRU).
    pub fn remove(&mut self, pfn: &Pfn) -> Option<Folio> {
        self.map.remove(pfn).map(|(f, _)| f)
    }

    /// Puts folio `pfn` back at the tail of the LRU, youngest
    /// (`folio_putback_lru()`), clearing its isolation.
    pub fn putback(&mut self, pfn: Pfn) {
        self.relink(pfn, false);
    }

    /// Moves folio `pfn` to the head of the LRU, where reclaim looks first
    /// (`folio_deactivate()` as the model has one list).
    pub fn deactivate(&mut self, pfn: Pfn) {
        self.relink(pfn, true);
    }

    fn relink(&mut self, pfn: Pfn, head: bool) {
        self.generation += 1;
        let g = self.generation;
        let Some((f, gen)) = self.map.get_mut(&pfn) else {
            return;
        };
        f.isolated = false;
        *gen = g;
        if head {
            self.lru.push_front((pfn, g));
        } else {
            self.lru.push_back((pfn, g));
        }
        self.compact();
    }

    /// Isolates folio `pfn` (`folio_isolate_lru()`): off the list, marked
    /// isolated. False if it is not resident or already isolated.
    pub fn isolate(&mut self, pfn: Pfn) -> bool {
        self.generation += 1;
        let g = self.generation;
        match self.map.get_mut(&pfn) {
            Some((f, gen)) if !f.isolated => {
                f.isolated = true;
                *gen = g;
                true
            }
            _ => false,
        }
    }

    /// Isolates the oldest folio on the list, if any
    /// (`isolate_lru_folios()`, one at a time).
    pub fn isolate_oldest(&mut self) -> Option<Pfn> {
        while let Some((pfn, g)) = self.lru.pop_front() {
            if self.map.get(&pfn).is_some_and(|&(_, gen)| gen == g) && self.isolate(pfn) {
                return Some(pfn);
            }
        }
        None
    }

    /// Drops stale entries once they outnumber the resident folios.
    fn compact(&mut self) {
        if self.lru.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.lru
                .retain(|&(pfn, g)| map.get(&pfn).is_some_and(|&(_, gen)| gen == g));
        }
    }
}

/// The lock of folio `pfn` (created on first use).
fn folio_lock_id(w: &World, pfn: Pfn) -> crate::kernel::LockId {
    if let Some(&l) = w.k.borrow().folio_locks.get(&pfn) {
        return l;
    }
    let l = w.new_lock("folio_lock");
    w.k.borrow_mut().folio_locks.insert(pfn, l);
    l
}

/// `__folio_set_locked()` on a folio nobody else can see yet: cannot wait.
pub(crate) fn folio_lock_new(ctx: &Ctx, pfn: Pfn) {
    let l = folio_lock_id(&ctx.w, pfn);
    let got = ctx.w.lock_acquire(l, ctx.task, false, ctx.now());
    assert!(got, "a new folio's lock is free");
}

/// `folio_lock()`: sleeps until the folio is unlocked.
pub async fn folio_lock(ctx: &Ctx, pfn: Pfn) {
    let l = folio_lock_id(&ctx.w, pfn);
    ctx.lock_sleeping(l).await;
}

/// `folio_trylock()`.
pub async fn folio_trylock(ctx: &Ctx, pfn: Pfn) -> bool {
    let l = folio_lock_id(&ctx.w, pfn);
    ctx.trylock_sleeping(l).await
}

/// `folio_unlock()`: wakes the next waiter.
pub async fn folio_unlock(ctx: &Ctx, pfn: Pfn) {
    let l = folio_lock_id(&ctx.w, pfn);
    ctx.up(l, false).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shmem(index: u64) -> Folio {
        Folio::new(Mapping::Shmem { id: 0, index }, 0, PageData::SameFilled)
    }

    fn drain(f: &mut Folios) -> Vec<Pfn> {
        std::iter::from_fn(|| f.isolate_oldest()).collect()
    }

    #[test]
    fn the_lru_is_oldest_first_and_moves_leave_no_second_entry() {
        let mut f = Folios::default();
        for pfn in 1..=4 {
            f.add(pfn, shmem(pfn));
        }
        f.deactivate(3); // to the head
        f.deactivate(3); // again: still one entry
        assert!(f.isolate(2));
        assert!(!f.isolate(2), "already isolated");
        f.putback(2); // to the tail
        f.remove(&4);
        assert_eq!(drain(&mut f), vec![3, 1, 2]);
        assert!(f.get(&1).is_some_and(|x| x.isolated));
        assert_eq!(drain(&mut f), Vec::<Pfn>::new());
    }

    #[test]
    fn stale_entries_do_not_accumulate() {
        let mut f = Folios::default();
        f.add(1, shmem(0));
        for _ in 0..10_000 {
            f.deactivate(1);
            f.putback(1);
        }
        assert!(f.lru.len() <= 2 * f.len() + 65, "{} entries", f.lru.len());
        assert_eq!(drain(&mut f), vec![1]);
    }

    #[test]
    fn cache_references_depend_on_the_owner() {
        let mut a = Folio::new(
            Mapping::Anon {
                family: MmId::new(0),
                anon: 1,
                index: 5,
            },
            0,
            PageData::Compressible,
        );
        assert_eq!((a.anon(), a.cache_refs()), (true, 0));
        a.swap = Some(7);
        assert_eq!(a.cache_refs(), 1);
        assert_eq!(shmem(0).cache_refs(), 1);
    }
}
