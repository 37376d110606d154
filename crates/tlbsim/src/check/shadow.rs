//! The checker's shadow of every address space's leaf PTEs: the value the
//! `PteWrite` events left (the shadow PTE) and, per page, the newest
//! version a completed call retired with the value it committed.
//!
//! Pages live in chunks of [`CHUNK_PAGES`] consecutive pages of one mm, so
//! the per-access question (is this entry retired and incompatible?) is one
//! hash lookup and an index, a 2 MiB page's 512 PTE writes touch a few
//! chunks, and a 2 MiB TLB entry is checked against its 512 pages chunk by
//! chunk, skipping every chunk whose newest retired version is older than
//! the entry. Each mm's chunk ids are also kept ordered, for the range
//! commits of `CallRange` and for dropping the mm.

use crate::hw::compatible;
use crate::hw::mem::{Granule, Pte};
use crate::hw::tlb::{LeafEntry, MmId};
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::collections::BTreeSet;

/// log2 of [`CHUNK_PAGES`].
const CHUNK_SHIFT: u32 = 6;
/// Pages per chunk: a power of two dividing 512 (a 2 MiB page spans whole
/// chunks) and the width of the chunk's bitmaps.
const CHUNK_PAGES: u64 = 1 << CHUNK_SHIFT;
const _: () = assert!(
    Granule::K4.hpage_pmd_nr().is_multiple_of(CHUNK_PAGES)
        && Granule::K64.hpage_pmd_nr().is_multiple_of(CHUNK_PAGES)
        && CHUNK_PAGES <= 64
);

/// The pages `base + i` (`i` < [`CHUNK_PAGES`]) of one mm.
#[derive(Debug)]
struct Chunk {
    /// Bit `i`: page `i` was written (has a shadow PTE, perhaps none).
    written: u64,
    /// Bit `i`: page `i` has a retired version (`retired`, `value`).
    committed: u64,
    /// The largest `retired` of a committed page (0 if none): an entry
    /// newer than this is retired on no page of the chunk.
    max_retired: u64,
    /// Shadow PTEs (meaningful where `written`).
    current: [Option<Pte>; CHUNK_PAGES as usize],
    /// Versions up to this are retired (meaningful where `committed`).
    retired: [u64; CHUNK_PAGES as usize],
    /// The value committed with `retired`.
    value: [Option<Pte>; CHUNK_PAGES as usize],
}

impl Chunk {
    fn new() -> Self {
        Self {
            written: 0,
            committed: 0,
            max_retired: 0,
            current: [None; CHUNK_PAGES as usize],
            retired: [0; CHUNK_PAGES as usize],
            value: [None; CHUNK_PAGES as usize],
        }
    }

    /// Retires the versions of page `i` up to `retired`, committing
    /// `value`, unless a newer retirement is already recorded.
    fn commit(&mut self, i: usize, retired: u64, value: Option<Pte>) {
        let bit = 1u64 << i;
        if self.committed & bit == 0 || retired >= self.retired[i] {
            self.committed |= bit;
            self.retired[i] = retired;
            self.value[i] = value;
            self.max_retired = self.max_retired.max(retired);
        }
    }

    /// Retires, up to `retired`, every written page of this chunk (`id` of
    /// `mm`) in `[lo, hi)`, committing its shadow PTE; appends those pages
    /// to `keys` in order. Returns whether there was any.
    fn commit_in(
        &mut self,
        mm: MmId,
        id: u64,
        (lo, hi): (u64, u64),
        retired: u64,
        keys: &mut Vec<(MmId, u64)>,
    ) -> bool {
        let mut bits = self.written & mask_in(id, lo, hi);
        let any = bits != 0;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            self.commit(i, retired, self.current[i]);
            keys.push((mm, (id << CHUNK_SHIFT) + i as u64));
        }
        any
    }

    /// Is `e`, the view of page `i`, retired and incompatible with the
    /// value committed there?
    fn stale(&self, i: usize, e: &LeafEntry) -> bool {
        self.committed & (1u64 << i) != 0
            && e.version <= self.retired[i]
            && !compatible(e, self.value[i])
    }
}

/// One PTE write of a call in progress: mm, vpn, the version it replaced
/// (`None`: the PTE was empty) and the value it wrote.
pub type PteWriteRec = (MmId, u64, Option<u64>, Option<Pte>);

/// Page `i`'s view of a 2 MiB leaf value (frame `pfn + i`).
pub fn huge_view(p: Option<Pte>, i: u64) -> Option<Pte> {
    p.map(|p| Pte {
        pfn: p.pfn + i,
        ..p
    })
}

