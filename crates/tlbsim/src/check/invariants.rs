//! Invariants held by observing events (never by reaching into policies):
//!
//! - **no stale use / hold**: once the kernel call that changed a PTE has
//!   returned, no CPU uses a translation of the value it replaced (or older,
//!   except a version another call still in progress replaced: that call
//!   retires it when it returns), nor holds one while it has the address
//!   space loaded (a loaded ASID can be used by speculative walks at any
//!   time). Calls with a range contract
//!   (munmap, madvise, mprotect: `CallRange`) also retire every translation
//!   of their range older than the call, whoever changed the PTE (this is
//!   what `mm_tlb_flush_nested` protects). A stale entry that grants nothing
//!   the committed PTE does not (e.g. read-only where the PTE became
//!   writable) is allowed: it costs a spurious fault, not a wrong access.
//! - **no use after free**: when a data frame is freed, no CPU with the
//!   address space loaded still maps it.
//! - **no stale walk**: no walk goes through a cached intermediate entry to a
//!   page-table page that was freed or reused, and no CPU with the ASID
//!   loaded still caches such an entry when the page is freed.
//! - **ASID isolation**: a CPU never uses, or loads an ASID while holding,
//!   entries of another address space under that ASID, and no two CPUs run
//!   different address spaces under one ASID at once. No CPU keeps TTBR0 on
//!   a freed top-level table.
//! - **no lost write**: once the kernel began copying a data frame out
//!   (writing it to swap, copying it to a migration target: `CopyOut`), no
//!   store reaches the frame through any translation until it is freed
//!   (`try_to_unmap_flush_dirty()` before `pageout()`, the batch flush
//!   before `migrate_folio()`); after the free, "no use after free" holds.
//!
//! Completion (a DSB completes only its own CPU's TLBIs) is a property of the
//! hardware model; the mutant tests show its consequences are caught.

use super::shadow::{huge_view, PteWriteRec, Shadow};
use super::{Invariant, Violation};
use crate::engine::Ns;
use crate::hw::cpumask::CpuMask;
use crate::hw::mem::{Granule, MaybePte, Pfn, Pte, TableId};
use crate::hw::tlb::{Asid, LeafEntry, MmId, Tag, Tlb, TlbiScope, Vmid, WalkEntry};
use crate::hw::Arch;
use crate::hw::{CpuId, CpuVec, Hw};
use crate::observe::{Event, Observer, TaskId};
use rustc_hash::{FxHashMap, FxHashSet};

/// A PTE's value before and after a write.
type PteChange = (Option<Pte>, Option<Pte>);

/// One PTE write of a call in progress: of a base-page PTE (`pages` 1),
/// or of a PMD-sized leaf standing for its `pages` (`HPAGE_PMD_NR`) pages,
/// page `i` mapping frame `pfn + i` of the values recorded for the first.
#[derive(Debug, Clone, Copy)]
struct PendingWrite {
    rec: PteWriteRec,
    pages: u64,
}

impl PendingWrite {
    /// Pages it covers: `[vpn, vpn + pages())`.
    fn pages(&self) -> u64 {
        self.pages
    }
}

/// PTE changes of the call in progress on one CPU.
#[derive(Debug, Default, Clone)]
struct Pending {
    /// Every PTE write of the call, in order (folded per page when the call
    /// returns: the newest version replaced, the last value written).
    writes: Vec<PendingWrite>,
    /// The range contract: mm, first and end vpn, version bound at entry.
    range: Option<(MmId, u64, u64, u64)>,
}

impl Pending {
    /// Drops the writes to, and the range over, the mms in `freed`.
    fn forget(&mut self, freed: &FxHashSet<MmId>) {
        self.writes.retain(|w| !freed.contains(&w.rec.0));
        if self.range.is_some_and(|r| freed.contains(&r.0)) {
            self.range = None;
        }
    }
}

/// The CPUs that loaded one address space (from `AsidLoad` events).
#[derive(Debug, Clone)]
struct MmCpus {
    /// CPUs whose last TTBR0 load was this mm.
    loaded: CpuMask,
    /// CPUs that ever loaded it: the only ones whose walk caches can hold
    /// entries into its tables (see [`Checker::table_free`]).
    ever: CpuMask,
}

/// A CPU's TLB was found to hold no stale translation of `mm` under
/// `asid` when its [`Tlb::tick`] and the shadow's [`Shadow::epoch`] were
/// as recorded. While both stay so, that still holds: the TLB has only lost
/// entries and no entry has become stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clean {
    tick: u64,
    epoch: u64,
    asid: Tag,
    mm: MmId,
}

/// At `tick`, a CPU's TLB held a leaf entry under `asid` translating a
/// page of `[lo, hi)` (vpns) iff `any`; while the tick stays the same it
/// only loses entries, so `!any` stays true for every sub-range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RangeProbe {
    tick: u64,
    asid: Tag,
    lo: u64,
    hi: u64,
    any: bool,
}

/// Page checks that a range of at least this many pages needs on one CPU
/// are answered first by one scan of its TLB ([`RangeProbe`]): a scan
/// visits every slot once, a page check two sets.
const PROBE_MIN_PAGES: u64 = 64;

/// After this many `FrameFree` events in a row in one 2 MiB region of one
/// mm (a huge page's 512 frames), each CPU is probed once for the whole
/// region instead of page by page.
const FREE_STREAK_PROBE: u32 = 8;

/// The invariant checker. Its hash maps and sets are only looked up,
/// cleared, or (`parked`, when freed mms are purged) edited entry by
/// entry, so their order cannot reach a report.
#[derive(Debug)]
pub struct Checker {
    /// The last `history_len` events, a ring: once full, `history_next`
    /// is the oldest (overwritten in place: no per-event bookkeeping).
    history: Vec<(Ns, Event)>,
    history_len: usize,
    history_next: usize,
    /// PTE changes made by the kernel call in progress on each CPU.
    pending: CpuVec<Pending>,
    /// The task each CPU runs (from `Running` and `CallEnter`), whose
    /// call `pending` holds.
    on_cpu: CpuVec<Option<TaskId>>,
    /// The calls in progress of tasks switched out in the middle of one (a
    /// call that sleeps, on a lock or in `wait4`): back into `pending`
    /// when the task runs again, on whichever CPU.
    parked: FxHashMap<TaskId, Pending>,
    /// Address spaces freed since the last purge of `pending` and `parked`
    /// ([`Checker::mm_free`]): a call's writes to them and its range over
    /// them are dropped when it returns.
    freed_mms: FxHashSet<MmId>,
    /// Shadow PTEs (from PteWrite events) and, per page, the versions
    /// retired by completed calls with the values they committed.
    shadow: Shadow,
    /// What each CPU last loaded into TTBR0 (from AsidLoad events).
    cpu_loaded: CpuVec<Option<(MmId, Tag)>>,
    /// The mm of the task each CPU runs (`None`: kernel thread or idle).
    running: CpuVec<Option<MmId>>,
    /// CPUs that loaded each live mm (an index; hardware state is re-read).
    by_mm: FxHashMap<MmId, MmCpus>,
    /// Per CPU, a state in which its TLB held no stale translation of an
    /// mm under an ASID.
    clean: CpuVec<Option<Clean>>,
    /// Per CPU, the [`Tlb::tick`] right after its last local `TLBI
    /// ASIDE1` (with the ASID) or `VMALLE1` (`None`): while the tick stays
    /// the same, the TLB and walk cache hold nothing under that ASID.
    flushed: CpuVec<Option<(u64, Vmid, Option<Asid>)>>,
    /// Per CPU, its last [`RangeProbe`].
    probes: CpuVec<Option<RangeProbe>>,
    /// The mm and 2 MiB region (vpn / 512) of the last `FrameFree` events,
    /// and how many in a row were there.
    free_streak: Option<(MmId, u64, u32)>,
    /// A buffer for lists of CPUs, kept to reuse its allocation.
    scratch_cpus: Vec<CpuId>,
    /// A buffer for a returning call's writes page by page, likewise.
    scratch_writes: Vec<PteWriteRec>,
    /// A buffer for the pages a returning call retired, likewise.
    scratch_keys: Vec<(MmId, u64)>,
    /// Reused by [`Checker::check_retired`]: the CPUs to check and where.
    scratch_spans: Vec<(CpuId, Option<Spans>)>,
    /// Per data frame, the version bound when it was last freed: a
    /// translation of it from an older PTE is one of a previous life.
    freed_below: Vec<u64>,
    /// Data frames whose contents the kernel began copying out
    /// (`CopyOut`) and that are not freed since.
    copied_out: std::collections::BTreeSet<Pfn>,
    /// One past the largest PTE version seen.
    version_bound: u64,
    failure: Option<Violation>,
    /// The machine's instruction-set family (from the hardware each event
    /// comes with), recorded in a violation for its report.
    arch: Arch,
    /// The machine's granule (from the hardware each event comes with):
    /// the size of the pages `vpn`s count and of huge leaves.
    g: Granule,
    /// Per mm, the pending writes (of every call in progress, on a CPU or
    /// parked) that replaced a version: while a returning call's mm has
    /// none, there is no other call's version to leave alone
    /// ([`Checker::defer_to_calls_in_progress`]). A freed mm's count is
    /// dropped with it (its writes are forgotten).
    replacing: FxHashMap<MmId, u32>,
    /// Page-table pages other address spaces' trees link too (`TableShare`:
    /// a shared hugetlb PMD table), with those address spaces, until the
    /// page is freed.
    shared_tables: FxHashMap<TableId, Vec<MmId>>,
    /// Events observed.
    pub events_seen: u64,
}

