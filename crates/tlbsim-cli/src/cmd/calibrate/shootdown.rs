//! A remote TLB shootdown's round trip (x86_flush.c's "ipi" minus
//! "local"): `madvise(MADV_DONTNEED)` of a touched page and a write to it,
//! on CPU `a`, while a second thread of the process spins on CPU `b`, so
//! that every zap sends `b` a flush IPI. `/proc/interrupts`' shootdown
//! line, read before and after, confirms the IPIs happened; the spinning
//! thread times the gaps in its own progress, i.e. the handler as the
//! interrupted CPU sees it.

use super::sample::{pin, Mapping, Spread};
use super::Budget;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The `/proc/interrupts` line that counts TLB-shootdown IPIs on this
/// architecture (`None` where shootdowns are not IPIs, e.g. arm64's
/// broadcast TLBI).
pub fn shootdown_label() -> Option<&'static str> {
    cfg!(target_arch = "x86_64").then_some("TLB")
}

/// The sum over CPUs of the `/proc/interrupts` line labelled `label`
/// (`TLB:` on x86); `None` if there is no such line.
pub fn interrupt_count(text: &str, label: &str) -> Option<u64> {
    let line = text.lines().find(|l| {
        l.trim_start()
            .strip_prefix(label)
            .is_some_and(|r| r.starts_with(':'))
    })?;
    let (_, rest) = line.split_once(':')?;
    let counts: Vec<u64> = rest
        .split_whitespace()
        .map_while(|w| w.parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// What the shootdown loops measured.
#[derive(Debug, Clone)]
pub struct Shootdown {
    /// madvise+touch per iteration, alone on `a`.
    pub local: Spread,
    /// The same with a thread of the process spinning on `b`, over the
    /// repetitions with an IPI in at least 90 % of the iterations (`None`
    /// if none had).
    pub remote: Option<Spread>,
    /// Repetitions of the remote loop tried.
    pub tried: usize,
    /// Shootdown IPIs counted per iteration of the remote loop, over
    /// every repetition tried.
    pub ipis_per_iter: f64,
    /// Shootdown IPIs per iteration of the local loop (should be ~0).
    pub local_ipis_per_iter: f64,
    /// Median gap (ns) the spinning thread saw per interruption, and how
    /// many gaps it saw.
    pub gap: Option<(Spread, usize)>,
}

/// Can the shootdown counter `label` be read? The error says why not
/// (no /proc/interrupts, or no such line).
pub fn check_counter(label: &str) -> Result<(), String> {
    read_count(label).map(|_| ())
}

fn read_count(label: &str) -> Result<u64, String> {
    let t = std::fs::read_to_string("/proc/interrupts")
        .map_err(|e| format!("cannot read /proc/interrupts: {e}"))?;
    interrupt_count(&t, label).ok_or_else(|| format!("/proc/interrupts has no \"{label}:\" line"))
}

/// `n` iterations of madvise(DONTNEED) + write of one page: ns per
/// iteration and the shootdown IPIs counted meanwhile.
fn zap_rep(m: &Mapping, n: u64, label: &str) -> Result<(f64, u64), String> {
    let before = read_count(label)?;
    let t = Instant::now();
    for i in 0..n {
        m.madvise(0, m.len, libc::MADV_DONTNEED)?;
        m.write(0, i as u8);
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    Ok((ns, read_count(label)?.saturating_sub(before)))
}

/// Spins on `cpu` until `stop`, timing gaps longer than `min_gap_ns`
/// between consecutive clock reads; returns the gaps.
fn spin_and_time_gaps(
    cpu: usize,
    stop: &AtomicBool,
    ready: &AtomicBool,
) -> Result<Vec<f64>, String> {
    const MIN_GAP_NS: u128 = 300;
    pin(cpu)?;
    let mut gaps = Vec::with_capacity(1 << 20);
    let mut last = Instant::now();
    ready.store(true, Ordering::Release);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let d = now.duration_since(last).as_nanos();
        if d > MIN_GAP_NS && gaps.len() < gaps.capacity() {
            gaps.push(d as f64);
        }
        last = now;
    }
    Ok(gaps)
}

/// Repetitions of the remote loop tried at most, per repetition wanted:
/// while another task runs on `b` the spinning thread is not there, no
/// IPI is needed, and the repetition does not count. The remote
/// repetitions are short (100 iterations, a few ms) so that on a busy
/// host some fall inside the time slices of both threads.
const TRIES_PER_REP: usize = 60;

/// The remote loop with a thread spinning on `b`: the repetitions in
/// which nearly every iteration sent an IPI (ns per iteration), the
/// repetitions tried, their IPIs per iteration, the spinning thread's gaps.
fn remote_reps(
    m: &Mapping,
    bud: &Budget,
    label: &str,
    b: usize,
) -> Result<(Vec<f64>, usize, f64, Vec<f64>), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let (s2, r2) = (stop.clone(), ready.clone());
    let spinner = std::thread::spawn(move || spin_and_time_gaps(b, &s2, &r2));
    while !ready.load(Ordering::Acquire) && !spinner.is_finished() {
        std::hint::spin_loop();
    }
    let n = (bud.n(50_000) / 500).max(50);
    let (mut good, mut tried, mut ipis) = (Vec::new(), 0, 0);
    let mut err = None;
    while good.len() < bud.reps && tried < TRIES_PER_REP * bud.reps && !spinner.is_finished() {
        match zap_rep(m, n, label) {
            Ok((ns, k)) => {
                tried += 1;
                ipis += k;
                if k as f64 >= 0.9 * n as f64 {
                    good.push(ns);
                }
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let gaps = spinner
        .join()
        .map_err(|_| "the spinning thread panicked")??;
    if let Some(e) = err {
        return Err(e);
    }
    Ok((
        good,
        tried,
        ipis as f64 / (tried as u64 * n).max(1) as f64,
        gaps,
    ))
}

/// Runs the local and remote loops; `a` and `b` are distinct CPUs.
pub fn measure(bud: &Budget, a: usize, b: usize) -> Result<Shootdown, String> {
    let label = shootdown_label().ok_or("no shootdown IPI counter on this architecture")?;
    pin(a)?;
    let m = Mapping::new(super::sample::page_size(), None)?;
    m.write(0, 1);
    let n = bud.n(50_000);
    zap_rep(&m, n / 10, label)?; // warm-up
    let (mut local, mut local_ipis) = (Vec::new(), 0);
    for _ in 0..bud.reps {
        let (ns, k) = zap_rep(&m, n, label)?;
        local.push(ns);
        local_ipis += k;
    }
    let (remote, tried, ipis_per_iter, gaps) = remote_reps(&m, bud, label, b)?;
    Ok(Shootdown {
        local: Spread::of(&local).expect("reps"),
        remote: Spread::of(&remote),
        tried,
        ipis_per_iter,
        local_ipis_per_iter: local_ipis as f64 / (n * bud.reps as u64) as f64,
        gap: Spread::of(&gaps).map(|s| (s, gaps.len())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "           CPU0       CPU1       \n  0:         32          0   IO-APIC   2-edge      timer\n LOC:   12345678   23456789   Local timer interrupts\n CAL:    6803050    6751942   Function call interrupts\n TLB:    3793851    3907761   TLB shootdowns\n";

    #[test]
    fn shootdown_line_is_summed_over_cpus() {
        assert_eq!(interrupt_count(X86, "TLB"), Some(3_793_851 + 3_907_761));
        assert_eq!(interrupt_count(X86, "CAL"), Some(6_803_050 + 6_751_942));
        assert_eq!(interrupt_count(X86, "TL"), None);
        assert_eq!(interrupt_count(X86, "IPI0"), None);
    }
}
