//! `tlbsim check --export-litmus FILE` (issue 19 item 4): a violation
//! written as a herd AArch64 litmus test, its condition reached by
//! `tlbsim litmus` and the fixed variant's not; the documented examples
//! are what the command writes; paths and violations without a litmus
//! form give clear errors.

use crate::common;

use common::{s, scratch_dir, stderr, stdout, tlbsim_in};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tlbsim check` in the repository root (the experiments' paths are
/// relative to it, as in the documented commands).
fn check(args: &[&str]) -> std::process::Output {
    let mut a = vec!["check"];
    a.extend_from_slice(args);
    tlbsim_in(&root(), &a)
}

const RANGE: [&str; 3] = [
    "experiments/seed000-safety.toml",
    "--policy",
    "mutant-range-no-broadcast",
];

#[test]
fn the_documented_exports_are_what_check_writes() {
    let dir = scratch_dir("export", "docs");
    let cases: [(&str, Vec<&str>); 2] = [
        ("mutant-range-no-broadcast", RANGE.to_vec()),
        (
            "arm64-tlbbatch-6.6",
            vec![
                "experiments/seed001-explore.toml",
                "--policy",
                "arm64-tlbbatch-6.6",
                "--schedules",
                "10000",
            ],
        ),
    ];
    for (name, args) in cases {
        let out = dir.join(format!("{name}.litmus"));
        let mut a = args.clone();
        a.extend(["--export-litmus", s(&out)]);
        let o = check(&a);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
        let got = std::fs::read_to_string(&out).unwrap();
        let doc =
            std::fs::read_to_string(root().join(format!("docs/litmus/{name}.litmus"))).unwrap();
        assert_eq!(
            got, doc,
            "docs/litmus/{name}.litmus is not what check writes"
        );
    }
}

#[test]
fn an_exported_test_is_reached_and_with_a_broadcast_flush_it_is_not() {
    let dir = scratch_dir("export", "roundtrip");
    let out = dir.join("range.litmus");
    let mut a = RANGE.to_vec();
    a.extend(["--export-litmus", s(&out)]);
    let o = check(&a);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("TLBI VALE1,X9"),
        "the mutant's local TLBI:\n{text}"
    );
    // The same test with the mutant's local TLBI and DSB made Linux's
    // broadcast ones (flush_tlb_range's TLBI VALE1IS; DSB ISH).
    let fixed = text
        .replace("AArch64 tlbsim-", "AArch64 fixed-")
        .replace("TLBI VALE1,X9", "TLBI VALE1IS,X9")
        .replace("DSB NSH", "DSB ISH");
    std::fs::write(dir.join("fixed.litmus"), fixed).unwrap();
    std::fs::write(
        dir.join("kinds.txt"),
        "tlbsim-mutant-range-no-broadcast-seed000-safety Allowed\n\
         fixed-mutant-range-no-broadcast-seed000-safety Forbidden\n",
    )
    .unwrap();
    let o = tlbsim_in(&dir, &["litmus", ".", "--verbose"]);
    let so = stdout(&o);
    assert!(o.status.success(), "{so}{}", stderr(&o));
    assert!(
        so.contains("agree (Allowed 1, Forbidden 1, Required 0)                     2"),
        "{so}"
    );
}

#[test]
fn bad_export_paths_stop_before_the_search() {
    let dir = scratch_dir("export", "paths");
    for (path, want) in [
        ("/nonexistent-dir-tlbsim/x.litmus", "--export-litmus"),
        ("-", "give a file name"),
        (s(&dir), "--export-litmus"),
    ] {
        let mut a = RANGE.to_vec();
        a.extend(["--export-litmus", path]);
        let o = check(&a);
        assert_eq!(o.status.code(), Some(2), "{path}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{path}: {}", stderr(&o));
        assert!(
            !stdout(&o).contains("schedules"),
            "the search ran: {}",
            stdout(&o)
        );
    }
}

#[test]
fn violations_without_a_litmus_form_say_cannot_export() {
    let dir = scratch_dir("export", "cannot");
    let cases: [(Vec<&str>, &str); 3] = [
        (
            vec![
                "experiments/seed004-safety.toml",
                "--policy",
                "x86-tlb-gen-before-b956575",
            ],
            "x86",
        ),
        (
            vec![
                "experiments/seed002-explore.toml",
                "--allocator",
                "mutant-asid-no-reserve",
            ],
            "\"ASID isolation\" has no litmus form",
        ),
        (
            vec![
                "experiments/seed000-safety.toml",
                "--policy",
                "arm64-skip-broadcast-v1",
            ],
            "\"no stale walk\" has no litmus form",
        ),
    ];
    for (k, (args, want)) in cases.into_iter().enumerate() {
        let out = dir.join(format!("{k}.litmus"));
        let mut a = args.clone();
        a.extend(["--export-litmus", s(&out)]);
        let o = check(&a);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("cannot export: ") && e.contains(want),
            "{args:?}: {e}"
        );
        assert!(!e.contains("panicked"), "{e}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

#[test]
fn a_passing_search_writes_nothing() {
    let dir = scratch_dir("export", "pass");
    let out = dir.join("x.litmus");
    let o = check(&[
        "experiments/seed000-safety.toml",
        "--schedules",
        "5",
        "--export-litmus",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing written"), "{}", stderr(&o));
    assert!(!out.exists());
}