/// Raises `mm`'s newest retirement in `mms` to at least `retired`.
fn note_retired(mms: &mut FxHashMap<MmId, MmShadow>, mm: MmId, retired: u64) {
    let m = mms.entry(mm).or_default();
    m.max_retired = Some(m.max_retired.map_or(retired, |r| r.max(retired)));
}

/// Chunk id of `vpn`, and its index in the chunk.
fn split(vpn: u64) -> (u64, usize) {
    (vpn >> CHUNK_SHIFT, (vpn & (CHUNK_PAGES - 1)) as usize)
}

/// Bits of the pages of chunk `id` that lie in `[lo, hi)`.
fn mask_in(id: u64, lo: u64, hi: u64) -> u64 {
    let base = id << CHUNK_SHIFT;
    let first = lo.max(base) - base;
    let end = hi.min(base + CHUNK_PAGES) - base;
    if first >= end {
        return 0;
    }
    let upto = if end == 64 {
        u64::MAX
    } else {
        (1u64 << end) - 1
    };
    upto & !((1u64 << first) - 1)
}

/// What is kept per mm besides its chunks.
#[derive(Debug, Default)]
struct MmShadow {
    /// Its chunk ids, in order.
    ids: BTreeSet<u64>,
    /// The largest version retired on any of its pages (`None`: none yet).
    max_retired: Option<u64>,
}

/// Shadow PTEs and retired versions of every live mm. Its hash maps are
/// only looked up, never iterated; ordered questions go through the
/// per-mm `BTreeSet`s.
#[derive(Debug, Default)]
pub struct Shadow {
    /// The chunks (slots of dropped mms are reused, see `free`).
    slab: Vec<Chunk>,
    /// Slab slots not in use.
    free: Vec<usize>,
    /// Slab slot of each (mm, chunk id).
    chunks: FxHashMap<(MmId, u64), usize>,
    /// The last (mm, chunk id) looked up and its slot: consecutive
    /// questions mostly concern one chunk (a 2 MiB page's 512 writes, a
    /// task's accesses).
    // A lookup cache; `Machine::emit` records the checker's accesses.
    // untracked: a cache inside the checker (see above)
    last: Cell<Option<((MmId, u64), usize)>>,
    /// Per mm: chunk ids and newest retirement.
    mms: FxHashMap<MmId, MmShadow>,
    /// Retirements recorded so far.
    epoch: u64,
}

impl Shadow {
    /// The slab slot of chunk `id` of `mm`, if it exists.
    fn slot(&self, mm: MmId, id: u64) -> Option<usize> {
        match self.last.get() {
            Some((key, s)) if key == (mm, id) => Some(s),
            _ => {
                let s = *self.chunks.get(&(mm, id))?;
                self.last.set(Some(((mm, id), s)));
                Some(s)
            }
        }
    }

    fn chunk(&self, mm: MmId, id: u64) -> Option<&Chunk> {
        self.slot(mm, id).map(|s| &self.slab[s])
    }

    /// Chunk `id` of `mm`, created empty (and indexed) if new.
    fn chunk_at(&mut self, mm: MmId, id: u64) -> &mut Chunk {
        let s = match self.slot(mm, id) {
            Some(s) => s,
            None => {
                let s = match self.free.pop() {
                    Some(s) => {
                        self.slab[s] = Chunk::new();
                        s
                    }
                    None => {
                        self.slab.push(Chunk::new());
                        self.slab.len() - 1
                    }
                };
                self.chunks.insert((mm, id), s);
                self.mms.entry(mm).or_default().ids.insert(id);
                s
            }
        };
        &mut self.slab[s]
    }

    /// The chunk of `vpn`, created empty if new, and the page's index.
    fn chunk_mut(&mut self, mm: MmId, vpn: u64) -> (&mut Chunk, usize) {
        let (id, i) = split(vpn);
        (self.chunk_at(mm, id), i)
    }

