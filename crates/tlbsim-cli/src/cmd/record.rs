//! `tlbsim record [-o FILE] -- COMMAND ARGS...`: runs a command under
//! `perf record` with the scheduler, system-call, page-fault and
//! `tlb:tlb_flush` tracepoints, converts `perf script`'s output to a
//! `tlbsim-trace` (docs/trace-format.md) and writes it whole or not at all.

use crate::files::{check_outputs_or_report, write_or_report};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use tlbsim::trace::{Event, EventKind, Header, TaskKind, TaskRec, Trace};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace file to write (replaced whole or not at all).
    #[arg(short = 'o', long, default_value = "tlbsim.trace")]
    output: PathBuf,
    /// Keep perf's raw data file here instead of deleting it.
    #[arg(long)]
    keep_perf_data: Option<PathBuf>,
    /// The command to record and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Tracepoints every recording needs.
const REQUIRED: &[&str] = &[
    "sched:sched_switch",
    "sched:sched_wakeup",
    "sched:sched_migrate_task",
    "sched:sched_process_fork",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
];
/// Tracepoints recorded where the kernel has them (x86 has both; arm64
/// has neither: its traces have no page faults and no flushes).
/// `task:task_newtask` gives each new task's clone flags (a `vfork` or
/// `posix_spawn` child shares its parent's mm: `CLONE_VM`); without it a
/// child is a thread or a process as `clone`'s own flags say, and
/// `clone3`'s and `vfork`'s children are processes.
const OPTIONAL: &[&str] = &[
    "exceptions:page_fault_user",
    "tlb:tlb_flush",
    "task:task_newtask",
    "csd:csd_queue_cpu",
];

/// `CLONE_VM`: the child shares the parent's address space.
const CLONE_VM: u64 = 0x100;
/// `CLONE_THREAD`: the child joins the parent's thread group.
const CLONE_THREAD: u64 = 0x10000;

/// What a child with clone flags `flags` is: a thread (`CLONE_THREAD`), a
/// process in its parent's mm (`CLONE_VM` alone: `vfork()`,
/// `posix_spawn()`), or a process with a copy.
fn kind_of_clone(flags: u64) -> TaskKind {
    if flags & CLONE_THREAD != 0 {
        TaskKind::Thread
    } else if flags & CLONE_VM != 0 {
        TaskKind::Vfork
    } else {
        TaskKind::Process
    }
}

/// Records the command and writes the trace.
pub fn run(args: Args) -> ExitCode {
    let outputs = [
        ("-o", Some(args.output.as_path())),
        ("--keep-perf-data", args.keep_perf_data.as_deref()),
    ];
    if let Err(code) = check_outputs_or_report(&[], &outputs) {
        return code;
    }
    match record(&args) {
        Ok(trace) => {
            let text = trace.to_text();
            let counts = trace.counts();
            let code = write_or_report(&args.output, text.as_bytes());
            if code == ExitCode::SUCCESS {
                let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
                eprintln!(
                    "tlbsim record: wrote {} ({} tasks, {} events: {})",
                    args.output.display(),
                    trace.tasks.len(),
                    trace.events.len(),
                    summary.join(", ")
                );
            }
            code
        }
        Err(e) => {
            eprintln!("error: tlbsim record: {e}");
            ExitCode::from(2)
        }
    }
}

/// `perf record` of `events` with switch records into `data`, up to and
/// including the `--` before the command (the recording and its overhead
/// probe run the same one).
pub(crate) fn perf_record(data: &Path, events: &[&str]) -> Command {
    let mut perf = Command::new("perf");
    perf.args(["record", "-q", "--switch-events", "-o"])
        .arg(data);
    for e in events {
        perf.args(["-e", e]);
    }
    perf.arg("--");
    perf
}

fn tracefs() -> Option<PathBuf> {
    [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_dir())
}

fn tracepoint_exists(base: &Path, tp: &str) -> bool {
    let (sys, name) = tp.split_once(':').unwrap_or((tp, ""));
    base.join(sys).join(name).is_dir()
}

