//! Footprints: which parts of the modelled machine one explorer action
//! reads and writes, recorded as the action runs. The partial-order
//! reducing search ([`crate::explore::dpor`]) reorders two actions only if
//! their footprints do not conflict (docs/model.md, "The explorer's
//! footprints and DPOR").
//!
//! Every piece of mutable state that kernel, workload, hardware or checker
//! code can reach during an action lives in a [`Tracked`] or a
//! [`TrackedCell`] (a source scan in the tests enforces it for the model's
//! directories), whose every borrow records its [`Loc`]; code that knows
//! it touches only one part of a tracked value says which with
//! [`Tracked::read_at`] / [`Tracked::write_at`]. Recording is per thread and
//! off unless a driver turns it on ([`start`], [`finish`]): the timing
//! driver pays one thread-local flag test per borrow.
//!
//! Soundness rests on two rules: a location is a conservative name for
//! everything behind it (a whole-space location, [`Loc::all`], overlaps
//! every part of the space), and a driver that cannot record an action
//! (the explorer, for a run with VMs) gives it [`Footprint::unknown`],
//! which conflicts with every footprint.

use std::cell::{Cell, Ref, RefCell, RefMut};

/// A region of the machine's state. Parts of one space are told apart by
/// [`Loc::part`]; the whole space is [`Loc::all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    /// The hardware: parts [`part::tlb`], [`part::regs`],
    /// [`part::dvm_pending`], [`part::PAGE_TABLES`].
    Hw,
    /// The step machinery's per-context state (what a context waits for,
    /// its pending interrupts), by context.
    Cx,
    /// The checker's state: parts by mm (what it knows of an mm's
    /// translations) and [`part::FRAMES`].
    Check,
    /// A container of the model's state ([`crate::engine::state`]) or a
    /// value made with [`Tracked::fresh`], numbered in the order the
    /// machine made them.
    Var(u32),
    /// The explorer's own bookkeeping that enables actions: the accessed
    /// VAs ([`part::TOUCHED`]) and the speculation budget
    /// ([`part::BUDGET`]).
    Explore,
}

/// Part numbers: a kind in the top byte, an index below.
pub mod part {
    use crate::engine::state::TableIndex;

    const KIND_SHIFT: u32 = 24;
    const fn of(kind: u32, i: usize) -> u32 {
        // Indices beyond 2^24 share a part with their residue: a coarser
        // name, still sound.
        (kind << KIND_SHIFT) | (i as u32 & ((1 << KIND_SHIFT) - 1))
    }
    /// An mm's part of a space (a [`PerMm`](crate::engine::state::PerMm)
    /// table's element; `Check`: what the checker knows of it).
    pub const fn mm(i: usize) -> u32 {
        of(1, i)
    }
    /// A task (a [`PerTask`](crate::engine::state::PerTask) table's element).
    pub const fn task(i: usize) -> u32 {
        of(2, i)
    }
    /// A CPU's part of a space (a [`PerCpu`](crate::engine::state::PerCpu)
    /// table's element; `Check`: its pending writes). `i`: the CPU
    /// (`hw::CpuId`) or its index.
    #[inline(always)]
    pub fn cpu(i: impl TableIndex) -> u32 {
        of(3, i.index())
    }
    /// A lock (a [`PerLock`](crate::engine::state::PerLock) table's element).
    pub const fn lock(i: usize) -> u32 {
        of(4, i)
    }
    /// A CPU's TLB and walk cache (`Space::Hw`).
    #[inline(always)]
    pub fn tlb(cpu: impl TableIndex) -> u32 {
        of(5, cpu.index())
    }
    /// A CPU's translation registers (`Space::Hw`).
    #[inline(always)]
    pub fn regs(cpu: impl TableIndex) -> u32 {
        of(6, cpu.index())
    }
    /// The pending bits of broadcast TLBIs at a CPU (`Space::Hw`).
    #[inline(always)]
    pub fn dvm_pending(cpu: impl TableIndex) -> u32 {
        of(7, cpu.index())
    }
    /// A context (`Space::Cx`).
    pub const fn cx(i: usize) -> u32 {
        of(8, i)
    }
    /// Every page-table entry in memory and the PTE version counter
    /// (`Space::Hw`).
    pub const PAGE_TABLES: u32 = of(9, 0);
    /// The checker's per-frame state (freed, copied out).
    pub const FRAMES: u32 = of(10, 0);
    /// The VAs accessed so far (`Space::Explore`).
    pub const TOUCHED: u32 = of(11, 0);
    /// The speculation budget (`Space::Explore`).
    pub const BUDGET: u32 = of(11, 1);
    /// A table's length, where creating an element appends (the next
    /// task id, mm id, lock id).
    pub const ALLOC: u32 = of(12, 0);
    /// The whole space.
    pub const ALL: u32 = u32::MAX;
}