    /// Commits the PTE writes of a returning call, `writes` sorted by
    /// (mm, vpn) with each page's writes in order: a page whose writes
    /// replaced a version retires the newest one replaced, committing the
    /// last value written; those pages are appended to `keys` in order.
    pub fn commit_writes(&mut self, writes: &[PteWriteRec], keys: &mut Vec<(MmId, u64)>) {
        let same_chunk =
            |a: &PteWriteRec, b: &PteWriteRec| (a.0, split(a.1).0) == (b.0, split(b.1).0);
        for in_chunk in writes.chunk_by(same_chunk) {
            if in_chunk.iter().all(|w| w.2.is_none()) {
                continue;
            }
            let (mm, id) = (in_chunk[0].0, split(in_chunk[0].1).0);
            let c = self.chunk_at(mm, id);
            let mut newest = None;
            for g in in_chunk.chunk_by(|a, b| a.1 == b.1) {
                let (_, vpn, _, new) = g[g.len() - 1];
                let Some(v) = g.iter().map(|w| w.2).max().flatten() else {
                    continue;
                };
                c.commit(split(vpn).1, v, new);
                keys.push((mm, vpn));
                newest = newest.max(Some(v));
            }
            if let Some(r) = newest {
                note_retired(&mut self.mms, mm, r);
                self.epoch += 1;
            }
        }
    }

    /// `PteWrite`: the shadow PTE of (mm, vpn) becomes `new`.
    pub fn write(&mut self, mm: MmId, vpn: u64, new: Option<Pte>) {
        let (c, i) = self.chunk_mut(mm, vpn);
        c.written |= 1u64 << i;
        c.current[i] = new;
    }

    /// `HugePteWrite`: the shadow PTEs of the `hpage_pages`
    /// (`HPAGE_PMD_NR`) pages from `vpn` (aligned to as many) become the
    /// views of the leaf `new` (page `i`: frame `pfn + i`), as that many
    /// [`Shadow::write`]s would leave them.
    pub fn write_huge(&mut self, mm: MmId, vpn: u64, new: Option<Pte>, hpage_pages: u64) {
        debug_assert!(vpn.is_multiple_of(hpage_pages));
        for id in vpn >> CHUNK_SHIFT..(vpn + hpage_pages) >> CHUNK_SHIFT {
            let first = (id << CHUNK_SHIFT) - vpn;
            let c = self.chunk_at(mm, id);
            c.written = u64::MAX;
            for (i, cur) in c.current.iter_mut().enumerate() {
                *cur = huge_view(new, first + i as u64);
            }
        }
    }

    /// The shadow PTE of (mm, vpn) (`None` also if never written).
    pub fn current(&self, mm: MmId, vpn: u64) -> Option<Pte> {
        let (id, i) = split(vpn);
        self.chunk(mm, id).and_then(|c| c.current[i])
    }

    /// Keeps `mm`'s newest retirement up to date with one of `retired`,
    /// and advances the epoch.
    fn note_retired(&mut self, mm: MmId, retired: u64) {
        self.epoch += 1;
        note_retired(&mut self.mms, mm, retired);
    }

    /// A counter that advances whenever a retirement is recorded: while it
    /// stays the same, no entry becomes [`Shadow::stale`].
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The largest version retired on any page of `mm` (`None`: none): an
    /// entry newer than this is not [`Shadow::stale`] anywhere in `mm`.
    pub fn max_retired(&self, mm: MmId) -> Option<u64> {
        self.mms.get(&mm).and_then(|m| m.max_retired)
    }

    /// Retires, up to `retired`, every written page of `mm` in `[lo, hi)`,
    /// committing its shadow PTE; appends those pages to `keys` in
    /// increasing order.
    pub fn commit_range(
        &mut self,
        mm: MmId,
        lo: u64,
        hi: u64,
        retired: u64,
        keys: &mut Vec<(MmId, u64)>,
    ) {
        if lo >= hi {
            return;
        }
        let (first, last) = (lo >> CHUNK_SHIFT, (hi - 1) >> CHUNK_SHIFT);
        let mut any = false;
        if first == last {
            // One chunk (an mprotect of a few pages): no list of ids.
            if let Some(s) = self.slot(mm, first) {
                any = self.slab[s].commit_in(mm, first, (lo, hi), retired, keys);
            }
        } else {
            let Some(m) = self.mms.get(&mm) else { return };
            let ids: Vec<u64> = m.ids.range(first..=last).copied().collect();
            for id in ids {
                let c = self.chunk_at(mm, id);
                any |= c.commit_in(mm, id, (lo, hi), retired, keys);
            }
        }
        if any {
            self.note_retired(mm, retired);
        }
    }

    /// Is `e` (a 4 KiB view at `e.vpn`, of `mm`) retired by a completed
    /// call and incompatible with the value that call committed?
    pub fn stale(&self, mm: MmId, e: &LeafEntry) -> bool {
        let (id, i) = split(e.vpn);
        self.chunk(mm, id).is_some_and(|c| c.stale(i, e))
    }

