//! From `perf script` to a trace: the text of `perf script --ns -F
//! comm,tid,pid,cpu,time,event,trace` over the tracepoints `tlbsim
//! record` asks for, converted to a [`Trace`] (docs/trace-format.md, "From
//! perf"). No I/O: the CLI runs `perf` and hands the text here.
//!
//! One file per tracepoint family: `sched.rs` (`sched:*` and
//! `task:task_newtask`: tasks, sleeps, wake-ups, migrations),
//! `raw_syscalls.rs` (the memory system calls a trace keeps) and `x86.rs`
//! (`exceptions:page_fault_user`, `csd:csd_queue_cpu`, `tlb:tlb_flush`,
//! which x86 has and arm64 lacks); [`line`](mod@line) reads one line.

pub mod line;
mod raw_syscalls;
mod sched;
mod x86;

use super::{Event, EventKind, Header, TaskRec, Trace};
use line::Line;
use raw_syscalls::Nr;
use std::collections::BTreeMap;

/// A task as the conversion follows it.
struct Task {
    rec: TaskRec,
    pid_seen: bool,
    running: bool,
    /// Index in the event list of its block without a waker yet, and when
    /// it began.
    open_block: Option<(usize, u64)>,
    /// `sys_enter`: number, arguments, time.
    pending: Option<(u64, [u64; 6], u64)>,
}

/// The conversion under way: the tasks kept so far (the recorded command
/// and what it created), their events, and each one's perf records.
struct Conv {
    /// The architecture's system-call numbers.
    nr: Nr,
    tasks: BTreeMap<u32, Task>,
    /// Task ids in the order first seen.
    order: Vec<u32>,
    events: Vec<Event>,
    /// Each kept task's perf records (their times), for the `perf` events.
    recs: BTreeMap<u32, Vec<u64>>,
    /// Clone flags of children created and not yet forked
    /// (`task:task_newtask`).
    clone_flags: BTreeMap<u32, u64>,
}

/// Converts `perf script --ns -F comm,tid,pid,cpu,time,event,trace` text
/// into a trace (docs/trace-format.md, "From perf"). The first task seen
/// is the recorded command; only tasks it created (or their descendants)
/// are kept. An error names the line that cannot be read, or says that
/// perf recorded nothing.
pub fn convert(text: &str, header: Header) -> Result<Trace, String> {
    let mut c = Conv {
        nr: raw_syscalls::numbers(&header.arch)?,
        tasks: BTreeMap::new(),
        order: Vec::new(),
        events: Vec::new(),
        recs: BTreeMap::new(),
        clone_flags: BTreeMap::new(),
    };
    let mut t0 = None;
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let Some(p) = line::parse(l) else {
            return Err(format!("perf script line {}: cannot read `{l}`", i + 1));
        };
        let t0 = *t0.get_or_insert(p.t_ns);
        c.line(&p, p.t_ns.saturating_sub(t0));
    }
    if c.order.is_empty() {
        return Err("perf recorded no events (did the command run?)".into());
    }
    // A syscall event is stamped at its entry: keep the list in time order.
    c.events.sort_by_key(|e| e.t_ns);
    let events = if header.version >= 2 {
        with_perf_records(c.events, &c.recs)
    } else {
        c.events
    };
    Ok(Trace {
        header,
        tasks: c.order.iter().map(|t| c.tasks[t].rec.clone()).collect(),
        events,
    })
}

impl Conv {
    /// One line `p`, at `t` ns since the first.
    fn line(&mut self, p: &Line<'_>, t: u64) {
        if self.order.is_empty() {
            self.order.push(p.tid);
            self.tasks
                .insert(p.tid, sched::new_task(p.tid, p.pid, 0, p.comm));
        }
        let me = self.tasks.contains_key(&p.tid).then_some(p.tid);
        if let Some(m) = me {
            self.recs.entry(m).or_default().push(t);
            self.learn_pid(m, p.pid);
            // Its own event shows a task on a CPU: a sleep or preemption
            // ended (when perf gives no switch-in record). Not its
            // switch-out record, nor the flush the switch itself makes
            // (x86's `switch_mm_irqs_off()` traces
            // `TLB_FLUSH_ON_TASK_SWITCH`, reason 0, while `current` is
            // still the task going to sleep).
            if !p.event.starts_with("PERF_RECORD_SWITCH OUT") && !x86::is_switch_flush(p) {
                self.resume(m, t, p.cpu);
            }
        }
        match p.event.split_once(':').map_or("", |(family, _)| family) {
            "sched" | "task" => self.sched(p, me, t),
            "raw_syscalls" => self.raw_syscalls(p, me, t),
            _ => self.x86(p, me, t),
        }
    }

