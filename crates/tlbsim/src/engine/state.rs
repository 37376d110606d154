//! The model's state, in containers that record their own footprint: each
//! access names the location it touches, so kernel and policy code reads
//! like Linux (`k.cpus[cpu].current`, `k.mms[mm].context_id`) and names no
//! explorer location, and no author can name a wrong one (docs/model.md, "The
//! explorer's footprints and DPOR").
//!
//! - [`Table`] (aliases [`PerCpu`], [`PerMm`], [`PerTask`], [`PerLock`]):
//!   one value per CPU, mm, task or lock. Indexing records the element
//!   (a read through `Index`, a write through `IndexMut`); `push` and
//!   `len` record the table's length; iterating records the whole table.
//! - [`Var`]: one value, recorded whole (a read through `Deref`, a write
//!   through `DerefMut`).
//! - [`State`]: a `RefCell` around a struct whose every field is one of
//!   the above (declared with [`recorded!`](crate::recorded!), which checks it), so that the
//!   borrow itself records nothing and the fields record what is used.
//!
//! Each container gets a location of its own when it is made: a fresh
//! [`Space::Var`] numbered in the order of creation since the machine was
//! made ([`new_machine`]), so the same configuration numbers them the same
//! in every run.

use super::track::{part, record, Loc, Space, Tracked, TrackedCell};
use std::cell::{Cell, Ref, RefCell, RefMut};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Index, IndexMut};

thread_local! {
    static NEXT: Cell<u32> = const { Cell::new(0) };
}

/// Starts the numbering of containers afresh: called when a machine is
/// made, before any of its state, so that a rebuilt machine numbers its
/// containers as the first one did.
pub fn new_machine() {
    NEXT.with(|n| n.set(0));
}

/// A location of its own for a container made now.
fn fresh() -> Space {
    NEXT.with(|n| {
        let v = n.get();
        n.set(v.wrapping_add(1));
        Space::Var(v)
    })
}

impl<T> Tracked<T> {
    /// `v`, with a location of its own (numbered as containers are): state the
    /// model makes as it runs (a pipe, a VM's bookkeeping, a workload's
    /// shared counters), named by the order of its making and never by
    /// its author.
    pub fn fresh(v: T) -> Self {
        Tracked::new(Loc::all(fresh()), v)
    }
}

impl<T: Copy> TrackedCell<T> {
    /// `v`, with a location of its own (as [`Tracked::fresh`]).
    pub fn fresh(v: T) -> Self {
        TrackedCell::new(Loc::all(fresh()), v)
    }
}

/// What indexes a [`Table`]: `usize`, or an id that is an index in its
/// table (`hw::CpuId`, `hw::tlb::MmId`, `observe::TaskId`), converted at
/// no cost.
pub trait TableIndex: Copy {
    /// The index.
    fn index(self) -> usize;
    /// The id at index `i`.
    fn from_index(i: usize) -> Self;
}

impl TableIndex for usize {
    #[inline(always)]
    fn index(self) -> usize {
        self
    }
    #[inline(always)]
    fn from_index(i: usize) -> Self {
        i
    }
}

/// What a [`Table`] is indexed by: the kind of part its elements are, and
/// the type of its indices. The kinds whose ids are declared on floors
/// above this one are implemented beside those ids ([`ByCpu`] beside
/// `hw::CpuId`, [`ByMm`] beside `hw::tlb::MmId`, [`ByTask`] beside
/// `observe::TaskId`).
pub trait PartKind {
    /// The type of an element's index.
    type Id: TableIndex;
    /// The part of element `i`.
    fn part(i: usize) -> u32;
}

/// Elements by CPU ([`part::cpu`]).
#[derive(Debug)]
pub struct ByCpu;
/// Elements by mm ([`part::mm`]).
#[derive(Debug)]
pub struct ByMm;
/// Elements by task ([`part::task`]).
#[derive(Debug)]
pub struct ByTask;
/// Elements by lock ([`part::lock`]).
#[derive(Debug)]
pub struct ByLock;

