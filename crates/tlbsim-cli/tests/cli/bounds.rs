//! Issue 35, items 6-8: `rerun` tells a bad file from a changed result;
//! work too large for tlbsim is refused before it starts; topologies and
//! traces that are no machine or no process tree are refused, located.
//! Every refusal here happens before any simulation, so each test is fast.

use crate::common;

use common::{s, scratch_dir, stderr, stdout, tlbsim, MPROTECT};
use std::path::Path;
use std::time::{Duration, Instant};

const HACKBENCH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed002-hackbench.toml"
);

const SAFETY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed000-safety.toml"
);

const VM_RACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed003-vm-race.toml"
);

/// Runs `tlbsim ARGS`, expects exit 2 within a few seconds (the refusal
/// comes before any work) and returns standard error.
fn refused_fast(args: &[&str]) -> String {
    let t0 = Instant::now();
    let o = tlbsim(args);
    let took = t0.elapsed();
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
    stderr(&o)
}

#[test]
fn run_of_an_endless_file_fails_at_once() {
    let e = refused_fast(&["run", "/dev/zero"]);
    assert_eq!(
        e,
        "error: /dev/zero: larger than tlbsim's limit of 4194304 bytes for an experiment file\n"
    );
    let e = refused_fast(&["replay", "/dev/zero", "--profile", "ampere-32"]);
    assert!(
        e.contains("/dev/zero:1: line longer than 4096 bytes"),
        "{e}"
    );
}