impl Checker {
    /// A checker for `ncpus` CPUs keeping `history_len` events for reports.
    pub fn new(ncpus: usize, history_len: usize) -> Self {
        Self {
            history: Vec::with_capacity(history_len),
            history_len,
            history_next: 0,
            pending: CpuVec::filled(ncpus, Pending::default()),
            on_cpu: CpuVec::filled(ncpus, None),
            parked: FxHashMap::default(),
            freed_mms: FxHashSet::default(),
            shadow: Shadow::default(),
            cpu_loaded: CpuVec::filled(ncpus, None),
            running: CpuVec::filled(ncpus, None),
            by_mm: FxHashMap::default(),
            clean: CpuVec::filled(ncpus, None),
            flushed: CpuVec::filled(ncpus, None),
            probes: CpuVec::filled(ncpus, None),
            free_streak: None,
            scratch_cpus: Vec::new(),
            scratch_writes: Vec::new(),
            scratch_keys: Vec::new(),
            scratch_spans: Vec::new(),
            freed_below: Vec::new(),
            copied_out: std::collections::BTreeSet::new(),
            version_bound: 1,
            failure: None,
            arch: Arch::Arm64,
            g: Granule::K4,
            shared_tables: FxHashMap::default(),
            replacing: FxHashMap::default(),
            events_seen: 0,
        }
    }

    /// Records the first violation (later ones are ignored): `cpus` as
    /// [`Violation::cpus`] orders them, with the history up to now.
    fn fail(
        &mut self,
        now: Ns,
        invariant: Invariant,
        cpus: &[CpuId],
        mm: Option<MmId>,
        va: Option<u64>,
        detail: String,
    ) {
        if self.failure.is_some() {
            return;
        }
        let mut cpus = cpus.to_vec();
        cpus.dedup();
        self.failure = Some(Violation {
            invariant,
            cpus,
            mm,
            va,
            time_ns: now,
            detail,
            history: self.history[self.history_next..]
                .iter()
                .chain(&self.history[..self.history_next])
                .copied()
                .collect(),
            arch: self.arch,
            granule: self.g,
            clock: super::Clock::SimulatedNs,
        });
    }

    /// Sets `out` to the CPUs whose last TTBR0 load was `mm` and whose
    /// current task runs `mm`, in increasing order (callers re-read the hardware). A CPU that
    /// keeps the tables lazily under a kernel thread or idle is not among
    /// them: it is checked when a task of `mm` runs there again
    /// (`Running`), and its (speculative) walks are checked as they happen.
    #[inline]
    fn cpus_running(&self, mm: MmId, out: &mut Vec<CpuId>) {
        out.clear();
        if let Some(s) = self.by_mm.get(&mm) {
            out.extend(s.loaded.iter().filter(|&c| self.running[c] == Some(mm)));
        }
    }

    /// The first 4 KiB view of the leaf entry `e` of `mm` (`huge`: a 2 MiB
    /// entry) that is retired and incompatible ([`Shadow::stale`]), if
    /// any. `newest` is `mm`'s [`Shadow::max_retired`]: newer entries are
    /// skipped without a lookup.
    fn stale_view(
        &self,
        mm: MmId,
        newest: Option<u64>,
        e: &LeafEntry,
        huge: bool,
    ) -> Option<LeafEntry> {
        if newest.is_none_or(|n| e.version > n) {
            None
        } else if huge {
            self.shadow.first_stale_huge(mm, e, self.g.hpage_pmd_nr())
        } else {
            self.shadow.stale(mm, e).then_some(*e)
        }
    }

    /// Does `cpu`'s TLB hold no leaf entry under `asid` translating a page
    /// of `[lo, hi)`? Answered by its last probe if that still applies,
    /// else by a scan recorded as the new probe.
    fn holds_none_in(&mut self, hw: &Hw, cpu: CpuId, asid: Tag, lo: u64, hi: u64) -> bool {
        let tlb = &hw.cpus[cpu].tlb;
        if let Some(p) = self.probes[cpu].filter(|p| p.tick == tlb.tick() && p.asid == asid) {
            if !p.any && p.lo <= lo && hi <= p.hi {
                return true;
            }
            if p.any && (p.lo, p.hi) == (lo, hi) {
                return false;
            }
        }
        let any = tlb.leaf_slots().any(|(e, huge)| {
            let span = if huge { self.g.hpage_pmd_nr() } else { 1 };
            e.tag() == asid && e.vpn < hi && lo < e.vpn + span
        });
        self.probes[cpu] = Some(RangeProbe {
            tick: tlb.tick(),
            asid,
            lo,
            hi,
            any,
        });
        !any
    }

    /// The state to compare with, or record in, `clean` for `tlb`.
    fn clean_state(&self, tlb: &Tlb, asid: Tag, mm: MmId) -> Clean {
        Clean {
            tick: tlb.tick(),
            epoch: self.shadow.epoch(),
            asid,
            mm,
        }
    }

    /// The first leaf translation of `mm` that `tlb` holds under `asid`
    /// and that is retired and incompatible ([`Shadow::stale`]), in the
    /// order of [`Tlb::leaf_entries`] (a 2 MiB entry as its first stale
    /// 4 KiB view).
    fn first_stale_held(&self, tlb: &Tlb, asid: Tag, mm: MmId) -> Option<LeafEntry> {
        let newest = self.shadow.max_retired(mm)?;
        tlb.leaf_slots()
            .filter(|(e, _)| e.tag() == asid && e.mm == mm)
            .find_map(|(e, huge)| self.stale_view(mm, Some(newest), &e, huge))
    }

    /// In one pass over `tlb`'s leaf entries under `asid`: the first of
    /// another mm than `mm` (as its first 4 KiB view, which is the entry
    /// itself) and, if there is none, the first stale one of `mm` (as
    /// [`Checker::first_stale_held`] finds it).
    fn other_or_stale(
        &self,
        tlb: &Tlb,
        asid: Tag,
        mm: MmId,
    ) -> (Option<LeafEntry>, Option<LeafEntry>) {
        let newest = self.shadow.max_retired(mm);
        let mut stale = None;
        for (e, huge) in tlb.leaf_slots().filter(|(e, _)| e.tag() == asid) {
            if e.mm != mm {
                return (Some(e), None);
            }
            if stale.is_none() {
                stale = self.stale_view(mm, newest, &e, huge);
            }
        }
        (None, stale)
    }

    /// `MmFree`: the address space is gone for good (its top-level table
    /// was freed, which no CPU's TTBR0 may still point at), so no check can
    /// ask about it again: its shadow PTEs, committed versions, loaded-CPU
    /// index and pending writes are dropped (memory stays bounded by the
    /// live address spaces).
    ///
    /// A call in progress elsewhere may still hold writes to it (a
    /// reclaimer's batch outlives the mm it unmapped from): those are
    /// dropped when that call returns, or when as many mms as there are
    /// CPUs have been freed, all at once ([`Checker::purge_freed`]), so
    /// that a free costs O(1) amortized, not a visit of every CPU.
    fn mm_free(&mut self, mm: MmId) {
        self.shadow.drop_mm(mm);
        self.by_mm.remove(&mm);
        self.replacing.remove(&mm);
        self.freed_mms.insert(mm);
        if self.freed_mms.len() >= self.pending.len() {
            self.purge_freed();
        }
    }

    /// Drops every pending write to, and range over, a freed mm, and the
    /// parked calls left with nothing (a task that died in a call).
    fn purge_freed(&mut self) {
        let freed = &self.freed_mms;
        for p in self.pending.iter_mut().chain(self.parked.values_mut()) {
            p.forget(freed);
        }
        self.parked
            .retain(|_, p| !p.writes.is_empty() || p.range.is_some());
        self.freed_mms.clear();
    }

    /// A returning call retires the versions it replaced and older ones,
    /// except a version another call still in progress replaced (on
    /// another CPU, or parked): that call retires it when it returns,
    /// after the flush it owes (a NUMA-hinting fault may make a PTE
    /// accessible again while the scan that made it `PROT_NONE` has not
    /// flushed yet, under the same `mmap_lock` for reading). So each of
    /// `recs` (the returning call's writes, one per page) retires at most
    /// up to the version below the oldest one other calls in progress
    /// replaced on its page. Range contracts are not touched.
    fn defer_to_calls_in_progress(&self, cpu: CpuId, recs: &mut [PteWriteRec]) {
        // The returning call's writes are uncounted already: a count left
        // for one of its mms is another call's.
        let busy = |mm: MmId| self.replacing.get(&mm).is_some_and(|&n| n > 0);
        let mut mms: Vec<MmId> = Vec::new();
        for r in recs.iter().filter(|r| r.2.is_some() && busy(r.0)) {
            if !mms.contains(&r.0) {
                mms.push(r.0);
            }
        }
        if mms.is_empty() {
            return;
        }
        let others = CpuId::all(self.pending.len())
            .filter(|&c| c != cpu)
            .map(|c| &self.pending[c])
            .chain(self.parked.values());
        let mut oldest: FxHashMap<(MmId, u64), u64> = FxHashMap::default();
        for w in others.flat_map(|p| p.writes.iter()) {
            let (mm, vpn, Some(old), _) = w.rec else {
                continue;
            };
            if !mms.contains(&mm) {
                continue;
            }
            for i in 0..w.pages() {
                let e = oldest.entry((mm, vpn + i)).or_insert(old);
                *e = (*e).min(old);
            }
        }
        for r in recs.iter_mut() {
            if let (Some(v), Some(&u)) = (r.2, oldest.get(&(r.0, r.1))) {
                if u <= v {
                    r.2 = u.checked_sub(1);
                }
            }
        }
    }

