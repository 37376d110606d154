//! The recorded-trace format (`tlbsim-trace`, versions 1 to 3; docs/trace-format.md):
//! what `tlbsim record` writes and the `replay` workload reads. A text
//! file, one record a line: a header (format and version, the recording
//! host, kernel, architecture, CPU count, page size, command), the tasks,
//! the timed events in time order, and an `end` line counting them (a
//! file without it was truncated).
//!
//! [`Trace::parse`] never panics: every error names the file, the line
//! and, where one is at fault, the field. Sizes and counts are bounded
//! ([`MAX_TRACE_EVENTS`], [`crate::config::limits::MAX_TASKS`], lengths by
//! [`crate::config::limits::MAX_PARAM_PAGES`]).

pub mod perf;

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The first word of a trace file.
pub const FORMAT_NAME: &str = "tlbsim-trace";
/// The format version this build writes (it reads 1 to 3; version 2
/// added the `overhead` header line and `perf` events, version 3 the task
/// kind `vfork`).
pub const FORMAT_VERSION: u32 = 3;
/// Events one trace may hold (a few hundred MiB of text).
pub const MAX_TRACE_EVENTS: usize = 1 << 24;
/// The largest `overhead` value accepted, ns.
pub const MAX_OVERHEAD_NS: u64 = 1_000_000;
/// The longest line accepted, in bytes.
pub const MAX_LINE_BYTES: usize = 4096;
/// The highest user address accepted (exclusive): 57-bit virtual
/// addresses (x86 LA57, arm64 52-bit VA fit below it).
pub const MAX_USER_ADDR: u64 = 1 << 57;

/// Where and how the trace was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Host name of the recording machine.
    pub host: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Architecture (`uname -m`).
    pub arch: String,
    /// Online CPUs when recorded.
    pub cpus: u32,
    /// Base page size of the recording kernel, bytes.
    pub page_size_bytes: u64,
    /// The recorded command line, words joined by spaces.
    pub command: String,
    /// The format version the trace was read in (written back as is).
    pub version: u32,
    /// What recording cost the recorded tasks (version 2, optional).
    pub overhead: Option<Overhead>,
}

/// The recorder's own cost in the recorded times, measured by `tlbsim
/// record` before it recorded (the `overhead` header line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overhead {
    /// Time one perf record adds to the task it is written in, ns.
    pub record_ns: u64,
    /// A user page fault's kernel time on the recording host, untraced, ns
    /// (it falls in the gap after a `fault` event).
    pub fault_ns: u64,
}

/// A process (thread-group leader) or a thread of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// A thread-group leader: its own address space.
    Process,
    /// A thread sharing its process's address space.
    Thread,
    /// Version 3: a process created with `CLONE_VM` and not
    /// `CLONE_THREAD` (`vfork()`, `posix_spawn()`): it runs in its
    /// parent's address space until it execs or exits, and (with
    /// `CLONE_VFORK`) its parent waits for that.
    Vfork,
}

/// One recorded task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRec {
    /// Its thread id (host numbering).
    pub tid: u32,
    /// Its process id (thread-group id).
    pub pid: u32,
    /// The task that created it, 0 for the recorded command itself.
    pub parent: u32,
    /// Process or thread.
    pub kind: TaskKind,
    /// Its command name (no spaces).
    pub comm: String,
}

/// What happened (each system call at its entry, with its duration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// `mmap` that returned `addr` (`prot`: [`PROT_READ`] | [`PROT_WRITE`] | [`PROT_EXEC`]).
    Mmap {
        /// Address returned.
        addr: u64,
        /// Length, bytes.
        len: u64,
        /// Protection bits.
        prot: u32,
        /// Time in the system call, ns.
        dur_ns: u64,
    },
    /// `munmap(addr, len)`.
    Munmap {
        /// Start.
        addr: u64,
        /// Length, bytes.
        len: u64,
        /// Time in the system call, ns.
        dur_ns: u64,
    },
    /// `mprotect(addr, len, prot)`.
    Mprotect {
        /// Start.
        addr: u64,
        /// Length, bytes.
        len: u64,
        /// Protection bits.
        prot: u32,
        /// Time in the system call, ns.
        dur_ns: u64,
    },
    /// `madvise(addr, len, advice)` (Linux's advice numbers).
    Madvise {
        /// Start.
        addr: u64,
        /// Length, bytes.
        len: u64,
        /// `MADV_*` number.
        advice: u32,
        /// Time in the system call, ns.
        dur_ns: u64,
    },
    /// `brk` that left the break at `addr`.
    Brk {
        /// The break after the call.
        addr: u64,
        /// Time in the system call, ns.
        dur_ns: u64,
    },
    /// `mremap(addr, len, new_len)` that returned `new_addr`.
    Mremap {
        /// Old start.
        addr: u64,
        /// Old length, bytes.
        len: u64,
        /// New start.
        new_addr: u64,
        /// New length, bytes.
        new_len: u64,
        /// Time in the system call, ns.
        dur_ns: u64,
    },
    /// The task created `child` (a thread or a process, as its task record says).
    Clone {
        /// The new task's tid.
        child: u32,
    },
    /// `execve` succeeded: a new address space.
    Exec,
    /// The task exited.
    Exit,
    /// A user page fault.
    Fault {
        /// Faulting address.
        addr: u64,
        /// A write fault?
        write: bool,
    },
    /// Switched in on `cpu`.
    Run {
        /// CPU number.
        cpu: u32,
    },
    /// Switched out asleep; `waker` is the recorded task that woke it,
    /// `None` if none did (a timer, an interrupt, an untraced task).
    Block {
        /// The waking task.
        waker: Option<u32>,
        /// How long it slept, ns.
        ns: u64,
    },
    /// Switched out still runnable (preempted).
    Preempt,
    /// Woke `target` (which had blocked).
    Wake {
        /// The woken task.
        target: u32,
    },
    /// Moved to `cpu` by the scheduler.
    Migrate {
        /// New CPU.
        cpu: u32,
    },
    /// `tlb:tlb_flush` (x86): a flush of `pages` pages (-1: all, written as
    /// `u64::MAX`) for `reason` (`TLB_FLUSH_ON_TASK_SWITCH` = 0, ...).
    TlbFlush {
        /// `enum tlb_flush_reason`.
        reason: u32,
        /// Pages, `u64::MAX` for a full flush.
        pages: u64,
    },
    /// Version 3: the task queued a TLB flush on another CPU
    /// (`csd:csd_queue_cpu` of x86's `flush_tlb_func`: one shootdown IPI
    /// that `cpu` counts in `/proc/interrupts`). Not replayed: the policy
    /// under test decides the flushes; counted beside them.
    Shootdown {
        /// The target CPU.
        cpu: u32,
    },
    /// Version 2: the task wrote `records` perf records since the end of
    /// its previous event (untraced system calls, switches, wake-ups,
    /// faults, flushes: each costs it [`Overhead::record_ns`]); stamped at
    /// the time of its next event, which follows it.
    Perf {
        /// Records.
        records: u64,
    },
}

