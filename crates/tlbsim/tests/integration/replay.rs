//! Recorded traces (tests/fixtures/traces, recorded with `tlbsim record`
//! on an x86-64 host; docs/trace-format.md) replayed under the checker.

use crate::common::{experiment, read_files, run_ok, run_seed};
use tlbsim::config::Experiment;
use tlbsim::sim::SimError;
use tlbsim::trace::Trace;

const FIXTURES: &[&str] = &["sort", "xz", "sh", "xz-v2"];

fn path(name: &str) -> String {
    format!(
        "{}/tests/fixtures/traces/{name}.trace",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn replay(profile: &str, policy: &str, trace: &str) -> Experiment {
    let kernel = if policy.starts_with("x86") {
        "asid_allocator = \"none\"\n"
    } else {
        ""
    };
    let wl = format!("name = \"replay\"\ntrace = \"{trace}\"");
    experiment(profile, policy, 2, kernel, &wl, "")
}

/// Writes `text` as `name` in this test process's scratch directory
/// `tag`; returns the directory (to remove) and the file's path.
fn scratch_trace(tag: &str, name: &str, text: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("tlbsim-replay-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p.display().to_string())
}

/// [`replay`] with workload parameter `key` set to the string `value`.
fn replay_with(profile: &str, policy: &str, trace: &str, key: &str, value: &str) -> Experiment {
    let mut e = replay(profile, policy, trace);
    e.workload
        .params
        .insert(key.into(), toml::Value::String(value.into()));
    e
}

/// A format-1 trace of a 2-CPU x86 host with these `task` lines and
/// events (each `ev ...`).
fn trace_text<S: AsRef<str>>(tasks: &str, ev: &[S]) -> String {
    let ev: Vec<&str> = ev.iter().map(|e| e.as_ref()).collect();
    format!(
        "tlbsim-trace 1\nhost h\nkernel k\narch x86_64\ncpus 2\npage_size 4096\ncommand c\n{tasks}{}\nend events={}\n",
        ev.join("\n"),
        ev.len()
    )
}

/// The task lines of a process (task 1) and its thread (task 2).
const PROCESS_AND_THREAD: &str =
    "task 1 pid=1 parent=0 kind=process comm=a\ntask 2 pid=1 parent=1 kind=thread comm=a\n";

fn recorded(name: &str) -> Trace {
    let p = path(name);
    Trace::parse(&p, &std::fs::read_to_string(&p).unwrap()).unwrap()
}

#[test]
fn fixtures_read_back_byte_for_byte() {
    for f in FIXTURES {
        let p = path(f);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(Trace::parse(&p, &text).unwrap().to_text(), text, "{f}");
    }
}

#[test]
fn every_fixture_passes_the_checker_with_its_faults_and_flushes() {
    for f in FIXTURES {
        let t = recorded(f);
        let faults = t.counts().get("fault").copied().unwrap_or(0);
        assert!(faults > 0, "{f}: the fixture has faults");
        for (profile, policy) in [
            ("ampere-32", "arm64-stock"),
            ("skylake-4c8t", "x86-tlb-gen"),
        ] {
            let o = run_ok(&replay(profile, policy, &path(f)));
            let s = &o.stats.total;
            // Every recorded fault is an access; a fault the model does not
            // take again (a page already mapped) makes fewer, never more
            // than the faults plus the image windows' first touches.
            assert!(
                s.page_faults >= faults / 2 && s.page_faults <= faults * 2,
                "{f} {policy}: {} faults replayed, {faults} recorded",
                s.page_faults
            );
            assert!(
                s.flushes_broadcast + s.flushes_local > 0,
                "{f} {policy}: the trace's munmap/mprotect flush"
            );
        }
    }
}

#[test]
fn threads_of_xz_make_remote_flushes() {
    // xz -T2's threads share an mm: the x86 policy shoots down the other
    // CPU (the recorded trace has reason-4 "remote send IPI" flushes).
    let t = recorded("xz");
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e.kind, tlbsim::trace::EventKind::TlbFlush { reason: 4, .. })));
    let o = run_ok(&replay("skylake-4c8t", "x86-tlb-gen", &path("xz")));
    assert!(o.stats.total.flushes_broadcast > 0);
    let o = run_ok(&replay("ampere-32", "arm64-stock", &path("xz")));
    assert!(o.stats.total.tlbi_broadcast > 0);
}