    /// After `why` (a call and the CPU it returned on) retired versions of
    /// (mm, vpn): `cpu`, if it has `mm` loaded, must hold none of them.
    fn check_loaded_cpu(
        &mut self,
        now: Ns,
        hw: &Hw,
        cpu: CpuId,
        mm: MmId,
        vpn: u64,
        why: (&str, CpuId),
    ) {
        let Some(t) = hw.cpus[cpu].ttbr0() else {
            return;
        };
        if t.mm != mm {
            return;
        }
        let bad = hw.cpus[cpu].tlb.leaf_entries_for(vpn).find(|e| {
            e.tag() == hw.cpus[cpu].tag(t.asid)
                && e.vpn == vpn
                && e.mm == mm
                && self.shadow.stale(mm, e)
        });
        if let Some(e) = bad {
            self.fail(
                now,
                Invariant::NoStaleHold,
                &[cpu, why.1],
                Some(mm),
                Some(vpn << self.g.page_shift()),
                format!(
                    "cpu{cpu} has mm {mm} loaded (ASID {}) and still holds a stale translation of va {:#x} after {} on cpu{} returned: {e}, current PTE {}",
                    t.asid,
                    vpn << self.g.page_shift(),
                    why.0,
                    why.1,
                    MaybePte(self.shadow.current(mm, vpn)), e = e.show(self.g)),
            );
        }
    }

    /// `PteWrite` (or, `huge`, `HugePteWrite`: a 2 MiB leaf, as the 512
    /// 4 KiB writes of its pages would be): the shadow PTE changes, and
    /// the call in progress on `cpu` records what it replaced (retired
    /// when the call returns).
    fn pte_write(&mut self, cpu: CpuId, mm: MmId, va: u64, (old, new): PteChange, huge: bool) {
        let vpn = va >> self.g.page_shift();
        if huge {
            self.shadow.write_huge(mm, vpn, new, self.g.hpage_pmd_nr());
        } else {
            self.shadow.write(mm, vpn, new);
        }
        if let Some(p) = new {
            self.version_bound = self.version_bound.max(p.version + 1);
        }
        let pages = if huge { self.g.hpage_pmd_nr() } else { 1 };
        if old.is_some() {
            *self.replacing.entry(mm).or_default() += 1;
        }
        self.pending[cpu].writes.push(PendingWrite {
            rec: (mm, vpn, old.map(|p| p.version), new),
            pages,
        });
    }

    /// `task` runs on `cpu` now (`Running`, `CallEnter`): the call in
    /// progress of the task that ran there, if any, is parked with its
    /// writes and range, and `task`'s, if parked, resumes here. (The first
    /// task seen on a CPU owns what is pending there: the scheduler's
    /// `Running` names the previous task before the next.)
    fn switch_task(&mut self, cpu: CpuId, task: TaskId) {
        match self.on_cpu[cpu] {
            Some(t) if t == task => return,
            Some(t) => {
                let p = std::mem::take(&mut self.pending[cpu]);
                if !p.writes.is_empty() || p.range.is_some() {
                    self.parked.insert(t, p);
                }
            }
            None => {}
        }
        self.on_cpu[cpu] = Some(task);
        if let Some(mut p) = self.parked.remove(&task) {
            // What is pending here is `task`'s own (a CPU's first task),
            // made after what it parked.
            let here = std::mem::take(&mut self.pending[cpu]);
            p.writes.extend(here.writes);
            p.range = here.range.or(p.range);
            self.pending[cpu] = p;
        }
    }

    /// `CallRange`: the call in progress on `cpu` promises to retire every
    /// translation of `[start, end)` older than now.
    fn call_range(&mut self, cpu: CpuId, mm: MmId, start: u64, end: u64) {
        self.pending[cpu].range = Some((
            mm,
            start >> self.g.page_shift(),
            end.div_ceil(self.g.page_size()),
            self.version_bound,
        ));
    }

    /// `Running`: a task of `mm` resumes on `cpu`, which must hold no
    /// retired translation of `mm` under its loaded ASID (no stale hold).
    fn running(&mut self, now: Ns, hw: &Hw, cpu: CpuId, mm: Option<MmId>) {
        self.running[cpu] = mm;
        let (Some(mm), Some(t)) = (mm, hw.cpus[cpu].ttbr0()) else {
            return;
        };
        if t.mm != mm {
            return;
        }
        let tlb = &hw.cpus[cpu].tlb;
        let state = self.clean_state(tlb, hw.cpus[cpu].tag(t.asid), mm);
        if self.clean[cpu] == Some(state) {
            return;
        }
        if let Some(e) = self.first_stale_held(tlb, hw.cpus[cpu].tag(t.asid), mm) {
            self.fail(
                now,
                Invariant::NoStaleHold,
                &[cpu],
                Some(mm),
                Some(e.vpn << self.g.page_shift()),
                format!("cpu{cpu} resumes a task of mm {mm} (ASID {}) while holding a stale translation: {e}", t.asid, e = e.show(self.g)),
            );
        } else {
            self.clean[cpu] = Some(state);
        }
    }

    /// `FrameFree`: no CPU running `mm` may still map `pfn` (no use after
    /// free).
    ///
    /// While the call on `cpu` frees the frames of a long range it
    /// unmapped (`CallRange`), or frees many frames of one 2 MiB region,
    /// each CPU is first asked with one probe of that range whether it
    /// holds anything there ([`Checker::holds_none_in`]).
    fn frame_free(&mut self, now: Ns, hw: &Hw, cpu: CpuId, pfn: Pfn, mm: MmId, va: u64) {
        self.copied_out.remove(&pfn);
        self.note_freed(pfn, 1);
        let vpn = va >> self.g.page_shift();
        let region = vpn / self.g.hpage_pmd_nr();
        let streak = match self.free_streak {
            Some((m, r, n)) if (m, r) == (mm, region) => n.saturating_add(1),
            _ => 1,
        };
        self.free_streak = Some((mm, region, streak));
        let range = self.pending[cpu]
            .range
            .filter(|r| r.0 == mm && r.1 <= vpn && vpn < r.2 && r.2 - r.1 >= PROBE_MIN_PAGES)
            .map(|r| (r.1, r.2))
            .or_else(|| {
                let lo = region * self.g.hpage_pmd_nr();
                (streak >= FREE_STREAK_PROBE).then_some((lo, lo + self.g.hpage_pmd_nr()))
            });
        let mut cpus = std::mem::take(&mut self.scratch_cpus);
        self.cpus_running(mm, &mut cpus);
        for &c in &cpus {
            let Some(t) = hw.cpus[c].ttbr0().filter(|t| t.mm == mm) else {
                continue;
            };
            if range
                .is_some_and(|(lo, hi)| self.holds_none_in(hw, c, hw.cpus[c].tag(t.asid), lo, hi))
            {
                continue;
            }
            if self.still_maps(now, hw, (cpu, c, hw.cpus[c].tag(t.asid)), pfn, mm, va) {
                break;
            }
        }
        self.scratch_cpus = cpus;
    }

    /// Does CPU `c`, with `mm` loaded under `asid`, still map `pfn` at
    /// `va` after `cpu` freed it? If so, that is reported (no use after
    /// free).
    fn still_maps(
        &mut self,
        now: Ns,
        hw: &Hw,
        (cpu, c, asid): (CpuId, CpuId, Tag),
        pfn: Pfn,
        mm: MmId,
        va: u64,
    ) -> bool {
        let vpn = va >> self.g.page_shift();
        let held = hw.cpus[c]
            .tlb
            .leaf_entries_for(vpn)
            .find(|e| e.tag() == asid && e.vpn == vpn && e.pfn == pfn);
        let Some(e) = held else { return false };
        self.fail(
            now,
            Invariant::NoUseAfterFree,
            &[c, cpu],
            Some(mm),
            Some(va),
            format!(
                "cpu{cpu} freed frame {pfn} (mm {mm} va {va:#x}) while cpu{c} (ASID {asid} loaded) still maps it: {e}", e = e.show(self.g)),
        );
        true
    }

    /// `HugeFrameFree`: the 512 frames from `pfn`, last mapped by `mm` at
    /// `va`, are freed: the same verdict as [`Checker::frame_free`] of each
    /// in turn. A CPU running `mm` is probed once for the whole 2 MiB
    /// region; the pages are then checked in order on the CPUs that hold
    /// something there, so the first page found held (and the first such
    /// CPU) is the one page-by-page frees would report.
    fn huge_frame_free(&mut self, now: Ns, hw: &Hw, cpu: CpuId, pfn: Pfn, mm: MmId, va: u64) {
        self.note_freed(pfn, self.g.hpage_pmd_nr());
        if !self.copied_out.is_empty() {
            let gone: Vec<Pfn> = self
                .copied_out
                .range(pfn..pfn + self.g.hpage_pmd_nr())
                .copied()
                .collect();
            for p in gone {
                self.copied_out.remove(&p);
            }
        }
        let vpn = va >> self.g.page_shift();
        let region = vpn / self.g.hpage_pmd_nr();
        self.free_streak = Some((mm, region, self.g.hpage_pmd_nr() as u32));
        let mut cpus = std::mem::take(&mut self.scratch_cpus);
        self.cpus_running(mm, &mut cpus);
        let mut holders: Vec<(CpuId, Tag)> = Vec::new();
        for &c in &cpus {
            let Some(t) = hw.cpus[c].ttbr0().filter(|t| t.mm == mm) else {
                continue;
            };
            let lo = region * self.g.hpage_pmd_nr();
            if !self.holds_none_in(
                hw,
                c,
                hw.cpus[c].tag(t.asid),
                lo,
                lo + self.g.hpage_pmd_nr(),
            ) {
                holders.push((c, hw.cpus[c].tag(t.asid)));
            }
        }
        self.scratch_cpus = cpus;
        for i in 0..self.g.hpage_pmd_nr() {
            for &(c, asid) in &holders {
                let (p, v) = (pfn + i, va + (i << self.g.page_shift()));
                if self.still_maps(now, hw, (cpu, c, asid), p, mm, v) {
                    return;
                }
            }
        }
    }