/// `PROT_READ`.
pub const PROT_READ: u32 = 1;
/// `PROT_WRITE`.
pub const PROT_WRITE: u32 = 2;
/// `PROT_EXEC`.
pub const PROT_EXEC: u32 = 4;

/// One timed event of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Time since the first event, ns.
    pub t_ns: u64,
    /// The task.
    pub tid: u32,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// When the event ends: a system call's entry plus its `dur`; any
    /// other event ends where it starts.
    pub fn end_ns(&self) -> u64 {
        let dur = match self.kind {
            EventKind::Mmap { dur_ns, .. }
            | EventKind::Munmap { dur_ns, .. }
            | EventKind::Mprotect { dur_ns, .. }
            | EventKind::Madvise { dur_ns, .. }
            | EventKind::Brk { dur_ns, .. }
            | EventKind::Mremap { dur_ns, .. } => dur_ns,
            _ => 0,
        };
        self.t_ns + dur
    }
}

/// A whole trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The header.
    pub header: Header,
    /// Tasks, in the order they appeared.
    pub tasks: Vec<TaskRec>,
    /// Events, in time order.
    pub events: Vec<Event>,
}

/// A parse error: file, line (1-based, 0 for the whole file), field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// File name as given.
    pub file: String,
    /// Line number, 1-based (0: the file as a whole).
    pub line: usize,
    /// The offending field, if one is.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some(k) = &self.field {
            write!(f, ": field `{k}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for TraceError {}

fn prot_word(p: u32) -> String {
    let mut s = String::new();
    s.push(if p & PROT_READ != 0 { 'r' } else { '-' });
    s.push(if p & PROT_WRITE != 0 { 'w' } else { '-' });
    s.push(if p & PROT_EXEC != 0 { 'x' } else { '-' });
    s
}

/// Writes an event's kind and fields, as `ev` lines give them.
fn write_kind(s: &mut String, kind: EventKind) {
    let _ = match kind {
        EventKind::Mmap {
            addr,
            len,
            prot,
            dur_ns,
        } => write!(
            s,
            "mmap addr={addr:#x} len={len} prot={} dur={dur_ns}",
            prot_word(prot)
        ),
        EventKind::Munmap { addr, len, dur_ns } => {
            write!(s, "munmap addr={addr:#x} len={len} dur={dur_ns}")
        }
        EventKind::Mprotect {
            addr,
            len,
            prot,
            dur_ns,
        } => write!(
            s,
            "mprotect addr={addr:#x} len={len} prot={} dur={dur_ns}",
            prot_word(prot)
        ),
        EventKind::Madvise {
            addr,
            len,
            advice,
            dur_ns,
        } => write!(
            s,
            "madvise addr={addr:#x} len={len} advice={advice} dur={dur_ns}"
        ),
        EventKind::Brk { addr, dur_ns } => write!(s, "brk addr={addr:#x} dur={dur_ns}"),
        EventKind::Mremap {
            addr,
            len,
            new_addr,
            new_len,
            dur_ns,
        } => write!(
            s,
            "mremap addr={addr:#x} len={len} new_addr={new_addr:#x} new_len={new_len} dur={dur_ns}"
        ),
        EventKind::Clone { child } => write!(s, "clone child={child}"),
        EventKind::Exec => write!(s, "exec"),
        EventKind::Exit => write!(s, "exit"),
        EventKind::Fault { addr, write } => {
            write!(s, "fault addr={addr:#x} write={}", u8::from(write))
        }
        EventKind::Run { cpu } => write!(s, "run cpu={cpu}"),
        EventKind::Block { waker, ns } => match waker {
            Some(w) => write!(s, "block waker={w} ns={ns}"),
            None => write!(s, "block waker=none ns={ns}"),
        },
        EventKind::Preempt => write!(s, "preempt"),
        EventKind::Wake { target } => write!(s, "wake target={target}"),
        EventKind::Migrate { cpu } => write!(s, "migrate cpu={cpu}"),
        EventKind::Perf { records } => write!(s, "perf records={records}"),
        EventKind::Shootdown { cpu } => write!(s, "shootdown cpu={cpu}"),
        EventKind::TlbFlush { reason, pages } => {
            if pages == u64::MAX {
                write!(s, "tlb_flush reason={reason} pages=all")
            } else {
                write!(s, "tlb_flush reason={reason} pages={pages}")
            }
        }
    };
}

impl Trace {
    /// The trace as text in the current format version.
    pub fn to_text(&self) -> String {
        let h = &self.header;
        let mut s = format!("{FORMAT_NAME} {}\n", h.version);
        let _ = writeln!(s, "host {}", one_word(&h.host));
        let _ = writeln!(s, "kernel {}", one_word(&h.kernel));
        let _ = writeln!(s, "arch {}", one_word(&h.arch));
        let _ = writeln!(s, "cpus {}", h.cpus);
        let _ = writeln!(s, "page_size {}", h.page_size_bytes);
        let _ = writeln!(s, "command {}", h.command.replace('\n', " "));
        if let Some(o) = h.overhead {
            let _ = writeln!(
                s,
                "overhead record_ns={} fault_ns={}",
                o.record_ns, o.fault_ns
            );
        }
        for t in &self.tasks {
            let kind = match t.kind {
                TaskKind::Process => "process",
                TaskKind::Thread => "thread",
                TaskKind::Vfork => "vfork",
            };
            let _ = writeln!(
                s,
                "task {} pid={} parent={} kind={kind} comm={}",
                t.tid,
                t.pid,
                t.parent,
                one_word(&t.comm)
            );
        }
        for e in &self.events {
            let _ = write!(s, "ev {} {} ", e.t_ns, e.tid);
            write_kind(&mut s, e.kind);
            s.push('\n');
        }
        let _ = writeln!(s, "end events={}", self.events.len());
        s
    }

    /// Parses `text`, read from `file` (named in errors).
    pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
        Parser {
            file,
            line: 0,
            field: None,
            version: 0,
        }
        .parse(text)
    }

    /// The task record of `tid`.
    pub fn task(&self, tid: u32) -> Option<&TaskRec> {
        self.tasks.iter().find(|t| t.tid == tid)
    }

    /// Counts of events by kind name (`fault`, `mmap`, ...), for reports.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            *m.entry(kind_name(&e.kind)).or_insert(0) += 1;
        }
        m
    }
}