    /// The first (lowest) base-page view of the huge entry `e` of
    /// `hpage_pages` pages (of `mm`, `e.vpn` and `e.pfn` its first page and
    /// frame) for which [`Shadow::stale`] holds: the same answer as testing
    /// its views in increasing order.
    pub fn first_stale_huge(&self, mm: MmId, e: &LeafEntry, hpage_pages: u64) -> Option<LeafEntry> {
        let (lo, hi) = (e.vpn, e.vpn + hpage_pages);
        for id in lo >> CHUNK_SHIFT..=(hi - 1) >> CHUNK_SHIFT {
            let Some(c) = self.chunk(mm, id) else {
                continue;
            };
            if e.version > c.max_retired {
                continue;
            }
            let mut bits = c.committed & mask_in(id, lo, hi);
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let vpn = (id << CHUNK_SHIFT) + i as u64;
                let view = LeafEntry {
                    vmid: 0,
                    vpn,
                    pfn: e.pfn + (vpn - e.vpn),
                    ..*e
                };
                if c.stale(i, &view) {
                    return Some(view);
                }
            }
        }
        None
    }

    /// Forgets `mm` (freed for good).
    pub fn drop_mm(&mut self, mm: MmId) {
        self.last.set(None);
        for id in self.mms.remove(&mm).unwrap_or_default().ids {
            if let Some(s) = self.chunks.remove(&(mm, id)) {
                self.free.push(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::mem::Perms;

    fn pte(pfn: u64, version: u64) -> Option<Pte> {
        Some(Pte {
            pfn,
            perms: Perms::RW,
            version,
        })
    }

    /// The mm of every test.
    const MM: MmId = MmId::new(0);

    fn entry(vpn: u64, pfn: u64, version: u64) -> LeafEntry {
        LeafEntry {
            vmid: 0,
            asid: 1,
            vpn,
            pfn,
            perms: Perms::RW,
            version,
            mm: MM,
        }
    }

    #[test]
    fn masks_cover_the_pages_in_range() {
        assert_eq!(mask_in(0, 0, 64), u64::MAX);
        assert_eq!(mask_in(1, 0, 1000), u64::MAX);
        assert_eq!(mask_in(1, 65, 67), 0b110);
        assert_eq!(mask_in(1, 0, 64), 0);
        assert_eq!(mask_in(1, 127, 500), 1 << 63);
    }

    #[test]
    fn a_range_commit_retires_written_pages_only_and_newer_retirements_stay() {
        let mut s = Shadow::default();
        for vpn in [3, 70, 200] {
            s.write(MM, vpn, pte(vpn, 1));
        }
        s.commit_writes(&[(MM, 70, Some(9), None)], &mut Vec::new());
        let mut keys = Vec::new();
        s.commit_range(MM, 0, 199, 5, &mut keys);
        assert_eq!(keys, vec![(MM, 3), (MM, 70)]);
        // vpn 70 keeps its newer retirement (9, None).
        assert!(s.stale(MM, &entry(70, 70, 8)));
        assert!(!s.stale(MM, &entry(3, 3, 4)), "compatible with the commit");
        assert!(s.stale(MM, &entry(3, 4, 4)), "another frame");
        assert!(!s.stale(MM, &entry(3, 4, 6)), "newer than the retirement");
        assert!(!s.stale(MM, &entry(200, 0, 1)), "never committed");
    }

    #[test]
    fn a_huge_entry_answers_as_its_first_stale_view() {
        let mut s = Shadow::default();
        let base = 512 * 7;
        let writes = [
            (MM, base + 100, Some(4), pte(1100, 4)),
            (MM, base + 300, Some(2), pte(1300, 2)),
            (MM, base + 300, Some(4), pte(1301, 4)),
        ];
        let mut keys = Vec::new();
        s.commit_writes(&writes, &mut keys);
        assert_eq!(keys, vec![(MM, base + 100), (MM, base + 300)]);
        let e = entry(base, 1000, 3);
        let v = s
            .first_stale_huge(MM, &e, 512)
            .expect("page 300 maps another frame");
        assert_eq!((v.vpn, v.pfn), (base + 300, 1300));
        assert_eq!(s.first_stale_huge(MM, &entry(base, 1000, 5), 512), None);
        s.drop_mm(MM);
        assert_eq!(s.first_stale_huge(MM, &e, 512), None);
    }
}