    /// `CallExit`: the call on `cpu` returns, retiring what it replaced and
    /// what its range contract covers; no CPU running an affected mm may
    /// still hold a retired translation (no stale hold).
    fn call_exit(&mut self, now: Ns, hw: &Hw, cpu: CpuId, call: &str) {
        if !self.freed_mms.is_empty() {
            self.pending[cpu].forget(&self.freed_mms);
        }
        let mut writes = std::mem::take(&mut self.pending[cpu].writes);
        for w in writes.iter().filter(|w| w.rec.2.is_some()) {
            if let Some(n) = self.replacing.get_mut(&w.rec.0) {
                *n -= 1;
            }
        }
        let range = self.pending[cpu].range.take();
        let mut keys = std::mem::take(&mut self.scratch_keys);
        if let Some(r) = range {
            drop_subsumed(&mut writes, r);
        }
        // Writes that replaced no version retire nothing: if all are such
        // (a fault filling empty PTEs), there is nothing to commit.
        if writes.iter().any(|w| w.rec.2.is_some()) {
            let mut recs = std::mem::take(&mut self.scratch_writes);
            per_page(&writes, &mut recs);
            // A stable sort keeps each page's writes in order: the group's
            // last value is the one the call left.
            if !recs.is_sorted_by_key(|w| (w.0, w.1)) {
                recs.sort_by_key(|w| (w.0, w.1));
            }
            self.defer_to_calls_in_progress(cpu, &mut recs);
            self.shadow.commit_writes(&recs, &mut keys);
            recs.clear();
            self.scratch_writes = recs;
        }
        writes.clear();
        self.pending[cpu].writes = writes;
        if let Some((mm, lo, hi, bound)) = range {
            self.shadow
                .commit_range(mm, lo, hi, bound.saturating_sub(1), &mut keys);
        }
        // Two sorted runs (the writes', the range's): a merge sort finds
        // them and merges in linear time.
        keys.sort();
        keys.dedup();
        for g in keys.chunk_by(|a, b| a.0 == b.0) {
            self.check_retired(now, hw, g, (call, cpu));
            if self.failure.is_some() {
                break;
            }
        }
        keys.clear();
        self.scratch_keys = keys;
    }

    /// After `why` (a call and the CPU it returned on) retired versions of
    /// the pages `g` (of one mm, in increasing order): no CPU running the
    /// mm may hold a stale one, checked page by page and, for each page,
    /// CPU by CPU ([`Checker::check_loaded_cpu`]). With many pages, each
    /// CPU's TLB is first scanned once for the entries that could be stale
    /// there, and a page no such entry covers is not checked on that CPU.
    fn check_retired(&mut self, now: Ns, hw: &Hw, g: &[(MmId, u64)], why: (&str, CpuId)) {
        let mm = g[0].0;
        let (lo, hi) = (g[0].1, g[g.len() - 1].1 + 1);
        let newest = self.shadow.max_retired(mm);
        let mut cpus = std::mem::take(&mut self.scratch_cpus);
        self.cpus_running(mm, &mut cpus);
        // Per CPU with `mm` loaded: where its candidates lie (`None`: anywhere).
        let mut spans = std::mem::take(&mut self.scratch_spans);
        spans.clear();
        for &c in &cpus {
            let Some(t) = hw.cpus[c].ttbr0().filter(|t| t.mm == mm) else {
                continue;
            };
            if (g.len() as u64) < PROBE_MIN_PAGES {
                spans.push((c, None));
                continue;
            }
            match candidate_spans(&hw.cpus[c].tlb, hw.cpus[c].tag(t.asid), mm, newest, lo, hi) {
                Some(s) if s.is_empty() => {}
                s => spans.push((c, s)),
            }
        }
        self.scratch_cpus = cpus;
        for &(_, vpn) in g {
            for (c, s) in &spans {
                if s.as_ref()
                    .is_none_or(|s| s.iter().any(|&(a, b)| a <= vpn && vpn < b))
                {
                    self.check_loaded_cpu(now, hw, *c, mm, vpn, why);
                }
            }
            if self.failure.is_some() {
                break;
            }
        }
        self.scratch_spans = spans;
    }

    /// Appends `ev` to the history ring (the last `history_len` events).
    #[inline]
    fn remember(&mut self, now: Ns, ev: &Event) {
        if self.history.len() < self.history_len {
            self.history.push((now, *ev));
        } else if self.history_len > 0 {
            self.history[self.history_next] = (now, *ev);
            // No division per event: the ring's index wraps by compare.
            self.history_next += 1;
            if self.history_next == self.history_len {
                self.history_next = 0;
            }
        }
    }

    /// A `LeafUse`: the translation must be current ([`Checker::leaf_use`]),
    /// its frame not freed, and a store through it not lost.
    #[inline]
    fn leaf_event(&mut self, now: Ns, cpu: CpuId, running: MmId, entry: &LeafEntry, store: bool) {
        self.leaf_use(now, cpu, running, entry);
        if self.failure.is_none() {
            self.used_after_free(now, cpu, entry);
        }
        if store && self.failure.is_none() {
            self.store(now, cpu, entry);
        }
    }

    /// `LeafUse`: the translation used must belong to the running mm (ASID
    /// isolation) and not be retired (no stale use).
    fn leaf_use(&mut self, now: Ns, cpu: CpuId, running: MmId, entry: &LeafEntry) {
        let va = entry.vpn << self.g.page_shift();
        if entry.mm != running {
            self.fail(
                now,
                isolation(running, entry.mm),
                &[cpu],
                Some(running),
                Some(va),
                format!(
                    "cpu{cpu} runs mm {running} but used a translation of mm {} under ASID {} for va {va:#x}",
                    entry.mm, entry.asid
                ),
            );
        } else if self.shadow.stale(entry.mm, entry) {
            self.fail(
                now,
                Invariant::NoStaleUse,
                &[cpu],
                Some(entry.mm),
                Some(va),
                format!(
                    "cpu{cpu} used a stale translation of mm {} va {va:#x}: {entry}, current PTE {}",
                    entry.mm,
                    MaybePte(self.shadow.current(entry.mm, entry.vpn)), entry = entry.show(self.g)),
            );
        }
    }

    /// Frames `pfn..pfn + n` were freed: every translation of them from a
    /// PTE written so far belongs to their previous life.
    fn note_freed(&mut self, pfn: Pfn, n: u64) {
        let end = usize::try_from(pfn + n).expect("frame numbers fit in memory");
        if self.freed_below.len() < end {
            self.freed_below.resize(end, 0);
        }
        for b in &mut self.freed_below[pfn as usize..end] {
            *b = self.version_bound;
        }
    }

    /// `LeafUse` of a translation filled before its frame was last freed
    /// (no use after free): the free found no CPU running the mm holding it
    /// (it was lazy, or the mm was not loaded), but the translation
    /// survived to be used. A use the range contract of a completed call
    /// already forbids is reported as a stale use first.
    fn used_after_free(&mut self, now: Ns, cpu: CpuId, entry: &LeafEntry) {
        let freed = self.freed_below.get(entry.pfn as usize).copied();
        if freed.is_some_and(|b| entry.version < b) {
            let va = entry.vpn << self.g.page_shift();
            self.fail(
                now,
                Invariant::NoUseAfterFree,
                &[cpu],
                Some(entry.mm),
                Some(va),
                format!(
                    "cpu{cpu} used a translation of mm {} va {va:#x} to frame {} filled before the frame was freed: {entry}, current PTE {}",
                    entry.mm,
                    entry.pfn,
                    MaybePte(self.shadow.current(entry.mm, entry.vpn)), entry = entry.show(self.g)),
            );
        }
    }

    /// A store through `entry` (after its `LeafUse` checks): the frame must
    /// not be copied out since it was last allocated (no lost write).
    fn store(&mut self, now: Ns, cpu: CpuId, entry: &LeafEntry) {
        if self.copied_out.contains(&entry.pfn) {
            let va = entry.vpn << self.g.page_shift();
            self.fail(
                now,
                Invariant::NoLostWrite,
                &[cpu],
                Some(entry.mm),
                Some(va),
                format!(
                    "cpu{cpu} stored to frame {} of mm {} va {va:#x} after the kernel began copying it out: the write is lost ({entry}, current PTE {})",
                    entry.pfn,
                    entry.mm,
                    MaybePte(self.shadow.current(entry.mm, entry.vpn)), entry = entry.show(self.g)),
            );
        }
    }

    /// `WalkUse`: the cached table entry walked through must belong to the
    /// running mm (ASID isolation) and lead to a live, unreused table page
    /// (no stale walk).
    fn walk_use(&mut self, now: Ns, hw: &Hw, cpu: CpuId, running: MmId, entry: &WalkEntry) {
        let t = hw.mem.table(entry.next);
        let va = Some(entry.va(self.g));
        if entry.mm != running {
            self.fail(
                now,
                isolation(running, entry.mm),
                &[cpu],
                Some(running),
                va,
                format!("cpu{cpu} runs mm {running} but walked through a cached table entry of mm {}: {entry}", entry.mm, entry = entry.show(self.g)),
            );
        } else if !t.live || t.instance != entry.next_instance {
            self.fail(
                now,
                Invariant::NoStaleWalk,
                &[cpu],
                Some(entry.mm),
                va,
                format!(
                    "cpu{cpu} walked mm {} through a cached entry to table page {} that was freed{}: {entry}",
                    entry.mm,
                    entry.next,
                    if t.live { " and reused" } else { "" }, entry = entry.show(self.g)),
            );
        }
    }

