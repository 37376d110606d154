//! Where simulated CPU time goes, as `perf report` would show it: each
//! CPU's time between two of its steps is charged to what it ran over that
//! interval — the innermost kernel function its context had entered
//! ([`crate::kernel::Ctx::func`], "self" time), user code, the idle loop,
//! or unnamed kernel code. A step's cost and whatever the CPU waited for
//! after it (a lock it spins on, the acknowledgements of its IPIs, its
//! DVM Sync) go to the function that posted it, as a sampling profiler
//! finds the CPU spinning there.
//!
//! The time is also split by task name (comm), as `perf report` sorts by
//! command: a published share is often of one process's samples.
//!
//! The timing driver keeps a [`CpuTime`] and calls [`CpuTime::switch`]
//! whenever a CPU starts a step (with the function's label, or [`USER`]
//! for user work and user loads and stores, [`IDLE`] when the idle loop
//! waits), and [`CpuTime::drain_into`] at the end of a run, which adds the
//! sums to [`crate::stats::Stats::cpu_time`] by name.

use crate::engine::label::Label;
use crate::engine::Ns;
use crate::hw::{CpuId, CpuVec};
use crate::stats::Stats;

/// User-mode work (`Op::Work { user: true }`) and user loads and stores.
pub static USER: Label = Label::new("[user]");
/// The idle loop.
pub static IDLE: Label = Label::new("[idle]");
/// Kernel code outside every named function.
pub static KERNEL: Label = Label::new("[kernel]");

/// The running charge of every CPU, and the sums so far by task name
/// (comm) and label.
#[derive(Debug)]
pub struct CpuTime {
    /// Per comm (index in `comms`): time charged per label id (ns), and
    /// the label.
    sums: Vec<Vec<(Ns, Option<&'static Label>)>>,
    /// Task names seen (a task's comm is fixed at its creation here).
    comms: Vec<String>,
    /// Per kernel (0: the host, then guests), per task id: its index in
    /// `comms` (`u32::MAX`: not yet seen).
    task_comm: Vec<Vec<u32>>,
    /// Per CPU: since when, and to what and whom, it is charged (the
    /// interval runs on while both stay the same).
    cpus: CpuVec<(Ns, &'static Label, u32)>,
}

impl CpuTime {
    /// Every CPU of `ncpus` charging `[kernel]` from time 0 (to no task
    /// until its first step).
    pub fn new(ncpus: usize) -> Self {
        Self {
            sums: vec![Vec::new()],
            comms: vec![String::from("[none]")],
            task_comm: Vec::new(),
            cpus: CpuVec::filled(ncpus, (0, &KERNEL, 0)),
        }
    }

    /// The comm index of `task` of kernel `kernel` (0: the host), whose
    /// name `name` gives on first sight.
    #[inline]
    pub fn comm(&mut self, kernel: usize, task: usize, name: impl FnOnce() -> String) -> u32 {
        match self.task_comm.get(kernel).and_then(|k| k.get(task)) {
            Some(&c) if c != u32::MAX => c,
            _ => self.learn(kernel, task, name()),
        }
    }

    /// Records the comm of a task seen for the first time. Per-CPU kernel
    /// threads (`swapper/3`) count under their base name, as `perf report`
    /// shows `swapper`: one row, not one per CPU.
    #[cold]
    fn learn(&mut self, kernel: usize, task: usize, mut name: String) -> u32 {
        if let Some((base, n)) = name.split_once('/') {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                name = base.to_string();
            }
        }
        let c = match self.comms.iter().position(|n| *n == name) {
            Some(c) => c,
            None => {
                self.comms.push(name);
                self.sums.push(Vec::new());
                self.comms.len() - 1
            }
        } as u32;
        if self.task_comm.len() <= kernel {
            self.task_comm.resize(kernel + 1, Vec::new());
        }
        let k = &mut self.task_comm[kernel];
        if k.len() <= task {
            k.resize(task + 1, u32::MAX);
        }
        k[task] = c;
        c
    }

    /// At `now`, if `cpu` starts running something else than `label` for
    /// `comm` (from [`CpuTime::comm`]), charges its time since it started
    /// that, and starts on `label`.
    #[inline]
    pub fn switch(&mut self, cpu: CpuId, now: Ns, label: &'static Label, comm: u32) {
        let c = &mut self.cpus[cpu];
        if !std::ptr::eq(c.1, label) || c.2 != comm {
            let (since, was, whom) = std::mem::replace(c, (now, label, comm));
            self.charge(whom, was, now - since);
        }
    }

    /// What `cpu` is charging now.
    pub fn label(&self, cpu: CpuId) -> &'static Label {
        self.cpus[cpu].1
    }

    /// [`CpuTime::switch`] to `label` for the comm `cpu` already runs.
    #[inline]
    pub fn relabel(&mut self, cpu: CpuId, now: Ns, label: &'static Label) {
        let comm = self.cpus[cpu].2;
        self.switch(cpu, now, label, comm);
    }

    #[inline]
    fn charge(&mut self, comm: u32, label: &'static Label, ns: Ns) {
        let id = label.id();
        match self.sums[comm as usize].get_mut(id) {
            Some((sum, l)) => {
                *sum += ns;
                l.get_or_insert(label);
            }
            None => self.grow(comm, label, ns),
        }
    }

    /// [`CpuTime::charge`] of a label whose id is past the end of its sums.
    #[cold]
    fn grow(&mut self, comm: u32, label: &'static Label, ns: Ns) {
        let sums = &mut self.sums[comm as usize];
        sums.resize(label.id() + 1, (0, None));
        sums[label.id()] = (ns, Some(label));
    }

    /// Charges every CPU up to `now` and moves the sums into `stats`.
    pub fn drain_into(&mut self, stats: &mut Stats, now: Ns) {
        for cpu in CpuId::all(self.cpus.len()) {
            let (since, label, comm) = self.cpus[cpu];
            self.charge(comm, label, now.saturating_sub(since));
            self.cpus[cpu].0 = now;
        }
        for (comm, sums) in self.comms.iter().zip(&mut self.sums) {
            for (ns, label) in sums.iter_mut() {
                if let (Some(l), true) = (*label, *ns > 0) {
                    stats.add_cpu_time(comm, l.name(), std::mem::take(ns));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_goes_to_what_ran_over_it_and_whom() {
        let flush = crate::label!("flush_tlb_range");
        let mut st = Stats::default();
        let mut c = CpuTime::new(2);
        let a = c.comm(0, 7, || "a.out".into());
        let idle = c.comm(0, 0, || "swapper/1".into());
        assert_eq!(
            c.comm(0, 1, || "swapper/0".into()),
            idle,
            "one row for idle tasks"
        );
        assert_eq!(c.comm(0, 7, || unreachable!("known")), a);
        let [c0, c1] = [0, 1].map(CpuId::from_index);
        c.switch(c0, 0, &USER, a);
        c.switch(c0, 100, flush, a);
        c.switch(c1, 120, &IDLE, idle);
        c.switch(c0, 130, flush, a);
        c.relabel(c0, 150, &USER);
        c.drain_into(&mut st, 400);
        let mut got = st.cpu_time.clone();
        got.sort();
        let s = String::from;
        let want = [
            (s("[none]"), "[kernel]", 120),
            (s("a.out"), "[user]", 350),
            (s("a.out"), "flush_tlb_range", 50),
            (s("swapper"), "[idle]", 280),
        ];
        assert_eq!(got, want);
        assert_eq!(got.iter().map(|x| x.2).sum::<Ns>(), 2 * 400);
    }
}