/// A location: a space, and a part of it or all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loc {
    /// The space.
    pub space: Space,
    /// The part ([`part`]), or [`part::ALL`].
    pub part: u32,
}

impl Loc {
    /// The whole of `space`.
    pub const fn all(space: Space) -> Loc {
        Loc {
            space,
            part: part::ALL,
        }
    }

    /// Part `part` of `space`.
    pub const fn part(space: Space, part: u32) -> Loc {
        Loc { space, part }
    }

    /// Do the two name common state?
    pub fn overlaps(&self, o: &Loc) -> bool {
        self.space == o.space
            && (self.part == o.part || self.part == part::ALL || o.part == part::ALL)
    }
}

/// What an action read and wrote. `unknown`: it reached state no
/// location names; it then conflicts with every footprint.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Footprint {
    /// Locations read and not written, sorted.
    pub reads: Vec<Loc>,
    /// Locations written, sorted.
    pub writes: Vec<Loc>,
    /// Dependent on everything.
    pub unknown: bool,
}

impl Footprint {
    /// The footprint that conflicts with every other.
    pub fn unknown() -> Self {
        Footprint {
            unknown: true,
            ..Default::default()
        }
    }

    /// A footprint of these reads and writes.
    pub fn of(reads: &[Loc], writes: &[Loc]) -> Self {
        let mut f = Footprint::default();
        reads.iter().for_each(|&l| f.add(l, false));
        writes.iter().for_each(|&l| f.add(l, true));
        f
    }

    /// Adds an access to `l`.
    pub fn add(&mut self, l: Loc, write: bool) {
        if write {
            if let Ok(i) = self.reads.binary_search(&l) {
                self.reads.remove(i);
            }
            if let Err(i) = self.writes.binary_search(&l) {
                self.writes.insert(i, l);
            }
        } else if self.writes.binary_search(&l).is_err() {
            if let Err(i) = self.reads.binary_search(&l) {
                self.reads.insert(i, l);
            }
        }
    }

    /// Do the two conflict: is either unknown, or does one write a
    /// location overlapping one the other reads or writes?
    pub fn conflicts(&self, o: &Footprint) -> bool {
        if self.unknown || o.unknown {
            return true;
        }
        let hits = |w: &[Loc], f: &Footprint| {
            w.iter()
                .any(|l| f.writes.iter().chain(&f.reads).any(|m| l.overlaps(m)))
        };
        hits(&self.writes, o) || hits(&o.writes, self)
    }
}

/// What is being recorded: the accesses in order.
#[derive(Default)]
struct Recording {
    accesses: Vec<(Loc, bool)>,
}

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static REC: RefCell<Recording> = RefCell::new(Recording::default());
}

/// Starts recording this thread's accesses (a fresh footprint).
pub fn start() {
    REC.with(|r| {
        r.borrow_mut().accesses.clear();
    });
    ON.with(|o| o.set(true));
}

/// Stops recording; returns what was recorded since [`start`].
pub fn finish() -> Footprint {
    ON.with(|o| o.set(false));
    REC.with(|r| {
        let mut r = r.borrow_mut();
        let mut f = Footprint::default();
        r.accesses.sort_unstable();
        r.accesses.dedup();
        for &(l, write) in &r.accesses {
            if write {
                f.writes.push(l);
            }
        }
        // Sorted by location, a write after the read of one location.
        for (i, &(l, write)) in r.accesses.iter().enumerate() {
            let written = r.accesses.get(i + 1).is_some_and(|&(m, _)| m == l);
            if !write && !written {
                f.reads.push(l);
            }
        }
        r.accesses.clear();
        f
    })
}

/// Is this thread recording?
#[inline(always)]
pub fn recording() -> bool {
    ON.with(|o| o.get())
}

/// Records an access to the location `l` makes (nothing unless
/// recording). Every access to the model's state comes through here, in
/// both drivers: what the timing driver pays is one thread-local load and
/// a branch, inlined, with the recording itself out of line. `l` is a
/// closure so that the location (a part number, an index) is computed
/// only when recording: built eagerly it cost the timing driver 230
/// million instructions of 5.3 billion on `bench --one
/// mprotect-32-stock`, about 75 an event (callgrind).
#[inline(always)]
pub fn record(l: impl FnOnce() -> Loc, write: bool) {
    if recording() {
        push_access(l(), write);
    }
}

/// [`record`]'s slow path: the explorer is recording.
#[cold]
#[inline(never)]
fn push_access(l: Loc, write: bool) {
    REC.with(|r| r.borrow_mut().accesses.push((l, write)));
}

/// A `RefCell` whose borrows record a location: the whole value's
/// ([`Tracked::borrow`]) or a part's ([`Tracked::read_at`]).
pub struct Tracked<T> {
    loc: Loc,
    cell: RefCell<T>,
}

