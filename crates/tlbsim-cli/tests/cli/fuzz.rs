//! Hostile inputs (issue 16): mutated experiment and profile files, random
//! `--set`, `--replay` and command-line arguments, and (issue 35) mutated
//! herd litmus tests and output flags pointed at the inputs, links to them
//! or each other, each run as a real
//! `tlbsim` process with its address space limited to 4 GiB and its
//! simulated time to 2 ms. Whatever the input, the process must end by
//! itself with exit 0, 1 (a run that failed: time limit, violation) or 2
//! (bad input), with one `error:` line for a failure, and never panic,
//! abort or be killed.
//!
//! The search is deterministic (a fixed proptest seed) and small enough
//! for CI (a few seconds); `PROPTEST_CASES=N` runs more cases,
//! `TLBSIM_FUZZ_SEED=S` other ones, and `TLBSIM_FUZZ_SHOW=1` prints each
//! exit code and first error line (with `-- --nocapture`).

use crate::common;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Values that broke tlbsim before, or sit on a limit's edge.
const NASTY: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "65536",
    "65537",
    "4096",
    "4097",
    "4294967292",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "1000000000000",
    "1e12",
    "0.5",
    "nan",
    "inf",
    "\"\"",
    "\"x\"",
    "\"arm64-stock\"",
    "\"kvm-stock\"",
    "[]",
    "[0, 99]",
    "[0, 1]",
    "true",
    "{}",
    "\"floating\"",
];

/// Experiments the mutations start from: one per kind of run (a host
/// workload, VMs, reclaim, the explorer's), each small.
const BASES: &[&str] = &[
    "experiments/seed000-mprotect.toml",
    "experiments/seed004-madv-migrate.toml",
    "experiments/seed003-vm-race.toml",
    "experiments/seed001-pageout.toml",
    "experiments/seed002-explore.toml",
    "experiments/seed003-victim-tx2.toml",
];

/// The directory the fuzz tests share while any of them runs (removed
/// after).
fn scratch_dir() -> common::Scratch {
    common::shared_dir("fuzz")
}

/// Runs `tlbsim ARGS` under a 4 GiB address-space limit and a host
/// deadline; returns (exit code, stderr), failing on a signal, a panic,
/// a hang or a failure without one error line.
fn tlbsim_ok(args: &[String]) -> Result<(), TestCaseError> {
    let dir = scratch_dir();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 4194304; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_tlbsim"))
        .args(args)
        // Outputs named by random arguments land in the scratch directory.
        .current_dir(&*dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sh runs");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestCaseError::fail(format!("hang: tlbsim {args:?}")));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let code = status.code();
    if std::env::var_os("TLBSIM_FUZZ_SHOW").is_some() {
        eprintln!("exit {code:?}: {}", err.lines().next().unwrap_or(""));
    }
    prop_assert!(
        matches!(code, Some(0..=2)),
        "tlbsim {args:?}: {status} (killed or crashed)\n{err}"
    );
    prop_assert!(
        !err.contains("panicked"),
        "tlbsim {args:?} panicked:\n{err}"
    );
    if code != Some(0) {
        prop_assert!(
            err.lines().any(|l| l.starts_with("error:")
                || l.contains("checker violation")
                || l.starts_with("replay")),
            "tlbsim {args:?}: exit {code:?} without a message:\n{err}"
        );
    }
    Ok(())
}

/// The flags that keep any run short: 2 ms of simulated time, and a
/// small search.
fn bounded(cmd: &str) -> Vec<String> {
    let mut v = vec!["--set".into(), "experiment.max_sim_time_ns=2000000".into()];
    if cmd == "check" {
        v.extend(["--schedules", "2", "--max-actions", "3000"].map(String::from));
    }
    v
}

/// `text` with line `line` (modulo the line count) changed by `how`.
fn mutate(text: &str, line: usize, how: usize, nasty: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let kv: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains(" = ") && !lines[i].trim_start().starts_with('#'))
        .collect();
    if kv.is_empty() {
        return text.to_string();
    }
    let i = kv[line % kv.len()];
    match how % 4 {
        0 | 1 => {
            let key = lines[i].split(" = ").next().unwrap().to_string();
            lines[i] = format!("{key} = {nasty}");
        }
        2 => {
            lines.remove(i);
        }
        _ => {
            let dup = lines[i].clone();
            lines.insert(i, dup);
        }
    }
    lines.join("\n")
}

