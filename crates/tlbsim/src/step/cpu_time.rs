//! Where simulated CPU time goes, as `perf report` would show it: each
//! CPU's time between two of its steps is charged to what it ran over that
//! interval — the innermost kernel function its context had entered
//! ([`crate::kernel::Ctx::func`], "self" time), user code, the idle loop,
//! or unnamed kernel code. A step's cost and whatever the CPU waited for
//! after it (a lock it spins on, the acknowledgements of its IPIs, its
//! DVM Sync) go to the function that posted it, as a sampling profiler
//! finds the CPU spinning there.
//!
//! The timing driver keeps a [`CpuTime`] and calls [`CpuTime::switch`]
//! whenever a CPU starts a step (with the function's label, or [`USER`]
//! for user work and user loads and stores, [`IDLE`] when the idle loop
//! waits), and [`CpuTime::drain_into`] at the end
//! of a run, which adds the sums to [`crate::stats::Stats::cpu_time`] by
//! name.

use crate::engine::label::Label;
use crate::engine::Ns;
use crate::hw::CpuId;
use crate::stats::Stats;

/// User-mode work (`Op::Work { user: true }`) and user loads and stores.
pub static USER: Label = Label::new("[user]");
/// The idle loop.
pub static IDLE: Label = Label::new("[idle]");
/// Kernel code outside every named function.
pub static KERNEL: Label = Label::new("[kernel]");

/// The running charge of every CPU, and the sums so far by label.
#[derive(Debug)]
pub struct CpuTime {
    /// Time charged per label id (ns), and the label.
    sums: Vec<(Ns, Option<&'static Label>)>,
    /// Per CPU: since when, and to what, it is charged (the interval runs
    /// on while the label stays the same).
    cpus: Vec<(Ns, &'static Label)>,
}

impl CpuTime {
    /// Every CPU of `ncpus` charging `[kernel]` from time 0.
    pub fn new(ncpus: usize) -> Self {
        Self {
            sums: Vec::new(),
            cpus: vec![(0, &KERNEL); ncpus],
        }
    }

    /// At `now`, if `cpu` starts running something else than `label`,
    /// charges its time since it started that, and starts on `label`.
    #[inline]
    pub fn switch(&mut self, cpu: CpuId, now: Ns, label: &'static Label) {
        let c = &mut self.cpus[cpu];
        if !std::ptr::eq(c.1, label) {
            let (since, was) = std::mem::replace(c, (now, label));
            self.charge(was, now - since);
        }
    }

    #[inline]
    fn charge(&mut self, label: &'static Label, ns: Ns) {
        let id = label.id();
        match self.sums.get_mut(id) {
            Some((sum, l)) => {
                *sum += ns;
                l.get_or_insert(label);
            }
            None => self.grow(label, ns),
        }
    }

    /// [`CpuTime::charge`] of a label whose id is past the end of `sums`.
    #[cold]
    fn grow(&mut self, label: &'static Label, ns: Ns) {
        self.sums.resize(label.id() + 1, (0, None));
        self.sums[label.id()] = (ns, Some(label));
    }

    /// Charges every CPU up to `now` and moves the sums into `stats`.
    pub fn drain_into(&mut self, stats: &mut Stats, now: Ns) {
        for cpu in 0..self.cpus.len() {
            let (since, label) = self.cpus[cpu];
            self.charge(label, now.saturating_sub(since));
            self.cpus[cpu].0 = now;
        }
        for (ns, label) in &mut self.sums {
            if let (Some(l), true) = (*label, *ns > 0) {
                let i = stats.cpu_time_slot(l.name());
                stats.cpu_time[i].1 += std::mem::take(ns);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_goes_to_what_ran_over_it() {
        let flush = crate::label!("flush_tlb_range");
        let mut st = Stats::default();
        let mut c = CpuTime::new(2);
        c.switch(0, 0, &USER);
        c.switch(0, 100, flush);
        c.switch(1, 120, &IDLE);
        c.switch(0, 130, flush);
        c.switch(0, 150, &USER);
        c.drain_into(&mut st, 400);
        let mut got = st.cpu_time.clone();
        got.sort();
        let want = [
            ("[idle]", 280),
            ("[kernel]", 120),
            ("[user]", 350),
            ("flush_tlb_range", 50),
        ];
        assert_eq!(got, want);
        assert_eq!(got.iter().map(|x| x.1).sum::<Ns>(), 2 * 400);
    }
}
