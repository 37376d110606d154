//! Sweeps that survive (issue 16): `sweep --resume` after a real `kill -9`
//! writes the CSV an uninterrupted sweep writes; `--shard I/N` shards
//! joined by `tlbsim merge` write it too; `--seeds` repeats every point
//! and `--summary` gives mean and spread; bad flags and directories of
//! another sweep are refused before any run.

use crate::common;

use common::{s, scratch_dir, stderr, tlbsim, EXE, MPROTECT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The churn stress, whose results depend on the seed.
const SAFETY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed000-safety.toml"
);

/// 12 points of a few milliseconds: 2 profiles x 2 CPU counts x 3
/// policies.
const SMALL: [&str; 8] = [
    "--set",
    "workload.iterations=20",
    "--cpus",
    "2,4",
    "--policies",
    "arm64-stock,arm64-skip-broadcast-v2,arm64-cpumask-tracking",
    "--profiles",
    "ampere-32,ampere-2s",
];

/// 120 points of about 3 ms (2 CPU counts x 2 policies x 30 seeds): long
/// enough to be killed in the middle.
const LONG: [&str; 10] = [
    "--set",
    "workload.iterations=200",
    "--cpus",
    "2,4",
    "--policies",
    "arm64-stock,arm64-cpumask-tracking",
    "--profiles",
    "ampere-32",
    "--seeds",
    "1..30",
];

/// `sweep EXPERIMENT ARGS... MORE...`.
fn sweep(exp: &str, args: &[&str], more: &[&str]) -> Output {
    let mut all = vec!["sweep", exp];
    all.extend_from_slice(args);
    all.extend_from_slice(more);
    tlbsim(&all)
}

#[track_caller]
fn ok(o: &Output) {
    assert!(o.status.success(), "{}", stderr(o));
}

/// Asserts that `o` exited 2 with an error containing `want` and that no
/// run started.
#[track_caller]
fn refused(o: &Output, want: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{want}: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(want), "want {want:?} in: {err}");
    assert!(!err.contains("runs on"), "a run started: {err}");
}

/// Finished points in the resume directory `dir`.
fn finished(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.starts_with("point-") && name.ends_with(".json")
        })
        .count()
    })
}

/// Starts `sweep --resume dir`, waits until `dir` holds at least `after`
/// finished points, then sends SIGKILL. Returns whether the sweep was
/// still running when killed.
fn kill_after(args: &[String], dir: &Path, after: usize) -> bool {
    let mut child: Child = Command::new(EXE)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tlbsim starts");
    let t0 = Instant::now();
    while finished(dir) < after && t0.elapsed() < Duration::from_secs(30) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

#[cfg(unix)]
#[test]
fn a_sweep_killed_at_any_moment_resumes_to_the_same_csv() {
    let dir = scratch_dir("resume", "kill");
    let whole = dir.join("whole.csv");
    ok(&sweep(MPROTECT, &LONG, &["--csv", s(&whole)]));
    let points = dir.join("points");
    let out = dir.join("resumed.csv");
    let args: Vec<String> = ["sweep", MPROTECT]
        .iter()
        .chain(LONG.iter())
        .chain(["--resume", s(&points), "--csv", s(&out)].iter())
        .map(|a| a.to_string())
        .collect();
    // Killed before anything is written (maybe while the manifest is),
    // then at a quarter and at two thirds of the 120 points.
    let mut interrupted = 0;
    let mut last = 0;
    for after in [0, 30, 80] {
        interrupted += usize::from(kill_after(&args, &points, after));
        let now = finished(&points);
        assert!(now >= last, "finished points are kept: {last} then {now}");
        last = now;
        assert!(!out.exists(), "a killed sweep writes no CSV");
    }
    assert!(interrupted >= 2, "the sweeps were killed while running");
    assert!(
        last < 120,
        "the last kill came before the end ({last} points)"
    );
    let o = tlbsim(&args.iter().map(String::as_str).collect::<Vec<_>>());
    ok(&o);
    assert!(
        stderr(&o).contains(&format!("{last} finished in")),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&whole).unwrap(),
        "the resumed CSV is the uninterrupted one, byte for byte"
    );
}