/// The litmus tests the mutations start from: the repository's own
/// (`docs/litmus/` and herd's array tests in
/// `crates/tlbsim/tests/fixtures/litmus/`, so the fuzz runs anywhere)
/// and, when the collection
/// is there (`$TLBSIM_LITMUS_DIR`, else `../shared/litmus` beside the
/// checkout), every 16th test of each herd AArch64 catalogue in it, in
/// a fixed order.
fn litmus_seeds() -> &'static [(String, String)] {
    static SEEDS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut files: Vec<PathBuf> = Vec::new();
        let docs = Path::new(ROOT).join("docs/litmus");
        let mut own: Vec<PathBuf> = std::fs::read_dir(&docs)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        own.sort();
        // herd's array tests, kept in the repository (the shared
        // catalogue has none).
        let arrays = Path::new(ROOT).join("crates/tlbsim/tests/fixtures/litmus");
        own.extend(
            std::fs::read_dir(&arrays)
                .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
                .unwrap_or_default(),
        );
        own.sort();
        files.extend(
            own.into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "litmus")),
        );
        let collection = std::env::var_os("TLBSIM_LITMUS_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(ROOT).join("../shared/litmus"));
        for cat in [
            "aarch64-VMSA",
            "herd-aarch64",
            "herd-aarch64-BBM",
            "herd-aarch64-faults",
            "herd-aarch64-ETS2",
        ] {
            let Ok(d) = std::fs::read_dir(collection.join(cat).join("tests")) else {
                continue;
            };
            let mut v: Vec<PathBuf> = d
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "litmus"))
                .collect();
            v.sort();
            files.extend(v.into_iter().step_by(16));
        }
        files
            .into_iter()
            .filter_map(|p| Some((p.display().to_string(), std::fs::read_to_string(&p).ok()?)))
            .collect()
    })
}

/// `text` with one of its lines (`at`, modulo the count) dropped or
/// duplicated, a whitespace-separated token of it dropped or
/// duplicated, a `|` column cell dropped or duplicated, or a number in
/// it replaced by `nasty`.
fn mutate_litmus(text: &str, at: usize, how: usize, pick: usize, nasty: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    if lines.is_empty() {
        return text.to_string();
    }
    let i = at % lines.len();
    let line = lines[i].clone();
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let cells: Vec<&str> = line.split('|').collect();
    match how % 7 {
        0 => {
            lines.remove(i);
        }
        1 => lines.insert(i, line.clone()),
        2 | 3 if !tokens.is_empty() => {
            let k = pick % tokens.len();
            let mut t: Vec<&str> = tokens.clone();
            if how % 7 == 2 {
                t.remove(k);
            } else {
                t.insert(k, tokens[k]);
            }
            lines[i] = t.join(" ");
        }
        4 | 5 if cells.len() > 1 => {
            let k = pick % cells.len();
            let mut c: Vec<&str> = cells.clone();
            if how % 7 == 4 {
                c.remove(k);
            } else {
                c.insert(k, cells[k]);
            }
            lines[i] = c.join("|");
        }
        _ => {
            // The first number on the line (or the one after `#`).
            if let Some(s) = line.find(|c: char| c.is_ascii_digit()) {
                let e = line[s..]
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or(line.len(), |e| s + e);
                lines[i] = format!("{}{nasty}{}", &line[..s], &line[e..]);
            }
        }
    }
    lines.join("\n")
}