#[test]
fn endless_iterations_are_refused_with_the_estimate_and_the_flag() {
    let e = refused_fast(&[
        "run",
        MPROTECT,
        "--set",
        "workload.iterations=9223372036854775807",
    ]);
    assert!(
        e.starts_with("error: --set workload.iterations=9223372036854775807: [workload] iterations: about 1.8e19 simulated events (32 processes x 1 threads x 9223372036854775807 iterations x 47 events each)"),
        "{e}"
    );
    assert!(
        e.contains("(--max-events 3000000000; raise it, or 0 for none)"),
        "{e}"
    );
    // Where the file sets it, the error points at its line.
    let dir = scratch_dir("bounds", "iterations");
    let text = std::fs::read_to_string(MPROTECT)
        .unwrap()
        .replace("iterations = 10000", "iterations = 100000000000");
    let exp = dir.join("x.toml");
    std::fs::write(&exp, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("iterations ="))
        .unwrap()
        + 1;
    let e = refused_fast(&["run", s(&exp)]);
    assert!(
        e.starts_with(&format!(
            "error: {}:{line}: [workload] iterations: about 1.5e14",
            exp.display()
        )),
        "{e}"
    );
    // A lower bound refuses what the default lets run.
    let e = refused_fast(&["run", MPROTECT, "--max-events", "1000"]);
    assert!(
        e.contains("over the bound of 1000 events (--max-events 1000;"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_million_hackbench_runs_are_refused() {
    let e = refused_fast(&["run", HACKBENCH, "--set", "workload.runs=1000000"]);
    assert!(
        e.starts_with("error: --set workload.runs=1000000: [workload] runs: about 2.8e12 simulated events (1000000 runs x 10 groups x 20 senders x 20 receivers x 100 loops x 7 events each)"),
        "{e}"
    );
}

#[test]
fn a_sweep_refuses_a_point_too_large_before_any_point_runs() {
    let dir = scratch_dir("bounds", "sweep");
    let csv = dir.join("o.csv");
    let sweep = |more: &[&str]| {
        let mut args = vec![
            "sweep",
            MPROTECT,
            "--cpus",
            "2",
            "--policies",
            "arm64-stock",
            "--profiles",
            "ampere-32",
            "--csv",
            s(&csv),
        ];
        args.extend(more);
        refused_fast(&args)
    };
    // The swept value is blamed on --param, not on the file's line.
    let e = sweep(&["--param", "iterations=10,100000000000"]);
    assert!(
        e.starts_with("error: ampere-32 2 CPUs iterations=100000000000 arm64-stock seed 1: --param iterations=100000000000: [workload] iterations: about 9.4e12 simulated events"),
        "{e}"
    );
    assert!(e.contains("(--max-events 3000000000;"), "{e}");
    assert!(
        !e.contains("iterations=10 arm64-stock seed 1:"),
        "a point ran: {e}"
    );
    // A --set value past a runtime limit, on its flag.
    let e = sweep(&["--set", "workload.pages=100000000"]);
    assert!(
        e.contains(": --set workload.pages=100000000: [workload] pages: 100000000 exceeds"),
        "{e}"
    );
    assert!(!csv.exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_sum_is_refused_naming_the_parameter_of_its_largest_term() {
    // churn: Q's iterations and P's rounds, each blamed when it dominates.
    let e = refused_fast(&["run", SAFETY, "--set", "workload.q_iterations=4000000000"]);
    assert!(
        e.starts_with("error: --set workload.q_iterations=4000000000: [workload] q_iterations: about 4.4e12 simulated events (4000000000 Q iterations x 1100 events + 20 rounds x 1624 events each)"),
        "{e}"
    );
    let e = refused_fast(&["run", SAFETY, "--set", "workload.rounds=4000000000"]);
    assert!(
        e.starts_with("error: --set workload.rounds=4000000000: [workload] rounds: about 6.5e12 simulated events (200 Q iterations x 1100 events + 4000000000 rounds x 1624 events each)"),
        "{e}"
    );
}

#[test]
fn a_workload_in_every_vm_is_refused_for_all_of_them() {
    let e = refused_fast(&["run", VM_RACE, "--set", "workload.iterations=100000000000"]);
    assert!(
        e.starts_with("error: --set workload.iterations=100000000000: [workload] iterations: about 2.8e13 simulated events (2 VMs x (4 threads squared x 20 events + 2 threads x 100000000000 iterations x 70 events) each)"),
        "{e}"
    );
}

#[test]
fn a_replay_is_estimated_from_its_trace_and_refused_at_the_trace_line() {
    let dir = scratch_dir("bounds", "replay");
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tlbsim/tests/fixtures/traces/sh.trace"
    );
    let exp = dir.join("replay.toml");
    std::fs::write(
        &exp,
        format!(
            "[experiment]\nname = \"replay-bound\"\nprofile = \"ampere-32\"\nseed = 1\n\n\
             [kernel]\ntlb_policy = \"arm64-stock\"\nasid_allocator = \"arm64-asid-reserved\"\n\n\
             [workload]\nname = \"replay\"\ntrace = \"{trace}\"\n"
        ),
    )
    .unwrap();
    let e = refused_fast(&["run", s(&exp), "--max-events", "1000"]);
    assert!(
        e.starts_with(&format!(
            "error: {}:12: [workload] trace: about 4848 simulated events (404 replayed records x 12 events each)",
            exp.display()
        )),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn memory_and_tasks_past_the_runtime_limits_are_refused_at_validation() {
    let e = refused_fast(&["run", MPROTECT, "--set", "workload.pages=16777216"]);
    assert_eq!(
        e,
        "error: --set workload.pages=16777216: [workload] pages: 32 processes x 1 threads x 16777216 pages = 536870912 pages of simulated memory in use at once would exceed tlbsim's limit of 8388608 (the run would stop there)\n"
    );
    let e = refused_fast(&["run", MPROTECT, "--set", "workload.processes=65536"]);
    assert_eq!(
        e,
        "error: --set workload.processes=65536: [workload] processes: 1 shell + 65536 processes x 1 threads = 65537 tasks alive at once would exceed tlbsim's limit of 65536 (the run would stop there)\n"
    );
}

#[test]
fn an_uneven_topology_is_refused_naming_the_field() {
    let dir = scratch_dir("bounds", "topology");
    let o = tlbsim(&["profiles", "--show", "ampere-32"]);
    assert!(o.status.success());
    let text = stdout(&o).replace("cpus_per_cluster = 2", "cpus_per_cluster = 5");
    let line = text
        .lines()
        .position(|l| l.starts_with("cpus_per_cluster"))
        .unwrap()
        + 1;
    let prof = dir.join("five.toml");
    std::fs::write(&prof, &text).unwrap();
    let e = refused_fast(&["run", MPROTECT, "--profile", s(&prof)]);
    assert!(
        e.contains(&format!(
            "{}:{line}: topology.cpus_per_cluster = 5 does not divide topology.cpus = 32 evenly",
            prof.display()
        )),
        "{e}"
    );
    let e = refused_fast(&["run", MPROTECT, "--set", "machine.sockets=3"]);
    assert!(
        e.starts_with("error: --set machine.sockets=3: [machine] sockets: topology.sockets = 3 does not divide topology.cpus = 32 evenly"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A `run --json` result of a short run, as text, in `dir`.
fn result(dir: &Path) -> String {
    let json = dir.join("r.json");
    let o = tlbsim(&[
        "run",
        MPROTECT,
        "--set",
        "workload.iterations=10",
        "--cpus",
        "4",
        "--json",
        s(&json),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::read_to_string(json).unwrap()
}

/// `tlbsim rerun` of `text` written to `dir/name`.
fn rerun(dir: &Path, name: &str, text: &str) -> std::process::Output {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    tlbsim(&["rerun", s(&p)])
}

#[test]
fn rerun_tells_a_bad_file_from_a_changed_result() {
    let dir = scratch_dir("bounds", "rerun");
    let text = result(&dir);
    let o = rerun(&dir, "same.json", &text);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("rerun: identical to the recorded result"));

    // An invalid value: exit 2, at its line and JSON path.
    let bad = text.replacen("\"cpus\": 4", "\"cpus\": 0", 1);
    let line = bad.lines().position(|l| l.contains("\"cpus\": 0")).unwrap() + 1;
    let o = rerun(&dir, "bad.json", &bad);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let path = dir.join("bad.json");
    assert!(
        stderr(&o).starts_with(&format!(
            "error: {}:{line}: run.profile.topology.cpus: 0 CPUs (must be 1..=4096)\n",
            path.display()
        )),
        "{}",
        stderr(&o)
    );
    // An unknown key: exit 2, naming it.
    let unknown = text.replacen("\"seed\":", "\"sede\": 1,\n    \"seed\":", 1);
    let o = rerun(&dir, "unknown.json", &unknown);
    assert_eq!(o.status.code(), Some(2));
    let line = unknown.lines().position(|l| l.contains("sede")).unwrap() + 1;
    assert!(
        stderr(&o).starts_with(&format!(
            "error: {}:{line}: run.sede: unknown field `sede`, expected one of",
            dir.join("unknown.json").display()
        )),
        "{}",
        stderr(&o)
    );
    // A changed result: exit 1, each field old -> new, no other version
    // suggested (this one wrote it).
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let elapsed = v["run"]["elapsed_ns"].clone();
    v["run"]["elapsed_ns"] = serde_json::json!(1);
    let o = rerun(
        &dir,
        "changed.json",
        &serde_json::to_string_pretty(&v).unwrap(),
    );
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("rerun: DIFFERS from the recorded result in 1 field (recorded -> now):\n")
            && out.contains(&format!("  run.elapsed_ns: 1 -> {elapsed}\n")),
        "{out}"
    );
    assert!(
        !out.contains("version") && !out.contains("recorded by"),
        "{out}"
    );
    // Recorded by another version: that one is suggested, by name.
    v["run"]["version"] = serde_json::json!("0.0.1");
    let o = rerun(&dir, "old.json", &serde_json::to_string_pretty(&v).unwrap());
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("  run.version: \"0.0.1\" -> \""), "{out}");
    assert!(
        out.contains("rerun: the result was recorded by tlbsim 0.0.1, this is tlbsim "),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Golden experiments whose estimate is not within a factor of two of
/// the run, with why and the range its ratio (estimate / run) must stay
/// in instead.
const ESTIMATED_OUTSIDE_TWO: &[(&str, &str, std::ops::RangeInclusive<f64>)] = &[(
    "seed004-safety",
    "churn's munmaps of 2 MiB spans cost one broadcast TLBI a page on arm64 \
     (seed000-safety, which it is fitted on) and one flush on x86: the \
     workload cannot see the kernel, so it over-estimates x86 about 8.5 times",
    2.0..=10.0,
)];

#[test]
fn estimates_are_within_a_factor_of_two_of_the_published_runs() {
    // Each golden result against the estimate of its experiment: within
    // a factor of two, or of its range in ESTIMATED_OUTSIDE_TWO. The table
    // is printed (--nocapture) for fitting constants.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let mut checked = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut all = Vec::new();
    for path in names {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        all.push(name.clone());
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let run = v.get("run").unwrap_or(&v);
        let events = run["stats"]["events"].as_u64().unwrap() as f64;
        let cfg: tlbsim::sim::RunConfig = serde_json::from_value(run.clone()).unwrap();
        let built = tlbsim::sim::build(&cfg.into_experiment(), &Default::default()).unwrap();
        let Some(f) = &built.estimate.events else {
            continue;
        };
        let ratio = f.value as f64 / events;
        eprintln!(
            "{name:<26} {:>12} {events:>12} {ratio:>6.2}  {}",
            f.value, f.how
        );
        let (range, why) = ESTIMATED_OUTSIDE_TWO
            .iter()
            .find(|(n, ..)| *n == name)
            .map_or((0.5..=2.0, ""), |(_, why, r)| (r.clone(), *why));
        assert!(
            range.contains(&ratio),
            "{}: estimated {} ({}), ran {events}: {ratio:.2}, not in {range:?} {why}",
            path.display(),
            f.value,
            f.how
        );
        checked.push(name);
        built.teardown();
    }
    // Every golden experiment: each workload estimates its events.
    assert_eq!(
        checked,
        [
            "seed000-mprotect",
            "seed000-safety",
            "seed000-scaling",
            "seed000-sort-compute",
            "seed000-switch-race",
            "seed000-tcmalloc",
            "seed000-victim",
            "seed001-explore-x86",
            "seed001-explore",
            "seed001-kswapd",
            "seed001-migrate",
            "seed001-mremap",
            "seed001-pageout-kunpeng",
            "seed001-pageout",
            "seed002-explore",
            "seed002-hackbench",
            "seed003-affinity-race",
            "seed003-unixbench-host",
            "seed003-victim-tx2",
            "seed003-vm-move",
            "seed003-vm-race",
            "seed003-vms",
            "seed004-explore-ipis",
            "seed004-explore-switch",
            "seed004-explore",
            "seed004-madv-migrate",
            "seed004-pthread-mmap",
            "seed004-safety",
            "wis-tlb-flush2",
        ]
    );
    assert_eq!(checked, all, "a golden experiment is missing above");
}
