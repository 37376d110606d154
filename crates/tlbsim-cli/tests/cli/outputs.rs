//! Output files of the `tlbsim` command (issue 16, "no panic, no lost
//! work"): `-` is standard output, devices and FIFOs are written in place,
//! a symbolic link keeps being one, a bad output or sweep list is found
//! before any work, and printed command lines survive a shell.

use crate::common;

use common::{scratch_dir, stderr, stdout, tlbsim, tlbsim_in, EXE, MPROTECT};
use std::path::Path;
use std::process::{Command, Output};

const SHORT: &str = "workload.iterations=10";

/// `run` of the short mprotect experiment, writing its JSON to `json`.
fn run_to(dir: &Path, json: &str) -> Output {
    tlbsim_in(dir, &["run", MPROTECT, "--set", SHORT, "--json", json])
}

/// Temporary files left in `dir` (`.NAME.tmp<pid>.<n>`).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect()
}

#[test]
fn json_dash_is_standard_output_and_the_table_goes_to_stderr() {
    let dir = scratch_dir("outputs", "dash");
    let o = run_to(&dir, "-");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON alone");
    assert_eq!(v["run"]["workload"]["iterations"], 10);
    let err = stderr(&o);
    assert!(
        err.contains("# tlbsim run ") && err.contains("checker: pass"),
        "{err}"
    );
    assert!(!dir.join("-").exists(), "no file named -");
    // rerun takes the result back and writes its own to stdout too.
    let result = dir.join("r.json");
    std::fs::write(&result, &o.stdout).unwrap();
    let o = tlbsim_in(&dir, &["rerun", "r.json", "--json", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let again: serde_json::Value = serde_json::from_slice(&o.stdout).expect("rerun stdout is JSON");
    assert_eq!(again["run"], v["run"]);
    assert!(stderr(&o).contains("identical to the recorded result"));
    // sweep --csv -.
    let o = tlbsim_in(
        &dir,
        &[
            "sweep",
            MPROTECT,
            "--set",
            SHORT,
            "--cpus",
            "2",
            "--policies",
            "arm64-stock",
            "--profiles",
            "ampere-32",
            "--csv",
            "-",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = stdout(&o);
    assert!(
        csv.starts_with("experiment,version,seed,profile,sockets,cpus,policy,allocator,"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(!dir.join("-").exists(), "no file named -");
}

#[cfg(target_os = "linux")]
#[test]
fn a_write_error_on_a_device_is_reported_and_the_device_stays() {
    use std::os::unix::fs::FileTypeExt;
    let is_char_device = || {
        std::fs::symlink_metadata("/dev/full")
            .map(|m| m.file_type().is_char_device())
            .unwrap_or(false)
    };
    if !is_char_device() {
        eprintln!("no /dev/full here: skipped");
        return;
    }
    let o = run_to(Path::new("."), "/dev/full");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: /dev/full: cannot write: No space left on device\n"),
        "{}",
        stderr(&o)
    );
    assert!(is_char_device(), "/dev/full was replaced");
}

#[cfg(unix)]
#[test]
fn a_fifo_is_written_in_place() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let dir = scratch_dir("outputs", "fifo");
    let fifo = dir.join("out.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("no mkfifo here: skipped");
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            std::fs::File::open(fifo)
                .and_then(|mut f| f.read_to_string(&mut text))
                .map(|_| text)
        })
    };
    let o = run_to(&dir, "out.json");
    // Should tlbsim not open the FIFO, a reader still waiting in `open` is
    // released by this open (read-write does not wait on Linux), with EOF.
    drop(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo),
    );
    let text = reader.join().unwrap().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&text).expect("the reader got the JSON");
    assert_eq!(v["run"]["workload"]["iterations"], 10);
    let t = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(t.is_fifo(), "the FIFO was replaced");
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_keeps_being_one_and_its_target_is_replaced() {
    let dir = scratch_dir("outputs", "symlink");
    std::fs::create_dir(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/real.json"), "old").unwrap();
    std::os::unix::fs::symlink("data/real.json", dir.join("link.json")).unwrap();
    let o = run_to(&dir, "link.json");
    assert!(o.status.success(), "{}", stderr(&o));
    let link = std::fs::symlink_metadata(dir.join("link.json")).unwrap();
    assert!(link.file_type().is_symlink(), "the link was replaced");
    let text = std::fs::read_to_string(dir.join("data/real.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).expect("the target has the JSON");
    assert_eq!(v["run"]["workload"]["iterations"], 10);
    // A dangling link into an existing directory creates its target.
    std::os::unix::fs::symlink("data/new.json", dir.join("dangling.json")).unwrap();
    let o = run_to(&dir, "dangling.json");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.join("data/new.json").is_file());
    assert!(std::fs::symlink_metadata(dir.join("dangling.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(leftovers(&dir).is_empty() && leftovers(&dir.join("data")).is_empty());
}

/// Each command with an output file, with a bad `path` for it; runs that
/// would take long if they ran. `dir` keeps the result file `rerun` reads.
fn commands_with_output(path: &str, dir: &Path) -> Vec<Vec<String>> {
    let mut cmds = vec![
        vec!["run", MPROTECT, "--json", path],
        vec!["sweep", MPROTECT, "--csv", path],
        vec!["reproduce", "--only", "seed000-mprotect", "--json", path],
        vec!["bench", "--only", "mprotect-32-v2", "--json", path],
    ];
    // rerun needs a result file; a missing one is reported first (exit 2
    // too), so give it one.
    let o = run_to(dir, "r.json");
    assert!(o.status.success(), "{}", stderr(&o));
    let result = dir.join("r.json");
    let result = result.to_str().unwrap();
    cmds.push(vec!["rerun", result, "--json", path]);
    cmds.into_iter()
        .map(|c| c.into_iter().map(String::from).collect())
        .collect()
}

#[test]
fn an_unwritable_output_is_found_before_any_work() {
    let dir = scratch_dir("outputs", "unwritable");
    std::fs::write(dir.join("plain"), "").unwrap();
    let missing = "/nonexistent-tlbsim-dir/x.json".to_string();
    let under_file = dir.join("plain/x.json").to_string_lossy().into_owned();
    let a_dir = dir.to_string_lossy().into_owned();
    for (path, want) in [
        (
            &missing,
            "directory /nonexistent-tlbsim-dir does not exist".to_string(),
        ),
        (
            &under_file,
            format!("{} is not a directory", dir.join("plain").display()),
        ),
        (&a_dir, "is a directory".to_string()),
    ] {
        for args in commands_with_output(path, &dir) {
            let flag = if args[0] == "sweep" {
                "--csv"
            } else {
                "--json"
            };
            let t0 = std::time::Instant::now();
            let o = tlbsim(&args.iter().map(String::as_str).collect::<Vec<_>>());
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.starts_with(&format!("error: {flag} {path}: ")) && err.contains(&want),
                "{args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "one line, nothing ran: {err}");
            assert!(o.stdout.is_empty(), "{args:?}: nothing printed before");
            assert!(t0.elapsed().as_secs_f64() < 5.0, "{args:?}: the work ran");
        }
    }
    assert!(leftovers(&dir).is_empty(), "the probe is removed");
}

#[test]
fn a_bad_sweep_list_is_found_before_the_first_run() {
    let dir = scratch_dir("outputs", "sweep-lists");
    let csv = dir.join("out.csv");
    let csv = csv.to_str().unwrap();
    for (flag, value, want) in [
        (
            "--policies",
            "arm64-stock,BAD,arm64-cpumask-tracking",
            "error: --policies BAD: unknown tlb_policy \"BAD\" (known: arm64-stock, ",
        ),
        (
            "--profiles",
            "ampere-32,nowhere",
            "error: --profiles nowhere: unknown profile \"nowhere\" (built-in: ampere-32, ",
        ),
        (
            "--param",
            "iterations=5,many",
            "--param iterations=many: [workload] iterations: invalid type: string \"many\"",
        ),
        (
            "--profiles",
            "ampere-32,skylake-4c8t",
            "is an arm64 policy but profile \"skylake-4c8t\" is an x86 machine",
        ),
    ] {
        let o = tlbsim(&[
            "sweep", MPROTECT, "--cpus", "2,4", flag, value, "--csv", csv,
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(want), "{flag} {value}: {err}");
        assert!(!err.contains("sweep:"), "a run started: {err}");
        assert!(!Path::new(csv).exists());
    }
    // The policies `tlbsim policies` lists are the ones a sweep takes.
    let o = tlbsim(&["policies"]);
    let listed = stdout(&o);
    assert!(listed.contains("  arm64-cpumask-tracking "), "{listed}");
}

/// `s` quoted for `sh`, as the command quotes its words.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Runs a printed `tlbsim ...` command line with `sh`, the binary in place
/// of `tlbsim`.
fn through_sh(line: &str, dir: &Path) -> Output {
    let rest = line.strip_prefix("tlbsim ").expect("a tlbsim command");
    Command::new("sh")
        .arg("-c")
        .arg(format!("{} {rest}", sh_quote(EXE)))
        .current_dir(dir)
        .output()
        .expect("sh runs")
}

#[cfg(unix)]
#[test]
fn printed_commands_quote_paths_with_spaces_and_quotes() {
    let dir = scratch_dir("outputs", "quoting");
    let sub = dir.join("my runs");
    std::fs::create_dir(&sub).unwrap();
    // `check` of seed 002's explorer experiment with a mutant allocator.
    let exp = sub.join("it's explore.toml");
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../experiments/seed002-explore.toml"
    );
    std::fs::copy(src, &exp).unwrap();
    let e = exp.to_str().unwrap();
    let o = tlbsim(&[
        "check",
        e,
        "--allocator",
        "mutant-asid-forget-cpu",
        "--schedules",
        "20",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("replay: "))
        .unwrap_or_else(|| panic!("no replay line in {out}"));
    assert!(line.contains(&sh_quote(e)), "{line}");
    let again = through_sh(line, &dir);
    assert_eq!(again.status.code(), Some(1), "{line}: {}", stderr(&again));
    assert!(stdout(&again).contains("replayed: checker violation"));
    // `run`'s replay line after a violation.
    let exp = sub.join("it's a mutant.toml");
    std::fs::write(
        &exp,
        "[experiment]\nname = \"m\"\nprofile = \"ampere-32\"\n[machine]\ncpus = 4\n[kernel]\ntlb_policy = \"mutant-range-no-broadcast\"\n[workload]\nname = \"threads\"\n",
    )
    .unwrap();
    let o = tlbsim(&["run", exp.to_str().unwrap(), "--seed", "5"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("replay: "))
        .unwrap_or_else(|| panic!("no replay line in {err}"));
    let again = through_sh(line, &dir);
    assert_eq!(again.status.code(), Some(1), "{line}: {}", stderr(&again));
    assert!(stderr(&again).contains("invariant: no stale"), "{line}");
}

/// Every file under `dir` (recursively) and its bytes, in name order.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else if m.is_file() {
                let bytes = std::fs::read(&p).unwrap();
                v.push((p, bytes));
            }
        }
    }
    v.sort();
    v
}

/// A directory of inputs for every command: `x.toml` (the short mprotect
/// experiment) with a symbolic link `link.toml` and a hard link
/// `hard.toml` to it; `prof.toml` (a profile file) and `y.toml` naming
/// it; `r.json` (a run result); `fig.svg` (a sweep CSV, so named to be a
/// plot's output too); `t.trace`; `t.litmus` with `k.txt`; `R`, a sweep's
/// `--resume` directory.
fn inputs_dir() -> common::Scratch {
    let dir = scratch_dir("outputs", "collisions");
    let text = std::fs::read_to_string(MPROTECT)
        .unwrap()
        .replace("iterations = ", "iterations = 10 #");
    std::fs::write(dir.join("x.toml"), &text).unwrap();
    std::os::unix::fs::symlink("x.toml", dir.join("link.toml")).unwrap();
    std::fs::hard_link(dir.join("x.toml"), dir.join("hard.toml")).unwrap();
    let prof = tlbsim(&["profiles", "--show", "ampere-32"]);
    std::fs::write(dir.join("prof.toml"), &prof.stdout).unwrap();
    let y = text.replace("profile = \"ampere-32\"", "profile = \"prof.toml\"");
    assert_ne!(y, text, "x.toml names a profile");
    std::fs::write(dir.join("y.toml"), y).unwrap();
    let ok = |o: Output| assert!(o.status.success(), "{}", stderr(&o));
    ok(tlbsim_in(&dir, &["run", "x.toml", "--json", "r.json"]));
    let sweep = [
        "sweep",
        "x.toml",
        "--cpus",
        "2",
        "--policies",
        "arm64-stock",
    ];
    let more = [
        "--profiles",
        "ampere-32",
        "--resume",
        "R",
        "--csv",
        "fig.svg",
    ];
    ok(tlbsim_in(&dir, &[&sweep[..], &more[..]].concat()));
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tlbsim/tests/fixtures/traces/xz.trace"
    );
    std::fs::copy(trace, dir.join("t.trace")).unwrap();
    std::fs::write(dir.join("t.litmus"), LITMUS).unwrap();
    std::fs::write(dir.join("k.txt"), "shoot Forbidden\n").unwrap();
    dir
}

use common::SHOOT_LITMUS as LITMUS;

/// The sweep arguments that `inputs_dir` ran into `R`.
const SWEEP: &[&str] = &[
    "sweep",
    "x.toml",
    "--cpus",
    "2",
    "--policies",
    "arm64-stock",
    "--profiles",
    "ampere-32",
];

#[cfg(unix)]
#[test]
fn an_output_that_is_an_input_or_another_output_is_refused() {
    let dir = inputs_dir();
    let before = snapshot(&dir);
    let with = |more: &[&'static str]| [SWEEP, more].concat();
    // (command line, the refused flag and path, the other file's name).
    let mut cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (
            vec!["run", "x.toml", "--json", "x.toml"],
            "--json x.toml",
            "the experiment file x.toml",
        ),
        (
            vec!["run", "x.toml", "--json", "./x.toml"],
            "--json ./x.toml",
            "the experiment file x.toml",
        ),
        (
            vec!["run", "x.toml", "--json", "link.toml"],
            "--json link.toml",
            "the experiment file x.toml",
        ),
        (
            vec!["run", "link.toml", "--json", "hard.toml"],
            "--json hard.toml",
            "the experiment file link.toml",
        ),
        (
            vec![
                "run",
                "x.toml",
                "--profile",
                "prof.toml",
                "--json",
                "prof.toml",
            ],
            "--json prof.toml",
            "--profile prof.toml",
        ),
        (
            vec!["run", "y.toml", "--json", "prof.toml"],
            "--json prof.toml",
            "the experiment's profile file prof.toml",
        ),
        (
            vec!["rerun", "r.json", "--json", "r.json"],
            "--json r.json",
            "the result file r.json",
        ),
        (
            vec!["check", "x.toml", "--json", "x.toml"],
            "--json x.toml",
            "the experiment file x.toml",
        ),
        (
            vec![
                "check",
                "x.toml",
                "--json",
                "e.litmus",
                "--export-litmus",
                "./e.litmus",
            ],
            "--export-litmus ./e.litmus",
            "--json e.litmus",
        ),
        (
            vec!["replay", "t.trace", "--json", "t.trace"],
            "--json t.trace",
            "the trace t.trace",
        ),
        (
            vec![
                "plot",
                "fig.svg",
                "--x",
                "cpus",
                "--y",
                "elapsed_s",
                "--out",
                "fig.svg",
            ],
            "--out fig.svg",
            "the CSV fig.svg",
        ),
        (
            vec!["litmus", "t.litmus", "--csv", "t.litmus"],
            "--csv t.litmus",
            "the litmus test t.litmus",
        ),
        (
            vec!["litmus", "t.litmus", "--kinds", "k.txt", "--csv", "k.txt"],
            "--csv k.txt",
            "the kinds file k.txt",
        ),
        (
            vec!["merge", "R", "--csv", "R/manifest.json"],
            "--csv R/manifest.json",
            "R/manifest.json",
        ),
        (
            vec!["merge", "R", "--csv", "o.csv", "--summary", "./o.csv"],
            "--summary ./o.csv",
            "--csv o.csv",
        ),
        (
            vec![
                "reproduce",
                "--only",
                "seed000",
                "--report",
                "P",
                "--json",
                "P/index.md",
            ],
            "--report P/index.md",
            "--json P/index.md",
        ),
        (
            vec![
                "record",
                "-o",
                "a.data",
                "--keep-perf-data",
                "a.data",
                "--",
                "true",
            ],
            "--keep-perf-data a.data",
            "-o a.data",
        ),
        (
            with(&["--csv", "x.toml"]),
            "--csv x.toml",
            "the experiment file x.toml",
        ),
        (
            with(&["--csv", "F", "--summary", "F"]),
            "--summary F",
            "--csv F",
        ),
        (
            with(&["--csv", "F", "--json", "./F"]),
            "--json ./F",
            "--csv F",
        ),
        (
            with(&["--csv", "-", "--json", "-"]),
            "--json -",
            "--csv is standard output already",
        ),
        (
            with(&["--profiles", "prof.toml", "--csv", "prof.toml"]),
            "--csv prof.toml",
            "--profiles prof.toml",
        ),
        (
            with(&["--resume", "R", "--csv", "R/point-000001.json"]),
            "--csv R/point-000001.json",
            "R/point-000001.json",
        ),
    ];
    // Standard output is a pipe here: /dev/stdout is the same pipe.
    cases.push((
        with(&["--csv", "-", "--json", "/dev/stdout"]),
        "--json /dev/stdout",
        "--csv -",
    ));
    for (args, refused, other) in cases {
        let t0 = std::time::Instant::now();
        let o = tlbsim_in(&dir, &args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error: {refused}: "))
                && err.contains(other)
                && (err.contains(" is the same file; ") || err.contains("standard output already")),
            "{args:?}: {err}"
        );
        assert_eq!(
            err.lines().count(),
            1,
            "{args:?}: one line, nothing ran: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: nothing printed before");
        assert!(t0.elapsed().as_secs_f64() < 5.0, "{args:?}: the work ran");
        assert!(snapshot(&dir) == before, "{args:?}: a file changed");
    }
}

#[cfg(unix)]
#[test]
fn standard_output_appended_to_an_input_is_refused() {
    let dir = inputs_dir();
    let before = std::fs::read(dir.join("x.toml")).unwrap();
    let append = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("x.toml"))
        .unwrap();
    let o = Command::new(EXE)
        .args([SWEEP, &["--csv", "-"]].concat())
        .current_dir(&*dir)
        .stdout(append)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: --csv -: the experiment file x.toml is the same file; "),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("x.toml")).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn outputs_of_one_command_in_distinct_files_or_devices_are_all_written() {
    let dir = inputs_dir();
    let o = tlbsim_in(
        &dir,
        &[
            SWEEP,
            &[
                "--csv",
                "a.csv",
                "--summary",
                "./b.csv",
                "--json",
                "/dev/null",
            ],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.join("a.csv").exists() && dir.join("b.csv").exists());
    let o = tlbsim_in(
        &dir,
        &[SWEEP, &["--csv", "/dev/null", "--summary", "/dev/null"]].concat(),
    );
    assert!(o.status.success(), "a device twice is fine: {}", stderr(&o));
}

/// Runs `tlbsim ARGS` in `dir` with standard output on `/dev/full`.
#[cfg(target_os = "linux")]
fn into_full_device(dir: &Path, args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::from(
            std::fs::File::create("/dev/full").unwrap(),
        ))
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("tlbsim runs")
}

#[cfg(target_os = "linux")]
#[test]
fn every_command_that_prints_reports_a_full_standard_output_without_a_panic() {
    let dir = inputs_dir();
    let with = |more: &[&'static str]| [SWEEP, more].concat();
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "x.toml"],
        vec!["run", "x.toml", "--json", "-"],
        vec!["rerun", "r.json"],
        vec!["check", "x.toml", "--schedules", "3"],
        vec!["check", "x.toml", "--schedules", "3", "--json", "-"],
        vec!["check", "x.toml", "--replay", "s0"],
        vec!["litmus", "t.litmus", "--kinds", "k.txt"],
        vec!["profiles"],
        vec!["profiles", "--show", "ampere-32"],
        vec!["policies"],
        vec!["reproduce", "--only", "seed000-mprotect"],
        vec!["bench", "--only", "mprotect-32-v2"],
        vec![
            "plot",
            "fig.svg",
            "--x",
            "cpus",
            "--y",
            "elapsed_s",
            "--out",
            "-",
        ],
        vec![
            "replay",
            "t.trace",
            "--profile",
            "skylake-4c8t",
            "--cpus",
            "2",
        ],
        vec!["merge", "R", "--csv", "-"],
        vec!["--help"],
        vec!["--version"],
        vec!["sweep", "--help"],
        with(&["--csv", "-"]),
        with(&["--csv", "o.csv", "--summary", "-"]),
    ];
    for args in cases {
        let o = into_full_device(&dir, &args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(
            err.matches("error: cannot write standard output: No space left on device")
                .count(),
            1,
            "{args:?}: {err}"
        );
    }
}

/// Tests run again by [`the_tests_leave_nothing_in_the_temporary_directory`]:
/// those that make scratch directories and run most commands (and fail
/// on any output written there by a command). Full paths in the test
/// binary (`--exact` takes nothing shorter).
const RERUN: &[&str] = &[
    "outputs::an_output_that_is_an_input_or_another_output_is_refused",
    "outputs::json_dash_is_standard_output_and_the_table_goes_to_stderr",
    "outputs::a_symbolic_link_keeps_being_one_and_its_target_is_replaced",
];

#[test]
fn the_tests_leave_nothing_in_the_temporary_directory() {
    let tmp = scratch_dir("outputs", "tmpdir");
    let me = std::env::current_exe().unwrap();
    let o = Command::new(me)
        .args(RERUN)
        .args(["--exact", "--test-threads", "2"])
        .env("TMPDIR", &*tmp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!("{} passed", RERUN.len())),
        "{}",
        stdout(&o)
    );
    let left: Vec<_> = std::fs::read_dir(&*tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}
