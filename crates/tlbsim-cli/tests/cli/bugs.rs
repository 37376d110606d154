//! `tlbsim bugs`: the catalogue of Linux's own TLB bugs.

use super::common::{stderr, stdout, tlbsim};

#[test]
fn bugs_list_names_every_bug_with_its_fix_and_runs_nothing() {
    let o = tlbsim(&["bugs", "--list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for b in tlbsim::bugs::catalogue::BUGS {
        assert!(out.contains(&format!("{}  (fix {}", b.id, b.fix)), "{out}");
    }
    assert!(!out.contains("found"), "{out}");
}

#[test]
fn bugs_only_matching_nothing_names_the_ids_and_exits_2() {
    let o = tlbsim(&["bugs", "--only", "no-such-bug"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("matches no bug") && err.contains("CVE-2018-18281"),
        "{err}"
    );
}

#[test]
fn bugs_runs_one_bug_and_its_fix_and_writes_json_without_host_times() {
    let o = tlbsim(&["bugs", "--only", "b956575", "--json", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["id"], "x86-lazy-freed-tables");
    assert_eq!(r["found"], true);
    assert_eq!(r["buggy"]["invariant"], "no stale walk");
    assert_eq!(r["fixed"]["failure_at"], serde_json::Value::Null);
    assert_eq!(r["fixed"]["schedules"], 1000);
    assert!(!stdout(&o).contains("host"));
    // The table went to standard error, with the verdict line.
    assert!(stderr(&o).contains("1 of 1 bugs found"), "{}", stderr(&o));
}