    /// `SoftwareWalk`: the PTE table a lockless walk reached must still be
    /// the live table page it read the PMD of (no stale walk: GUP-fast
    /// relies on the IPI or the RCU grace period that every table free
    /// waits for while it runs with interrupts off).
    fn software_walk(
        &mut self,
        now: Ns,
        hw: &Hw,
        cpu: CpuId,
        mm: MmId,
        va: u64,
        table: (TableId, u64),
    ) {
        let t = hw.mem.table(table.0);
        if !t.live || t.instance != table.1 {
            self.fail(
                now,
                Invariant::NoStaleWalk,
                &[cpu],
                Some(mm),
                Some(va),
                format!(
                    "cpu{cpu}'s lockless walk of mm {mm} (GUP-fast) read the PTE of va {va:#x} in table page {} after it was freed{}",
                    table.0,
                    if t.live { " and reused" } else { "" }
                ),
            );
        }
    }

    /// `AsidLoad`: `cpu` loads `asid` for `mm`; its TLB must hold under that
    /// ASID no entry of another mm (ASID isolation), no retired translation
    /// of `mm` (no stale hold) and no walk entry of another mm or to a
    /// freed table (no stale walk), checked in that order.
    fn asid_load(&mut self, now: Ns, hw: &Hw, cpu: CpuId, mm: MmId, asid: Asid) {
        let asid = hw.cpus[cpu].tag(asid);
        // Two CPUs may briefly hold the same ASID for different mms: a CPU
        // that has published its next mm's ASID but not yet loaded it keeps
        // the old one through a rollover that hands that number out again
        // (the explorer found this window in the Linux allocator). Only what
        // one CPU's TLB holds or uses under its loaded ASID can alias.
        if let Some((old_mm, _)) = self.cpu_loaded[cpu].replace((mm, asid)) {
            if let Some(s) = self.by_mm.get_mut(&old_mm) {
                s.loaded.clear(cpu);
            }
        }
        let ncpus = hw.ncpus();
        let s = self.by_mm.entry(mm).or_insert_with(|| MmCpus {
            loaded: CpuMask::new(ncpus),
            ever: CpuMask::new(ncpus),
        });
        s.loaded.set(cpu);
        s.ever.set(cpu);
        let tlb = &hw.cpus[cpu].tlb;
        let flushed = self.flushed[cpu].is_some_and(|(tick, v, a)| {
            tick == tlb.tick() && v == asid.vmid && a.is_none_or(|a| a == asid.asid)
        });
        if flushed {
            // Nothing under `asid`: no entry to alias, be stale or walk.
            self.clean[cpu] = Some(self.clean_state(tlb, asid, mm));
            return;
        }
        let (other, stale) = self.other_or_stale(tlb, asid, mm);
        if other.is_none() && stale.is_none() {
            self.clean[cpu] = Some(self.clean_state(tlb, asid, mm));
        }
        let (invariant, va, detail) = if let Some(e) = other {
            (
                isolation(mm, e.mm),
                e.vpn << self.g.page_shift(),
                format!("cpu{cpu} loads ASID {asid} for mm {mm} while holding a translation of mm {} under it: {e}", e.mm, e = e.show(self.g)),
            )
        } else if let Some(e) = stale {
            (
                Invariant::NoStaleHold,
                e.vpn << self.g.page_shift(),
                format!(
                    "cpu{cpu} loads ASID {asid} for mm {mm} while holding a stale translation: {e}",
                    e = e.show(self.g)
                ),
            )
        } else if let Some(e) = bad_walk(hw, tlb, mm, asid) {
            (
                Invariant::NoStaleWalk,
                e.va(self.g),
                format!("cpu{cpu} loads ASID {asid} for mm {mm} while its walk cache holds {e} (other mm or freed table)", e = e.show(self.g)),
            )
        } else {
            return;
        };
        self.fail(now, invariant, &[cpu], Some(mm), Some(va), detail);
    }

    /// `Tlbi`, local (applied on `cpu` when its event is seen): after
    /// `TLBI ASIDE1` or `VMALLE1` the TLB and walk cache hold nothing under
    /// the ASID (any ASID) of the CPU's VMID until the next insertion ([`Checker::flushed`]);
    /// other scopes only remove entries, which keeps that true.
    fn local_tlbi(&mut self, hw: &Hw, cpu: CpuId, scope: TlbiScope) {
        let tick = hw.cpus[cpu].tlb.tick();
        let vmid = hw.cpus[cpu].vmid;
        match scope {
            TlbiScope::Asid(a) => self.flushed[cpu] = Some((tick, vmid, Some(a))),
            TlbiScope::All | TlbiScope::VmallS12 => self.flushed[cpu] = Some((tick, vmid, None)),
            // Guests' entries are gone, the host's stay: nothing to record.
            TlbiScope::AllE1 | TlbiScope::Va { .. } | TlbiScope::Range { .. } => {}
        }
    }

    /// `TableFree`: no TTBR0 may point at a freed top-level table, and no
    /// CPU may cache, under its loaded ASID, a walk entry to the freed page
    /// (no stale walk).
    ///
    /// Only CPUs whose last TTBR0 load was `mm` are searched for a TTBR0 on
    /// the table, and only CPUs that ever loaded `mm` for walk entries (all
    /// CPUs if `mm` is unknown): a walk fills entries into the tables of
    /// the mm in TTBR0, a table page belongs to one mm's tree, and a walk
    /// that reaches another mm's table through a cached entry (of another
    /// mm, or to a freed or reused table) is itself a violation reported
    /// at its `WalkUse`, before this check can run. The first CPU found is
    /// therefore the first in CPU order, as in a search of every CPU.
    fn table_free(
        &mut self,
        now: Ns,
        hw: &Hw,
        cpu: CpuId,
        mm: MmId,
        table: TableId,
        instance: u64,
    ) {
        // A TTBR0 pointing at `table` was loaded for the mm whose tables
        // include it (every TTBR0 load is an `AsidLoad`; had the page
        // belonged to a freed mm before, its free would have been reported
        // then): only CPUs whose last load was `mm` can point at it.
        let points_at = |c: CpuId| hw.cpus[c].user.base.is_some_and(|(_, pgd)| pgd == table);
        let at = match self.by_mm.get(&mm) {
            Some(s) => s.loaded.iter().find(|&c| points_at(c)),
            None => CpuId::all(hw.ncpus()).find(|&c| points_at(c)),
        };
        if let Some(c) = at {
            self.fail(
                now,
                Invariant::NoStaleWalk,
                &[c, cpu],
                Some(mm),
                None,
                format!("cpu{cpu} freed top-level table {table} of mm {mm} while cpu{c}'s TTBR0 still points at it"),
            );
            return;
        }
        // A shared page is searched on the CPUs of every mm that linked it.
        let linked = self.shared_tables.remove(&table).unwrap_or_default();
        let held = if !linked.is_empty() {
            let mut cpus = CpuMask::new(hw.ncpus());
            for m in linked.iter().chain([&mm]) {
                match self.by_mm.get(m) {
                    Some(s) => s.ever.iter().for_each(|c| cpus.set(c)),
                    None => CpuId::all(hw.ncpus()).for_each(|c| cpus.set(c)),
                }
            }
            first_walk_to(hw, cpus.iter(), table, instance)
        } else {
            match self.by_mm.get(&mm) {
                Some(s) => first_walk_to(hw, s.ever.iter(), table, instance),
                None => first_walk_to(hw, CpuId::all(hw.ncpus()), table, instance),
            }
        };
        if let Some((c, asid, e)) = held {
            self.fail(
                now,
                Invariant::NoStaleWalk,
                &[c, cpu],
                Some(mm),
                Some(e.va(self.g)),
                format!(
                    "cpu{cpu} freed table page {table} of mm {mm} while cpu{c} (ASID {asid} loaded) still caches a walk entry to it: {e}", e = e.show(self.g)),
            );
        }
    }
}

/// Drops from a returning call's `writes` those its range contract
/// `(mm, lo, hi, bound)` retires anyway, when that is exact: if every write
/// to a page of `mm` in `[lo, hi)` replaced a version older than `bound`
/// (or none), the range commit ([`Shadow::commit_range`]) retires each
/// such page up to `bound - 1` with its shadow PTE, which overrides what
/// committing its writes would record (an older or equal version) and
/// lists the page for the same checks. A munmap's thousands of writes then
/// need no sort and no commit of their own. If some write in the range
/// replaced a newer version (a concurrent fault, under a call that holds
/// the mmap lock for reading), nothing is dropped.
///
/// A write covering pages both in and out of the range (a 2 MiB leaf the
/// range cuts) is kept: committing it too is what the range commit
/// overrides on its pages in the range.
fn drop_subsumed(writes: &mut Vec<PendingWrite>, (mm, lo, hi, bound): (MmId, u64, u64, u64)) {
    let overlaps = |w: &PendingWrite| w.rec.0 == mm && w.rec.1 < hi && lo < w.rec.1 + w.pages();
    if writes
        .iter()
        .any(|w| overlaps(w) && w.rec.2.is_some_and(|v| v >= bound))
    {
        return;
    }
    writes.retain(|w| !(w.rec.0 == mm && lo <= w.rec.1 && w.rec.1 + w.pages() <= hi));
}

/// `writes` as one record per 4 KiB page, in order, into `out`: a 2 MiB
/// leaf's write as the writes of its 512 pages, page `i` mapping frame
/// `pfn + i` of each value.
fn per_page(writes: &[PendingWrite], out: &mut Vec<PteWriteRec>) {
    for w in writes {
        let (mm, vpn, old, new) = w.rec;
        if w.pages == 1 {
            out.push(w.rec);
            continue;
        }
        out.extend((0..w.pages).map(|i| (mm, vpn + i, old, huge_view(new, i))));
    }
}

/// Page ranges `[first, end)` (vpns).
type Spans = Vec<(u64, u64)>;

