//! `tlbsim litmus`: small tests written here, and (ignored by default,
//! run by `.ci/run`) the whole herdtools7 AArch64 VMSA catalogue, which
//! lives outside the repository: in `$TLBSIM_LITMUS_DIR/aarch64-VMSA/tests`,
//! or by default in `../shared/litmus/aarch64-VMSA/tests` beside the
//! checkout. Without it the catalogue test says so and passes.

use crate::common;

use common::tlbsim;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch_dir(name: &str) -> common::Scratch {
    common::scratch_dir("litmus", name)
}

use common::SHOOT_LITMUS as SHOOT;

#[test]
fn litmus_compares_verdicts_and_writes_the_csv() {
    let dir = scratch_dir("small");
    std::fs::write(dir.join("shoot.litmus"), SHOOT).unwrap();
    let no_tlbi = SHOOT
        .replace("AArch64 shoot", "AArch64 noshoot")
        .replace(" TLBI VAAE1IS,X9 |", " MOV X9,#0       |");
    std::fs::write(dir.join("noshoot.litmus"), no_tlbi).unwrap();
    std::fs::write(
        dir.join("hw-af.litmus"),
        SHOOT.replace("AArch64 shoot\n", "AArch64 hwaf\nTTHM=HA\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("kinds.txt"),
        "shoot Forbidden\nnoshoot Allowed\nhwaf Allowed\n",
    )
    .unwrap();
    let csv = dir.join("out.csv");
    let o = tlbsim(&[
        "litmus",
        dir.to_str().unwrap(),
        "--verbose",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("litmus: 3 test files"), "{out}");
    assert!(
        out.contains("agree (Allowed 1, Forbidden 1, Required 0)"),
        "{out}"
    );
    assert!(
        out.contains("hardware access-flag/dirty-bit updates"),
        "{out}"
    );
    let csv = std::fs::read_to_string(csv).unwrap();
    assert!(
        csv.starts_with("file,name,expected,tlbsim,class,states,detail\n"),
        "{csv}"
    );
    assert!(
        csv.contains("shoot.litmus,shoot,Forbidden,Forbidden,agree,"),
        "{csv}"
    );
    assert!(
        csv.contains("noshoot.litmus,noshoot,Allowed,Allowed,agree,"),
        "{csv}"
    );

    // Told that the stale use is Forbidden, the weakened test is a
    // disagreement (tlbsim weaker), and the exit code says so.
    std::fs::write(
        dir.join("kinds.txt"),
        "shoot Forbidden\nnoshoot Forbidden\nhwaf Allowed\n",
    )
    .unwrap();
    let o = tlbsim(&["litmus", dir.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("weaker         noshoot"), "{out}");

    // With every TLBI a no-op, the shootdown's Forbidden outcome is
    // reached too: its verdict rests on the TLBI.
    let o = tlbsim(&["litmus", dir.to_str().unwrap(), "--without-tlbi"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("weaker         shoot "), "{out}");
}

#[test]
fn litmus_reports_a_malformed_test_with_its_line() {
    let dir = scratch_dir("bad");
    let bad = SHOOT.replace("LSR X9,X3,#12", "LSR X9,X3    ");
    let f = dir.join("bad.litmus");
    std::fs::write(&f, bad).unwrap();
    let o = tlbsim(&["litmus", f.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    // One malformed file is bad input.
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert!(out.contains("bad.litmus:9: LSR takes 3 operands"), "{out}");
    assert!(
        err.contains("error: ") && err.contains("bad.litmus:9:"),
        "{err}"
    );
    let o = tlbsim(&["litmus", dir.join("absent").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("absent")
            && err.contains("../shared/litmus")
            && err.contains("TLBSIM_LITMUS_DIR"),
        "{err}"
    );
}

/// The count on the summary row starting with `label`.
fn row(out: &str, label: &str) -> usize {
    let l = out
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no row {label:?} in\n{out}"));
    l.split_whitespace().last().unwrap().parse().unwrap()
}

/// Runs `tlbsim litmus ARGS` with `TLBSIM_LITMUS_DIR` set to `dir` (or
/// removed).
fn litmus_with_dir(dir: Option<&OsStr>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tlbsim"));
    c.arg("litmus").args(args);
    match dir {
        Some(d) => c.env("TLBSIM_LITMUS_DIR", d),
        None => c.env_remove("TLBSIM_LITMUS_DIR"),
    };
    c.output().unwrap()
}

/// Issue 35, item 3: each of these was once accepted and given a
/// verdict. In a directory they are reported and skipped, and the run's
/// exit code still reflects the verdicts of the others.
#[test]
fn malformed_tests_are_refused_with_file_and_line_and_skipped_in_a_directory() {
    let dir = scratch_dir("malformed");
    let cases: [(&str, String, &str); 4] = [
        (
            "short-row",
            SHOOT.replace(
                " DSB ISH         |             ;\n MOV",
                " DSB ISH         ;\n MOV",
            ),
            "short-row.litmus:11: 1 column where the thread header (line 6) has 2",
        ),
        (
            "p7",
            SHOOT.replace("fault(P1:L0,x)", "fault(P7:L0,x)"),
            "p7.litmus:14: the condition names thread P7, but the test has 2 threads",
        ),
        (
            "no-label",
            SHOOT.replace("fault(P1:L0,x)", "fault(P1:L5,x)"),
            "no-label.litmus:14: the condition names label L5 of P1",
        ),
        (
            "twice",
            SHOOT.replace("1:X3=x; 1:X8=z;", "1:X3=x; 1:X8=z; 1:X3=z;"),
            "twice.litmus:4: 1:X3 is initialised twice (first on line 4)",
        ),
    ];
    for (name, text, want) in &cases {
        let f = dir.join(format!("{name}.litmus"));
        std::fs::write(&f, text).unwrap();
        let o = tlbsim(&["litmus", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(want), "{name}: want {want:?} in\n{err}");
    }
    // A well-formed herd test with an array location (herdtools7's
    // coRR-pte9-plus8, Allowed in herd's kinds.txt): run to a verdict,
    // tlbsim's Forbidden, as the catalogue's other coRR tests whose
    // outcome needs two loads reordered (SC-unreachable by design).
    std::fs::write(dir.join("array.litmus"), ARRAY).unwrap();
    std::fs::write(dir.join("shoot.litmus"), SHOOT).unwrap();
    std::fs::write(
        dir.join("kinds.txt"),
        "shoot Forbidden\ncoRR-pte9-plus8 Allowed\n",
    )
    .unwrap();
    let csv = dir.join("out.csv");
    let o = tlbsim(&[
        "litmus",
        dir.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(row(&out, "malformed (parse error; skipped)"), 4, "{out}");
    assert_eq!(row(&out, "run to a verdict"), 2, "{out}");
    assert_eq!(row(&out, "unsupported"), 0, "{out}");
    assert_eq!(row(&out, "Allowed, SC-unreachable by design"), 1, "{out}");
    assert!(
        out.contains("agree (Allowed 0, Forbidden 1, Required 0)"),
        "{out}"
    );
    for (_, _, want) in &cases {
        assert!(
            out.contains(&format!("malformed: {}", dir.join(want).display())),
            "{want}\n{out}"
        );
    }
    let csv = std::fs::read_to_string(csv).unwrap();
    assert!(
        csv.contains("array.litmus,coRR-pte9-plus8,Allowed,Forbidden,sc-unreachable,"),
        "{csv}"
    );
    assert!(csv.contains("p7.litmus,,,,malformed,0,"), "{csv}");
    // A disagreement among them still fails the run.
    std::fs::write(dir.join("kinds.txt"), "shoot Allowed\n").unwrap();
    let o = tlbsim(&["litmus", dir.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "stronger is documented, not a failure"
    );
    std::fs::write(
        dir.join("noshoot.litmus"),
        SHOOT
            .replace("AArch64 shoot", "AArch64 noshoot")
            .replace(" TLBI VAAE1IS,X9 |", " MOV X9,#0       |"),
    )
    .unwrap();
    std::fs::write(
        dir.join("kinds.txt"),
        "shoot Forbidden\nnoshoot Forbidden\n",
    )
    .unwrap();
    let o = tlbsim(&["litmus", dir.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// herdtools7's `catalogue/aarch64-VMSA/tests/coRR-pte9-plus8.litmus`
/// (CeCILL-B), which the shared copy of the catalogue lacks: the
/// library's fixture.
const ARRAY: &str = include_str!("../../../tlbsim/tests/fixtures/litmus/coRR-pte9-plus8.litmus");

/// Four threads of loads and stores to three variables: millions of
/// states, more than a few MiB.
const BIG: &str = "AArch64 big4
{
0:X1=x; 0:X2=y; 0:X3=z;
1:X1=x; 1:X2=y; 1:X3=z;
2:X1=x; 2:X2=y; 2:X3=z;
3:X1=x; 3:X2=y; 3:X3=z;
}
 P0          | P1          | P2          | P3          ;
 MOV W0,#1   | MOV W0,#2   | LDR W4,[X1] | LDR W4,[X2] ;
 STR W0,[X1] | STR W0,[X2] | LDR W5,[X2] | LDR W5,[X3] ;
 STR W0,[X2] | STR W0,[X3] | LDR W6,[X3] | LDR W6,[X1] ;
 LDR W4,[X3] | LDR W4,[X1] | LDR W7,[X1] | LDR W7,[X2] ;
exists(2:X4=3 /\\ 3:X4=2)
";

/// Issue 35, item 1: `--max-states` did not bound memory (a 64-thread
/// test reached 18.7 GB and was OOM-killed). Under `--max-memory` the
/// search stops at the bound and says so: the bound, the test, the
/// states explored; exit code 2, as for `run`'s limits.
#[test]
fn a_litmus_run_under_a_memory_cap_stops_naming_the_bound() {
    let dir = scratch_dir("memory");
    let f = dir.join("big4.litmus");
    std::fs::write(&f, BIG).unwrap();
    let o = tlbsim(&["litmus", f.to_str().unwrap(), "--max-memory", "8M"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in {err}"));
    assert!(
        line.contains(
            "big4.litmus: test big4 stopped at the memory bound (--max-memory 8.0 MiB) after "
        ),
        "{line}"
    );
    let states: u64 = line
        .split(" after ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no state count in {line}"));
    assert!(states > 10_000, "{line}");
    assert_eq!(row(&out, "incomplete (memory bound)"), 1, "{out}");
    // Bad sizes are refused before any work, naming the flag.
    for bad in ["0", "12X", "-4G", "1e400G", "100K"] {
        let flag = format!("--max-memory={bad}");
        let o = tlbsim(&["litmus", f.to_str().unwrap(), &flag]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--max-memory"), "{bad}: {err}");
    }
}

/// Issue 35, item 1: a long run off a terminal prints progress lines on
/// standard error (states explored, memory held).
#[test]
fn a_long_litmus_run_prints_progress_off_a_terminal() {
    let dir = scratch_dir("progress");
    let f = dir.join("big4.litmus");
    std::fs::write(&f, BIG).unwrap();
    let t0 = std::time::Instant::now();
    let o = tlbsim(&["litmus", f.to_str().unwrap(), "--max-memory", "40M"]);
    let err = String::from_utf8_lossy(&o.stderr);
    if t0.elapsed() < std::time::Duration::from_secs(6) {
        eprintln!("the run took less than the 5 s before a first progress line");
        return;
    }
    assert!(
        err.lines().any(|l| l.starts_with("litmus: 0/1 files, ")
            && l.contains(" states explored, ")
            && l.contains(" of 40.0 MiB held")),
        "{err}"
    );
}

/// Issue 35, item 5: with no PATH, `tlbsim litmus` runs the catalogue
/// `TLBSIM_LITMUS_DIR` names, and says what to do when it is not there.
#[test]
fn the_catalogue_is_found_through_tlbsim_litmus_dir() {
    let o = litmus_with_dir(None, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no PATH given and TLBSIM_LITMUS_DIR is not set"),
        "{err}"
    );
    let o = litmus_with_dir(Some(OsStr::new("/nonexistent/litmus")), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/nonexistent/litmus/aarch64-VMSA/tests: "),
        "{err}"
    );
    // A collection laid out as the catalogue is.
    let dir = scratch_dir("collection");
    let tests = dir.join("aarch64-VMSA/tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(tests.join("shoot.litmus"), SHOOT).unwrap();
    std::fs::write(tests.join("kinds.txt"), "shoot Forbidden\n").unwrap();
    let o = litmus_with_dir(Some(dir.as_os_str()), &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("agree (Allowed 0, Forbidden 1, Required 0)"),
        "{out}"
    );
    // The test suite's own lookup: an absent catalogue is a message.
    match catalogue_in(Some(OsStr::new("/nonexistent/litmus"))) {
        Err(m) => assert!(
            m.contains("/nonexistent/litmus/aarch64-VMSA/tests")
                && m.contains("TLBSIM_LITMUS_DIR")
                && m.starts_with("skipped:"),
            "{m}"
        ),
        Ok(p) => panic!("found a catalogue at {}", p.display()),
    }
    assert_eq!(catalogue_in(Some(dir.as_os_str())).unwrap(), tests);
}

/// The VMSA catalogue: `$TLBSIM_LITMUS_DIR/aarch64-VMSA/tests` when the
/// variable is set (`dir`), else beside the checkout,
/// `<workspace>/../shared/litmus/aarch64-VMSA/tests`; a message saying
/// it was skipped when the catalogue is not there.
fn catalogue_in(dir: Option<&OsStr>) -> Result<PathBuf, String> {
    let root = match dir {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/litmus"),
    };
    let p = root.join("aarch64-VMSA/tests");
    if p.join("kinds.txt").is_file() {
        Ok(p)
    } else {
        Err(format!(
            "skipped: the herdtools7 AArch64 VMSA catalogue is not at {} (set TLBSIM_LITMUS_DIR \
             to the folder holding aarch64-VMSA/tests: ../shared/litmus beside the checkout, or \
             a herdtools7 checkout's catalogue/)",
            p.display()
        ))
    }
}

/// The whole catalogue: no Forbidden outcome reached, nothing malformed
/// or cut short, and the summary docs/validation.md records ("Litmus
/// tests (issue 19)"): a change in any count means the model moved and
/// the documented disagreements must be looked at again. About a minute
/// in release on 2 cores.
#[test]
#[ignore]
fn the_vmsa_catalogue_agrees_except_where_documented() {
    let catalogue = match catalogue_in(std::env::var_os("TLBSIM_LITMUS_DIR").as_deref()) {
        Ok(p) => p,
        Err(m) => {
            // Printed even when the harness captures output.
            println!("{m}");
            eprintln!("{m}");
            return;
        }
    };
    let o = tlbsim(&["litmus", catalogue.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let row = |label: &str| row(&out, label);
    assert_eq!(row("disagree: Forbidden reached"), 0, "{out}");
    assert_eq!(row("malformed"), 0, "{out}");
    assert_eq!(row("incomplete (state bound)"), 0, "{out}");
    assert_eq!(row("incomplete (memory bound)"), 0, "{out}");
    assert_eq!(row("no expected verdict"), 0, "{out}");
    assert_eq!(row("run to a verdict"), EXPECTED_RUN, "{out}");
    assert_eq!(row("agree"), EXPECTED_AGREE, "{out}");
    assert_eq!(row("Allowed, SC-unreachable"), EXPECTED_SC, "{out}");
    assert_eq!(
        row("disagree: Allowed staleness"),
        EXPECTED_STRONGER,
        "{out}"
    );
}

/// The counts of docs/validation.md, "Litmus tests (issue 19)".
const EXPECTED_RUN: usize = 382;
const EXPECTED_AGREE: usize = 237;
const EXPECTED_SC: usize = 114;
const EXPECTED_STRONGER: usize = 31;
