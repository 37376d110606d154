//! Time stolen from CPUs by work done on other CPUs' behalf (a broadcast
//! TLBI's targets process the DVM operation), charged to each CPU's next
//! step. A CPU in the idle loop absorbs it (docs/model.md).
//!
//! Charging every busy CPU is O(1): a running sum of what was charged to
//! all, and per CPU the sum when it was last settled. Exact: the same
//! integers as charging each CPU in turn.

use crate::engine::Ns;
use crate::hw::{CpuId, CpuVec};

/// Stolen time per CPU.
#[derive(Debug, Clone)]
pub struct Stolen {
    /// Charged so far to every busy CPU ([`Stolen::charge_all_busy`]).
    sum_ns: Ns,
    /// Per CPU: `sum_ns` when it was last settled.
    mark_ns: CpuVec<Ns>,
    /// Per CPU: settled stolen time not yet taken.
    own_ns: CpuVec<Ns>,
    /// Per CPU: in the idle loop (charges pass it by).
    idle: CpuVec<bool>,
}

impl Stolen {
    /// No time stolen from any of `ncpus` CPUs, none idle.
    pub fn new(ncpus: usize) -> Self {
        Self {
            sum_ns: 0,
            mark_ns: CpuVec::filled(ncpus, 0),
            own_ns: CpuVec::filled(ncpus, 0),
            idle: CpuVec::filled(ncpus, false),
        }
    }

    /// Moves what `charge_all_busy` left `cpu` since it was last settled
    /// into its own account (nothing while it was idle).
    #[inline]
    fn settle(&mut self, cpu: CpuId) {
        if !self.idle[cpu] {
            self.own_ns[cpu] += self.sum_ns - self.mark_ns[cpu];
        }
        self.mark_ns[cpu] = self.sum_ns;
    }

    /// `cpu` enters (`true`) or leaves the idle loop.
    #[inline]
    pub fn set_idle(&mut self, cpu: CpuId, idle: bool) {
        self.settle(cpu);
        self.idle[cpu] = idle;
    }

    /// Charges `ns` to every CPU but `except` that is not idle.
    #[inline]
    pub fn charge_all_busy(&mut self, except: CpuId, ns: Ns) {
        self.settle(except);
        self.sum_ns += ns;
        self.mark_ns[except] = self.sum_ns;
    }

    /// Charges `ns` to `cpu` unless it is idle.
    #[inline]
    pub fn charge(&mut self, cpu: CpuId, ns: Ns) {
        if !self.idle[cpu] {
            self.own_ns[cpu] += ns;
        }
    }

    /// Takes the time stolen from `cpu` since it was last taken.
    #[inline]
    pub fn take(&mut self, cpu: CpuId) -> Ns {
        self.settle(cpu);
        std::mem::take(&mut self.own_ns[cpu])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charging_all_busy_cpus_at_once_equals_charging_each() {
        let mut s = Stolen::new(3);
        let [c0, c1, c2] = [0, 1, 2].map(CpuId::from_index);
        s.charge_all_busy(c0, 5); // 1 and 2 busy
        s.set_idle(c2, true);
        s.charge_all_busy(c1, 7); // only 0
        s.charge(c2, 100); // idle: absorbed
        s.set_idle(c2, false);
        s.charge_all_busy(c0, 11); // 1 and 2
        s.charge(c0, 1);
        assert_eq!((s.take(c0), s.take(c1), s.take(c2)), (8, 16, 16));
        assert_eq!((s.take(c0), s.take(c1), s.take(c2)), (0, 0, 0));
    }
}
