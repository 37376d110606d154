//! What recording costs the recorded program, measured before each
//! recording (the trace's `overhead` line, docs/trace-format.md): `tlbsim
//! record` runs `tlbsim record-probe` once plainly and once under the same
//! `perf record` command line it will record with. The probe times a loop
//! of null system calls (each writes two perf records, `sys_enter` and
//! `sys_exit`) and a loop of first-touch write faults on fresh anonymous
//! pages. The per-record cost is half the difference of the two system
//! call times; the fault cost is the untraced one. `replay` subtracts
//! both from the recorded compute gaps (docs/model.md, "Trace replay").

use crate::cmd::calibrate::sample::{page_size, Mapping};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;
use tlbsim::trace::Overhead;

/// System calls per timed batch.
const SYSCALLS: u32 = 4_000;
/// Pages faulted per timed batch.
const FAULT_PAGES: usize = 2_000;
/// Batches; the fastest is kept (the least disturbed by other work).
const BATCHES: usize = 7;

/// The hidden `record-probe` command: prints `syscall_ns=X fault_ns=Y`.
pub fn run() -> ExitCode {
    match probe() {
        Ok((s, f)) => {
            outln!("syscall_ns={s} fault_ns={f}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: tlbsim record-probe: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fastest batch's ns per null system call and per first-touch fault.
fn probe() -> Result<(u64, u64), String> {
    let mut sys = u64::MAX;
    let mut fault = u64::MAX;
    let page = page_size();
    for _ in 0..BATCHES {
        let t = Instant::now();
        for _ in 0..SYSCALLS {
            // SAFETY: getppid has no arguments and cannot fail.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        sys = sys.min(t.elapsed().as_nanos() as u64 / u64::from(SYSCALLS));
        let m = Mapping::new(FAULT_PAGES * page, None)?;
        let t = Instant::now();
        for p in 0..FAULT_PAGES {
            m.write(p * page, 1);
        }
        fault = fault.min(t.elapsed().as_nanos() as u64 / FAULT_PAGES as u64);
    }
    Ok((sys, fault))
}

/// Parses the probe's output line.
fn parse(out: &str) -> Option<(u64, u64)> {
    let mut s = None;
    let mut f = None;
    for w in out.split_whitespace() {
        match w.split_once('=') {
            Some(("syscall_ns", v)) => s = v.parse().ok(),
            Some(("fault_ns", v)) => f = v.parse().ok(),
            _ => {}
        }
    }
    Some((s?, f?))
}

/// Runs `cmd` (the probe, maybe under perf) and reads its result.
fn run_probe(mut cmd: Command, what: &str) -> Result<(u64, u64), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run the overhead probe ({what}): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the overhead probe ({what}) failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| format!("the overhead probe ({what}) printed no result"))
}

/// Measures the overhead of `perf record` with `events` on this host.
pub fn measure(events: &[&str], scratch: &Path) -> Result<Overhead, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find tlbsim itself: {e}"))?;
    let mut plain = Command::new(&exe);
    plain.arg("record-probe");
    let (sys_plain, fault_plain) = run_probe(plain, "untraced")?;
    let mut perf = super::perf::perf_record(scratch, events);
    perf.arg(&exe).arg("record-probe");
    let traced = run_probe(perf, "under perf");
    let _ = std::fs::remove_file(scratch);
    let (sys_traced, _) = traced?;
    Ok(Overhead {
        record_ns: sys_traced.saturating_sub(sys_plain) / 2,
        fault_ns: fault_plain,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_line_and_refuses_others() {
        assert_eq!(parse("syscall_ns=84 fault_ns=510\n"), Some((84, 510)));
        assert_eq!(parse("syscall_ns=84\n"), None);
        assert_eq!(parse("fault_ns=x syscall_ns=1"), None);
    }

    #[test]
    #[ignore = "measures this host (a fault against a null system call); .ci/run runs it"]
    fn a_fault_costs_more_than_a_null_system_call() {
        // A first-touch fault enters the kernel too, and then allocates
        // and clears a page.
        let (s, f) = probe().unwrap();
        assert!(s > 0 && f > s, "syscall {s} ns, fault {f} ns");
    }
}