/// The word naming an event kind in the format.
pub fn kind_name(k: &EventKind) -> &'static str {
    match k {
        EventKind::Mmap { .. } => "mmap",
        EventKind::Munmap { .. } => "munmap",
        EventKind::Mprotect { .. } => "mprotect",
        EventKind::Madvise { .. } => "madvise",
        EventKind::Brk { .. } => "brk",
        EventKind::Mremap { .. } => "mremap",
        EventKind::Clone { .. } => "clone",
        EventKind::Exec => "exec",
        EventKind::Exit => "exit",
        EventKind::Fault { .. } => "fault",
        EventKind::Run { .. } => "run",
        EventKind::Block { .. } => "block",
        EventKind::Preempt => "preempt",
        EventKind::Wake { .. } => "wake",
        EventKind::Migrate { .. } => "migrate",
        EventKind::TlbFlush { .. } => "tlb_flush",
        EventKind::Perf { .. } => "perf",
        EventKind::Shootdown { .. } => "shootdown",
    }
}

/// `s` with whitespace replaced by `_` (a header value or comm is one word).
fn one_word(s: &str) -> String {
    let w: String = s
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    if w.is_empty() {
        "-".into()
    } else {
        w
    }
}

struct Parser<'a> {
    file: &'a str,
    line: usize,
    field: Option<String>,
    /// The version the first line gave.
    version: u32,
}

/// `key=value` fields of one line, each used once.
struct Fields<'t> {
    words: Vec<(&'t str, &'t str)>,
}

