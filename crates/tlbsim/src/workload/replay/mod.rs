//! `replay`: runs a recorded trace (`tlbsim record`, docs/trace-format.md)
//! as a workload. Each recorded task becomes a model task (a thread shares
//! its process's mm, a process is forked, `exec` gives it a fresh mm);
//! each runs its recorded events in order:
//!
//! - the time it spent on a CPU between two events becomes user work
//!   (`ctx.user_work`), unscaled: the model runs the recorded host's
//!   compute as is, whatever the profile;
//! - `mmap`, `munmap`, `mprotect`, `madvise`, `brk` and `mremap` run the
//!   model's system calls on the model's address range for the recorded
//!   one (mappings are placed by the model's `mmap` and the recorded
//!   addresses translated piece by piece, so they are rebased);
//! - each recorded page fault becomes a user access to the translated
//!   address (a read or a write as recorded); an address in no recorded
//!   mapping (the program image, the stack, the vDSO, mapped at `execve`
//!   and so never seen by `mmap`) gets an anonymous read-write window of
//!   [`IMAGE_WINDOW_BYTES`] around it, clipped to the gaps between known
//!   mappings;
//! - a recorded sleep that a recorded task ended (`block waker=T`) waits
//!   for that task's `wake` (a count, so a wake that comes first is not
//!   lost); a sleep that nothing recorded ended (a timer, I/O, an
//!   untraced task) is slept on a timer for its recorded length
//!   ([`UntracedSleeps`]; metric `replay_timed_sleep_ns`, or
//!   `replay_dropped_sleep_ns` when dropped);
//! - recorded switches, preemptions, migrations and `tlb:tlb_flush` events
//!   are not replayed (the model's scheduler and TLB policy decide those);
//!   the trace's counts are reported as metrics `trace_faults` and
//!   `trace_tlb_flushes` beside the model's.
//!
//! The assumptions are listed in docs/model.md, "Trace replay".

mod mm;
mod sched;
mod task;

use super::{parse_params, Files, Params, Workload, WorkloadEntry};
use crate::engine::rng::Streams;
use crate::engine::track::{Tracked, TrackedCell};
use crate::hw::CpuId;
use crate::kernel::fork::spawn_user;
use crate::kernel::{Ctx, Program, TaskId, World};
use crate::trace::{EventKind, TaskKind, Trace};
use mm::Space;
use sched::handoffs;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use task::run_task;

/// The window mapped around a fault outside every recorded mapping.
pub const IMAGE_WINDOW_BYTES: u64 = 1 << 20;
/// The recorded host's page size (the replay runs 4 KiB pages only).
const PAGE: u64 = crate::hw::mem::PAGE_SIZE_4K;

/// Where the replayed tasks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// On the CPU each `run` event names: the host scheduler's placement,
    /// imposed at no cost ([`set_cpus_allowed_replayed`](crate::kernel::sched::set_cpus_allowed_replayed)). Which tasks
    /// overlap on which CPUs decides how many flushes must reach another
    /// CPU, so this is what a comparison with the recording host needs.
    /// The profile must have every recorded CPU.
    #[default]
    Recorded,
    /// Wherever the model's scheduler puts them (no affinity).
    Model,
}

/// What becomes of a recorded sleep that no recorded task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UntracedSleeps {
    /// Slept for its recorded length on a timer
    /// ([`crate::kernel::hrtimer::schedule_hrtimeout`]): what ended it on
    /// the host (a timer, I/O, an untraced task) is taken to end it as
    /// long after in the model.
    #[default]
    Timer,
    /// Left out: the task runs on at once (tlbsim before the timer).
    Drop,
}

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// The trace file (relative to the working directory).
    pub trace: String,
    /// Where the tasks run (default `recorded`).
    #[serde(default)]
    pub placement: Placement,
    /// Sleeps with no recorded waker (default `timer`).
    #[serde(default)]
    pub untraced_sleeps: UntracedSleeps,
    /// The parsed trace.
    #[serde(skip)]
    parsed: Option<Arc<Trace>>,
}

