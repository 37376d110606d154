//! Time stolen from CPUs by work done on other CPUs' behalf (a broadcast
//! TLBI's targets process the DVM operation), charged to each CPU's next
//! step. A CPU in the idle loop absorbs it (docs/model.md).
//!
//! Charging every busy CPU is O(1): a running sum of what was charged to
//! all, and per CPU the sum when it was last settled. Exact: the same
//! integers as charging each CPU in turn.

use crate::engine::Ns;
use crate::hw::CpuId;

/// Stolen time per CPU.
#[derive(Debug, Clone)]
pub struct Stolen {
    /// Charged so far to every busy CPU ([`Stolen::charge_all_busy`]).
    sum_ns: Ns,
    /// Per CPU: `sum_ns` when it was last settled.
    mark_ns: Vec<Ns>,
    /// Per CPU: settled stolen time not yet taken.
    own_ns: Vec<Ns>,
    /// Per CPU: in the idle loop (charges pass it by).
    idle: Vec<bool>,
}

impl Stolen {
    /// No time stolen from any of `ncpus` CPUs, none idle.
    pub fn new(ncpus: usize) -> Self {
        Self {
            sum_ns: 0,
            mark_ns: vec![0; ncpus],
            own_ns: vec![0; ncpus],
            idle: vec![false; ncpus],
        }
    }

    /// Moves what `charge_all_busy` left `cpu` since it was last settled
    /// into its own account (nothing while it was idle).
    fn settle(&mut self, cpu: CpuId) {
        if !self.idle[cpu] {
            self.own_ns[cpu] += self.sum_ns - self.mark_ns[cpu];
        }
        self.mark_ns[cpu] = self.sum_ns;
    }

    /// `cpu` enters (`true`) or leaves the idle loop.
    pub fn set_idle(&mut self, cpu: CpuId, idle: bool) {
        self.settle(cpu);
        self.idle[cpu] = idle;
    }

    /// Charges `ns` to every CPU but `except` that is not idle.
    pub fn charge_all_busy(&mut self, except: CpuId, ns: Ns) {
        self.settle(except);
        self.sum_ns += ns;
        self.mark_ns[except] = self.sum_ns;
    }

    /// Charges `ns` to `cpu` unless it is idle.
    pub fn charge(&mut self, cpu: CpuId, ns: Ns) {
        if !self.idle[cpu] {
            self.own_ns[cpu] += ns;
        }
    }

    /// Takes the time stolen from `cpu` since it was last taken.
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
        s.charge_all_busy(0, 5); // 1 and 2 busy
        s.set_idle(2, true);
        s.charge_all_busy(1, 7); // only 0
        s.charge(2, 100); // idle: absorbed
        s.set_idle(2, false);
        s.charge_all_busy(0, 11); // 1 and 2
        s.charge(0, 1);
        assert_eq!((s.take(0), s.take(1), s.take(2)), (8, 16, 16));
        assert_eq!((s.take(0), s.take(1), s.take(2)), (0, 0, 0));
    }
}
