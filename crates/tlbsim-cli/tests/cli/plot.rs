//! Results people can look at (issue 16, Plots): `tlbsim plot` draws a
//! CSV (today's sweep schema or the older one of docs/data) as an SVG
//! line chart, the same bytes every time, and refuses bad input with exit
//! 2 and nothing written; `reproduce --report DIR` writes a page and a
//! figure per seed.

use crate::common;

use common::{s, scratch_dir, stderr, tlbsim, EXE, MPROTECT};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SCALING_CSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/data/seed000-scaling.csv"
);

/// [`tlbsim`], killed (and the test failed) if it runs longer than `limit`.
fn tlbsim_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(EXE)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tlbsim runs");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("tlbsim {args:?} still runs after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

/// The lines of series in an SVG that `tlbsim plot` drew (axes and ticks
/// are 1 px wide, series lines 2 px).
fn series_lines(svg: &str) -> usize {
    svg.matches("stroke-width=\"2\" points=").count()
}

/// A CSV in the sweep's schema: two policies, three CPU counts, rows out
/// of x order.
const SMALL: &str = "\
experiment,version,seed,profile,sockets,cpus,policy,allocator,elapsed_s
e,v,1,ampere-32,1,4,arm64-stock,asid,0.25
e,v,1,ampere-32,1,2,arm64-stock,asid,0.5
e,v,1,ampere-32,1,2,arm64-skip-broadcast-v2,asid,0.125
e,v,1,ampere-32,1,8,arm64-stock,asid,1.5
e,v,1,ampere-32,1,4,arm64-skip-broadcast-v2,asid,0.0625
e,v,1,ampere-32,1,8,arm64-skip-broadcast-v2,asid,0.03125
";