fn record(args: &Args) -> Result<Trace, String> {
    match Command::new("perf").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(_) | Err(_) => {
            return Err(
                "`perf` is not installed or does not run (install linux-perf / linux-tools)".into(),
            )
        }
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root && paranoid.is_some_and(|p| p > -1) {
        return Err(format!(
            "tracepoints need root or kernel.perf_event_paranoid <= -1 (it is {}): run as root or `sysctl kernel.perf_event_paranoid=-1`",
            paranoid.unwrap_or(0)
        ));
    }
    let prog = &args.command[0];
    let found = if prog.contains('/') {
        Path::new(prog).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
    };
    if !found {
        return Err(format!("command `{prog}` not found"));
    }
    let Some(base) = tracefs() else {
        return Err("tracefs is not mounted (/sys/kernel/tracing): `mount -t tracefs nodev /sys/kernel/tracing`".into());
    };
    let mut events: Vec<&str> = Vec::new();
    for tp in REQUIRED {
        if !tracepoint_exists(&base, tp) {
            return Err(format!("this kernel has no tracepoint {tp} (needed)"));
        }
        events.push(tp);
    }
    for tp in OPTIONAL {
        if tracepoint_exists(&base, tp) {
            events.push(tp);
        } else {
            eprintln!("tlbsim record: this kernel has no tracepoint {tp}; recording without it");
        }
    }
    let probe = std::env::temp_dir().join(format!("tlbsim-probe-{}.data", std::process::id()));
    let _probe_registered = crate::cleanup::register(&probe);
    let overhead = match crate::cmd::record_probe::measure(&events, &probe) {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("tlbsim record: {e}; the trace has no `overhead` line (replay will not subtract perf's cost)");
            None
        }
    };
    let data = match &args.keep_perf_data {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join(format!("tlbsim-record-{}.data", std::process::id())),
    };
    // perf's data in the temporary directory goes if a signal ends tlbsim.
    let _data_registered = args
        .keep_perf_data
        .is_none()
        .then(|| crate::cleanup::register(&data));
    let mut perf = perf_record(&data, &events);
    perf.args(&args.command);
    let status = perf.status().map_err(|e| format!("cannot run perf: {e}"))?;
    let script = Command::new("perf")
        .args([
            "script",
            "--ns",
            "--show-switch-events",
            "-F",
            "comm,tid,pid,cpu,time,event,trace",
            "-i",
        ])
        .arg(&data)
        .output()
        .map_err(|e| format!("cannot run perf script: {e}"));
    if args.keep_perf_data.is_none() {
        let _ = std::fs::remove_file(&data);
    }
    let script = script?;
    if !status.success() {
        eprintln!("tlbsim record: the command exited with {status}; converting what was recorded");
    }
    if !script.status.success() {
        // perf script warns about fields of event kinds the file lacks.
        let stderr = String::from_utf8_lossy(&script.stderr);
        let why: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.contains("not valid for"))
            .collect();
        return Err(format!("perf script failed: {}", why.join("; ")));
    }
    let text = String::from_utf8_lossy(&script.stdout);
    let header = Header {
        host: read_trim("/proc/sys/kernel/hostname"),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        arch: std::env::consts::ARCH.to_string(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        page_size_bytes: page_size(),
        command: args.command.join(" "),
        version: tlbsim::trace::FORMAT_VERSION,
        overhead,
    };
    convert(&text, header)
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn page_size() -> u64 {
    Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(4096)
}

/// System-call numbers of the calls a trace keeps, per architecture.
struct Nr {
    mmap: u64,
    munmap: u64,
    mprotect: u64,
    madvise: u64,
    brk: u64,
    mremap: u64,
    clone: u64,
}

fn numbers(arch: &str) -> Result<Nr, String> {
    match arch {
        // arch/x86/entry/syscalls/syscall_64.tbl
        "x86_64" => Ok(Nr {
            mmap: 9,
            mprotect: 10,
            munmap: 11,
            brk: 12,
            mremap: 25,
            madvise: 28,
            clone: 56,
        }),
        // include/uapi/asm-generic/unistd.h
        "aarch64" => Ok(Nr {
            mmap: 222,
            mprotect: 226,
            munmap: 215,
            brk: 214,
            mremap: 216,
            madvise: 233,
            clone: 220,
        }),
        a => Err(format!(
            "recording on {a} is not supported (x86_64 and aarch64 are)"
        )),
    }
}

/// One line of `perf script --ns -F comm,tid,pid,cpu,time,event,trace`.
struct Line<'a> {
    pid: u32,
    tid: u32,
    comm: &'a str,
    cpu: u32,
    t_ns: u64,
    event: &'a str,
    trace: &'a str,
}