impl Replay {
    /// From config parameters and the trace's text, which the caller read
    /// into `files` ([`crate::config::WorkloadConfig::file_paths`]):
    /// parses the trace.
    pub fn from_params(p: &Params, files: &Files) -> Result<Self, String> {
        let mut r: Replay = parse_params(p)?;
        let text = match files.get(&r.trace) {
            Some(Ok(text)) => text,
            Some(Err(e)) => return Err(format!("`trace`: {e}")),
            None => {
                return Err(format!(
                    "`trace`: {}: not read (the caller reads the files a workload names into WorkloadConfig::files)",
                    r.trace
                ))
            }
        };
        let t = Trace::parse(&r.trace, text).map_err(|e| format!("`trace`: {e}"))?;
        supported(&t).map_err(|e| format!("`trace`: {}: {e}", r.trace))?;
        r.parsed = Some(Arc::new(t));
        Ok(r)
    }

    /// The highest CPU a `run` event names.
    fn max_recorded_cpu(&self) -> Option<u32> {
        let t = self.parsed.as_ref()?;
        t.events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Run { cpu } => Some(cpu),
                _ => None,
            })
            .max()
    }
}

/// Refuses what the replay does not model.
fn supported(t: &Trace) -> Result<(), String> {
    if t.tasks.is_empty() {
        return Err("the trace has no tasks".into());
    }
    if t.tasks[0].parent != 0 {
        return Err("the first task must be the recorded command (parent=0)".into());
    }
    // An exec in a process with live threads (which exec kills) is not replayed.
    for e in &t.events {
        if e.kind == EventKind::Exec {
            let me = t.task(e.tid).expect("parsed");
            let threads = t
                .tasks
                .iter()
                .filter(|o| o.pid == me.pid && o.tid != me.tid && o.kind == TaskKind::Thread);
            for th in threads {
                let created = t
                    .events
                    .iter()
                    .any(|c| c.t_ns <= e.t_ns && c.kind == EventKind::Clone { child: th.tid });
                let exited = t
                    .events
                    .iter()
                    .any(|x| x.tid == th.tid && x.kind == EventKind::Exit && x.t_ns <= e.t_ns);
                if created && !exited {
                    return Err(format!(
                        "task {} execs while its thread {} lives: not supported",
                        e.tid, th.tid
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What the tasks of one replay share.
struct Shared {
    untraced_sleeps: UntracedSleeps,
    placement: Placement,
    /// `run` event index → the event of another task that handed it the
    /// CPU ([`handoffs`]); empty unless the placement is recorded.
    handoff: BTreeMap<usize, usize>,
    /// The events `handoff` names.
    awaited: BTreeSet<usize>,
    /// Handed-off events processed so far, and tasks waiting for one.
    handed: Tracked<BTreeSet<usize>>,
    handoff_waiters: Tracked<BTreeMap<usize, TaskId>>,
    /// Recorder time taken out of the compute so far, ns.
    removed_ns: TrackedCell<u64>,
    /// Runnable waits replayed so far ([`runnable_wait`]), ns.
    runnable_wait_ns: TrackedCell<u64>,
    trace: Arc<Trace>,
    /// Each task's event indices, in order.
    by_tid: BTreeMap<u32, Vec<usize>>,
    /// Wakes received and not yet consumed by a sleep.
    tokens: Tracked<BTreeMap<u32, u64>>,
    /// Tasks asleep waiting for a wake, and their model ids.
    sleeping: Tracked<BTreeMap<u32, TaskId>>,
}

/// Driver events per replayed record (a fault, a system call, a sleep or
/// a wake, a clone, an exec or an exit, with the user work before it;
/// `run`, `preempt`, `migrate`, `tlb_flush`, `shootdown` and `perf`
/// records are not replayed as such). Fitted on the fixture traces
/// (`crates/tlbsim/tests/fixtures/traces`) replayed on ampere-32 and
/// skylake-4c8t: 9.4 to 14.0 a record (`sh.trace`: 404 records, 4,908
/// and 4,024 events; `sort.trace`: 170, 2,387 and 1,601; `xz.trace`:
/// 783, 9,900 and 9,263; `xz-v2.trace`: 786, 7,862 and 7,559).
const EVENTS_PER_RECORD: u64 = 12;

impl Workload for Replay {
    /// From the trace, which [`Replay::from_params`] has read and parsed
    /// already (within [`crate::config::limits::MAX_TRACE_FILE_BYTES`]):
    /// its replayed records, and its tasks, every one of which stays
    /// alive until its parent has replayed its own records and reaps it.
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let Some(t) = self.parsed.as_ref() else {
            return super::Estimate::default();
        };
        let replayed = t
            .events
            .iter()
            .filter(|e| {
                !matches!(
                    e.kind,
                    EventKind::Run { .. }
                        | EventKind::Preempt
                        | EventKind::Migrate { .. }
                        | EventKind::TlbFlush { .. }
                        | EventKind::Shootdown { .. }
                        | EventKind::Perf { .. }
                )
            })
            .count() as u64;
        super::Estimate {
            events: Some(Figure::product(
                "trace",
                &[
                    (replayed, "replayed records"),
                    (EVENTS_PER_RECORD, "events"),
                ],
            )),
            live_pages: None,
            tasks: Some(Figure::product(
                "trace",
                &[(t.tasks.len() as u64, "recorded tasks")],
            )),
        }
    }

    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        let cpus = profile.topology.cpus;
        match self.max_recorded_cpu() {
            Some(c) if self.placement == Placement::Recorded && c >= cpus => Err(format!(
                "`placement`: \"recorded\" runs each task on the CPU the trace names, up to CPU {c}, but the machine has {cpus} CPUs (use placement = \"model\")"
            )),
            _ => Ok(()),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let trace = Arc::clone(self.parsed.as_ref().expect("from_params parsed the trace"));
        let mut by_tid: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut untraced = 0u64;
        for (i, e) in trace.events.iter().enumerate() {
            by_tid.entry(e.tid).or_default().push(i);
            if let EventKind::Block { waker: None, ns } = e.kind {
                untraced = untraced.saturating_add(ns);
            }
        }
        let (timed, dropped) = match self.untraced_sleeps {
            UntracedSleeps::Timer => (untraced, 0),
            UntracedSleeps::Drop => (0, untraced),
        };
        let counts = trace.counts();
        {
            let mut st = w.stats.borrow_mut();
            let m = &mut st.metrics;
            m.insert(w.metric("replay_dropped_sleep_ns"), dropped as f64);
            m.insert(w.metric("replay_timed_sleep_ns"), timed as f64);
            let c = |k: &str| counts.get(k).copied().unwrap_or(0) as f64;
            m.insert(w.metric("trace_faults"), c("fault"));
            m.insert(w.metric("trace_tlb_flushes"), c("tlb_flush"));
            m.insert(w.metric("trace_shootdowns"), c("shootdown"));
            let span = trace.events.last().map_or(0, |e| e.t_ns);
            m.insert(w.metric("trace_elapsed_ns"), span as f64);
        }
        let handoff = match self.placement {
            Placement::Recorded => handoffs(&trace),
            Placement::Model => BTreeMap::new(),
        };
        let shared = Rc::new(Shared {
            placement: self.placement,
            untraced_sleeps: self.untraced_sleeps,
            awaited: handoff.values().copied().collect(),
            handoff,
            handed: Tracked::fresh(BTreeSet::new()),
            handoff_waiters: Tracked::fresh(BTreeMap::new()),
            removed_ns: TrackedCell::fresh(0),
            runnable_wait_ns: TrackedCell::fresh(0),
            trace: Arc::clone(&trace),
            by_tid,
            tokens: Tracked::fresh(BTreeMap::new()),
            sleeping: Tracked::fresh(BTreeMap::new()),
        });
        let root = &trace.tasks[0];
        let space = super::shared(Space::default());
        spawn_user(w, &root.comm, CpuId::BOOT, program(shared, root.tid, space))
    }
}

/// The program of recorded task `tid` in address space `space`.
fn program(shared: Rc<Shared>, tid: u32, space: Rc<Tracked<Space>>) -> Program {
    Box::new(move |ctx: Ctx| Box::pin(async move { run_task(&ctx, &shared, tid, space).await }))
}

impl Shared {
    /// The CPU of task `tid`'s first `run` event.
    fn first_run(&self, tid: u32) -> Option<CpuId> {
        self.by_tid
            .get(&tid)?
            .iter()
            .find_map(|&j| match self.trace.events[j].kind {
                EventKind::Run { cpu } => Some(CpuId::new(cpu)),
                _ => None,
            })
    }
}

/// The registry entry of `replay`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "replay",
    description: "a recorded trace (tlbsim record): its tasks' memory operations, faults, compute and wake-ups",
    new: |p, files| super::resolved(Replay::from_params(p, files)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_beside_a_live_thread_is_refused() {
        let text =
            "tlbsim-trace 1\nhost h\nkernel k\narch x86_64\ncpus 2\npage_size 4096\ncommand c\n\
task 1 pid=1 parent=0 kind=process comm=a\ntask 2 pid=1 parent=1 kind=thread comm=a\n\
ev 0 1 clone child=2\nev 5 1 exec\nev 9 2 exit\nend events=3\n";
        let t = Trace::parse("t", text).unwrap();
        let e = supported(&t).unwrap_err();
        assert_eq!(e, "task 1 execs while its thread 2 lives: not supported");
        // Once the thread has exited, the exec is fine.
        let t = Trace::parse(
            "t",
            &text.replace("ev 5 1 exec\nev 9 2 exit", "ev 5 2 exit\nev 9 1 exec"),
        )
        .unwrap();
        assert!(supported(&t).is_ok());
    }

    #[test]
    fn handoffs_pair_the_halves_of_a_switch_on_one_cpu() {
        let text =
            "tlbsim-trace 1\nhost h\nkernel k\narch x86_64\ncpus 2\npage_size 4096\ncommand c\n\
task 1 pid=1 parent=0 kind=process comm=a\ntask 2 pid=1 parent=1 kind=thread comm=a\n\
ev 0 1 run cpu=0\nev 1 1 clone child=2\nev 5 1 preempt\nev 5 2 run cpu=0\n\
ev 9 2 block waker=1 ns=4\nev 9 1 run cpu=0\nev 10 1 wake target=2\nev 11 2 run cpu=1\n\
ev 12 2 exit\nev 13 1 exit\nend events=10\n";
        let t = Trace::parse("t", text).unwrap();
        // Task 2's first run takes cpu0 from task 1's preempt (events 3 <- 2),
        // task 1 takes it back at task 2's block (5 <- 4); task 2's wake-up
        // on idle cpu1 waits for nobody.
        let h: Vec<(usize, usize)> = handoffs(&t).into_iter().collect();
        assert_eq!(h, vec![(3, 2), (5, 4)]);
    }

    #[test]
    fn recorded_placement_needs_the_recorded_cpus() {
        let text =
            "tlbsim-trace 1\nhost h\nkernel k\narch x86_64\ncpus 4\npage_size 4096\ncommand c\n\
task 1 pid=1 parent=0 kind=process comm=a\nev 0 1 run cpu=3\nev 1 1 exit\nend events=2\n";
        let mut r = Replay {
            trace: "t".into(),
            placement: Placement::Recorded,
            untraced_sleeps: UntracedSleeps::Timer,
            parsed: Some(Arc::new(Trace::parse("t", text).unwrap())),
        };
        let p = crate::config::builtin_profile("skylake-4c8t").unwrap();
        let mut two = p.clone();
        two.topology.cpus = 2;
        assert!(r.check(&p).is_ok());
        let e = r.check(&two).unwrap_err();
        assert!(e.starts_with("`placement`:") && e.contains("CPU 3"), "{e}");
        r.placement = Placement::Model;
        assert!(r.check(&two).is_ok());
    }

    #[test]
    fn pieces_split_and_translate() {
        let mut s = Space::default();
        s.ranges.insert(0x10000, (0x14000, 0x9000_0000));
        s.ranges.insert(0x14000, (0x18000, 0x7000_0000));
        assert_eq!(
            s.pieces(0x13000, 0x2000),
            vec![
                (0x13000, 0x9000_3000, 0x1000),
                (0x14000, 0x7000_0000, 0x1000)
            ]
        );
        s.remove(0x11000, 0x1000);
        assert_eq!(s.translate(0x11000), None);
        assert_eq!(s.translate(0x12010), Some(0x9000_2010));
        assert_eq!(s.translate(0x10010), Some(0x9000_0010));
        let (lo, hi) = s.window(0x11800);
        assert_eq!((lo, hi), (0x11000, 0x12000));
    }
}