#[test]
fn a_damaged_point_file_is_refused_and_a_temporary_one_ignored() {
    let dir = scratch_dir("resume", "damaged");
    let whole = dir.join("whole.csv");
    ok(&sweep(MPROTECT, &SMALL, &["--csv", s(&whole)]));
    let points = dir.join("points");
    let out = dir.join("out.csv");
    let resume = ["--resume", s(&points), "--csv", s(&out)];
    ok(&sweep(MPROTECT, &SMALL, &resume));
    // A write cut by a kill leaves a hidden temporary file: never read.
    std::fs::write(points.join(".point-000003.json.tmp99999.0"), "{\"form").unwrap();
    std::fs::remove_file(points.join("point-000003.json")).unwrap();
    // A point file that is not whole (not written by tlbsim) is refused.
    let p2 = points.join("point-000002.json");
    let text = std::fs::read(&p2).unwrap();
    std::fs::write(&p2, &text[..text.len() / 2]).unwrap();
    let o = sweep(MPROTECT, &SMALL, &resume);
    refused(&o, "point-000002.json: not a finished point of this sweep");
    assert!(stderr(&o).contains("remove it to run the point again"));
    std::fs::remove_file(&p2).unwrap();
    let o = sweep(MPROTECT, &SMALL, &resume);
    ok(&o);
    assert!(stderr(&o).contains("10 finished in"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&whole).unwrap());
}

#[test]
fn shards_merged_equal_the_whole_sweep() {
    let dir = scratch_dir("resume", "shards");
    let whole = dir.join("whole.csv");
    ok(&sweep(MPROTECT, &SMALL, &["--csv", s(&whole)]));
    let want = std::fs::read(&whole).unwrap();
    // One directory per shard, as on different machines.
    let shard_dirs: Vec<PathBuf> = (1..=3).map(|i| dir.join(format!("s{i}"))).collect();
    for (i, d) in shard_dirs.iter().enumerate() {
        let shard = format!("{}/3", i + 1);
        ok(&sweep(
            MPROTECT,
            &SMALL,
            &["--shard", &shard, "--resume", s(d)],
        ));
        assert_eq!(finished(d), 4, "shard {shard}");
    }
    let merged = dir.join("merged.csv");
    let mut args = vec!["merge"];
    args.extend(shard_dirs.iter().map(|d| s(d)));
    args.extend(["--csv", s(&merged)]);
    ok(&tlbsim(&args));
    assert_eq!(std::fs::read(&merged).unwrap(), want, "merged == whole");
    // One directory that all shards share, as on a cluster's file system.
    let shared = dir.join("shared");
    for i in [3, 1, 2] {
        let shard = format!("{i}/3");
        ok(&sweep(
            MPROTECT,
            &SMALL,
            &["--shard", &shard, "--resume", s(&shared)],
        ));
    }
    let merged2 = dir.join("merged2.csv");
    ok(&tlbsim(&["merge", s(&shared), "--csv", s(&merged2)]));
    assert_eq!(std::fs::read(&merged2).unwrap(), want, "shared == whole");
    // A missing shard: exit 2, naming the missing points; nothing written.
    let partial = dir.join("partial.csv");
    let o = tlbsim(&[
        "merge",
        s(&shard_dirs[0]),
        s(&shard_dirs[2]),
        "--csv",
        s(&partial),
    ]);
    refused(&o, "4 of 12 points are in none of the directories");
    assert!(
        stderr(&o).contains("2 (ampere-32 2 CPUs arm64-skip-broadcast-v2 seed 1), 5 ("),
        "{}",
        stderr(&o)
    );
    assert!(!partial.exists());
    // A point in two directories, a directory given twice, one that is
    // not a sweep's.
    let o = tlbsim(&["merge", s(&shard_dirs[0]), s(&shared), "--csv", s(&partial)]);
    refused(&o, "4 points are in more than one directory");
    let o = tlbsim(&["merge", s(&shared), s(&shared), "--csv", s(&partial)]);
    refused(&o, "given twice");
    let o = tlbsim(&["merge", s(&dir), "--csv", s(&partial)]);
    refused(&o, "not a sweep's directory (no manifest.json)");
    assert!(!partial.exists());
}