fn parse_line(l: &str) -> Option<Line<'_>> {
    // "COMM PID/TID [CPU] SEC.NSEC: EVENT: TRACE"; COMM may hold spaces.
    let open = l.find(" [")?;
    let close = open + l[open..].find(']')?;
    let cpu = l[open + 2..close].trim().parse().ok()?;
    let (comm, ids) = l[..open].trim().rsplit_once(' ')?;
    let (pid, tid) = ids.split_once('/')?;
    let rest = l[close + 1..].trim_start();
    let (time, rest) = rest.split_once(": ")?;
    let (sec, ns) = time.split_once('.')?;
    let t_ns = sec.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?;
    let (event, trace) = match rest.split_once(": ") {
        Some((e, t)) => (e.trim(), t.trim()),
        None => (rest.trim().trim_end_matches(':'), ""),
    };
    Some(Line {
        pid: pid.trim().parse().ok()?,
        tid: tid.trim().parse().ok()?,
        comm: comm.trim(),
        cpu,
        t_ns,
        event,
        trace,
    })
}

/// The value of `key=` in a tracepoint's text (up to the next space).
fn field<'a>(trace: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=");
    let mut from = 0;
    while let Some(i) = trace[from..].find(&pat) {
        let at = from + i;
        if at == 0 || trace.as_bytes()[at - 1] == b' ' {
            let v = &trace[at + pat.len()..];
            return Some(v.split(' ').next().unwrap_or(""));
        }
        from = at + pat.len();
    }
    None
}

fn num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

struct Task {
    rec: TaskRec,
    pid_seen: bool,
    running: bool,
    /// Index in the event list of its block without a waker yet, and when it began.
    open_block: Option<(usize, u64)>,
    /// `sys_enter`: number, arguments, time.
    pending: Option<(u64, [u64; 6], u64)>,
}