/// Candidate spans kept per CPU by [`Checker::check_retired`]; with more,
/// it checks every page on that CPU.
const MAX_SPANS: usize = 32;

/// The pages `[vpn, vpn + span)` of `tlb`'s leaf entries of `mm` under
/// `asid` that overlap `[lo, hi)` and are not newer than `newest` (`mm`'s
/// newest retirement): only they can be stale there. `None` if there are
/// more than [`MAX_SPANS`].
fn candidate_spans(
    tlb: &Tlb,
    asid: Tag,
    mm: MmId,
    newest: Option<u64>,
    lo: u64,
    hi: u64,
) -> Option<Spans> {
    let Some(newest) = newest else {
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    let hpage_pages = tlb.granule().hpage_pmd_nr();
    for (e, huge) in tlb.leaf_slots() {
        let end = e.vpn + if huge { hpage_pages } else { 1 };
        if e.tag() == asid && e.mm == mm && e.version <= newest && e.vpn < hi && lo < end {
            if out.len() == MAX_SPANS {
                return None;
            }
            out.push((e.vpn, end));
        }
    }
    Some(out)
}

/// Which isolation a CPU running `running` breaks by using (or holding
/// under its tag) a translation of `other`: VMID isolation if `other`
/// belongs to another kernel (another VM, or the host), else ASID
/// isolation. Machine-wide mm ids carry their kernel ([`MmId::kernel`]).
fn isolation(running: MmId, other: MmId) -> Invariant {
    if running.kernel() == other.kernel() {
        Invariant::AsidIsolation
    } else {
        Invariant::VmidIsolation
    }
}

/// The first walk-cache entry of `tlb` under `asid` that belongs to
/// another mm than `mm` or leads to a freed or reused table page.
fn bad_walk(hw: &Hw, tlb: &Tlb, mm: MmId, asid: Tag) -> Option<WalkEntry> {
    tlb.walk_entries()
        .find(|e| {
            e.tag() == asid && {
                let t = hw.mem.table(e.next);
                e.mm != mm || !t.live || t.instance != e.next_instance
            }
        })
        .copied()
}

/// The first of `cpus` that caches, under the ASID it may walk with
/// ([`Hw::walk_context`]: its current ASID while TTBR0 holds user tables,
/// or on the reserved table where the walk-cache reading keeps cached
/// walks usable), a walk entry to `table` at `instance`: the CPU, that
/// ASID and the entry.
fn first_walk_to(
    hw: &Hw,
    cpus: impl Iterator<Item = CpuId>,
    table: TableId,
    instance: u64,
) -> Option<(CpuId, Tag, WalkEntry)> {
    cpus.filter_map(|c| hw.walk_context(c).map(|t| (c, hw.cpus[c].tag(t.asid))))
        .find_map(|(c, asid)| {
            hw.cpus[c]
                .tlb
                .walk_entries()
                .find(|e| e.tag() == asid && e.next == table && e.next_instance == instance)
                .map(|e| (c, asid, *e))
        })
}

impl Observer for Checker {
    /// What the checker reads and writes for `ev` (docs/model.md, "The
    /// explorer's footprints and DPOR"): a use of a cached translation
    /// reads what the checker knows of its mm and of frames; a PTE write
    /// writes its mm's part and its CPU's pending writes (the version
    /// bound it raises is a maximum, which commutes); a walk use reads
    /// table liveness. Every other event may read any hardware the checker
    /// is given and writes the whole checker state.
    fn record_footprint(&self, ev: &Event) {
        use crate::engine::track::{part, record, Loc, Space};
        let check = |p| Loc::part(Space::Check, p);
        match *ev {
            Event::LeafUse { running, .. } => {
                record(|| check(part::mm(running.index())), false);
                record(|| check(part::FRAMES), false);
            }
            Event::WalkUse { .. } | Event::SoftwareWalk { .. } => {
                record(|| Loc::part(Space::Hw, part::PAGE_TABLES), false)
            }
            Event::PteWrite { cpu, mm, .. } | Event::HugePteWrite { cpu, mm, .. } => {
                // The mm's shadow, and the writes pending on the CPU's call.
                record(|| check(part::mm(mm.index())), true);
                record(|| check(part::cpu(cpu)), true);
            }
            Event::CopyOut { .. } => record(|| check(part::FRAMES), true),
            Event::Tlbi {
                broadcast: true, ..
            }
            | Event::DsbDone { .. } => {}
            _ => {
                record(|| Loc::all(Space::Hw), false);
                record(|| Loc::all(Space::Check), true);
            }
        }
    }

    fn event(&mut self, now: Ns, ev: &Event, hw: &Hw) {
        self.g = hw.granule;
        // A huge write or free counts as the `HPAGE_PMD_NR` it stands for.
        self.events_seen += match ev {
            Event::HugePteWrite { .. } | Event::HugeFrameFree { .. } => self.g.hpage_pmd_nr(),
            _ => 1,
        };
        if self.failure.is_some() {
            return;
        }
        self.arch = hw.arch;
        self.remember(now, ev);
        match *ev {
            Event::PteWrite {
                cpu,
                mm,
                va,
                old,
                new,
            } => self.pte_write(cpu, mm, va, (old, new), false),
            Event::HugePteWrite {
                cpu,
                mm,
                va,
                old,
                new,
            } => self.pte_write(cpu, mm, va, (old, new), true),
            Event::HugeFrameFree { cpu, pfn, mm, va } => {
                self.huge_frame_free(now, hw, cpu, pfn, mm, va)
            }
            Event::CallRange {
                cpu,
                mm,
                start,
                end,
            } => self.call_range(cpu, mm, start, end),
            Event::Running { cpu, task, mm } => {
                self.switch_task(cpu, task);
                self.running(now, hw, cpu, mm);
            }
            Event::CallEnter { cpu, task, .. } => self.switch_task(cpu, task),
            Event::FrameFree { cpu, pfn, mm, va } => self.frame_free(now, hw, cpu, pfn, mm, va),
            Event::CallExit { cpu, call, .. } => self.call_exit(now, hw, cpu, call),
            Event::LeafUse {
                cpu,
                running,
                entry,
                store,
            } => self.leaf_event(now, cpu, running, &entry, store),
            Event::CopyOut { pfn, .. } => {
                self.copied_out.insert(pfn);
            }
            Event::WalkUse {
                cpu,
                running,
                entry,
            } => self.walk_use(now, hw, cpu, running, &entry),
            Event::SoftwareWalk {
                cpu,
                mm,
                va,
                table,
                instance,
            } => self.software_walk(now, hw, cpu, mm, va, (table, instance)),
            Event::AsidLoad { cpu, mm, asid } => self.asid_load(now, hw, cpu, mm, asid),
            Event::TableFree {
                cpu,
                mm,
                table,
                instance,
            } => self.table_free(now, hw, cpu, mm, table, instance),
            Event::MmFree { mm } => self.mm_free(mm),
            Event::TableShare {
                mm, from, table, ..
            } => {
                let mms = self.shared_tables.entry(table).or_default();
                for m in [from, mm] {
                    if !mms.contains(&m) {
                        mms.push(m);
                    }
                }
            }
            Event::Tlbi {
                cpu,
                scope,
                broadcast: false,
            } => self.local_tlbi(hw, cpu, scope),
            Event::TlbiFault {
                cpu,
                scope,
                broadcast,
            } => {
                let insn = scope.insn(broadcast, self.arch);
                self.fail(
                    now,
                    Invariant::ValidTlbi,
                    &[cpu],
                    None,
                    None,
                    format!("cpu{cpu} refused {insn:#} and raised a fault (x86: #GP): the kernel oopses"),
                );
            }
            Event::Tlbi { .. } | Event::DsbDone { .. } => {}
        }
    }

    fn failure(&self) -> Option<Violation> {
        self.failure.clone()
    }

    fn failed(&self) -> bool {
        self.failure.is_some()
    }

    fn events_seen(&self) -> u64 {
        self.events_seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::builtin_profile;
    use crate::hw::cpu::cpuid;
    use crate::hw::mem::{Perms, PAGE_SHIFT_4K as PAGE_SHIFT, PAGE_SIZE_4K as PAGE_SIZE};
    use crate::hw::tlb::LeafEntry;
    use crate::hw::Ttbr0;

    /// Pages in a 2 MiB huge page (4 KiB pages).
    const HPAGE_PAGES: u64 = 512;

    const VA: u64 = 0x4000_0000;

    fn pte(pfn: u64, version: u64) -> Option<Pte> {
        Some(Pte {
            pfn,
            perms: Perms::RW,
            version,
        })
    }

    /// Task `task`'s madvise returns on `cpu` at `now`.
    fn madvise_returns(c: &mut Checker, hw: &Hw, now: Ns, cpu: CpuId, task: usize) {
        let (task, call) = (TaskId::from_index(task), "madvise");
        c.event(now, &Event::CallExit { cpu, task, call }, hw);
    }

    /// Three CPUs; cpu1 runs mm 0 and caches the translation of VA from PTE
    /// version 1 (frame 5), which cpu0's fault installed.
    fn setup() -> (Checker, Hw) {
        let mut p = builtin_profile("ampere-32").unwrap();
        p.topology.cpus = 3;
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        hw.set_ttbr0(
            cpuid(1),
            Some(Ttbr0 {
                mm: MmId::new(0),
                pgd: 0,
                asid: 1,
            }),
        );
        hw.cpus[cpuid(1)].tlb.insert(LeafEntry {
            vmid: 0,
            asid: 1,
            vpn: VA >> PAGE_SHIFT,
            pfn: 5,
            perms: Perms::RW,
            version: 1,
            mm: MmId::new(0),
        });
        let mut c = Checker::new(3, 8);
        c.event(
            0,
            &Event::AsidLoad {
                cpu: cpuid(1),
                mm: MmId::new(0),
                asid: 1,
            },
            &hw,
        );
        c.event(
            0,
            &Event::Running {
                cpu: cpuid(1),
                task: TaskId::from_index(1),
                mm: Some(MmId::new(0)),
            },
            &hw,
        );
        let write = |cpu, old, new| Event::PteWrite {
            cpu,
            mm: MmId::new(0),
            va: VA,
            old,
            new,
        };
        c.event(1, &write(cpuid(0), None, pte(5, 1)), &hw);
        c.event(
            2,
            &Event::CallExit {
                cpu: cpuid(0),
                task: TaskId::from_index(0),
                call: "fault",
            },
            &hw,
        );
        // cpu0's madvise clears the PTE; its flush has not completed.
        c.event(
            3,
            &Event::CallEnter {
                cpu: cpuid(0),
                task: TaskId::from_index(0),
                call: "madvise",
            },
            &hw,
        );
        c.event(4, &write(cpuid(0), pte(5, 1), None), &hw);
        // cpu2 faults the page in again (frame 6).
        c.event(5, &write(cpuid(2), None, pte(6, 2)), &hw);
        (c, hw)
    }

    /// `task` runs on `cpu` (with `mm`) at `now`.
    fn runs(c: &mut Checker, hw: &Hw, now: Ns, cpu: CpuId, task: usize, mm: Option<MmId>) {
        let task = TaskId::from_index(task);
        c.event(now, &Event::Running { cpu, task, mm }, hw);
    }

    /// A munmap-like call on cpu0 (task 0) clears the 2 MiB leaf at
    /// `HVA` (frames from 1000, version 1) and frees its frames, while
    /// cpu1 runs the mm and still holds page 300's view: as one event each
    /// (`huge`) or as 512 each. Returns the checker after the frees.
    fn huge_unmap(huge: bool) -> Checker {
        const HVA: u64 = 0x4000_0000;
        let mut p = builtin_profile("ampere-32").unwrap();
        p.topology.cpus = 2;
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        hw.set_ttbr0(
            cpuid(1),
            Some(Ttbr0 {
                mm: MmId::new(0),
                pgd: 0,
                asid: 1,
            }),
        );
        let vpn = HVA >> PAGE_SHIFT;
        hw.cpus[cpuid(1)].tlb.insert(LeafEntry {
            vmid: 0,
            asid: 1,
            vpn: vpn + 300,
            pfn: 1300,
            perms: Perms::RW,
            version: 1,
            mm: MmId::new(0),
        });
        let mut c = Checker::new(2, 8);
        let (cpu, mm) = (cpuid(0), MmId::new(0));
        c.event(
            0,
            &Event::AsidLoad {
                cpu: cpuid(1),
                mm,
                asid: 1,
            },
            &hw,
        );
        runs(&mut c, &hw, 0, cpuid(1), 1, Some(mm));
        let call = "munmap";
        c.event(
            1,
            &Event::CallEnter {
                cpu,
                task: TaskId::from_index(0),
                call,
            },
            &hw,
        );
        let old = pte(1000, 1);
        if huge {
            let ev = Event::HugePteWrite {
                cpu,
                mm,
                va: HVA,
                old,
                new: None,
            };
            c.event(2, &ev, &hw);
            let ev = Event::HugeFrameFree {
                cpu,
                pfn: 1000,
                mm,
                va: HVA,
            };
            c.event(3, &ev, &hw);
        } else {
            for i in 0..HPAGE_PAGES {
                let va = HVA + (i << PAGE_SHIFT);
                let old = huge_view(old, i);
                c.event(
                    2,
                    &Event::PteWrite {
                        cpu,
                        mm,
                        va,
                        old,
                        new: None,
                    },
                    &hw,
                );
            }
            for i in 0..HPAGE_PAGES {
                let (pfn, va) = (1000 + i, HVA + (i << PAGE_SHIFT));
                c.event(3, &Event::FrameFree { cpu, pfn, mm, va }, &hw);
            }
        }
        c
    }

    /// A store through `entry` on cpu1 at `now`.
    fn store(c: &mut Checker, hw: &Hw, now: Ns, entry: LeafEntry, store: bool) {
        let ev = Event::LeafUse {
            cpu: cpuid(1),
            running: MmId::new(0),
            entry,
            store,
        };
        c.event(now, &ev, hw);
    }

    #[test]
    fn a_translation_filled_before_its_frame_was_freed_may_not_be_used_later() {
        let hw = Hw::new(&builtin_profile("ampere-32").unwrap().hw_params(Granule::K4));
        let entry = |version| LeafEntry {
            vmid: 0,
            asid: 1,
            vpn: VA >> PAGE_SHIFT,
            pfn: 9,
            perms: Perms::R,
            version,
            mm: MmId::new(0),
        };
        let mut c = Checker::new(3, 8);
        let map = Event::PteWrite {
            cpu: cpuid(0),
            mm: MmId::new(0),
            va: VA,
            old: None,
            new: pte(9, 3),
        };
        c.event(1, &map, &hw);
        // Freed while no CPU ran the mm (nobody to find holding it).
        let free = Event::FrameFree {
            cpu: cpuid(0),
            pfn: 9,
            mm: MmId::new(0),
            va: VA,
        };
        c.event(2, &free, &hw);
        // A translation from a PTE written after the free is the frame's
        // new life; one from before is not.
        store(&mut c, &hw, 3, entry(4), false);
        assert!(c.failure().is_none());
        store(&mut c, &hw, 4, entry(3), false);
        let f = c.failure().expect("a use after free");
        assert_eq!(f.invariant, Invariant::NoUseAfterFree, "{f}");
    }

    #[test]
    fn a_store_to_a_frame_being_copied_out_is_a_lost_write_until_the_frame_is_freed() {
        let entry = LeafEntry {
            vmid: 0,
            asid: 1,
            vpn: (VA >> PAGE_SHIFT) + 1,
            pfn: 9,
            perms: Perms::RW,
            version: 1,
            mm: MmId::new(0),
        };
        let mut c = Checker::new(3, 8);
        let hw = Hw::new(&builtin_profile("ampere-32").unwrap().hw_params(Granule::K4));
        // A store before the copy-out, and a load after it, are fine.
        store(&mut c, &hw, 1, entry, true);
        c.event(
            2,
            &Event::CopyOut {
                cpu: cpuid(0),
                pfn: 9,
            },
            &hw,
        );
        store(&mut c, &hw, 3, entry, false);
        assert!(c.failure().is_none());
        // Once freed (and reused), the frame may be written again.
        let free = Event::FrameFree {
            cpu: cpuid(0),
            pfn: 9,
            mm: MmId::new(0),
            va: VA,
        };
        let mut freed = Checker::new(3, 8);
        freed.event(
            2,
            &Event::CopyOut {
                cpu: cpuid(0),
                pfn: 9,
            },
            &hw,
        );
        freed.event(3, &free, &hw);
        store(&mut freed, &hw, 4, entry, true);
        assert!(freed.failure().is_none());
        // A store after the copy-out is lost.
        store(&mut c, &hw, 4, entry, true);
        let f = c.failure().expect("a lost write");
        assert_eq!(f.invariant, Invariant::NoLostWrite, "{f}");
        assert_eq!(f.va, Some(VA + PAGE_SIZE));
        assert_eq!(f.cpus, vec![cpuid(1)]);
    }

    #[test]
    fn a_huge_write_and_free_are_checked_as_their_512_pages() {
        let (one, each) = (huge_unmap(true), huge_unmap(false));
        let f = one.failure().expect("cpu1 still maps a freed frame");
        assert_eq!(f.invariant, Invariant::NoUseAfterFree, "{f}");
        assert_eq!(f.va, Some(0x4000_0000 + (300 << PAGE_SHIFT)));
        let g = each.failure().expect("page by page too");
        assert_eq!(
            (f.invariant, f.cpus, f.mm, f.va, f.time_ns, f.detail),
            (g.invariant, g.cpus, g.mm, g.va, g.time_ns, g.detail)
        );
        // AsidLoad, Running, CallEnter, then 512 writes and 512 frees.
        assert_eq!(one.events_seen(), 3 + 512 + 512);
        assert_eq!(each.events_seen(), one.events_seen());
    }

    #[test]
    fn writes_a_range_commit_overrides_are_dropped_only_when_all_in_it_are_older() {
        let w = |vpn, old: Option<u64>, huge: bool| PendingWrite {
            rec: (MmId::new(0), vpn, old, None),
            pages: if huge { 512 } else { 1 },
        };
        let mut writes = vec![
            w(10, Some(3), false),
            w(512, Some(4), true),
            w(2000, Some(9), false),
        ];
        // Range [0, 1100) of mm 0, bound 5: pages 10 and 512..1024 go.
        drop_subsumed(&mut writes, (MmId::new(0), 0, 1100, 5));
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].rec.1, 2000);
        // A leaf the range cuts stays; a write in it of a version not
        // older than the bound keeps every write.
        let mut writes = vec![w(10, Some(3), false), w(512, Some(4), true)];
        drop_subsumed(&mut writes, (MmId::new(0), 0, 600, 5));
        assert_eq!(writes.len(), 1, "the cut leaf stays");
        let mut writes = vec![w(10, Some(3), false), w(20, Some(5), false)];
        drop_subsumed(&mut writes, (MmId::new(0), 0, 600, 5));
        assert_eq!(writes.len(), 2, "version 5 is not older than the bound");
    }

    #[test]
    fn a_call_that_sleeps_keeps_its_writes_while_another_task_makes_a_call_on_its_cpu() {
        let (mut c, hw) = setup();
        // Task 0's madvise (it cleared VA on cpu0) sleeps; task 3 runs
        // there and faults.
        runs(&mut c, &hw, 6, cpuid(0), 0, None);
        runs(&mut c, &hw, 7, cpuid(0), 3, Some(MmId::new(0)));
        let (cpu, task, call) = (cpuid(0), TaskId::from_index(3), "fault");
        c.event(8, &Event::CallEnter { cpu, task, call }, &hw);
        c.event(9, &Event::CallExit { cpu, task, call }, &hw);
        assert_eq!(c.failure(), None, "the fault retired nothing of madvise's");
        // Task 0 resumes and its madvise returns, its flush never done.
        runs(&mut c, &hw, 10, cpuid(0), 3, None);
        runs(&mut c, &hw, 11, cpuid(0), 0, Some(MmId::new(0)));
        madvise_returns(&mut c, &hw, 12, cpuid(0), 0);
        let f = c.failure().expect("cpu1 still holds what madvise cleared");
        assert_eq!(f.invariant, Invariant::NoStaleHold, "{f}");
        assert_eq!((f.cpus, f.time_ns), (vec![cpuid(1), cpuid(0)], 12));
    }

    #[test]
    fn a_lazy_cpu_may_hold_a_stale_entry_until_a_task_of_the_mm_runs_there() {
        let (mut c, hw) = setup();
        // cpu1 switches to a kernel thread, keeping mm 0's tables lazily.
        let kthread = Event::Running {
            cpu: cpuid(1),
            task: TaskId::from_index(2),
            mm: None,
        };
        c.event(6, &kthread, &hw);
        madvise_returns(&mut c, &hw, 7, cpuid(0), 0);
        assert!(c.failure().is_none(), "a lazy CPU is not checked at return");
        // A task of mm 0 runs on cpu1 again without a flush.
        c.event(
            8,
            &Event::Running {
                cpu: cpuid(1),
                task: TaskId::from_index(1),
                mm: Some(MmId::new(0)),
            },
            &hw,
        );
        let f = c.failure().expect("resuming with a stale entry is caught");
        assert_eq!(f.invariant, Invariant::NoStaleHold, "{f}");
        assert_eq!(
            (f.cpus, f.mm, f.va, f.time_ns),
            (vec![cpuid(1)], Some(MmId::new(0)), Some(VA), 8)
        );
        assert!(f.detail.contains("resumes"), "{}", f.detail);
    }

    #[test]
    fn a_call_returning_after_its_mm_was_freed_commits_nothing_to_it() {
        // cpu0's madvise holds its write to mm 0 when mm 0 is freed (a
        // reclaimer's batch can outlive the mm it unmapped from).
        let (mut c, hw) = setup();
        c.event(6, &Event::MmFree { mm: MmId::new(0) }, &hw);
        madvise_returns(&mut c, &hw, 7, cpuid(0), 0);
        assert!(c.failure.is_none());
        assert!(c.pending[cpuid(0)].writes.is_empty());
        // Nothing of mm 0 comes back: committing the write would have
        // retired version 1 in a new shadow of the freed mm.
        assert_eq!(c.shadow.max_retired(MmId::new(0)), None);
    }

    #[test]
    fn freeing_as_many_mms_as_cpus_purges_their_writes_and_empty_parked_calls() {
        let (mut c, hw) = setup();
        // Task 0 is switched out in its madvise: its call is parked.
        runs(&mut c, &hw, 6, cpuid(0), 5, None);
        assert!(c.parked.contains_key(&TaskId::from_index(0)));
        for mm in [0, 7].map(MmId::new) {
            c.event(7, &Event::MmFree { mm }, &hw);
        }
        assert_eq!(c.freed_mms.len(), 2, "no purge before 3 frees");
        assert!(c.parked.contains_key(&TaskId::from_index(0)));
        c.event(8, &Event::MmFree { mm: MmId::new(8) }, &hw);
        assert!(c.freed_mms.is_empty());
        assert!(
            !c.parked.contains_key(&TaskId::from_index(0)),
            "its only write was to mm 0"
        );
        // cpu2's fault wrote mm 0 too (setup): dropped as well.
        assert!(c.pending[cpuid(2)].writes.is_empty());
    }

    #[test]
    fn a_fault_that_filled_an_empty_pte_retires_nothing() {
        let (mut c, hw) = setup();
        c.event(
            6,
            &Event::CallExit {
                cpu: cpuid(2),
                task: TaskId::from_index(1),
                call: "fault",
            },
            &hw,
        );
        assert_eq!(c.failure(), None, "madvise on cpu0 has not returned yet");
    }

    #[test]
    fn a_range_call_retires_what_another_call_changed() {
        // cpu2 instead runs madvise on the same page: it finds the PTE
        // already none, and must still not return while cpu1 holds the old
        // translation (what mm_tlb_flush_nested() guarantees).
        let (mut c, hw) = setup();
        c.event(
            6,
            &Event::CallRange {
                cpu: cpuid(2),
                mm: MmId::new(0),
                start: VA,
                end: VA + 4096,
            },
            &hw,
        );
        madvise_returns(&mut c, &hw, 7, cpuid(2), 1);
        let f = c.failure().expect("stale hold caught");
        assert_eq!(f.invariant, Invariant::NoStaleHold, "{f}");
        assert_eq!(
            f.cpus,
            vec![cpuid(1), cpuid(2)],
            "the holder, then the CPU returning"
        );
    }

    #[test]
    fn the_call_that_replaced_the_pte_retires_it() {
        let (mut c, hw) = setup();
        madvise_returns(&mut c, &hw, 6, cpuid(0), 0);
        let f = c.failure().expect("stale hold caught");
        assert_eq!(f.invariant, Invariant::NoStaleHold, "{f}");
        assert_eq!(
            (f.cpus, f.mm, f.va, f.time_ns),
            (vec![cpuid(1), cpuid(0)], Some(MmId::new(0)), Some(VA), 6)
        );
        assert_eq!(f.history.len(), 8, "the last `history_len` events");
        assert_eq!(f.history.last().map(|(t, _)| *t), Some(6));
    }

    #[test]
    fn a_violation_prints_the_report_people_read() {
        let (mut c, hw) = setup();
        madvise_returns(&mut c, &hw, 6, cpuid(0), 0);
        let f = c.failure().expect("stale hold caught");
        let text = f.to_string();
        let head = format!(
            "invariant: no stale hold\nat: 6 ns\n{}\nlast events:\n",
            f.detail
        );
        assert!(text.starts_with(&head), "{text}");
        assert!(
            f.detail.starts_with("cpu1 has mm 0 loaded (ASID 1)"),
            "{}",
            f.detail
        );
        assert_eq!(
            f.detail,
            format!(
                "cpu1 has mm 0 loaded (ASID 1) and still holds a stale translation of va {VA:#x} \
                 after madvise on cpu0 returned: va {VA:#x} -> pfn 5 rw (asid 1, vmid 0, mm 0, v1), \
                 current PTE pfn 6 rw v2"
            )
        );
        for line in [
            "             0 ns  AsidLoad cpu1 mm0 asid 1\n",
            "             0 ns  Running cpu1 task1 mm0\n",
            "             4 ns  PteWrite cpu0 mm0 va 0x40000000 pfn 5 rw v1 -> none\n",
            "             5 ns  PteWrite cpu2 mm0 va 0x40000000 none -> pfn 6 rw v2\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            text.ends_with("             6 ns  CallExit cpu0 task0 madvise\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 4 + f.history.len());
        assert!(
            !text.contains('{') && !text.contains("Some(") && !text.contains("None"),
            "no Rust debug structs: {text}"
        );
        // The explorer's clocks are per CPU: its report numbers the events
        // in the order they ran and prints no times.
        let explored = super::super::Violation {
            clock: super::super::Clock::PerCpuActions,
            ..f.clone()
        };
        let text = explored.to_string();
        assert!(!text.contains(" ns"), "{text}");
        assert!(
            text.contains("last events, in the order the explorer ran them:\n"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!(
                "  {:>4}  CallExit cpu0 task0 madvise\n",
                f.history.len()
            )),
            "{text}"
        );
        assert!(
            text.contains("\n     1  AsidLoad cpu1 mm0 asid 1\n"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_tlbi_breaks_valid_tlb_maintenance() {
        let (mut c, hw) = setup();
        let fault = Event::TlbiFault {
            cpu: cpuid(2),
            scope: TlbiScope::Asid(8),
            broadcast: true,
        };
        c.event(10, &fault, &hw);
        let f = c.failure().expect("a fault is a violation");
        assert_eq!(f.invariant, Invariant::ValidTlbi);
        assert!(f.to_string().contains("cpu2 refused"), "{f}");
    }

    #[test]
    fn a_translation_of_another_kernel_breaks_vmid_isolation_not_asid_isolation() {
        let (mut c, hw) = setup();
        // cpu1 runs mm 3 of guest kernel 2 and uses an entry filled from
        // mm 3 of guest kernel 1 (say two VMs given one VMID).
        let (guest1_mm, guest2_mm) = (MmId::new(3).in_kernel(1), MmId::new(3).in_kernel(2));
        let entry = LeafEntry {
            vmid: 1,
            asid: 1,
            vpn: VA >> PAGE_SHIFT,
            pfn: 5,
            perms: Perms::RW,
            version: 1,
            mm: guest1_mm,
        };
        let used = |running| Event::LeafUse {
            cpu: cpuid(1),
            running,
            entry,
            store: false,
        };
        c.event(10, &used(guest2_mm), &hw);
        assert_eq!(c.failure().unwrap().invariant, Invariant::VmidIsolation);
        // Within one kernel it is ASID isolation.
        let (mut c, hw) = setup();
        c.event(10, &used(MmId::new(4).in_kernel(1)), &hw);
        assert_eq!(c.failure().unwrap().invariant, Invariant::AsidIsolation);
    }
}