/// Output paths the collision fuzz picks from, each with the file it
/// names (`x`: the experiment, `p`: the profile, `F`: a new file, `-`:
/// standard output): names, `./` names, a symbolic and a hard link.
const OUT_PATHS: &[(&str, &str)] = &[
    ("x.toml", "x"),
    ("./x.toml", "x"),
    ("link.toml", "x"),
    ("hard.toml", "x"),
    ("prof.toml", "p"),
    ("./prof.toml", "p"),
    ("plink.toml", "p"),
    ("F", "F"),
    ("./F", "F"),
    ("Flink", "F"),
    ("-", "-"),
];

/// Each command's output flags, and how it is given the profile file.
fn output_flags(cmd: &str) -> (&'static [&'static str], [&'static str; 2]) {
    match cmd {
        "run" => (&["--json"], ["--profile", "prof.toml"]),
        "check" => (&["--json", "--export-litmus"], ["--profile", "plink.toml"]),
        _ => (
            &["--csv", "--summary", "--json"],
            ["--profiles", "./prof.toml"],
        ),
    }
}

/// A directory with the experiment `x.toml` (and `link.toml`, a symbolic
/// link, `hard.toml`, a hard link, to it), the profile `prof.toml` (and
/// `plink.toml`), and `Flink`, a dangling link to the new file `F`.
#[cfg(unix)]
fn collision_inputs() -> common::Scratch {
    let dir = common::scratch_dir("fuzz", "collisions");
    std::fs::copy(
        format!("{ROOT}/experiments/seed000-mprotect.toml"),
        dir.join("x.toml"),
    )
    .unwrap();
    let prof = Command::new(env!("CARGO_BIN_EXE_tlbsim"))
        .args(["profiles", "--show", "ampere-32"])
        .output()
        .unwrap();
    std::fs::write(dir.join("prof.toml"), prof.stdout).unwrap();
    std::os::unix::fs::symlink("x.toml", dir.join("link.toml")).unwrap();
    std::fs::hard_link(dir.join("x.toml"), dir.join("hard.toml")).unwrap();
    std::os::unix::fs::symlink("prof.toml", dir.join("plink.toml")).unwrap();
    std::os::unix::fs::symlink("F", dir.join("Flink")).unwrap();
    dir
}

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(64),
        rng_seed: RngSeed::Fixed(
            std::env::var("TLBSIM_FUZZ_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(16),
        ),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_experiment_files(
        base in 0..BASES.len(),
        line in 0usize..64,
        how in 0usize..4,
        nasty in 0..NASTY.len(),
        truncate in proptest::option::weighted(0.15, 0usize..2000),
    ) {
        let text = std::fs::read_to_string(format!("{ROOT}/{}", BASES[base])).unwrap();
        let mut t = mutate(&text, line, how, NASTY[nasty]);
        if let Some(n) = truncate {
            let mut n = n.min(t.len());
            while !t.is_char_boundary(n) {
                n -= 1;
            }
            t.truncate(n);
        }
        let dir = scratch_dir();
        let file = dir.join(format!("exp-{base}-{line}-{how}-{nasty}.toml"));
        std::fs::write(&file, &t).unwrap();
        let cmd = if BASES[base].contains("explore") || BASES[base].contains("race") { "check" } else { "run" };
        let mut args = vec![cmd.to_string(), file.display().to_string()];
        args.extend(bounded(cmd));
        tlbsim_ok(&args)?;
    }

    #[test]
    fn mutated_profiles(
        profile in prop::sample::select(vec!["ampere-32", "hisi-96-dvmbm", "skylake-4c8t"]),
        line in 0usize..128,
        how in 0usize..4,
        nasty in 0..NASTY.len(),
    ) {
        let out = Command::new(env!("CARGO_BIN_EXE_tlbsim"))
            .args(["profiles", "--show", profile])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let dir = scratch_dir();
        let p = dir.join(format!("prof-{profile}-{line}-{how}-{nasty}.toml"));
        std::fs::write(&p, mutate(&text, line, how, NASTY[nasty])).unwrap();
        let (exp, policy) = if profile == "skylake-4c8t" {
            ("experiments/seed004-madv-migrate.toml", "x86-tlb-gen")
        } else {
            ("experiments/seed000-mprotect.toml", "arm64-stock")
        };
        let mut args = vec![
            "run".to_string(),
            format!("{ROOT}/{exp}"),
            "--profile".into(),
            p.display().to_string(),
            "--policy".into(),
            policy.into(),
            "--set".into(),
            "workload.iterations=20".into(),
        ];
        args.extend(bounded("run"));
        tlbsim_ok(&args)?;
    }

    #[test]
    fn random_set_arguments(
        base in 0..BASES.len(),
        section in prop::sample::select(vec!["experiment", "machine", "kernel", "workload", "checker", "vm", "nope", ""]),
        key in prop::sample::select(vec![
            "cpus", "seed", "name", "profile", "tlb_policy", "asid_allocator", "kpti", "history",
            "enabled", "count", "vcpus", "kvm_policy", "placement", "iterations", "pages",
            "processes", "threads", "loaders", "sockets", "asid_bits", "memory_limit_pages", "x",
        ]),
        nasty in 0..NASTY.len(),
        twice in any::<bool>(),
    ) {
        let file = format!("{ROOT}/{}", BASES[base]);
        let cmd = if BASES[base].contains("explore") || BASES[base].contains("race") { "check" } else { "run" };
        let set = format!("{section}.{key}={}", NASTY[nasty]);
        let mut args = vec![cmd.to_string(), file, "--set".into(), set.clone()];
        if twice {
            args.extend(["--set".to_string(), set]);
        }
        args.extend(bounded(cmd));
        tlbsim_ok(&args)?;
    }

    #[test]
    fn random_replay_schedules(
        tokens in prop::collection::vec(
            (prop::sample::select(vec!["s", "d", "i", "p", "x", ""]),
             prop::sample::select(vec!["0", "1", "3", "99", "4294967296", "18446744073709551615", "", "-1"]),
             prop::sample::select(vec!["", "*2", "*0", "*4000000000", "*18446744073709551615", ":ff", ":zz", "*"])),
            0..6,
        ),
    ) {
        let s: Vec<String> = tokens.iter().map(|(a, n, r)| format!("{a}{n}{r}")).collect();
        let args = vec![
            "check".to_string(),
            format!("{ROOT}/experiments/seed004-explore.toml"),
            "--replay".into(),
            s.join(" "),
        ];
        tlbsim_ok(&args)?;
    }

    #[test]
    fn random_command_lines(
        cmd in prop::sample::select(vec!["run", "check", "sweep"]),
        flags in prop::collection::vec(
            (prop::sample::select(vec![
                "--cpus", "--seed", "--policy", "--profile", "--schedules", "--max-actions",
                "--max-spin", "--depth", "--strategy", "--preemptions", "--speculation", "--allocator",
                "--policies", "--profiles", "--param", "--set", "--bogus", "--seeds",
                "--shard", "--summary", "--json",
            ]),
             prop::sample::select(vec![
                "0", "1", "2", "4097", "18446744073709551615", "-1", "", "x", "random", "pct",
                "exhaustive", "arm64-stock", "nope.toml", "ampere-32", "tasks=1,2", "vm.count=0,1",
                "2,4", "profile", "1..3", "1..9999999999", "0/3", "4/3", "1/0", "2/3",
                "/nonexistent/x.json",
            ])),
            0..4,
        ),
    ) {
        let mut args = vec![cmd.to_string(), format!("{ROOT}/experiments/seed000-mprotect.toml")];
        for (f, v) in &flags {
            args.push(f.to_string());
            args.push(v.to_string());
        }
        if cmd == "sweep" {
            args.extend(["--csv".to_string(), "-".to_string()]);
        }
        args.extend(["--set".to_string(), "workload.iterations=5".to_string()]);
        args.extend(bounded(cmd));
        tlbsim_ok(&args)?;
    }

    #[test]
    fn mutated_litmus_tests(
        seed in any::<prop::sample::Index>(),
        at in 0usize..64,
        how in 0usize..7,
        pick in 0usize..32,
        nasty in 0..NASTY.len(),
        twice in any::<bool>(),
        truncate in proptest::option::weighted(0.1, 0usize..1500),
    ) {
        let seeds = litmus_seeds();
        prop_assert!(!seeds.is_empty(), "no litmus seeds: docs/litmus/ is empty");
        let (name, text) = &seeds[seed.index(seeds.len())];
        let mut t = mutate_litmus(text, at, how, pick, NASTY[nasty]);
        if twice {
            t = mutate_litmus(&t, at / 2 + pick, how + 3, pick / 2, NASTY[nasty]);
        }
        if let Some(n) = truncate {
            let mut n = n.min(t.len());
            while !t.is_char_boundary(n) {
                n -= 1;
            }
            t.truncate(n);
        }
        let stem = Path::new(name).file_stem().unwrap().to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let dir = scratch_dir();
        let file = dir.join(format!("lit-{stem}-{at}-{how}-{pick}-{nasty}-{twice}.litmus"));
        std::fs::write(&file, &t).unwrap();
        let args = vec![
            "litmus".to_string(),
            file.display().to_string(),
            "--max-states".into(),
            "20000".into(),
            "--max-memory".into(),
            "256M".into(),
        ];
        tlbsim_ok(&args)?;
    }

    /// Output flags pointed at the inputs, at links to them or at each
    /// other: exit 2 with one error line, before any work, every input
    /// byte-identical and no output written.
    #[cfg(unix)]
    #[test]
    fn random_output_collisions(
        cmd in prop::sample::select(vec!["run", "check", "sweep"]),
        picks in prop::collection::vec((0usize..3, 0..OUT_PATHS.len()), 1..4),
    ) {
        let (flags, profile) = output_flags(cmd);
        let mut outs: Vec<(&str, &str, &str)> = Vec::new();
        for (f, p) in picks {
            let flag = flags[f % flags.len()];
            if outs.iter().all(|(g, _, _)| *g != flag) {
                outs.push((flag, OUT_PATHS[p].0, OUT_PATHS[p].1));
            }
        }
        if cmd == "sweep" && outs.iter().all(|(g, _, _)| *g == "--summary") {
            outs.push(("--csv", "G", "G")); // a sweep needs --csv or --json
        }
        let collides = outs.iter().enumerate().any(|(i, (_, _, id))| {
            matches!(*id, "x" | "p") || outs[..i].iter().any(|(_, _, other)| other == id)
        });
        prop_assume!(collides);
        let dir = collision_inputs();
        let before: Vec<Vec<u8>> = ["x.toml", "prof.toml"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap())
            .collect();
        let mut args: Vec<&str> = vec![cmd, "x.toml", profile[0], profile[1]];
        if cmd == "sweep" {
            args.extend(["--cpus", "2", "--policies", "arm64-stock"]);
        }
        for (flag, path, _) in &outs {
            args.extend([*flag, *path]);
        }
        let o = Command::new(env!("CARGO_BIN_EXE_tlbsim"))
            .args(&args)
            .current_dir(&*dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if std::env::var_os("TLBSIM_FUZZ_SHOW").is_some() {
            eprintln!("{args:?}: exit {:?}: {err}", o.status.code());
        }
        prop_assert_eq!(o.status.code(), Some(2), "tlbsim {:?}: {}", args, err);
        prop_assert!(err.starts_with("error: ") && err.lines().count() == 1, "tlbsim {:?}: {}", args, err);
        prop_assert!(
            err.contains(" is the same file; ")
                || err.contains("is standard output already")
                || err.contains("--export-litmus: give a file name"),
            "tlbsim {:?}: not refused as a collision: {}", args, err
        );
        prop_assert!(o.stdout.is_empty(), "tlbsim {:?}: printed before refusing", args);
        for (f, b) in ["x.toml", "prof.toml"].iter().zip(&before) {
            prop_assert!(&std::fs::read(dir.join(f)).unwrap() == b, "tlbsim {:?}: {} changed", args, f);
        }
        prop_assert!(!dir.join("F").exists() && !dir.join("G").exists(), "tlbsim {:?}: an output written", args);
    }
}