/// Converts `perf script --ns -F comm,tid,pid,cpu,time,event,trace` text
/// into a trace (docs/trace-format.md, "From perf"). The first task seen
/// is the recorded command; only tasks it created (or their descendants)
/// are kept.
pub fn convert(text: &str, header: Header) -> Result<Trace, String> {
    let nr = numbers(&header.arch)?;
    let mut tasks: BTreeMap<u32, Task> = BTreeMap::new();
    let mut order: Vec<u32> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    // Each kept task's perf records (their times), for the `perf` events.
    let mut recs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    // Clone flags of children created and not yet forked (task_newtask).
    let mut clone_flags: BTreeMap<u32, u64> = BTreeMap::new();
    let mut t0 = None;
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let Some(p) = parse_line(l) else {
            return Err(format!("perf script line {}: cannot read `{l}`", i + 1));
        };
        let t0 = *t0.get_or_insert(p.t_ns);
        let t = p.t_ns.saturating_sub(t0);
        if order.is_empty() {
            order.push(p.tid);
            tasks.insert(p.tid, new_task(p.tid, p.pid, 0, p.comm));
        }
        let me = tasks.contains_key(&p.tid).then_some(p.tid);
        if let Some(m) = me {
            recs.entry(m).or_default().push(t);
            let tk = tasks.get_mut(&m).expect("present");
            if !tk.pid_seen {
                tk.rec.pid = p.pid;
                tk.rec.kind = match (p.pid == p.tid, tk.rec.kind) {
                    (false, _) => TaskKind::Thread,
                    (true, TaskKind::Vfork) => TaskKind::Vfork,
                    (true, _) => TaskKind::Process,
                };
                tk.pid_seen = true;
            }
        }
        // Its own event shows a task on a CPU: a sleep or preemption ended
        // (when perf gives no switch-in record).
        // Not its switch-out record, nor the flush the switch itself makes
        // (x86's `switch_mm_irqs_off()` traces `TLB_FLUSH_ON_TASK_SWITCH`,
        // reason 0, while `current` is still the task going to sleep).
        if let Some(m) = me {
            if !p.event.starts_with("PERF_RECORD_SWITCH OUT") && !is_switch_flush(&p) {
                resume(&mut tasks, &mut events, m, t, p.cpu);
            }
        }
        match p.event {
            "task:task_newtask" => {
                // In the parent, before its sched_process_fork.
                let flags =
                    field(p.trace, "clone_flags").and_then(|f| u64::from_str_radix(f, 16).ok());
                if let (Some(_), Some(child), Some(flags)) =
                    (me, field(p.trace, "pid").and_then(num), flags)
                {
                    clone_flags.insert(child as u32, flags);
                }
            }
            "sched:sched_process_fork" => {
                let Some(parent) = me else { continue };
                let Some(child) = field(p.trace, "child_pid").and_then(num) else {
                    continue;
                };
                let child = child as u32;
                let comm = field(p.trace, "child_comm").unwrap_or(p.comm);
                let ptask = &tasks[&parent];
                // The flags task_newtask gave, else clone's own (clone3
                // and vfork pass none readable here: a process).
                let kind = match (clone_flags.remove(&child), ptask.pending) {
                    (Some(f), _) => kind_of_clone(f),
                    (None, Some((n, a, _))) if n == nr.clone => kind_of_clone(a[0]),
                    _ => TaskKind::Process,
                };
                let pid = if kind == TaskKind::Thread {
                    ptask.rec.pid
                } else {
                    child
                };
                let mut c = new_task(child, pid, parent, comm);
                c.rec.kind = kind;
                c.running = false;
                tasks.insert(child, c);
                order.push(child);
                push(&mut events, t, parent, EventKind::Clone { child });
            }
            "sched:sched_process_exec" => {
                if let Some(m) = me {
                    tasks.get_mut(&m).expect("present").rec.comm = p.comm.to_string();
                    push(&mut events, t, m, EventKind::Exec);
                }
            }
            "sched:sched_process_exit" => {
                if let Some(m) = me {
                    wake_waiting_parent(&mut tasks, &mut events, m, t);
                    push(&mut events, t, m, EventKind::Exit);
                }
            }
            "sched:sched_switch" => {
                let prev = field(p.trace, "prev_pid").and_then(num).map(|x| x as u32);
                let next = field(p.trace, "next_pid").and_then(num).map(|x| x as u32);
                let state = field(p.trace, "prev_state").unwrap_or("R");
                if let Some(prev) = prev.filter(|x| tasks.contains_key(x)) {
                    if state.starts_with('R') {
                        push(&mut events, t, prev, EventKind::Preempt);
                    } else if !state.starts_with('X') && !state.starts_with('Z') {
                        let i = push(
                            &mut events,
                            t,
                            prev,
                            EventKind::Block { waker: None, ns: 0 },
                        );
                        tasks.get_mut(&prev).expect("present").open_block = Some((i, t));
                    }
                    tasks.get_mut(&prev).expect("present").running = false;
                }
                if let Some(next) = next.filter(|x| tasks.contains_key(x)) {
                    resume(&mut tasks, &mut events, next, t, p.cpu);
                }
            }
            "sched:sched_wakeup" => {
                let (Some(waker), Some(target)) =
                    (me, field(p.trace, "pid").and_then(num).map(|x| x as u32))
                else {
                    continue;
                };
                let Some(tk) = tasks.get_mut(&target) else {
                    continue;
                };
                if let Some((i, _)) = tk.open_block {
                    if waker != target {
                        if let EventKind::Block { waker: w, .. } = &mut events[i].kind {
                            if w.is_none() {
                                *w = Some(waker);
                                push(&mut events, t, waker, EventKind::Wake { target });
                            }
                        }
                    }
                }
            }
            "sched:sched_migrate_task" => {
                let target = field(p.trace, "pid").and_then(num).map(|x| x as u32);
                let dest = field(p.trace, "dest_cpu").and_then(num);
                if let (Some(target), Some(dest)) = (target, dest) {
                    if tasks.contains_key(&target) {
                        push(
                            &mut events,
                            t,
                            target,
                            EventKind::Migrate { cpu: dest as u32 },
                        );
                    }
                }
            }
            "raw_syscalls:sys_enter" => {
                let Some(m) = me else { continue };
                let Some((n, args)) = syscall_enter(p.trace) else {
                    continue;
                };
                tasks.get_mut(&m).expect("present").pending = Some((n, args, t));
            }
            "raw_syscalls:sys_exit" => {
                let Some(m) = me else { continue };
                let Some(pending) = tasks.get_mut(&m).expect("present").pending.take() else {
                    continue;
                };
                let Some(ret) = syscall_ret(p.trace) else {
                    continue;
                };
                if let Some(ev) = syscall_event(&nr, pending, ret, t) {
                    events.push(Event {
                        t_ns: pending.2,
                        tid: m,
                        kind: ev,
                    });
                }
            }
            "exceptions:page_fault_user" => {
                let Some(m) = me else { continue };
                let addr = field(p.trace, "address").and_then(num);
                let code = field(p.trace, "error_code").and_then(num).unwrap_or(0);
                if let Some(addr) = addr {
                    if addr < tlbsim::trace::MAX_USER_ADDR {
                        // X86_PF_WRITE is bit 1 of the error code.
                        push(
                            &mut events,
                            t,
                            m,
                            EventKind::Fault {
                                addr,
                                write: code & 2 != 0,
                            },
                        );
                    }
                }
            }
            "csd:csd_queue_cpu" => {
                // A remote x86 TLB flush this task sent (one per target).
                let (Some(m), Some(cpu)) = (me, field(p.trace, "cpu").and_then(num)) else {
                    continue;
                };
                if field(p.trace, "func") == Some("flush_tlb_func") {
                    push(&mut events, t, m, EventKind::Shootdown { cpu: cpu as u32 });
                }
            }
            "tlb:tlb_flush" => {
                let Some(m) = me else { continue };
                let pages = p
                    .trace
                    .strip_prefix("pages:")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|v| v.parse::<i64>().ok());
                let reason = flush_reason(p.trace);
                if let (Some(pages), Some(reason)) = (pages, reason) {
                    let pages = u64::try_from(pages).unwrap_or(u64::MAX);
                    push(&mut events, t, m, EventKind::TlbFlush { reason, pages });
                }
            }
            _ => {}
        }
    }
    if order.is_empty() {
        return Err("perf recorded no events (did the command run?)".into());
    }
    // A syscall event is stamped at its entry: keep the list in time order.
    events.sort_by_key(|e| e.t_ns);
    let events = if header.version >= 2 {
        with_perf_records(events, &recs)
    } else {
        events
    };
    Ok(Trace {
        header,
        tasks: order.iter().map(|t| tasks[t].rec.clone()).collect(),
        events,
    })
}