    /// A task's first own line gives its process id: a thread if it is
    /// not its own.
    fn learn_pid(&mut self, tid: u32, pid: u32) {
        use super::TaskKind;
        let tk = self.tasks.get_mut(&tid).expect("present");
        if !tk.pid_seen {
            tk.rec.pid = pid;
            tk.rec.kind = match (pid == tid, tk.rec.kind) {
                (false, _) => TaskKind::Thread,
                (true, TaskKind::Vfork) => TaskKind::Vfork,
                (true, _) => TaskKind::Process,
            };
            tk.pid_seen = true;
        }
    }

    /// Marks `tid` running on `cpu` from `t` (a `run` event) if it was
    /// not, ending its open sleep.
    fn resume(&mut self, tid: u32, t: u64, cpu: u32) {
        let Some(tk) = self.tasks.get_mut(&tid) else {
            return;
        };
        if tk.running {
            return;
        }
        if let Some((i, since)) = tk.open_block.take() {
            if let EventKind::Block { ns, .. } = &mut self.events[i].kind {
                *ns = t - since;
            }
        }
        tk.running = true;
        self.push(t, tid, EventKind::Run { cpu });
    }

    /// Appends an event; returns its index.
    fn push(&mut self, t_ns: u64, tid: u32, kind: EventKind) -> usize {
        self.events.push(Event { t_ns, tid, kind });
        self.events.len() - 1
    }
}

