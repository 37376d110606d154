//! A fixed-size CPU bitmap (Linux's `struct cpumask`).

use super::CpuId;
use serde::Serialize;

/// Bitmap of CPUs, sized at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuMask {
    words: Vec<u64>,
    ncpus: usize,
}

impl Default for CpuMask {
    /// A mask of no CPUs (0 wide).
    fn default() -> Self {
        CpuMask::new(0)
    }
}

impl CpuMask {
    /// An empty mask for `ncpus` CPUs.
    pub fn new(ncpus: usize) -> Self {
        Self {
            words: vec![0; ncpus.div_ceil(64)],
            ncpus,
        }
    }

    /// A mask with every CPU set.
    pub fn full(ncpus: usize) -> Self {
        let mut m = Self::new(ncpus);
        m.set_all();
        m
    }

    /// Number of CPUs the mask can hold.
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }

    /// Sets `cpu`.
    pub fn set(&mut self, cpu: CpuId) {
        let cpu = cpu.index();
        self.words[cpu / 64] |= 1 << (cpu % 64);
    }

    /// Clears `cpu`.
    pub fn clear(&mut self, cpu: CpuId) {
        let cpu = cpu.index();
        self.words[cpu / 64] &= !(1 << (cpu % 64));
    }

    /// Is `cpu` set?
    pub fn test(&self, cpu: CpuId) -> bool {
        let cpu = cpu.index();
        self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Sets `cpu`, returning its old value.
    pub fn test_and_set(&mut self, cpu: CpuId) -> bool {
        let old = self.test(cpu);
        self.set(cpu);
        old
    }

    /// Clears `cpu`, returning its old value.
    pub fn test_and_clear(&mut self, cpu: CpuId) -> bool {
        let old = self.test(cpu);
        self.clear(cpu);
        old
    }

    /// Sets every CPU.
    pub fn set_all(&mut self) {
        for w in &mut self.words {
            *w = !0;
        }
        let rem = self.ncpus % 64;
        if rem != 0 {
            if let Some(last) = self.words.last_mut() {
                *last = (1u64 << rem) - 1;
            }
        }
    }

    /// Clears every CPU.
    pub fn clear_all(&mut self) {
        for w in &mut self.words {
            *w = 0;
        }
    }

    /// Number of CPUs set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True if no CPU is set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// True if a CPU other than `cpu` is set.
    pub fn any_other_than(&self, cpu: CpuId) -> bool {
        let cpu = cpu.index();
        self.words.iter().enumerate().any(|(i, w)| {
            let w = if i == cpu / 64 {
                w & !(1 << (cpu % 64))
            } else {
                *w
            };
            w != 0
        })
    }

    /// Sets every CPU set in `other` (a mask of the same machine).
    pub fn or_with(&mut self, other: &CpuMask) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= *o;
        }
    }

    /// Is every CPU set?
    pub fn is_full(&self) -> bool {
        self.count() == self.ncpus
    }

    /// The set CPUs in increasing order.
    #[inline]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: &self.words,
            i: 0,
            w: self.words.first().copied().unwrap_or(0),
        }
    }
}

impl std::fmt::Display for CpuMask {
    /// The set CPUs as a Linux CPU list (`%*pbl`): `0-3,5`, or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut cpus = self.iter().map(CpuId::index).peekable();
        if cpus.peek().is_none() {
            return f.write_str("none");
        }
        let mut first = true;
        while let Some(lo) = cpus.next() {
            let mut hi = lo;
            while cpus.next_if_eq(&(hi + 1)).is_some() {
                hi += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match hi - lo {
                0 => write!(f, "{lo}")?,
                _ => write!(f, "{lo}-{hi}")?,
            }
        }
        Ok(())
    }
}

/// The set CPUs of a [`CpuMask`] in increasing order ([`CpuMask::iter`]):
/// a scan of its words, one set bit at a time. An iterator of its own
/// rather than adapters over the words (`flat_map`, `map`), whose
/// closures the compiler may leave out of line where the checker and
/// the timing driver walk masks of 4,096 CPUs.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    words: &'a [u64],
    /// The word `w` came from (word `i` holds CPUs `64 * i ..`).
    i: usize,
    /// The bits of word `i` not yet yielded.
    w: u64,
}

impl Iterator for Iter<'_> {
    type Item = CpuId;

    #[inline]
    fn next(&mut self) -> Option<CpuId> {
        while self.w == 0 {
            self.i += 1;
            self.w = *self.words.get(self.i)?;
        }
        let b = self.w.trailing_zeros() as usize;
        self.w &= self.w - 1;
        Some(CpuId::from_index(self.i * 64 + b))
    }
}

impl std::iter::FusedIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_operations() {
        let mut m = CpuMask::new(70);
        assert!(m.is_empty());
        let c = CpuId::from_index;
        m.set(c(3));
        m.set(c(69));
        assert!(m.test(c(69)) && !m.test(c(68)));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![c(3), c(69)]);
        assert!(m.any_other_than(c(3)));
        m.clear(c(69));
        assert!(!m.any_other_than(c(3)));
        assert!(m.test_and_clear(c(3)));
        assert!(!m.test_and_set(c(5)));
        let f = CpuMask::full(70);
        assert_eq!(f.count(), 70);
        assert!(f.is_full() && !m.is_full());
        // Iteration crosses empty words and ends at the last one.
        let mut m = CpuMask::new(200);
        m.set(c(199));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![c(199)]);
        assert!(CpuMask::new(0).iter().next().is_none());
        assert!(CpuMask::full(130).iter().map(CpuId::index).eq(0..130));
    }

    #[test]
    fn a_mask_prints_as_a_cpu_list() {
        let mut m = CpuMask::new(70);
        assert_eq!(m.to_string(), "none");
        for c in [0, 1, 2, 3, 5, 64, 65, 69] {
            m.set(CpuId::from_index(c));
        }
        assert_eq!(m.to_string(), "0-3,5,64-65,69");
        assert_eq!(CpuMask::full(4).to_string(), "0-3");
    }
}