#[test]
fn replay_is_deterministic() {
    for f in FIXTURES {
        let e = replay("ampere-32", "arm64-stock", &path(f));
        let a = format!("{:?}", run_seed(&e, 7).unwrap());
        let b = format!("{:?}", run_seed(&e, 7).unwrap());
        assert_eq!(a, b, "{f}");
    }
}

fn config_error(e: &Experiment) -> String {
    match run_ok_or_err(e) {
        Err(err) => err.to_string(),
        Ok(()) => panic!("the run should have been refused"),
    }
}

fn run_ok_or_err(e: &Experiment) -> Result<(), SimError> {
    run_seed(e, 1).map(|_| ())
}

#[test]
fn bad_traces_are_refused_naming_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("tlbsim-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(path("sort")).unwrap();
    let cases = [
        (
            "version",
            good.replacen("tlbsim-trace 1", "tlbsim-trace 4", 1),
            ":1: field `version`: format version 4",
        ),
        ("truncated", good[..good.len() / 2].to_string(), "truncated"),
        (
            "malformed",
            good.replacen("write=", "write=maybe", 1),
            "field `write`: `maybe",
        ),
    ];
    for (name, text, want) in cases {
        let p = dir.join(format!("{name}.trace"));
        std::fs::write(&p, text).unwrap();
        let p = p.display().to_string();
        let err = config_error(&replay("ampere-32", "arm64-stock", &p));
        assert!(err.contains(&p) && err.contains(want), "{name}: {err}");
    }
    let missing = config_error(&replay("ampere-32", "arm64-stock", "/nonexistent.trace"));
    assert!(
        missing.contains("/nonexistent.trace: cannot read"),
        "{missing}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two threads that the host ran one after the other on cpu0 (cpu1
/// idle), each copying zero pages on write (`wp_page_copy` flushes).
fn cpu0_only_trace() -> String {
    let mut ev = vec![
        "ev 0 1 run cpu=0".to_string(),
        "ev 10 1 mmap addr=0x10000000 len=262144 prot=rw- dur=100".into(),
        "ev 200 1 clone child=2".into(),
        "ev 300 1 preempt".into(),
        "ev 300 2 run cpu=0".into(),
    ];
    let mut t = 400;
    let faults = |ev: &mut Vec<String>, tid: u32, first: u64, t: &mut u64| {
        for p in first..first + 16 {
            let a = 0x1000_0000 + p * 4096;
            ev.push(format!("ev {t} {tid} fault addr={a:#x} write=0"));
            ev.push(format!(
                "ev {} {tid} fault addr={a:#x} write=1",
                *t + 20_000
            ));
            *t += 40_000;
        }
    };
    faults(&mut ev, 2, 0, &mut t);
    ev.push(format!("ev {t} 2 exit"));
    ev.push(format!("ev {t} 1 run cpu=0"));
    t += 100;
    faults(&mut ev, 1, 32, &mut t);
    ev.push(format!("ev {t} 1 exit"));
    trace_text(PROCESS_AND_THREAD, &ev)
}

#[test]
fn recorded_placement_keeps_the_hosts_cpu_sharing() {
    let (dir, p) = scratch_trace("place", "cpu0.trace", &cpu0_only_trace());
    let ipis = |placement: &str| {
        let e = replay_with("skylake-4c8t", "x86-tlb-gen", &p, "placement", placement);
        let o = run_ok(&e);
        o.stats.total.flushes_broadcast
    };
    // On the host the threads took turns on cpu0: no flush had another
    // CPU to reach. The model's own scheduler spreads them over both CPUs,
    // and the copies then shoot down the other thread's CPU.
    assert_eq!(ipis("recorded"), 0);
    assert!(ipis("model") > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_recorders_own_time_is_taken_out_of_the_compute() {
    // One task: 2 ms between its mmap and its exit, of which 100 perf
    // records at 1 us each and one fault's host handling (50 us) were the
    // recorder's and the host's, not the program's.
    let trace = |perf: &str| {
        format!(
            "tlbsim-trace 2\nhost h\nkernel k\narch x86_64\ncpus 2\npage_size 4096\ncommand c\n\
overhead record_ns=1000 fault_ns=50000\ntask 1 pid=1 parent=0 kind=process comm=a\n\
ev 0 1 run cpu=0\nev 10 1 mmap addr=0x10000000 len=4096 prot=rw- dur=90\n\
ev 100000 1 fault addr=0x10000000 write=1\n{perf}ev 2000000 1 exit\nend events={}\n",
            if perf.is_empty() { 4 } else { 5 }
        )
    };
    let dir = std::env::temp_dir().join(format!("tlbsim-replay-ovh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let elapsed = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let o = run_ok(&replay(
            "skylake-4c8t",
            "x86-tlb-gen",
            &p.display().to_string(),
        ));
        (o.elapsed_ns, o.metrics["replay_recorder_removed_ns"])
    };
    let (plain, _) = elapsed("plain.trace", trace(""));
    let (less, m) = elapsed("perf.trace", trace("ev 2000000 1 perf records=100\n"));
    assert_eq!(plain - less, 100_000, "the records' 100 us");
    // The fault's 50 us comes out of both runs; the records' only of one.
    assert_eq!(m, 150_000.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_version_2_fixture_takes_the_recorders_time_out() {
    let t = recorded("xz-v2");
    let o = t.header.overhead.expect("format 2 with an overhead line");
    assert!(o.record_ns > 0 && o.fault_ns > 0);
    let r = run_ok(&replay("skylake-4c8t", "x86-tlb-gen", &path("xz-v2")));
    let removed = r.metrics["replay_recorder_removed_ns"];
    // At least every fault's host time comes out (a gap shorter than it
    // gives up less).
    let faults = t.counts()["fault"] as f64;
    assert!(removed > 0.5 * faults * o.fault_ns as f64, "{removed}");
}

/// Two threads on two CPUs: task 2 sleeps 5 ms with no recorded waker
/// (a timer) between two touches of a shared page, while task 1 unmaps
/// another page and then waits for task 2's wake-up.
fn timed_sleep_trace() -> String {
    let ev = [
        "ev 0 1 run cpu=0",
        "ev 10 1 mmap addr=0x10000000 len=65536 prot=rw- dur=100",
        "ev 200 1 fault addr=0x10000000 write=1",
        "ev 300 1 fault addr=0x10001000 write=1",
        "ev 400 1 clone child=2",
        "ev 500 2 run cpu=1",
        "ev 600 2 fault addr=0x10000000 write=0",
        "ev 700 2 block waker=none ns=5000000",
        "ev 800 1 munmap addr=0x10001000 len=4096 dur=100",
        "ev 1000 1 block waker=2 ns=5000000",
        "ev 5000700 2 run cpu=1",
        "ev 5000800 2 fault addr=0x10002000 write=1",
        "ev 5000850 2 wake target=1",
        "ev 5000900 2 exit",
        "ev 5001000 1 run cpu=0",
        "ev 5001100 1 exit",
    ];
    trace_text(PROCESS_AND_THREAD, &ev)
}

#[test]
fn a_sleep_no_task_ended_is_slept_on_a_timer() {
    let (dir, p) = scratch_trace("timer", "timer.trace", &timed_sleep_trace());
    let run = |mode: &str| {
        let e = replay_with("skylake-4c8t", "x86-tlb-gen", &p, "untraced_sleeps", mode);
        run_ok(&e)
    };
    let (timer, dropped) = (run("timer"), run("drop"));
    assert_eq!(timer.metrics["replay_timed_sleep_ns"], 5e6);
    assert_eq!(dropped.metrics["replay_dropped_sleep_ns"], 5e6);
    // The sleep is in the elapsed time, once.
    assert!(timer.elapsed_ns >= 5_000_000, "{}", timer.elapsed_ns);
    let extra = timer.elapsed_ns - dropped.elapsed_ns;
    assert!(
        (4_900_000..5_100_000).contains(&extra),
        "the timer adds {extra} ns"
    );
    // The explorer takes the timer's interrupt wherever it chooses, and
    // every schedule finishes (a timer that fired before schedule() does
    // not leave the task asleep).
    let e = replay_with("ampere-32", "arm64-stock", &p, "untraced_sleeps", "timer");
    let opts = tlbsim::explore::CheckOptions {
        strategy: tlbsim::explore::Strategy::Random,
        schedules: 200,
        seed: 1,
        max_actions: 200_000,
        max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
        speculation: 1,
        cpus: None,
    };
    let r = tlbsim::explore::check(&read_files(&e), &opts).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.completed, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process runs on CPU 1, moves to CPU 0 (CPU 1 goes idle, lazy on its
/// mm) and forks twice; each child runs on CPU 1 and exits.
fn forks_after_a_move_trace() -> String {
    let ev = [
        "ev 0 1 run cpu=1",
        "ev 10 1 mmap addr=0x10000000 len=65536 prot=rw- dur=100",
        "ev 200 1 fault addr=0x10000000 write=1",
        "ev 300 1 block waker=none ns=1000",
        "ev 1300 1 run cpu=0",
        "ev 1400 1 clone child=2",
        "ev 1500 2 run cpu=1",
        "ev 1600 2 exit",
        "ev 2000 1 clone child=3",
        "ev 2100 3 run cpu=1",
        "ev 2200 3 exit",
        "ev 3000 1 exit",
    ];
    trace_text(
        "task 1 pid=1 parent=0 kind=process comm=a
task 2 pid=2 parent=1 kind=process comm=a
\
task 3 pid=3 parent=1 kind=process comm=a
",
        &ev,
    )
}

#[test]
fn a_lazy_mm_cpumask_sends_forks_flush_to_the_cpu_the_parent_left() {
    let (dir, p) = scratch_trace("lazymask", "forks.trace", &forks_after_a_move_trace());
    let ipis = |policy: &str| {
        let o = run_ok(&replay("skylake-4c8t", policy, &p));
        o.stats.total.ipi_call + o.stats.total.ipi_call_single
    };
    // The first fork's flush_tlb_mm() (tables freed: lazy CPUs too) reaches
    // CPU 1, lazy on the parent's mm, under both. Before 6.13 CPU 1 then
    // leaves the parent's mask (switch to init_mm); since 6.13 it stays,
    // and the second fork's flush reaches it again, where it leaves the
    // mask (TLB_REMOTE_WRONG_CPU).
    assert_eq!(ipis("x86-tlb-gen"), 1);
    assert_eq!(ipis("x86-lazy-cpumask"), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_preempted_task_waits_its_recorded_runnable_time_before_running_elsewhere() {
    // Preempted on cpu0 at 1 us, run again on cpu1 a millisecond later,
    // taking the CPU from nobody: the host kept it runnable meanwhile.
    let text =
        "tlbsim-trace 3\nhost h\nkernel 6.8\narch x86_64\ncpus 2\npage_size 4096\ncommand c\n\
task 1 pid=1 parent=0 kind=process comm=a\n\
ev 0 1 run cpu=0\nev 1000 1 preempt\nev 1001000 1 run cpu=1\nev 1002000 1 exit\nend events=4\n";
    let (dir, p) = scratch_trace("runnable", "runnable.trace", text);
    let run = |placement: &str| {
        let e = replay_with("skylake-4c8t", "x86-tlb-gen", &p, "placement", placement);
        run_ok(&e)
    };
    let (rec, model) = (run("recorded"), run("model"));
    assert_eq!(rec.metrics["replay_runnable_wait_ns"], 1_000_000.0);
    assert!(rec.elapsed_ns >= 1_002_000, "{}", rec.elapsed_ns);
    assert_eq!(model.metrics["replay_runnable_wait_ns"], 0.0);
    assert!(model.elapsed_ns < 100_000, "{}", model.elapsed_ns);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The library reads no file: a replay whose trace the caller did not
/// read into `WorkloadConfig::files` is refused naming the field, and one
/// the caller could not read reports the caller's error.
#[test]
fn a_trace_the_caller_did_not_read_is_refused_naming_the_field() {
    let mut e = replay("ampere-32", "arm64-stock", &path("sort"));
    let err = tlbsim::sim::run(&e, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("trace") && err.contains("sort.trace: not read"),
        "{err}"
    );
    assert_eq!(e.workload.file_paths(), [path("sort")]);
    e.workload
        .files
        .insert(path("sort"), Err("sort.trace: cannot read: gone".into()));
    assert!(e.workload.file_paths().is_empty());
    let err = tlbsim::sim::run(&e, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("sort.trace: cannot read: gone"), "{err}");
}
