//! `tlbsim record [-o FILE] -- COMMAND ARGS...`: runs a command under
//! `perf record` with the scheduler, system-call, page-fault and
//! `tlb:tlb_flush` tracepoints, converts `perf script`'s output to a
//! `tlbsim-trace` (docs/trace-format.md) and writes it whole or not at all.

use crate::files::{check_outputs_or_report, write_or_report};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use tlbsim::trace::perf::convert;
use tlbsim::trace::{Header, Trace};

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

/// What recording needs before it starts: perf that runs, the right to
/// use tracepoints, the command, tracefs and the required tracepoints.
/// Returns the tracepoints to record (the optional ones this kernel has).
fn preflight(args: &Args) -> Result<Vec<&'static str>, String> {
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
    let mut events: Vec<&'static str> = Vec::new();
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
    Ok(events)
}

/// Records the command (after measuring what recording costs it) and
/// converts perf's script of it into a trace.
fn record(args: &Args) -> Result<Trace, String> {
    let events = preflight(args)?;
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
    let mut perf = super::perf::perf_record(&data, &events);
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