/// Is this `tlb:tlb_flush` the one a context switch makes (reason 0)?
fn is_switch_flush(p: &Line<'_>) -> bool {
    p.event == "tlb:tlb_flush" && flush_reason(p.trace) == Some(0)
}

/// `tlb:tlb_flush`'s reason: the number in the parentheses at the end.
fn flush_reason(trace: &str) -> Option<u32> {
    trace
        .rsplit_once('(')
        .and_then(|(_, r)| r.trim_end_matches(')').parse::<u32>().ok())
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

/// A process's exit wakes its parent if it sleeps (in `wait4()`, or on a
/// pipe the child held) from `exit_notify()`, which runs after
/// `perf_event_exit_task()`: perf never sees that wake-up, so it is
/// written here, as the exiting child's last act (`wake` before `exit`).
/// A thread's exit is left alone: its `pthread_join` waker
/// (`CLONE_CHILD_CLEARTID`'s futex wake in `exit_mm()`) comes before and
/// is recorded.
fn wake_waiting_parent(tasks: &mut BTreeMap<u32, Task>, events: &mut Vec<Event>, tid: u32, t: u64) {
    let (parent, kind) = match tasks.get(&tid) {
        Some(c) => (c.rec.parent, c.rec.kind),
        None => return,
    };
    if kind != TaskKind::Process {
        return;
    }
    let Some(pt) = tasks.get_mut(&parent) else {
        return;
    };
    let Some((i, _)) = pt.open_block else {
        return;
    };
    if let EventKind::Block {
        waker: w @ None, ..
    } = &mut events[i].kind
    {
        *w = Some(tid);
        push(events, t, tid, EventKind::Wake { target: parent });
    }
}

/// Marks `tid` running on `cpu` from `t` (a `run` event) if it was not,
/// ending its open sleep.
fn resume(tasks: &mut BTreeMap<u32, Task>, events: &mut Vec<Event>, tid: u32, t: u64, cpu: u32) {
    let Some(tk) = tasks.get_mut(&tid) else {
        return;
    };
    if tk.running {
        return;
    }
    if let Some((i, since)) = tk.open_block.take() {
        if let EventKind::Block { ns, .. } = &mut events[i].kind {
            *ns = t - since;
        }
    }
    tk.running = true;
    push(events, t, tid, EventKind::Run { cpu });
}

/// Appends an event; returns its index.
fn push(events: &mut Vec<Event>, t_ns: u64, tid: u32, kind: EventKind) -> usize {
    events.push(Event { t_ns, tid, kind });
    events.len() - 1
}

fn new_task(tid: u32, pid: u32, parent: u32, comm: &str) -> Task {
    Task {
        rec: TaskRec {
            tid,
            pid,
            parent,
            kind: TaskKind::Process,
            comm: comm.split_whitespace().collect::<Vec<_>>().join("_"),
        },
        pid_seen: false,
        running: true,
        open_block: None,
        pending: None,
    }
}

/// `NR 9 (0, 2000, 3, 22, ffffffff, 0)`: the number and six arguments (hex).
fn syscall_enter(trace: &str) -> Option<(u64, [u64; 6])> {
    let rest = trace.strip_prefix("NR ")?;
    let (n, args) = rest.split_once(' ')?;
    let n = n.parse().ok()?;
    let mut a = [0u64; 6];
    for (i, w) in args
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .take(6)
        .enumerate()
    {
        a[i] = u64::from_str_radix(w.trim(), 16).ok()?;
    }
    Some((n, a))
}

/// `NR 9 = 140000107073536`: the return value.
fn syscall_ret(trace: &str) -> Option<i64> {
    trace.rsplit_once("= ")?.1.trim().parse().ok()
}

fn syscall_event(
    nr: &Nr,
    (n, a, t_enter): (u64, [u64; 6], u64),
    ret: i64,
    t_exit: u64,
) -> Option<EventKind> {
    let dur_ns = t_exit.saturating_sub(t_enter);
    let ok = ret >= 0;
    let page_ok = |addr: u64| addr < tlbsim::trace::MAX_USER_ADDR;
    if n == nr.mmap && ok && page_ok(ret as u64) {
        Some(EventKind::Mmap {
            addr: ret as u64,
            len: a[1],
            prot: (a[2] & 7) as u32,
            dur_ns,
        })
    } else if n == nr.munmap && ret == 0 && page_ok(a[0]) {
        Some(EventKind::Munmap {
            addr: a[0],
            len: a[1],
            dur_ns,
        })
    } else if n == nr.mprotect && ret == 0 && page_ok(a[0]) {
        Some(EventKind::Mprotect {
            addr: a[0],
            len: a[1],
            prot: (a[2] & 7) as u32,
            dur_ns,
        })
    } else if n == nr.madvise && ret == 0 && page_ok(a[0]) {
        Some(EventKind::Madvise {
            addr: a[0],
            len: a[1],
            advice: a[2] as u32,
            dur_ns,
        })
    } else if n == nr.brk && ok && page_ok(ret as u64) {
        Some(EventKind::Brk {
            addr: ret as u64,
            dur_ns,
        })
    } else if n == nr.mremap && ok && page_ok(a[0]) && page_ok(ret as u64) {
        Some(EventKind::Mremap {
            addr: a[0],
            len: a[1],
            new_addr: ret as u64,
            new_len: a[2],
            dur_ns,
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