#[test]
fn resuming_with_other_arguments_is_refused() {
    let dir = scratch_dir("resume", "other");
    let points = dir.join("points");
    let out = dir.join("out.csv");
    let resume = ["--resume", s(&points), "--csv", s(&out)];
    ok(&sweep(MPROTECT, &SMALL, &resume));
    let mut more = SMALL.to_vec();
    more.extend(["--set", "kernel.kpti=false"]);
    refused(
        &sweep(MPROTECT, &more, &resume),
        "it holds another sweep: --set [workload.iterations=20] there, [workload.iterations=20 kernel.kpti=false] now",
    );
    let mut fewer = SMALL.to_vec();
    fewer[3] = "2";
    refused(
        &sweep(MPROTECT, &fewer, &resume),
        "the points differ (--profiles, --cpus, --param, --policies): 12 there, 6 now; point 4:",
    );
    refused(
        &sweep(
            MPROTECT,
            &SMALL,
            &[&resume[..], &["--seeds", "1..2"]].concat(),
        ),
        "--seeds (none) there, [1,2] now",
    );
    let edited = dir.join("edited.toml");
    let text = std::fs::read_to_string(MPROTECT).unwrap();
    std::fs::write(&edited, text.replace("pages = 1", "pages = 2")).unwrap();
    refused(
        &sweep(s(&edited), &SMALL, &resume),
        "the experiment file's text differs",
    );
    // A directory with other files and no manifest is not taken over.
    let o = sweep(MPROTECT, &SMALL, &["--resume", s(&dir), "--csv", s(&out)]);
    refused(
        &o,
        "not empty and not a sweep's directory (no manifest.json)",
    );
    // The same arguments still resume.
    ok(&sweep(MPROTECT, &SMALL, &resume));
}

#[test]
fn seeds_give_one_row_per_seed_and_a_deterministic_summary() {
    let dir = scratch_dir("resume", "seeds");
    // v2 passes the churn stress only under the walk-cache reading it was
    // designed for (docs/validation.md, "Walk cache after the reserved
    // TTBR0"); this test is about the rows a sweep writes.
    let args = [
        "--set",
        "workload.rounds=2",
        "--cpus",
        "4",
        "--policies",
        "arm64-stock,arm64-skip-broadcast-v2",
        "--profiles",
        "ampere-32",
        "--seeds",
        "1..3",
        "--set",
        "machine.walk_cache_after_ttbr_write=flush-on-ttbr-change",
    ];
    let (csv, summary) = (dir.join("a.csv"), dir.join("a-summary.csv"));
    ok(&sweep(
        SAFETY,
        &args,
        &["--csv", s(&csv), "--summary", s(&summary)],
    ));
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 6, "{text}");
    let seeds: Vec<&str> = rows.iter().map(|r| r.split(',').nth(2).unwrap()).collect();
    assert_eq!(seeds, ["1", "2", "3", "1", "2", "3"]);
    assert_ne!(
        rows[0].split(',').nth(8),
        rows[1].split(',').nth(8),
        "seeds differ"
    );
    let sum = std::fs::read_to_string(&summary).unwrap();
    let lines: Vec<&str> = sum.lines().collect();
    assert_eq!(lines.len(), 3, "{sum}");
    assert!(
        lines[0].starts_with("experiment,version,seeds,runs,profile,sockets,cpus,policy,allocator,elapsed_s_mean,elapsed_s_sd,"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("seed000-safety,"), "{}", lines[1]);
    assert!(
        lines[1].contains(",1..3,3,ampere-32,1,4,arm64-stock,"),
        "{}",
        lines[1]
    );
    // Again, resumed, and sharded: the same bytes.
    let (csv2, summary2) = (dir.join("b.csv"), dir.join("b-summary.csv"));
    let points = dir.join("points");
    ok(&sweep(
        SAFETY,
        &args,
        &["--shard", "2/2", "--resume", s(&points)],
    ));
    ok(&sweep(
        SAFETY,
        &args,
        &[
            "--resume",
            s(&points),
            "--csv",
            s(&csv2),
            "--summary",
            s(&summary2),
        ],
    ));
    assert_eq!(std::fs::read(&csv2).unwrap(), text.as_bytes());
    assert_eq!(std::fs::read(&summary2).unwrap(), sum.as_bytes());
    let summary3 = dir.join("c-summary.csv");
    ok(&tlbsim(&[
        "merge",
        s(&points),
        "--csv",
        s(&dir.join("c.csv")),
        "--summary",
        s(&summary3),
    ]));
    assert_eq!(std::fs::read(&summary3).unwrap(), sum.as_bytes());
    // A list of seeds.
    let mut listed = args.to_vec();
    listed[9] = "7,5";
    let o = sweep(SAFETY, &listed, &["--csv", "-"]);
    ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    let seeds: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|r| r.split(',').nth(2).unwrap())
        .collect();
    assert_eq!(seeds, ["7", "5", "7", "5"]);
}