impl PartKind for ByLock {
    type Id = usize;
    #[inline(always)]
    fn part(i: usize) -> u32 {
        part::lock(i)
    }
}

/// A value per CPU (`DEFINE_PER_CPU`).
pub type PerCpu<T> = Table<ByCpu, T>;
/// A value per mm (a field of `struct mm_struct`, or a policy's per-mm
/// state).
pub type PerMm<T> = Table<ByMm, T>;
/// A value per task.
pub type PerTask<T> = Table<ByTask, T>;
/// A value per lock.
pub type PerLock<T> = Table<ByLock, T>;

/// Values by index, each its own part of the table's location.
pub struct Table<K, T> {
    space: Space,
    items: Vec<T>,
    by: PhantomData<K>,
}

impl<K: PartKind, T> Table<K, T> {
    /// An empty table, with a location of its own.
    pub fn new() -> Self {
        Table {
            space: fresh(),
            items: Vec::new(),
            by: PhantomData,
        }
    }

    /// Appends `v` (writes the length); its index.
    pub fn push(&mut self, v: T) -> K::Id {
        record(|| Loc::part(self.space, part::ALLOC), true);
        self.items.push(v);
        K::Id::from_index(self.items.len() - 1)
    }

    /// The number of elements (reads the length).
    pub fn len(&self) -> usize {
        record(|| Loc::part(self.space, part::ALLOC), false);
        self.items.len()
    }

    /// No elements? (reads the length).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element (reads the whole table).
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        record(|| Loc::all(self.space), false);
        self.items.iter()
    }

    /// Makes the table `n` copies of `v` (writes the whole table): set-up,
    /// such as a per-CPU variable's initial values at boot.
    pub fn fill(&mut self, n: usize, v: T)
    where
        T: Clone,
    {
        record(|| Loc::all(self.space), true);
        self.items.clear();
        self.items.resize(n, v);
    }

    /// Element `i`, or its default where the table is shorter (reads
    /// element `i` only): for a table whose absent elements mean their
    /// default, grown by [`Table::grow_mut`], such as a policy's state of
    /// every mm there may be.
    #[inline]
    pub fn get_or_default(&self, i: K::Id) -> T
    where
        T: Clone + Default,
    {
        let i = i.index();
        record(|| Loc::part(self.space, K::part(i)), false);
        self.items.get(i).cloned().unwrap_or_default()
    }

    /// Element `i` to change, growing the table with defaults to hold it.
    /// Records a write of element `i`, and of the length if the table
    /// grew ([`Table::len`] reads it); the elements added read as before,
    /// through [`Table::get_or_default`], so they record nothing.
    #[inline]
    pub fn grow_mut(&mut self, i: K::Id) -> &mut T
    where
        T: Clone + Default,
    {
        let i = i.index();
        if self.items.len() <= i {
            record(|| Loc::part(self.space, part::ALLOC), true);
            self.items.resize(i + 1, T::default());
        }
        record(|| Loc::part(self.space, K::part(i)), true);
        &mut self.items[i]
    }

    /// Takes every element out, leaving the table empty (writes the whole
    /// table).
    pub fn drain(&mut self) -> Vec<T> {
        record(|| Loc::all(self.space), true);
        std::mem::take(&mut self.items)
    }

    /// The location of element `i`: for the step machinery, which records
    /// what a driver does to an element for it (never for kernel code,
    /// whose accesses record themselves).
    pub fn loc_of(&self, i: K::Id) -> Loc {
        Loc::part(self.space, K::part(i.index()))
    }
}

impl<K: PartKind, T> Default for Table<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PartKind, T> Index<K::Id> for Table<K, T> {
    type Output = T;

    #[inline(always)]
    fn index(&self, i: K::Id) -> &T {
        let i = i.index();
        record(|| Loc::part(self.space, K::part(i)), false);
        &self.items[i]
    }
}