impl<T> Tracked<T> {
    /// `v`, named `loc` as a whole.
    pub const fn new(loc: Loc, v: T) -> Self {
        Tracked {
            loc,
            cell: RefCell::new(v),
        }
    }

    /// Reads the whole value.
    #[inline]
    pub fn borrow(&self) -> Ref<'_, T> {
        record(|| self.loc, false);
        self.cell.borrow()
    }

    /// Writes (may write) the whole value.
    #[inline]
    pub fn borrow_mut(&self) -> RefMut<'_, T> {
        record(|| self.loc, true);
        self.cell.borrow_mut()
    }

    /// Reads the part `part` of the value only: the caller's contract is
    /// that what it reads through the guard lies in that part.
    #[inline]
    pub fn read_at(&self, part: u32) -> Ref<'_, T> {
        record(|| Loc::part(self.loc.space, part), false);
        self.cell.borrow()
    }

    /// Writes the part `part` of the value only (same contract).
    #[inline]
    pub fn write_at(&self, part: u32) -> RefMut<'_, T> {
        record(|| Loc::part(self.loc.space, part), true);
        self.cell.borrow_mut()
    }

    /// The value without recording: for code outside every action (set-up,
    /// reports) or code that records what it touches itself.
    #[inline]
    pub fn untracked(&self) -> &RefCell<T> {
        &self.cell
    }

    /// The location of the whole value.
    pub fn loc(&self) -> Loc {
        self.loc
    }

    /// Replaces the value (a write of the whole).
    pub fn replace(&self, v: T) -> T {
        record(|| self.loc, true);
        self.cell.replace(v)
    }

    /// The value.
    pub fn into_inner(self) -> T {
        self.cell.into_inner()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Tracked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cell.fmt(f)
    }
}

/// A `Cell` whose reads and writes record a location.
pub struct TrackedCell<T> {
    loc: Loc,
    cell: Cell<T>,
}

impl<T: Copy> TrackedCell<T> {
    /// `v`, named `loc`.
    pub const fn new(loc: Loc, v: T) -> Self {
        TrackedCell {
            loc,
            cell: Cell::new(v),
        }
    }

    /// Reads it.
    #[inline]
    pub fn get(&self) -> T {
        record(|| self.loc, false);
        self.cell.get()
    }

    /// Writes it.
    #[inline]
    pub fn set(&self, v: T) {
        record(|| self.loc, true);
        self.cell.set(v);
    }

    /// Writes it, returning the old value.
    pub fn replace(&self, v: T) -> T {
        record(|| self.loc, true);
        self.cell.replace(v)
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for TrackedCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cell.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Space = Space::Var(0);

    #[test]
    fn a_whole_space_overlaps_its_parts_and_parts_overlap_only_themselves() {
        let all = Loc::all(K);
        let a = Loc::part(K, part::mm(1));
        let b = Loc::part(K, part::mm(2));
        assert!(all.overlaps(&a) && a.overlaps(&all));
        assert!(!a.overlaps(&b));
        assert!(!a.overlaps(&Loc::part(Space::Check, part::mm(1))));
    }

    #[test]
    fn reads_commute_writes_conflict_and_unknown_conflicts_with_everything() {
        let a = Loc::part(K, part::mm(1));
        let r = Footprint::of(&[a], &[]);
        let w = Footprint::of(&[], &[a]);
        assert!(!r.conflicts(&r));
        assert!(r.conflicts(&w) && w.conflicts(&r) && w.conflicts(&w));
        let other = Footprint::of(&[], &[Loc::part(K, part::mm(2))]);
        assert!(!w.conflicts(&other));
        assert!(Footprint::unknown().conflicts(&Footprint::default()));
        // A coarse write meets a fine read.
        assert!(Footprint::of(&[], &[Loc::all(K)]).conflicts(&r));
    }

    #[test]
    fn a_written_location_is_listed_once_among_the_writes() {
        let a = Loc::part(K, part::mm(1));
        let mut f = Footprint::default();
        f.add(a, false);
        f.add(a, true);
        f.add(a, false);
        assert_eq!((f.reads.len(), f.writes.len()), (0, 1));
    }

    #[test]
    fn borrows_record_only_while_recording() {
        let t = Tracked::new(Loc::all(K), 5);
        let c = TrackedCell::new(Loc::all(Space::Var(9)), 1);
        let _ = *t.borrow();
        assert!(!recording());
        start();
        let _ = *t.read_at(part::mm(3));
        *t.borrow_mut() += 1;
        let _ = c.get();
        let f = finish();
        assert_eq!(f.writes, vec![Loc::all(K)]);
        let mut want = vec![Loc::part(K, part::mm(3)), Loc::all(Space::Var(9))];
        want.sort();
        assert_eq!(f.reads, want);
        let _ = *t.borrow();
        assert_eq!(finish(), Footprint::default());
    }
}