/// Puts a `perf records=N` event before each event whose task wrote N > 0
/// perf records between the end of its previous event and its start (the
/// previous system call's `sys_exit`, untraced system calls, switches,
/// wake-ups, a fault's own record): the time they cost lies in that gap.
fn with_perf_records(events: Vec<Event>, recs: &BTreeMap<u32, Vec<u64>>) -> Vec<Event> {
    let mut last_end: BTreeMap<u32, u64> = BTreeMap::new();
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        if let (Some(&from), Some(r)) = (last_end.get(&e.tid), recs.get(&e.tid)) {
            let lo = r.partition_point(|&t| t < from);
            let hi = r.partition_point(|&t| t < e.t_ns);
            if hi > lo {
                out.push(Event {
                    t_ns: e.t_ns,
                    tid: e.tid,
                    kind: EventKind::Perf {
                        records: (hi - lo) as u64,
                    },
                });
            }
        }
        let end = e.end_ns();
        let le = last_end.entry(e.tid).or_insert(end);
        *le = (*le).max(end);
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TaskKind;

    const SAMPLE: &str = "\
            sort 31344/31344 [000] 40875.398815000:              tlb:tlb_flush: pages:1 reason:local MM shootdown (3)
            sort 31344/31344 [000] 40875.399112000:     raw_syscalls:sys_enter: NR 9 (0, 2000, 3, 22, ffffffff, 0)
            sort 31344/31344 [000] 40875.399113000:      raw_syscalls:sys_exit: NR 9 = 140000107073536
            sort 31344/31344 [000] 40875.399576000: exceptions:page_fault_user: address=0x7f5450a69000 ip=0x7f5450a8b581 error_code=0x6
            sort 31344/31344 [000] 40875.399600000:   sched:sched_process_fork: comm=sort pid=31344 child_comm=sort child_pid=31345
            sort 31344/31344 [000] 40875.399700000:         sched:sched_switch: prev_comm=sort prev_pid=31344 prev_prio=120 prev_state=S ==> next_comm=sort next_pid=31345 next_prio=120
            sort 31344/31344 [000] 40875.399701000:              tlb:tlb_flush: pages:-1 reason:flush on task switch (0)
            sort 31345/31345 [000] 40875.399800000:         sched:sched_wakeup: comm=sort pid=31344 prio=120 target_cpu=001
            sort 31345/31345 [000] 40875.399900000:         sched:sched_switch: prev_comm=sort prev_pid=31345 prev_prio=120 prev_state=R ==> next_comm=lto cgu.13 next_pid=31344 next_prio=120
";

    /// A test header in format `version`.
    fn header(command: &str, version: u32) -> Header {
        Header {
            host: "h".into(),
            kernel: "k".into(),
            arch: "x86_64".into(),
            cpus: 2,
            page_size_bytes: 4096,
            command: command.into(),
            version,
            overhead: None,
        }
    }

    #[test]
    fn a_clone_vm_child_is_a_vfork_task() {
        let newtask = |flags: &str| {
            format!(
                "            sort 31344/31344 [000] 40875.399590000:          task:task_newtask: pid=31345 comm=sort clone_flags={flags} oom_score_adj=0\n"
            )
        };
        let at = SAMPLE
            .find("            sort 31344/31344 [000] 40875.399600000")
            .unwrap();
        let kind = |flags: &str| {
            let text = format!("{}{}{}", &SAMPLE[..at], newtask(flags), &SAMPLE[at..]);
            let t = convert(&text, header("sort", 3)).unwrap();
            let out = t.to_text();
            assert_eq!(Trace::parse("t", &out).unwrap(), t);
            t.task(31345).unwrap().kind
        };
        // posix_spawn's clone3(CLONE_VM | CLONE_VFORK | SIGCHLD).
        assert_eq!(kind("4111"), TaskKind::Vfork);
        assert_eq!(kind("11"), TaskKind::Process); // fork(): SIGCHLD
                                                   // Without task_newtask: a process.
        let t = convert(SAMPLE, header("sort", 3)).unwrap();
        assert_eq!(t.task(31345).unwrap().kind, TaskKind::Process);
    }

    #[test]
    fn converts_perf_script() {
        let h = header("sort", 1);
        let t = convert(SAMPLE, h).unwrap();
        let text = t.to_text();
        assert!(
            text.contains("ev 297000 31344 mmap addr=0x7f5450a69000 len=8192 prot=rw- dur=1000"),
            "{text}"
        );
        assert!(
            text.contains("ev 0 31344 tlb_flush reason=3 pages=1"),
            "{text}"
        );
        assert!(text.contains("fault addr=0x7f5450a69000 write=1"), "{text}");
        assert!(text.contains("ev 785000 31344 clone child=31345"), "{text}");
        assert!(
            text.contains("ev 885000 31344 block waker=31345 ns=200000"),
            "{text}"
        );
        assert!(text.contains("ev 985000 31345 wake target=31344"), "{text}");
        assert!(text.contains("ev 1085000 31344 run cpu=0"), "{text}");
        assert!(
            text.contains("task 31345 pid=31345 parent=31344 kind=process"),
            "{text}"
        );
        // The written trace reads back.
        assert_eq!(Trace::parse("t", &text).unwrap(), t);
        assert!(!text.contains("perf records"), "version 1 has none");
    }

    #[test]
    fn a_child_process_exit_wakes_its_sleeping_parent() {
        // The parent sleeps (wait4) and no wake-up is recorded: the child's
        // exit_notify() runs after perf stopped following it.
        let sample = "\
            sh 100/100 [000] 1.000000000:   sched:sched_process_fork: comm=sh pid=100 child_comm=sh child_pid=101
            sh 100/100 [000] 1.000100000:         sched:sched_switch: prev_comm=sh prev_pid=100 prev_prio=120 prev_state=S ==> next_comm=sh next_pid=101 next_prio=120
            sh 101/101 [000] 1.000500000:   sched:sched_process_exit: comm=sh pid=101 prio=120
            sh 100/100 [001] 1.000600000:              tlb:tlb_flush: pages:1 reason:local MM shootdown (3)
";
        let h = header("sh", 1);
        let text = convert(sample, h).unwrap().to_text();
        assert!(
            text.contains("ev 100000 100 block waker=101 ns=500000"),
            "{text}"
        );
        assert!(
            text.contains("ev 500000 101 wake target=100\nev 500000 101 exit"),
            "{text}"
        );
    }

    #[test]
    fn version_2_counts_each_gaps_perf_records() {
        let h = header("sort", 2);
        let text = convert(SAMPLE, h).unwrap().to_text();
        // Before the mmap: the tlb_flush record (its cost follows it);
        // before the fault: the mmap's sys_exit (its sys_enter is inside
        // the call's `dur`); before the clone: the fault's own record.
        for (t, next) in [(297000, "mmap"), (761000, "fault"), (785000, "clone")] {
            let want = format!("ev {t} 31344 perf records=1\nev {t} 31344 {next}");
            assert!(text.contains(&want), "{want}\n{text}");
        }
        assert_eq!(text.matches("perf records=").count(), 7, "{text}");
    }
}