impl<K: PartKind, T> IndexMut<K::Id> for Table<K, T> {
    #[inline(always)]
    fn index_mut(&mut self, i: K::Id) -> &mut T {
        let i = i.index();
        record(|| Loc::part(self.space, K::part(i)), true);
        &mut self.items[i]
    }
}

impl<K, T: std::fmt::Debug> std::fmt::Debug for Table<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.items.fmt(f)
    }
}

/// One value, recorded whole: read through `Deref`, written through
/// `DerefMut`.
pub struct Var<T> {
    space: Space,
    v: T,
}

impl<T> Var<T> {
    /// `v`, with a location of its own.
    pub fn new(v: T) -> Self {
        Var { space: fresh(), v }
    }

    /// The value without recording (set-up, reports).
    pub fn untracked(&self) -> &T {
        &self.v
    }
}

impl<T: Default> Default for Var<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T> Deref for Var<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        record(|| Loc::all(self.space), false);
        &self.v
    }
}

impl<T> DerefMut for Var<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        record(|| Loc::all(self.space), true);
        &mut self.v
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Var<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.v.fmt(f)
    }
}

/// A type whose every access records its own locations: the containers
/// of this module, and structs declared with [`recorded!`](crate::recorded!). Only such a
/// type may sit in a [`State`].
pub trait Recorded {}

impl<K, T> Recorded for Table<K, T> {}
impl<T> Recorded for Var<T> {}

/// Declares a struct whose every field is [`Recorded`] (checked when it
/// compiles), and makes it [`Recorded`], for a [`State`].
#[macro_export]
macro_rules! recorded {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$fmeta])* $fvis $field : $ty ),*
        }
        impl $crate::engine::state::Recorded for $name {}
        const _: () = {
            const fn recorded<T: $crate::engine::state::Recorded + ?Sized>() {}
            $( recorded::<$ty>(); )*
        };
    };
}

/// A `RefCell` around a [`Recorded`] value: the borrow records nothing,
/// the value's fields record what is used.
pub struct State<T: Recorded> {
    cell: RefCell<T>,
}

impl<T: Recorded> State<T> {
    /// `v`.
    pub fn new(v: T) -> Self {
        State {
            cell: RefCell::new(v),
        }
    }

    /// Borrows it to read.
    #[inline]
    pub fn borrow(&self) -> Ref<'_, T> {
        self.cell.borrow()
    }

    /// Borrows it to change.
    #[inline]
    pub fn borrow_mut(&self) -> RefMut<'_, T> {
        self.cell.borrow_mut()
    }
}

impl<T: Recorded + std::fmt::Debug> std::fmt::Debug for State<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cell.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::track::{finish, start};

    recorded! {
        #[derive(Default)]
        struct Kernel {
            mms: PerMm<u32>,
            jiffies: Var<u64>,
        }
    }

    #[test]
    fn indexing_records_the_element_and_a_variable_records_itself() {
        new_machine();
        let k = State::new(Kernel::default());
        let mm = k.borrow_mut().mms.push(7);
        start();
        let _ = k.borrow().mms[mm];
        k.borrow_mut().mms[mm] += 1;
        let f = finish();
        let mms = k.borrow().mms.loc_of(mm);
        assert_eq!(f.writes, vec![mms]);
        assert!(f.reads.is_empty(), "{f:?}");
        start();
        let _ = *k.borrow().jiffies;
        let n = k.borrow().mms.len();
        let f = finish();
        assert_eq!(n, 1);
        assert_eq!(f.reads.len(), 2);
        assert!(f.writes.is_empty());
    }

    #[test]
    fn containers_are_numbered_afresh_for_each_machine() {
        new_machine();
        let a: (PerLock<u8>, Var<u8>) = (PerLock::new(), Var::new(0));
        new_machine();
        let b: (PerLock<u8>, Var<u8>) = (PerLock::new(), Var::new(0));
        assert_eq!(a.0.loc_of(1), b.0.loc_of(1));
        assert_ne!(a.0.loc_of(1).space, a.1.space);
    }
}
