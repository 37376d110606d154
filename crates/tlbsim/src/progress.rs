//! How far the running jobs of this process have got, for a front end to
//! show (the CLI's progress bars). The drivers advance these counters now
//! and then (a timing run every 4,096 events, the explorer once per
//! schedule) with relaxed atomic operations; nothing in the simulation
//! reads them, so they cannot change a result.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The counters. There is one set per process ([`PROGRESS`]): runs that go
/// on at the same time (a parallel sweep) add to the same totals.
#[derive(Debug)]
pub struct Progress {
    sim_ns: AtomicU64,
    events: AtomicU64,
    runs_done: AtomicU64,
    schedules: AtomicU64,
}

/// What [`Progress`] holds at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Simulated time of the timing run last reported (ns).
    pub sim_ns: u64,
    /// Events processed by timing runs so far (all runs, rounded down to
    /// the last report of each).
    pub events: u64,
    /// Timing runs finished (successfully or not).
    pub runs_done: u64,
    /// Schedules the explorer finished.
    pub schedules: u64,
}

/// The process's counters.
pub static PROGRESS: Progress = Progress {
    sim_ns: AtomicU64::new(0),
    events: AtomicU64::new(0),
    runs_done: AtomicU64::new(0),
    schedules: AtomicU64::new(0),
};

impl Progress {
    /// A timing run reached simulated time `now_ns` after `events` more
    /// events since its last report.
    pub fn advance_run(&self, now_ns: u64, events: u64) {
        self.sim_ns.store(now_ns, Relaxed);
        self.events.fetch_add(events, Relaxed);
    }

    /// A timing run ended.
    pub fn run_done(&self) {
        self.runs_done.fetch_add(1, Relaxed);
    }

    /// The explorer finished a schedule.
    pub fn schedule_done(&self) {
        self.schedules.fetch_add(1, Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            sim_ns: self.sim_ns.load(Relaxed),
            events: self.events.load(Relaxed),
            runs_done: self.runs_done.load(Relaxed),
            schedules: self.schedules.load(Relaxed),
        }
    }
}