impl Parser<'_> {
    fn err(&self, field: Option<&str>, message: impl Into<String>) -> TraceError {
        TraceError {
            file: self.file.to_string(),
            line: self.line,
            field: field.map(str::to_string).or_else(|| self.field.clone()),
            message: message.into(),
        }
    }

    /// An `ev` line after `read` events, the last at `last_t`: within
    /// tlbsim's limit and in time order.
    fn ev_line(
        &mut self,
        rest: &str,
        by_tid: &BTreeMap<u32, usize>,
        read: usize,
        last_t: u64,
    ) -> Result<Event, TraceError> {
        if read >= MAX_TRACE_EVENTS {
            return Err(self.err(
                None,
                format!("more than {MAX_TRACE_EVENTS} events (tlbsim's limit)"),
            ));
        }
        let e = self.event(rest, by_tid)?;
        if e.t_ns < last_t {
            return Err(self.err(Some("time"), "events out of time order"));
        }
        Ok(e)
    }

    /// A header line `word rest` at line `n` (`late`: after a task or an
    /// event, which it must not be), each word once.
    fn header_line<'t>(
        &self,
        header: &mut BTreeMap<&'t str, (usize, String)>,
        (n, word, rest): (usize, &'t str, &str),
        late: bool,
    ) -> Result<(), TraceError> {
        if word == "overhead" && self.version < 2 {
            return Err(self.err(Some(word), "needs format version 2"));
        }
        if late {
            return Err(self.err(Some(word), "header line after the tasks or events"));
        }
        if header.insert(word, (n, rest.trim().to_string())).is_some() {
            return Err(self.err(Some(word), "given twice"));
        }
        Ok(())
    }

    /// The `end` line (with its newline: else the file was cut there),
    /// which must count the `events` read.
    fn end(&mut self, rest: &str, newline: bool, events: usize) -> Result<(), TraceError> {
        if !newline {
            return Err(self.err(None, "truncated: the `end` line has no newline"));
        }
        let mut f = self.fields(rest)?;
        let count: u64 = self.num(&mut f, "events")?;
        self.done(f)?;
        if count != events as u64 {
            return Err(self.err(
                Some("events"),
                format!("says {count} events but the file has {events} (truncated or edited)"),
            ));
        }
        Ok(())
    }

    fn parse(mut self, text: &str) -> Result<Trace, TraceError> {
        let mut lines = text.split_inclusive('\n').enumerate().filter_map(|(i, l)| {
            let body = l.trim_end_matches(['\n', '\r']);
            let t = body.trim();
            (!t.is_empty() && !t.starts_with('#')).then_some((i + 1, body, l.ends_with('\n')))
        });
        let Some((n, first, _)) = lines.next() else {
            return Err(self.err(None, format!("empty file: not a {FORMAT_NAME} trace")));
        };
        self.line = n;
        self.check_magic(first)?;
        let mut header = BTreeMap::new();
        let mut tasks: Vec<TaskRec> = Vec::new();
        let mut by_tid: BTreeMap<u32, usize> = BTreeMap::new();
        let mut task_lines: Vec<usize> = Vec::new();
        let mut events = Vec::new();
        let mut ended = false;
        let mut last_t = 0u64;
        for (n, body, newline) in lines {
            self.line = n;
            self.field = None;
            if ended {
                return Err(self.err(None, "text after the `end` line"));
            }
            if body.len() > MAX_LINE_BYTES {
                return Err(self.err(None, format!("line longer than {MAX_LINE_BYTES} bytes")));
            }
            let (word, rest) = body.trim().split_once(' ').unwrap_or((body.trim(), ""));
            match word {
                "host" | "kernel" | "arch" | "cpus" | "page_size" | "command" | "overhead" => {
                    let late = !tasks.is_empty() || !events.is_empty();
                    self.header_line(&mut header, (n, word, rest), late)?;
                }
                "task" => {
                    if !events.is_empty() {
                        return Err(self.err(None, "task line after the first event"));
                    }
                    let t = self.task(rest)?;
                    if by_tid.insert(t.tid, tasks.len()).is_some() {
                        return Err(self.err(Some("tid"), format!("task {} declared twice", t.tid)));
                    }
                    if tasks.len() as u64 >= crate::config::limits::MAX_TASKS {
                        return Err(self.err(None, "more tasks than tlbsim's limit"));
                    }
                    tasks.push(t);
                    task_lines.push(n);
                }
                "ev" => {
                    let e = self.ev_line(rest, &by_tid, events.len(), last_t)?;
                    last_t = e.t_ns;
                    events.push(e);
                }
                "end" => {
                    self.end(rest, newline, events.len())?;
                    ended = true;
                }
                other => {
                    return Err(self.err(None, format!("unknown record `{other}`")));
                }
            }
        }
        if !ended {
            self.line = 0;
            self.field = None;
            return Err(self.err(None, "truncated: no `end` line"));
        }
        self.line = 0;
        let header = self.header(&header)?;
        self.check_parents(&tasks, &by_tid, &task_lines)?;
        Ok(Trace {
            header,
            tasks,
            events,
        })
    }

    /// Every task's `parent` is 0 (the recorded command) or a task of the
    /// trace, and following parents from any task reaches 0: a cycle (a
    /// task its own ancestor) is no process tree. The error names the line
    /// of a task on the cycle.
    fn check_parents(
        &mut self,
        tasks: &[TaskRec],
        by_tid: &BTreeMap<u32, usize>,
        lines: &[usize],
    ) -> Result<(), TraceError> {
        // 0: not yet known, 1: on the walk being followed, 2: reaches 0.
        let mut state = vec![0u8; tasks.len()];
        for start in 0..tasks.len() {
            let mut walk = Vec::new();
            let mut i = start;
            while state[i] == 0 {
                state[i] = 1;
                walk.push(i);
                let t = &tasks[i];
                if t.parent == 0 {
                    break;
                }
                let Some(&p) = by_tid.get(&t.parent) else {
                    self.line = lines[i];
                    return Err(self.err(
                        Some("parent"),
                        format!(
                            "task {}: parent {} is not a task of the trace",
                            t.tid, t.parent
                        ),
                    ));
                };
                if state[p] == 1 {
                    let from = walk.iter().position(|&w| w == p).unwrap_or(0);
                    let cycle: Vec<String> = walk[from..]
                        .iter()
                        .chain([&p])
                        .map(|&w| tasks[w].tid.to_string())
                        .collect();
                    self.line = lines[p];
                    return Err(self.err(
                        Some("parent"),
                        format!(
                            "task {}: its parents form a cycle ({}), not a process tree",
                            tasks[p].tid,
                            cycle.join(" -> ")
                        ),
                    ));
                }
                i = p;
            }
            for w in walk {
                state[w] = 2;
            }
        }
        self.line = 0;
        Ok(())
    }

    /// The first line that is not blank or a comment starts with
    /// [`FORMAT_NAME`] (the version is checked by [`Self::check_magic`]).
    fn looks_like_a_trace(&self, first: &str) -> Result<(), TraceError> {
        if first.split_whitespace().next() == Some(FORMAT_NAME) {
            return Ok(());
        }
        Err(self.err(
            None,
            format!(
                "not a {FORMAT_NAME} trace (first line must be `{FORMAT_NAME} {FORMAT_VERSION}`)"
            ),
        ))
    }

    fn check_magic(&mut self, first: &str) -> Result<(), TraceError> {
        let mut it = first.split_whitespace();
        if it.next() != Some(FORMAT_NAME) {
            return Err(self.err(
                None,
                format!("not a {FORMAT_NAME} trace (first line must be `{FORMAT_NAME} {FORMAT_VERSION}`)"),
            ));
        }
        match it.next().map(str::parse::<u32>) {
            Some(Ok(v @ 1..=FORMAT_VERSION)) => {
                self.version = v;
                Ok(())
            }
            Some(Ok(v)) => Err(self.err(
                Some("version"),
                format!("format version {v}, this tlbsim reads versions 1 to {FORMAT_VERSION}"),
            )),
            _ => Err(self.err(Some("version"), "missing or not a number")),
        }
    }

    /// The header from its lines (keyword → line number, value); an
    /// error names the line of the bad value.
    fn header(&mut self, h: &BTreeMap<&str, (usize, String)>) -> Result<Header, TraceError> {
        let get = |s: &Self, k: &str| {
            h.get(k)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| s.err(Some(k), "missing header line"))
        };
        let line_of = |k: &str| h.get(k).map_or(0, |(n, _)| *n);
        self.line = line_of("cpus");
        let cpus: u32 = get(self, "cpus")?
            .parse()
            .map_err(|_| self.err(Some("cpus"), "not a number"))?;
        if cpus == 0 || cpus > crate::config::limits::MAX_CPUS {
            return Err(self.err(Some("cpus"), format!("{cpus} is outside 1..=4096")));
        }
        self.line = line_of("page_size");
        let page_size_bytes: u64 = get(self, "page_size")?
            .parse()
            .map_err(|_| self.err(Some("page_size"), "not a number"))?;
        if !page_size_bytes.is_power_of_two() || !(4096..=65536).contains(&page_size_bytes) {
            return Err(self.err(
                Some("page_size"),
                format!("{page_size_bytes} is not 4096, 16384 or 65536"),
            ));
        }
        let overhead = match h.get("overhead") {
            None => None,
            Some((n, v)) => {
                self.line = *n;
                let mut f = self.fields(v)?;
                let record_ns = self.num(&mut f, "record_ns")?;
                let fault_ns = self.num(&mut f, "fault_ns")?;
                self.done(f)?;
                for (k, v) in [("record_ns", record_ns), ("fault_ns", fault_ns)] {
                    if v > MAX_OVERHEAD_NS {
                        return Err(
                            self.err(Some(k), format!("{v} ns is over {MAX_OVERHEAD_NS} (1 ms)"))
                        );
                    }
                }
                Some(Overhead {
                    record_ns,
                    fault_ns,
                })
            }
        };
        self.line = 0;
        Ok(Header {
            version: self.version,
            overhead,
            host: get(self, "host")?,
            kernel: get(self, "kernel")?,
            arch: get(self, "arch")?,
            cpus,
            page_size_bytes,
            command: get(self, "command")?,
        })
    }

    fn fields<'t>(&self, rest: &'t str) -> Result<Fields<'t>, TraceError> {
        let mut words = Vec::new();
        for w in rest.split_whitespace() {
            let Some((k, v)) = w.split_once('=') else {
                return Err(self.err(None, format!("`{w}` is not key=value")));
            };
            if words.iter().any(|(k2, _)| *k2 == k) {
                return Err(self.err(Some(k), "given twice"));
            }
            words.push((k, v));
        }
        Ok(Fields { words })
    }

    fn raw<'t>(&self, f: &mut Fields<'t>, key: &str) -> Result<&'t str, TraceError> {
        match f.words.iter().position(|(k, _)| *k == key) {
            Some(i) => Ok(f.words.remove(i).1),
            None => Err(self.err(Some(key), "missing")),
        }
    }

    fn num<T: TryFrom<u64>>(&self, f: &mut Fields<'_>, key: &str) -> Result<T, TraceError> {
        let v = self.raw(f, key)?;
        let n = match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => v.parse::<u64>(),
        }
        .map_err(|_| self.err(Some(key), format!("`{v}` is not a number")))?;
        T::try_from(n).map_err(|_| self.err(Some(key), format!("{n} is out of range")))
    }

    fn addr(&self, f: &mut Fields<'_>, key: &str) -> Result<u64, TraceError> {
        let a: u64 = self.num(f, key)?;
        if a >= MAX_USER_ADDR {
            return Err(self.err(Some(key), format!("{a:#x} is not a user address")));
        }
        Ok(a)
    }

    fn len(&self, f: &mut Fields<'_>, key: &str) -> Result<u64, TraceError> {
        let l: u64 = self.num(f, key)?;
        let max = crate::config::limits::MAX_PARAM_PAGES * crate::hw::mem::PAGE_SIZE_4K;
        if l > max {
            return Err(self.err(
                Some(key),
                format!("{l} bytes exceeds tlbsim's limit of {max}"),
            ));
        }
        Ok(l)
    }

    /// [`Self::len`] of a call that Linux refuses with `EINVAL` when the
    /// length is 0 (`mmap`, `munmap`, `mremap`'s new length), so that no
    /// recorded trace has one; `mprotect` and `madvise` of 0 bytes succeed
    /// and are kept.
    fn nonzero_len(&self, f: &mut Fields<'_>, key: &str, call: &str) -> Result<u64, TraceError> {
        match self.len(f, key)? {
            0 => Err(self.err(
                Some(key),
                format!(
                    "0 bytes: a zero-length {call} fails with EINVAL in Linux, so a trace has none"
                ),
            )),
            l => Ok(l),
        }
    }

    fn prot(&self, f: &mut Fields<'_>) -> Result<u32, TraceError> {
        let v = self.raw(f, "prot")?;
        let b = v.as_bytes();
        let bad = || self.err(Some("prot"), format!("`{v}` is not like `rw-`"));
        if b.len() != 3 {
            return Err(bad());
        }
        let mut p = 0;
        for (i, (c, bit)) in [(b'r', PROT_READ), (b'w', PROT_WRITE), (b'x', PROT_EXEC)]
            .iter()
            .enumerate()
        {
            if b[i] == *c {
                p |= bit;
            } else if b[i] != b'-' {
                return Err(bad());
            }
        }
        Ok(p)
    }

    fn done(&self, f: Fields<'_>) -> Result<(), TraceError> {
        match f.words.first() {
            Some((k, _)) => Err(self.err(Some(k), "unknown field")),
            None => Ok(()),
        }
    }

    fn task(&self, rest: &str) -> Result<TaskRec, TraceError> {
        let (tid, rest) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
        let tid: u32 = tid
            .parse()
            .map_err(|_| self.err(Some("tid"), format!("`{tid}` is not a number")))?;
        let mut f = self.fields(rest)?;
        let pid = self.num(&mut f, "pid")?;
        let parent = self.num(&mut f, "parent")?;
        let kind = match self.raw(&mut f, "kind")? {
            "process" => TaskKind::Process,
            "thread" => TaskKind::Thread,
            "vfork" if self.version >= 3 => TaskKind::Vfork,
            "vfork" => return Err(self.err(Some("kind"), "`vfork` needs format version 3")),
            k => {
                return Err(self.err(
                    Some("kind"),
                    format!("`{k}` is not process, thread or vfork"),
                ))
            }
        };
        let comm = self.raw(&mut f, "comm")?.to_string();
        self.done(f)?;
        Ok(TaskRec {
            tid,
            pid,
            parent,
            kind,
            comm,
        })
    }

    /// The memory system calls' event kinds (`mmap`, `munmap`,
    /// `mprotect`, `madvise`, `brk`, `mremap`) with their fields; `None`
    /// for another kind.
    fn call_kind(&self, kind: &str, f: &mut Fields<'_>) -> Result<Option<EventKind>, TraceError> {
        Ok(Some(match kind {
            "mmap" => EventKind::Mmap {
                addr: self.addr(f, "addr")?,
                len: self.nonzero_len(f, "len", "mmap")?,
                prot: self.prot(f)?,
                dur_ns: self.num(f, "dur")?,
            },
            "munmap" => EventKind::Munmap {
                addr: self.addr(f, "addr")?,
                len: self.nonzero_len(f, "len", "munmap")?,
                dur_ns: self.num(f, "dur")?,
            },
            "mprotect" => EventKind::Mprotect {
                addr: self.addr(f, "addr")?,
                len: self.len(f, "len")?,
                prot: self.prot(f)?,
                dur_ns: self.num(f, "dur")?,
            },
            "madvise" => EventKind::Madvise {
                addr: self.addr(f, "addr")?,
                len: self.len(f, "len")?,
                advice: self.num(f, "advice")?,
                dur_ns: self.num(f, "dur")?,
            },
            "brk" => EventKind::Brk {
                addr: self.addr(f, "addr")?,
                dur_ns: self.num(f, "dur")?,
            },
            "mremap" => EventKind::Mremap {
                addr: self.addr(f, "addr")?,
                len: self.len(f, "len")?,
                new_addr: self.addr(f, "new_addr")?,
                new_len: self.nonzero_len(f, "new_len", "mremap")?,
                dur_ns: self.num(f, "dur")?,
            },
            _ => return Ok(None),
        }))
    }

    /// A `0`/`1` field.
    fn flag(&self, f: &mut Fields<'_>, key: &str) -> Result<bool, TraceError> {
        match self.raw(f, key)? {
            "0" => Ok(false),
            "1" => Ok(true),
            v => Err(self.err(Some(key), format!("`{v}` is not 0 or 1"))),
        }
    }

    /// A task id in the word `v` of field `key` (`none` taken apart by
    /// the caller).
    fn tid_word(&self, v: &str, key: &str) -> Result<u32, TraceError> {
        v.parse()
            .map_err(|_| self.err(Some(key), format!("`{v}` is not a tid or none")))
    }

    /// `tlb_flush`'s `pages`: a count, or `all` (a whole-mm flush).
    fn pages_or_all(&self, f: &mut Fields<'_>) -> Result<u64, TraceError> {
        if f.words.iter().any(|(k, v)| *k == "pages" && *v == "all") {
            self.raw(f, "pages")?;
            Ok(u64::MAX)
        } else {
            self.num(f, "pages")
        }
    }

    fn event(&mut self, rest: &str, tasks: &BTreeMap<u32, usize>) -> Result<Event, TraceError> {
        let mut w = rest.split_whitespace();
        let (Some(t), Some(tid), Some(kind)) = (w.next(), w.next(), w.next()) else {
            return Err(self.err(None, "an event is `ev TIME TID KIND FIELDS...`"));
        };
        let t_ns: u64 = t
            .parse()
            .map_err(|_| self.err(Some("time"), format!("`{t}` is not a number")))?;
        let tid: u32 = tid
            .parse()
            .map_err(|_| self.err(Some("tid"), format!("`{tid}` is not a number")))?;
        if !tasks.contains_key(&tid) {
            return Err(self.err(Some("tid"), format!("task {tid} has no task line")));
        }
        let rest = w.collect::<Vec<&str>>().join(" ");
        let mut f = self.fields(&rest)?;
        let known = |s: &Self, key: &str, t: u32| {
            if tasks.contains_key(&t) {
                Ok(t)
            } else {
                Err(s.err(Some(key), format!("task {t} has no task line")))
            }
        };
        if let Some(k) = self.call_kind(kind, &mut f)? {
            self.done(f)?;
            return Ok(Event { t_ns, tid, kind: k });
        }
        let kind = match kind {
            "clone" => {
                let c = self.num(&mut f, "child")?;
                EventKind::Clone {
                    child: known(self, "child", c)?,
                }
            }
            "exec" => EventKind::Exec,
            "exit" => EventKind::Exit,
            "fault" => EventKind::Fault {
                addr: self.addr(&mut f, "addr")?,
                write: self.flag(&mut f, "write")?,
            },
            "run" => EventKind::Run {
                cpu: self.num(&mut f, "cpu")?,
            },
            "block" => {
                let waker = match self.raw(&mut f, "waker")? {
                    "none" => None,
                    v => Some(known(self, "waker", self.tid_word(v, "waker")?)?),
                };
                EventKind::Block {
                    waker,
                    ns: self.num(&mut f, "ns")?,
                }
            }
            "preempt" => EventKind::Preempt,
            "wake" => {
                let t = self.num(&mut f, "target")?;
                EventKind::Wake {
                    target: known(self, "target", t)?,
                }
            }
            "migrate" => EventKind::Migrate {
                cpu: self.num(&mut f, "cpu")?,
            },
            "perf" if self.version >= 2 => EventKind::Perf {
                records: self.num(&mut f, "records")?,
            },
            "shootdown" if self.version >= 3 => EventKind::Shootdown {
                cpu: self.num(&mut f, "cpu")?,
            },
            "tlb_flush" => EventKind::TlbFlush {
                reason: self.num(&mut f, "reason")?,
                pages: self.pages_or_all(&mut f)?,
            },
            other => return Err(self.err(Some("kind"), format!("unknown event `{other}`"))),
        };
        self.done(f)?;
        Ok(Event { t_ns, tid, kind })
    }
}