#[test]
fn bad_flags_are_refused_before_any_work() {
    let dir = scratch_dir("resume", "flags");
    let out = dir.join("out.csv");
    let points = dir.join("points");
    let (o, p) = (s(&out), s(&points));
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    for (more, want) in [
        (
            vec!["--shard", "0/3", "--resume", p],
            "--shard 0/3: shard 0 of 3 does not exist",
        ),
        (
            vec!["--shard", "4/3", "--resume", p],
            "--shard 4/3: shard 4 of 3 does not exist",
        ),
        (
            vec!["--shard", "1/0", "--resume", p],
            "--shard 1/0: shard 1 of 0 does not exist",
        ),
        (
            vec!["--shard", "one", "--resume", p],
            "--shard: \"one\" is not I/N",
        ),
        (vec!["--shard", "1/3"], "--shard: needs --resume DIR"),
        (
            vec!["--shard", "1/3", "--resume", p, "--csv", o],
            "--csv: a shard writes none",
        ),
        (vec![], "--csv FILE (or --json FILE) is required"),
        (
            vec!["--seeds", "3..1", "--csv", o],
            "--seeds 3..1: the range is empty",
        ),
        (
            vec!["--seeds", "1..9999999999", "--csv", o],
            "--seeds 1..9999999999: 9999999999 seeds (at most 1048576)",
        ),
        (
            vec!["--seeds", "1,x", "--csv", o],
            "--seeds: \"1,x\" is not A..B",
        ),
        (
            vec!["--seeds", "1,1", "--csv", o],
            "--seeds 1,1: seed 1 is given twice",
        ),
        (
            vec!["--csv", "-", "--summary", "-"],
            "--summary -: --csv is standard output already",
        ),
        (vec!["--csv", o, "--resume", s(&file)], "not a directory"),
        (vec!["--csv", o, "--resume", ""], "--resume <DIR>"),
        (
            vec!["--csv", o, "--summary", s(&dir.join("no/x.csv"))],
            "--summary",
        ),
    ] {
        refused(&sweep(MPROTECT, &SMALL, &more), want);
        assert!(!out.exists() && !points.exists(), "{want}: nothing written");
    }
}

#[test]
fn json_holds_the_csvs_rows_with_numbers_as_numbers() {
    let dir = scratch_dir("resume", "json");
    let csv = dir.join("out.csv");
    let json = dir.join("out.json");
    let more = ["--csv", s(&csv), "--json", s(&json)];
    let o = sweep(MPROTECT, &SMALL, &more);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let lines = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(rows.len(), lines - 1, "one object per CSV row");
    assert!(rows[0]["cpus"].is_u64() && rows[0]["elapsed_s"].is_f64());
    assert!(rows[0]["policy"].is_string());
}

/// 40 points of about 30 ms (LONG with ten times the iterations and 10
/// seeds): a sweep that runs for a second or so.
fn slow() -> Vec<&'static str> {
    let mut a = LONG.to_vec();
    a[1] = "workload.iterations=2000";
    a[9] = "1..10";
    a
}

/// Starts `sweep MPROTECT ARGS` in the background, its standard error
/// kept.
fn start(args: &[&str]) -> Child {
    Command::new(EXE)
        .args([&["sweep", MPROTECT][..], args].concat())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tlbsim starts")
}

