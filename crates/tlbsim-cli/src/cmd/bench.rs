//! `tlbsim bench`: the simulator's own speed and memory on a fixed set of
//! runs (issue 13), so that regressions show: simulated events, host
//! seconds, host ns per event, events/s and peak RSS, each run with and
//! without the checker. Each run is a child process (`bench --one`), so
//! its peak RSS is its own. Rates are of the run's CPU time, not its wall
//! time, so that a machine shared with other work (a build, another
//! bench) slows the figures less; the wall time is shown beside it.

use crate::files::{check_outputs_or_report, write_or_report, Console};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only cases whose name contains this text.
    #[arg(long)]
    only: Option<String>,
    /// Also write the measurements as a JSON array to this file, or to
    /// standard output if "-" (the table then goes to standard error);
    /// written as `run --json` writes.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run one case in this process and print its measurement as one JSON
    /// line (what the parent runs in each child).
    #[arg(long, hide = true)]
    one: Option<String>,
    /// With --one: the checker off.
    #[arg(long, hide = true)]
    no_checker: bool,
}

/// One benchmark run: a built-in experiment with `--set` changes.
struct Case {
    name: &'static str,
    experiment: &'static str,
    sets: &'static [&'static str],
}

/// The fixed set. Sizes keep the whole bench at a few minutes on 2 cores
/// while covering the costs issue 13 names: broadcast fan-out (mprotect at
/// 32, 256 and 4096 CPUs), the checker (sort-compute, pthread-mmap with
/// huge pages) and the event loop (hackbench). The 4096-CPU cases run 21
/// iterations, the size issue 13 measured at filing: shorter runs are
/// mostly the one-off setup of 4096 CPUs (their TLBs, processes and first
/// context switches), not the per-event cost the comparison with 32 CPUs
/// is about.
const CASES: &[Case] = &[
    Case {
        name: "mprotect-32-stock",
        experiment: "seed000-mprotect",
        sets: &["workload.iterations=2000"],
    },
    Case {
        name: "mprotect-32-v2",
        experiment: "seed000-mprotect",
        sets: &[
            "kernel.tlb_policy=\"arm64-skip-broadcast-v2\"",
            "workload.iterations=2000",
        ],
    },
    Case {
        name: "mprotect-256-stock",
        experiment: "seed000-mprotect",
        sets: &["machine.cpus=256", "workload.iterations=100"],
    },
    Case {
        name: "mprotect-4096-stock",
        experiment: "seed000-mprotect",
        sets: &["machine.cpus=4096", "workload.iterations=21"],
    },
    Case {
        name: "mprotect-4096-v2",
        experiment: "seed000-mprotect",
        sets: &[
            "machine.cpus=4096",
            "kernel.tlb_policy=\"arm64-skip-broadcast-v2\"",
            "workload.iterations=21",
        ],
    },
    Case {
        name: "sort-compute",
        experiment: "seed000-sort-compute",
        sets: &["workload.shells=64"],
    },
    Case {
        name: "pthread-mmap",
        experiment: "seed004-pthread-mmap",
        sets: &["workload.rounds=25"],
    },
    Case {
        name: "hackbench",
        experiment: "seed002-hackbench",
        sets: &["workload.runs=5"],
    },
];

/// What one run measured.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Measured {
    case: String,
    checker: bool,
    simulated_s: f64,
    events: u64,
    host_s: f64,
    /// CPU seconds the run took (its process's, user and system).
    #[serde(default)]
    cpu_s: f64,
    peak_rss_kib: Option<u64>,
}

/// Runs every selected case twice (checker on, off) in child processes and
/// prints the table.
pub fn run(args: Args) -> ExitCode {
    if let Some(name) = &args.one {
        return one(name, !args.no_checker);
    }
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| args.only.as_deref().is_none_or(|o| c.name.contains(o)))
        .collect();
    if cases.is_empty() {
        let names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        eprintln!(
            "error: --only {:?} matches no case (cases: {})",
            args.only.unwrap_or_default(),
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    if let Err(code) = check_outputs_or_report(&[], &[("--json", args.json.as_deref())]) {
        return code;
    }
    let console = Console::new(&[args.json.as_deref()]);
    console.line(&format!(
        "{:<22} {:>7} {:>11} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "case",
        "checker",
        "simulated s",
        "events",
        "wall s",
        "CPU s",
        "ns/event",
        "M ev/s",
        "RSS MiB"
    ));
    let mut all = Vec::new();
    for c in cases {
        for checker in [true, false] {
            match child(c.name, checker) {
                Ok(m) => {
                    console.line(&row(&m));
                    all.push(m);
                }
                Err(e) => {
                    eprintln!("error: {} (checker {checker}): {e}", c.name);
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    match args.json {
        Some(j) => write_or_report(&j, &serde_json::to_vec_pretty(&all).expect("serialisable")),
        None => ExitCode::SUCCESS,
    }
}

/// One printed row of the table.
fn row(m: &Measured) -> String {
    let ns = m.cpu_s * 1e9 / m.events.max(1) as f64;
    let rss = m
        .peak_rss_kib
        .map_or("-".to_string(), |k| format!("{:.1}", k as f64 / 1024.0));
    format!(
        "{:<22} {:>7} {:>11.6} {:>12} {:>9.2} {:>9.2} {:>9.0} {:>9.2} {:>9}",
        m.case,
        if m.checker { "on" } else { "off" },
        m.simulated_s,
        m.events,
        m.host_s,
        m.cpu_s,
        ns,
        m.events as f64 / m.cpu_s.max(1e-9) / 1e6,
        rss
    )
}

/// Runs `bench --one name` in a child process and reads its line.
fn child(name: &str, checker: bool) -> Result<Measured, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "--one", name]);
    if !checker {
        cmd.arg("--no-checker");
    }
    let out = cmd.output().map_err(|e| format!("cannot run: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bad child output: {e}"))
}

/// Runs case `name` here and prints its measurement as one JSON line.
fn one(name: &str, checker: bool) -> ExitCode {
    let Some(c) = CASES.iter().find(|c| c.name == name) else {
        eprintln!("error: no bench case {name:?}");
        return ExitCode::from(2);
    };
    let Some(r) = tlbsim::reproduce::REPRODUCTIONS
        .iter()
        .find(|r| r.experiment == c.experiment)
    else {
        eprintln!("error: no built-in experiment {}", c.experiment);
        return ExitCode::FAILURE;
    };
    let mut sets: Vec<String> = c.sets.iter().map(|s| s.to_string()).collect();
    sets.push(format!("checker.enabled={checker}"));
    let exp = match tlbsim::config::apply_sets(r.toml, &sets) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t0 = Instant::now();
    let cpu0 = cpu_seconds();
    let o = match tlbsim::sim::run(&exp, &Default::default()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let m = Measured {
        case: name.to_string(),
        checker,
        simulated_s: o.elapsed_ns as f64 / 1e9,
        events: o.stats.events,
        host_s: t0.elapsed().as_secs_f64(),
        cpu_s: cpu_seconds() - cpu0,
        peak_rss_kib: peak_rss_kib(),
    };
    outln!("{}", serde_json::to_string(&m).expect("serialisable"));
    ExitCode::SUCCESS
}

/// The CPU time this process has used so far, in seconds
/// (`CLOCK_PROCESS_CPUTIME_ID`, user and system, of every thread).
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to write; the clock id
    // is one every Linux kernel has.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// This process's peak resident set (`VmHWM` of /proc/self/status, Linux);
/// `None` where the kernel does not report it.
fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