/// Reads the text of the trace `file` from `r` (the caller opens it: the
/// model does no I/O of its own), line by line, refusing at once what
/// cannot be a trace rather than reading it whole: a line longer than
/// [`MAX_LINE_BYTES`] (`/dev/zero` has no newline), bytes that are not
/// UTF-8, a first line that is not `tlbsim-trace N`, or more than
/// `max_bytes` in all (an endless input). Errors name the file and line,
/// as [`Trace::parse`]'s do.
pub fn read_text(
    file: &str,
    r: impl std::io::BufRead,
    max_bytes: u64,
) -> Result<String, TraceError> {
    use std::io::BufRead as _;
    use std::io::Read as _;
    let mut p = Parser {
        file,
        line: 0,
        field: None,
        version: 0,
    };
    let mut r = r;
    let (mut text, mut buf, mut found_magic) = (String::new(), Vec::new(), false);
    loop {
        buf.clear();
        // A line, its "\r\n", and one byte more to tell it is too long.
        let cap = MAX_LINE_BYTES as u64 + 3;
        let got = (&mut r)
            .take(cap)
            .read_until(b'\n', &mut buf)
            .map_err(|e| p.err(None, format!("cannot read: {e}")))?;
        if got == 0 {
            return Ok(text);
        }
        p.line += 1;
        let line = std::str::from_utf8(&buf).map_err(|_| p.err(None, "not UTF-8 text"))?;
        let body = line.trim_end_matches(['\n', '\r']);
        if body.len() > MAX_LINE_BYTES {
            return Err(p.err(None, format!("line longer than {MAX_LINE_BYTES} bytes")));
        }
        let t = body.trim();
        if !found_magic && !t.is_empty() && !t.starts_with('#') {
            p.looks_like_a_trace(t)?;
            found_magic = true;
        }
        if (text.len() + line.len()) as u64 > max_bytes {
            return Err(p.err(
                None,
                format!("the file is larger than tlbsim's limit of {max_bytes} bytes"),
            ));
        }
        text.push_str(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_or_binary_input_is_refused_before_it_is_read_whole() {
        use std::io::Read;
        // /dev/zero: no newline ever.
        let zeros = std::io::BufReader::new(std::io::repeat(0));
        let e = read_text("/dev/zero", zeros, 1 << 30)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/dev/zero:1: line longer than 4096 bytes");
        // `yes`: short lines, forever; not a trace from its first line.
        let yes = std::io::BufReader::new(std::io::repeat(b'y').take(1))
            .chain(std::io::BufReader::new(std::io::repeat(b'\n')));
        let e = read_text("yes", yes, 1 << 30).unwrap_err().to_string();
        assert!(e.starts_with("yes:1: not a tlbsim-trace trace"), "{e}");
        // A trace followed by many comment lines stops at the limit.
        let text = sample().to_text();
        let more = format!("{text}{}", "#\n".repeat(10_000));
        let e = read_text("big", more.as_bytes(), 4096)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("larger than tlbsim's limit of 4096 bytes"),
            "{e}"
        );
        // A whole trace reads back as it is.
        let t = read_text("t", text.as_bytes(), 1 << 20).unwrap();
        assert_eq!(t, text);
    }

    fn sample() -> Trace {
        Trace {
            header: Header {
                host: "box".into(),
                kernel: "6.1.0".into(),
                arch: "x86_64".into(),
                cpus: 2,
                page_size_bytes: 4096,
                command: "sort /tmp/x".into(),
                version: FORMAT_VERSION,
                overhead: None,
            },
            tasks: vec![
                TaskRec {
                    tid: 10,
                    pid: 10,
                    parent: 0,
                    kind: TaskKind::Process,
                    comm: "sort".into(),
                },
                TaskRec {
                    tid: 11,
                    pid: 10,
                    parent: 10,
                    kind: TaskKind::Thread,
                    comm: "sort".into(),
                },
            ],
            events: vec![
                Event {
                    t_ns: 0,
                    tid: 10,
                    kind: EventKind::Run { cpu: 1 },
                },
                Event {
                    t_ns: 5,
                    tid: 10,
                    kind: EventKind::Mmap {
                        addr: 0x7f00_0000_0000,
                        len: 8192,
                        prot: PROT_READ | PROT_WRITE,
                        dur_ns: 700,
                    },
                },
                Event {
                    t_ns: 900,
                    tid: 10,
                    kind: EventKind::Fault {
                        addr: 0x7f00_0000_0010,
                        write: true,
                    },
                },
                Event {
                    t_ns: 950,
                    tid: 10,
                    kind: EventKind::Clone { child: 11 },
                },
                Event {
                    t_ns: 990,
                    tid: 10,
                    kind: EventKind::Block {
                        waker: Some(11),
                        ns: 100,
                    },
                },
                Event {
                    t_ns: 1000,
                    tid: 11,
                    kind: EventKind::TlbFlush {
                        reason: 1,
                        pages: u64::MAX,
                    },
                },
                Event {
                    t_ns: 1090,
                    tid: 11,
                    kind: EventKind::Wake { target: 10 },
                },
            ],
        }
    }

    /// The sample with version 2's overhead line and a `perf` event.
    fn sample_v2() -> Trace {
        let mut t = sample();
        t.header.overhead = Some(Overhead {
            record_ns: 210,
            fault_ns: 900,
        });
        t.events.insert(
            6,
            Event {
                t_ns: 1090,
                tid: 11,
                kind: EventKind::Perf { records: 3 },
            },
        );
        t
    }

    #[test]
    fn round_trip() {
        for t in [sample(), sample_v2()] {
            let text = t.to_text();
            assert_eq!(Trace::parse("x.trace", &text).unwrap(), t);
            assert_eq!(Trace::parse("x.trace", &text).unwrap().to_text(), text);
        }
        let v2 = sample_v2().to_text();
        assert!(v2.contains("overhead record_ns=210 fault_ns=900\n"), "{v2}");
        assert!(
            v2.contains("ev 1090 11 perf records=3\nev 1090 11 wake"),
            "{v2}"
        );
    }

    #[test]
    fn version_1_reads_back_as_1_and_has_no_version_2_records() {
        let mut t = sample();
        t.header.version = 1;
        let text = t.to_text();
        assert!(text.starts_with("tlbsim-trace 1\n"));
        assert_eq!(Trace::parse("x.trace", &text).unwrap(), t);
        let perf = text.replacen(
            "ev 1090 11 wake",
            "ev 1090 11 perf records=3\nev 1090 11 wake",
            1,
        );
        let perf = perf.replacen("end events=7", "end events=8", 1);
        let e = Trace::parse("v1.trace", &perf).unwrap_err().to_string();
        assert!(e.contains("unknown event `perf`"), "{e}");
        let head = text.replacen(
            "command sort /tmp/x\n",
            "command sort /tmp/x\noverhead record_ns=1 fault_ns=2\n",
            1,
        );
        let e = Trace::parse("v1.trace", &head).unwrap_err().to_string();
        assert!(
            e.contains("field `overhead`: needs format version 2"),
            "{e}"
        );
    }

    #[test]
    fn an_absurd_overhead_is_refused() {
        let text = sample_v2()
            .to_text()
            .replacen("record_ns=210", "record_ns=99999999999", 1);
        let e = Trace::parse("o.trace", &text).unwrap_err().to_string();
        assert!(e.contains("field `record_ns`") && e.contains("over"), "{e}");
    }

    #[test]
    fn wrong_version_names_file_line_field() {
        let text = sample().to_text().replacen(
            &format!("tlbsim-trace {FORMAT_VERSION}"),
            "tlbsim-trace 7",
            1,
        );
        let e = Trace::parse("a.trace", &text).unwrap_err().to_string();
        assert!(
            e.starts_with("a.trace:1: field `version`: format version 7"),
            "{e}"
        );
    }

    #[test]
    fn a_vfork_task_needs_version_3() {
        let text = sample().to_text().replace("kind=thread", "kind=vfork");
        let t = Trace::parse("v.trace", &text).unwrap();
        assert_eq!(t.tasks[1].kind, TaskKind::Vfork);
        assert_eq!(t.to_text(), text);
        let old = text.replacen("tlbsim-trace 3", "tlbsim-trace 2", 1);
        let e = Trace::parse("v.trace", &old).unwrap_err().to_string();
        assert!(
            e.contains("field `kind`: `vfork` needs format version 3"),
            "{e}"
        );
    }

    #[test]
    fn malformed_field_names_file_line_field() {
        let text = sample().to_text().replace("len=8192", "len=eight");
        let e = Trace::parse("b.trace", &text).unwrap_err().to_string();
        // magic, 6 header lines, 2 tasks, the run event: the mmap is line 11.
        assert_eq!(e, "b.trace:11: field `len`: `eight` is not a number");
        let text = sample().to_text().replace("write=1", "write=yes");
        let e = Trace::parse("b.trace", &text).unwrap_err().to_string();
        assert_eq!(e, "b.trace:12: field `write`: `yes` is not 0 or 1");
        let text = sample().to_text().replace("target=10", "target=99");
        let e = Trace::parse("b.trace", &text).unwrap_err().to_string();
        assert_eq!(e, "b.trace:16: field `target`: task 99 has no task line");
    }

    #[test]
    fn a_parent_cycle_is_refused_at_a_task_line() {
        // Task 11 is 10's child; make 10 the child of 11 as well.
        let text = sample().to_text();
        let cyc = text.replace("parent=0", "parent=11");
        let e = Trace::parse("p.trace", &cyc).unwrap_err().to_string();
        assert_eq!(
            e,
            "p.trace:8: field `parent`: task 10: its parents form a cycle (10 -> 11 -> 10), not a process tree"
        );
        let own = text.replace("parent=0", "parent=10");
        let e = Trace::parse("p.trace", &own).unwrap_err().to_string();
        assert!(e.contains("cycle (10 -> 10)"), "{e}");
        let missing = text.replace("parent=10", "parent=77");
        let e = Trace::parse("p.trace", &missing).unwrap_err().to_string();
        assert_eq!(
            e,
            "p.trace:9: field `parent`: task 11: parent 77 is not a task of the trace"
        );
    }

    #[test]
    fn a_zero_length_mmap_is_refused_at_its_line() {
        let text = sample().to_text().replace("len=8192", "len=0");
        let e = Trace::parse("z.trace", &text).unwrap_err().to_string();
        assert_eq!(
            e,
            "z.trace:11: field `len`: 0 bytes: a zero-length mmap fails with EINVAL in Linux, so a trace has none"
        );
    }

    #[test]
    fn truncated_is_an_error() {
        let text = sample().to_text();
        // Cut inside the last event: no `end` line.
        let cut = &text[..text.len() - 20];
        let e = Trace::parse("c.trace", cut).unwrap_err().to_string();
        assert!(e.starts_with("c.trace:"), "{e}");
        let no_end = text.replace("end events=7\n", "");
        let e = Trace::parse("c.trace", &no_end).unwrap_err().to_string();
        assert_eq!(e, "c.trace: truncated: no `end` line");
        let dropped = text.replace("ev 1000 11 tlb_flush reason=1 pages=all\n", "");
        let e = Trace::parse("c.trace", &dropped).unwrap_err().to_string();
        assert_eq!(
            e,
            "c.trace:16: field `events`: says 7 events but the file has 6 (truncated or edited)"
        );
    }

    #[test]
    fn other_errors_never_panic() {
        for bad in [
            "",
            "hello",
            "tlbsim-trace",
            "tlbsim-trace 1\nhost a\n",
            "tlbsim-trace 1\nev 1 2 mmap\nend events=1\n",
            "tlbsim-trace 1\ntask x\n",
            "tlbsim-trace 1\ntask 1 pid=1 parent=0 kind=process comm=a\nev 5 1 fault addr=0xffffffffffffffff write=0\nend events=1\n",
        ] {
            assert!(Trace::parse("d", bad).is_err(), "{bad:?}");
        }
        let e = Trace::parse("d", "tlbsim-trace 1\ncpus 2\ncpus 3\n")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "d:3: field `cpus`: given twice");
        let text = sample().to_text().replace("cpus 2", "cpus two");
        let e = Trace::parse("d", &text).unwrap_err().to_string();
        assert_eq!(e, "d:5: field `cpus`: not a number");
    }
}