#[test]
fn plot_draws_a_line_per_group_with_its_legend_label_and_the_same_bytes_twice() {
    let dir = scratch_dir("plot", "groups");
    let csv = dir.join("small.csv");
    std::fs::write(&csv, SMALL).unwrap();
    let out = dir.join("fig.svg");
    let args = [
        "plot",
        s(&csv),
        "--x",
        "cpus",
        "--y",
        "elapsed_s",
        "--group",
        "profile,policy",
        "--log-x",
        "--log-y",
        "--out",
        s(&out),
    ];
    let o = tlbsim(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(series_lines(&svg), 2, "{svg}");
    for label in [
        "ampere-32, arm64-stock",
        "ampere-32, arm64-skip-broadcast-v2",
    ] {
        assert!(svg.contains(&format!("\n{label}\n</text>")), "{label}");
    }
    assert!(
        svg.contains("small.csv: elapsed_s by cpus"),
        "default title"
    );
    // The first group's points, sorted by x: 2, 4, 8 CPUs going down.
    let first = svg.split("stroke-width=\"2\" points=\"").nth(1).unwrap();
    let xs: Vec<i32> = first
        .split(['"', ' '])
        .take(3)
        .map(|p| p.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(xs[0] < xs[1] && xs[1] < xs[2], "{xs:?}");
    let o = tlbsim(&args);
    assert!(o.status.success());
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        svg,
        "byte-identical"
    );
}

#[test]
fn plot_reads_a_fresh_sweep_csv_and_the_older_schema_of_docs_data() {
    let dir = scratch_dir("plot", "schemas");
    let csv = dir.join("sweep.csv");
    let o = tlbsim(&[
        "sweep",
        MPROTECT,
        "--set",
        "workload.iterations=20",
        "--cpus",
        "2,4",
        "--policies",
        "arm64-stock,arm64-skip-broadcast-v2",
        "--profiles",
        "ampere-32",
        "--csv",
        s(&csv),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = dir.join("sweep.svg");
    let o = tlbsim(&[
        "plot",
        s(&csv),
        "--x",
        "cpus",
        "--y",
        "elapsed_s",
        "--group",
        "policy",
        "--filter",
        "profile=ampere-32",
        "--title",
        "sweep",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(series_lines(&std::fs::read_to_string(&out).unwrap()), 2);
    // docs/data: 2 profiles x 3 policies; one profile kept by --filter.
    let o = tlbsim(&[
        "plot",
        SCALING_CSV,
        "--x",
        "cpus",
        "--y",
        "elapsed_s",
        "--group",
        "policy",
        "--filter",
        "profile=ampere-2s",
        "--log-x",
        "--log-y",
        "--out",
        "-",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(series_lines(&String::from_utf8_lossy(&o.stdout)), 3);
}

/// `tlbsim plot ARGS... --out OUT` exits 2 with `error: ` and `want` in
/// its message, and writes nothing (OUT stays as it was: absent, or a
/// directory).
#[track_caller]
fn refused(args: &[&str], out: &Path, want: &str) {
    let before = out.exists();
    let mut all = vec!["plot"];
    all.extend_from_slice(args);
    all.extend(["--out", s(out)]);
    let o = tlbsim(&all);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.starts_with("error: ") && e.contains(want),
        "{e}\nwant: {want}"
    );
    assert_eq!(out.exists(), before, "nothing written");
    if before {
        assert!(out.is_dir());
    }
}

#[test]
fn plot_refuses_bad_input_with_exit_2_naming_file_row_and_column() {
    let dir = scratch_dir("plot", "bad");
    let csv = dir.join("small.csv");
    std::fs::write(&csv, SMALL).unwrap();
    let c = s(&csv);
    let out = dir.join("out.svg");
    let xy = ["--x", "cpus", "--y", "elapsed_s"];
    refused(
        &[c, "--x", "cpus", "--y", "elapsed"],
        &out,
        &format!("{c}:1: no column \"elapsed\" (--y); the columns are: experiment, version,"),
    );
    refused(
        &[c, "--x", "cpus", "--y", "policy"],
        &out,
        &format!("{c}:2: column policy (--y): \"arm64-stock\" is not a number"),
    );
    let zero = dir.join("zero.csv");
    std::fs::write(&zero, "cpus,elapsed_s\n2,1\n4,0\n").unwrap();
    refused(&[s(&zero), xy[0], xy[1], xy[2], xy[3], "--log-y"], &out, &format!(
        "{}:3: column elapsed_s (--y): 0 is not positive, so it cannot be drawn on a logarithmic axis (--log-y)",
        s(&zero)
    ));
    let empty = dir.join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    refused(
        &[s(&empty), xy[0], xy[1], xy[2], xy[3]],
        &out,
        "empty: no header line",
    );
    std::fs::write(&empty, "cpus,elapsed_s\n").unwrap();
    refused(
        &[s(&empty), xy[0], xy[1], xy[2], xy[3]],
        &out,
        "no data rows",
    );
    let mut args = vec![c];
    args.extend(xy);
    refused(&args, &dir.join("no/such/dir/out.svg"), "does not exist");
    refused(&args, &dir.join("out.png"), "PNG is not supported");
    refused(
        &args,
        &dir.join("out.txt"),
        "the file name must end in .svg",
    );
    let is_dir = dir.join("fig.svg");
    std::fs::create_dir(&is_dir).unwrap();
    refused(&args, &is_dir, "fig.svg: is a directory");
    args.extend(["--filter", "policy=none"]);
    refused(
        &args,
        &out,
        "none of its 6 rows matches --filter policy=none",
    );
}

#[test]
fn reproduce_report_writes_the_page_and_a_figure_per_seed() {
    let dir = scratch_dir("plot", "report");
    let report = dir.join("new/report");
    let o = tlbsim(&[
        "reproduce",
        "--only",
        "seed004-madv",
        "--report",
        s(&report),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(report.join("index.md")).unwrap();
    assert!(
        page.contains("| seed004-madv-migrate | iteration, "),
        "{page}"
    );
    // The verdict on a line of its own after the ratio row, with the
    // figures it judged; the criteria table leads the page.
    assert!(
        page.contains("| | accept: ok (ratio within +-20% of published): ratio "),
        "{page}"
    );
    assert!(
        page.contains("| seed004-madv-migrate | iteration: x86-lazy-legacy -> x86-tlb-gen | ratio within +-20% of published | ratio "),
        "{page}"
    );
    assert!(page.contains("\n1 of 1 criteria met.\n"), "{page}");
    assert!(
        page.contains("![seed004: published vs simulated](seed004.svg)"),
        "{page}"
    );
    let svg = std::fs::read_to_string(report.join("seed004.svg")).unwrap();
    assert!(svg.contains("published 21.6 us") && svg.contains("seed004-madv-migrate: iteration"));
    // Run again: the same page and figure (no host seconds in them).
    let o = tlbsim(&[
        "reproduce",
        "--only",
        "seed004-madv",
        "--report",
        s(&report),
    ]);
    assert!(o.status.success());
    assert_eq!(
        std::fs::read_to_string(report.join("index.md")).unwrap(),
        page
    );
    assert_eq!(
        std::fs::read_to_string(report.join("seed004.svg")).unwrap(),
        svg
    );
    // A report path that cannot be a directory is refused before any run.
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    let o = tlbsim(&["reproduce", "--only", "seed004-madv", "--report", s(&file)]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!("error: --report {}: not a directory\n", s(&file))
    );
    assert!(o.stdout.is_empty(), "no table: nothing ran");
}

/// The repository's root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn every_csv_in_docs_data_has_the_figure_tools_figures_sh_draws() {
    let out = scratch_dir("plot", "figures");
    let o = Command::new("sh")
        .arg("tools/figures.sh")
        .arg(&out)
        .current_dir(ROOT)
        .env("TLBSIM", EXE)
        .output()
        .expect("sh runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let data = Path::new(ROOT).join("docs/data");
    let mut csvs: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    csvs.sort();
    assert_eq!(csvs.len(), 8, "{csvs:?}");
    for csv in csvs {
        let name = format!("{}.svg", csv.file_stem().unwrap().to_string_lossy());
        let drawn = std::fs::read(out.join(&name)).unwrap();
        let kept = std::fs::read(Path::new(ROOT).join("docs/figures").join(&name));
        assert!(
            kept.is_ok_and(|k| k == drawn),
            "docs/figures/{name} is not what tools/figures.sh draws: run tools/figures.sh"
        );
    }
}

/// Cells of the fuzzed CSVs: numbers of every sign and size, values
/// that are not numbers, empty cells, a quoted comma.
const CELLS: [&str; 14] = [
    "1", "0", "-3", "2.5", "1e308", "-1e308", "5e-324", "1e-200", "1e200", "NaN", "inf", "abc", "",
    "\"a,b\"",
];

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48),
        rng_seed: proptest::test_runner::RngSeed::Fixed(16),
        failure_persistence: None,
        ..Default::default()
    })]

    /// Whatever the CSV and the axes, `tlbsim plot` draws it (exit 0) or
    /// refuses it with one error line (exit 2), within seconds; it never
    /// panics or hangs.
    #[test]
    fn plot_never_panics_on_any_csv(
        rows in proptest::collection::vec(proptest::collection::vec(0..CELLS.len(), 3), 0..6),
        ragged in proptest::bool::ANY,
        log_x in proptest::bool::ANY,
        log_y in proptest::bool::ANY,
        group in proptest::bool::ANY,
    ) {
        let dir = scratch_dir("plot", "fuzz");
        let mut text = String::from("a,b,g\n");
        for (i, r) in rows.iter().enumerate() {
            let cells: Vec<&str> = r.iter().map(|&c| CELLS[c]).collect();
            let n = if ragged && i == 1 { 2 } else { 3 };
            text.push_str(&cells[..n].join(","));
            text.push('\n');
        }
        let csv = dir.join("f.csv");
        std::fs::write(&csv, &text).unwrap();
        let out = dir.join("f.svg");
        let mut args = vec!["plot", s(&csv), "--x", "a", "--y", "b", "--out", s(&out)];
        args.extend(log_x.then_some("--log-x"));
        args.extend(log_y.then_some("--log-y"));
        if group {
            args.extend(["--group", "g"]);
        }
        let o = tlbsim_within(&args, Duration::from_secs(20));
        let e = stderr(&o);
        match o.status.code() {
            Some(0) => proptest::prop_assert!(std::fs::read_to_string(&out).unwrap().starts_with("<svg")),
            Some(2) => {
                proptest::prop_assert!(e.starts_with("error: ") && e.lines().count() == 1, "{}", e);
                proptest::prop_assert!(!out.exists());
            }
            c => proptest::prop_assert!(false, "exit {:?} on {:?}: {}", c, text, e),
        }
    }
}
