//! CPU numbers ([`CpuId`]) and what they index ([`CpuVec`], and the
//! explorer-tracked [`PerCpu`](crate::engine::state::PerCpu)).

use crate::engine::state::{ByCpu, PartKind, TableIndex};
use std::ops::{Deref, DerefMut, Index, IndexMut};

/// A CPU of one machine, as Linux's `smp_processor_id()` numbers it: 0 to
/// the machine's CPU count less one, in topology order (sockets, then
/// dies, then clusters). The machine is a kernel's: the host's CPUs are
/// the physical ones ([`Hw::cpus`](super::Hw::cpus)), a guest kernel's
/// are its vCPUs, numbered from 0 as well. An index into per-CPU state
/// ([`CpuVec`], [`PerCpu`](crate::engine::state::PerCpu),
/// [`CpuMask`](super::cpumask::CpuMask)) at no cost; made from an index
/// with [`CpuId::from_index`], which takes indices below [`CpuId::LIMIT`]
/// (checked in debug builds). Printed (`Display` and `Debug`) as the bare
/// number, as when it was an integer.
///
/// Thirty-two bits, as the kernel ids ([`MmId`](super::tlb::MmId)) are: a
/// `u16` would hold [`CpuId::LIMIT`] too, but saves nothing in the events
/// and steps that carry a CPU beside 32- and 64-bit fields.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct CpuId(u32);

impl CpuId {
    /// One more than the largest CPU number: the CPUs of the largest
    /// machine tlbsim accepts (`config::limits::MAX_CPUS` is this), far
    /// above the largest built-in profile's 96.
    pub const LIMIT: usize = 4096;

    /// CPU 0: the boot CPU, which every machine has.
    pub const BOOT: CpuId = CpuId(0);

    /// CPU `i` (below [`CpuId::LIMIT`], checked in debug builds).
    #[inline(always)]
    pub fn from_index(i: usize) -> CpuId {
        debug_assert!(i < Self::LIMIT, "CPU index {i}");
        CpuId(i as u32)
    }

    /// CPU number `n`, as a configuration gives it (below
    /// [`CpuId::LIMIT`], checked in debug builds).
    #[inline(always)]
    pub fn new(n: u32) -> CpuId {
        debug_assert!((n as usize) < Self::LIMIT, "CPU {n}");
        CpuId(n)
    }

    /// The number as an index into per-CPU state.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The number, for arithmetic that mixes it with other integers
    /// (`u64::from(cpu.get())`).
    #[inline(always)]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The CPUs of a machine of `n` CPUs, in increasing order
    /// (`for_each_possible_cpu`).
    #[inline]
    pub fn all(n: usize) -> CpuIds {
        debug_assert!(n <= Self::LIMIT, "{n} CPUs");
        CpuIds {
            next: 0,
            end: n as u32,
        }
    }
}

/// The CPUs `next..end` in increasing order ([`CpuId::all`]): a range
/// of its own rather than a `map` over a `Range<usize>`, so that loops
/// over thousands of CPUs inline as a range's do.
#[derive(Debug, Clone)]
pub struct CpuIds {
    next: u32,
    end: u32,
}

impl Iterator for CpuIds {
    type Item = CpuId;

    #[inline]
    fn next(&mut self) -> Option<CpuId> {
        (self.next < self.end).then(|| {
            self.next += 1;
            CpuId(self.next - 1)
        })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end - self.next) as usize;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for CpuIds {
    #[inline]
    fn next_back(&mut self) -> Option<CpuId> {
        (self.next < self.end).then(|| {
            self.end -= 1;
            CpuId(self.end)
        })
    }
}

impl ExactSizeIterator for CpuIds {}

impl std::iter::FusedIterator for CpuIds {}

/// CPU `i`, for tests' literal CPU numbers (`cpuid(1)`; unchecked, and
/// `const`).
#[cfg(test)]
pub(crate) const fn cpuid(i: u32) -> CpuId {
    CpuId(i)
}

impl TableIndex for CpuId {
    #[inline(always)]
    fn index(self) -> usize {
        CpuId::index(self)
    }
    #[inline(always)]
    fn from_index(i: usize) -> Self {
        CpuId::from_index(i)
    }
}

/// A per-CPU table is indexed by [`CpuId`]s.
impl PartKind for ByCpu {
    type Id = CpuId;
    #[inline(always)]
    fn part(i: usize) -> u32 {
        crate::engine::track::part::cpu(i)
    }
}

impl std::fmt::Display for CpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for CpuId {
    /// As `Display`: the bare number, as when the id was an integer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One value per CPU that the explorer does not track (the hardware's own
/// state, a driver's or a report's): a `Vec` indexed by [`CpuId`], which
/// derefs to the slice for `len`, `iter` and the like.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct CpuVec<T>(Vec<T>);

impl<T> CpuVec<T> {
    /// Each CPU's value, CPU 0's first.
    pub fn from_vec(v: Vec<T>) -> Self {
        CpuVec(v)
    }

    /// `n` CPUs' values, each `v`.
    pub fn filled(n: usize, v: T) -> Self
    where
        T: Clone,
    {
        CpuVec(vec![v; n])
    }

    /// `n` CPUs' values, each `f` of its CPU.
    pub fn from_fn(n: usize, f: impl FnMut(CpuId) -> T) -> Self {
        CpuVec(CpuId::all(n).map(f).collect())
    }

    /// Appends the value of the next CPU; that CPU.
    pub fn push(&mut self, v: T) -> CpuId {
        self.0.push(v);
        CpuId::from_index(self.0.len() - 1)
    }

    /// Every CPU with its value, in CPU order.
    pub fn iter_cpus(&self) -> impl DoubleEndedIterator<Item = (CpuId, &T)> + ExactSizeIterator {
        self.0
            .iter()
            .enumerate()
            .map(|(i, v)| (CpuId::from_index(i), v))
    }

    /// The values as a `Vec`, CPU 0's first.
    pub fn into_vec(self) -> Vec<T> {
        self.0
    }
}

impl<T> Deref for CpuVec<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> DerefMut for CpuVec<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T> Index<CpuId> for CpuVec<T> {
    type Output = T;
    #[inline(always)]
    fn index(&self, c: CpuId) -> &T {
        &self.0[c.index()]
    }
}

impl<T> IndexMut<CpuId> for CpuVec<T> {
    #[inline(always)]
    fn index_mut(&mut self, c: CpuId) -> &mut T {
        &mut self.0[c.index()]
    }
}

impl<'a, T> IntoIterator for &'a CpuVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    /// Every CPU's value, in CPU order.
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> FromIterator<T> for CpuVec<T> {
    /// Each CPU's value in turn, CPU 0's first.
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        CpuVec(it.into_iter().collect())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for CpuVec<T> {
    /// As the `Vec`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_prints_and_indexes_as_its_number() {
        let c = CpuId::from_index(17);
        assert_eq!(
            (c.index(), c.to_string(), format!("{c:?}")),
            (17, "17".into(), "17".into())
        );
        let v = CpuVec::from_fn(3, |c| c.index() * 10);
        assert_eq!(v[CpuId::from_index(2)], 20);
        assert_eq!(
            CpuId::all(3).rev().map(CpuId::index).collect::<Vec<_>>(),
            [2, 1, 0]
        );
    }
}