/// Waits until `dir` holds a finished point (at most 30 s).
fn first_point(dir: &Path) {
    let t0 = Instant::now();
    while finished(dir) == 0 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The points a sweep's standard error says it ran.
fn points_run(err: &str) -> usize {
    err.lines()
        .filter(|l| l.starts_with("  ") && l.contains(" s simulated"))
        .count()
}

#[cfg(unix)]
#[test]
fn a_second_sweep_of_a_running_sweeps_points_is_refused_and_no_point_runs_twice() {
    let dir = scratch_dir("resume", "concurrent");
    let points = dir.join("points");
    let (a_csv, b_csv) = (dir.join("a.csv"), dir.join("b.csv"));
    let args = slow();
    let first = start(&[&args[..], &["--resume", s(&points), "--csv", s(&a_csv)]].concat());
    first_point(&points);
    // The same sweep, and a shard of it: both hold points the first runs.
    for more in [&[][..], &["--shard", "2/3"][..]] {
        let mut second = [&args[..], &["--resume", s(&points)], more].concat();
        if more.is_empty() {
            second.extend(["--csv", s(&b_csv)]);
        }
        let o = sweep(MPROTECT, &second, &[]);
        refused(
            &o,
            &format!(
                "error: --resume {}: another sweep is running in this directory (process {}, all points)",
                points.display(),
                first.id()
            ),
        );
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    let running = finished(&points) < 40;
    let out = first.wait_with_output().unwrap();
    ok(&out);
    assert!(
        running,
        "the first sweep ended before the second was refused"
    );
    assert_eq!(points_run(&stderr(&out)), 40, "the first ran every point");
    assert!(!b_csv.exists());
    // Once it has finished, the same sweep takes every point from it.
    let o = sweep(
        MPROTECT,
        &args,
        &["--resume", s(&points), "--csv", s(&b_csv)],
    );
    ok(&o);
    assert_eq!(points_run(&stderr(&o)), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&a_csv).unwrap(),
        std::fs::read(&b_csv).unwrap()
    );
    let mut left: Vec<String> = std::fs::read_dir(&points)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    left.sort();
    assert_eq!(left, [".lock"], "no claim is left behind");
}

#[cfg(unix)]
#[test]
fn shards_of_one_sweep_run_at_once_in_one_directory() {
    let dir = scratch_dir("resume", "concurrent-shards");
    let shared = dir.join("shared");
    let args = slow();
    let shards: Vec<Child> = ["1/2", "2/2"]
        .iter()
        .map(|sh| start(&[&args[..], &["--shard", sh, "--resume", s(&shared)]].concat()))
        .collect();
    let outs: Vec<Output> = shards
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for o in &outs {
        ok(o);
        assert_eq!(points_run(&stderr(o)), 20, "{}", stderr(o));
    }
    let merged = dir.join("merged.csv");
    ok(&tlbsim(&["merge", s(&shared), "--csv", s(&merged)]));
    let whole = dir.join("whole.csv");
    ok(&sweep(
        MPROTECT,
        &args,
        &["--resume", s(&shared), "--csv", s(&whole)],
    ));
    assert_eq!(
        std::fs::read(&merged).unwrap(),
        std::fs::read(&whole).unwrap()
    );
}

#[cfg(unix)]
#[test]
fn a_sweep_ended_by_a_signal_leaves_no_temporary_or_claim_file() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch_dir("resume", "signals");
    // Thousands of tiny points: the sweep spends much of its time writing
    // point files, so a signal often lands in the middle of one.
    let args = [
        "--set",
        "workload.iterations=1",
        "--cpus",
        "2",
        "--policies",
        "arm64-stock",
        "--profiles",
        "ampere-32",
        "--seeds",
        "1..5000",
    ];
    // A sweep that finished every point before its signal came (a test
    // thread starved on a loaded host) exits 0: it says nothing about the
    // signal, and is counted apart.
    let mut signalled = 0;
    for (i, (sig, number)) in [("TERM", 15), ("INT", 2), ("HUP", 1)]
        .iter()
        .cycle()
        .take(12)
        .enumerate()
    {
        let points = dir.join(format!("p{i}"));
        let child = start(&[&args[..], &["--resume", s(&points), "--csv", "-"]].concat());
        let t0 = Instant::now();
        while finished(&points) < 1 + 7 * i && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let killed = Command::new("kill")
            .args([format!("-{sig}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let out = child.wait_with_output().unwrap();
        if out.status.success() && finished(&points) == 5000 {
            continue;
        }
        assert_eq!(out.status.signal(), Some(*number), "{}", stderr(&out));
        signalled += 1;
        let hidden: Vec<String> = std::fs::read_dir(&points)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.') && n != ".lock")
            .collect();
        assert!(hidden.is_empty(), "SIG{sig}: left {hidden:?}");
    }
    assert!(
        signalled >= 6,
        "only {signalled} of 12 sweeps were still running when signalled"
    );
}
