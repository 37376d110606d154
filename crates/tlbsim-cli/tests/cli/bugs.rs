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

#[test]
fn bugs_report_writes_a_page_whose_table_block_has_no_host_times() {
    let dir = super::common::scratch_dir("bugs", "report");
    let d = super::common::s(&dir);
    let o = tlbsim(&["bugs", "--only", "b956575", "--report", d]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(dir.join("index.md")).expect("the page");
    let begin = "<!-- bugs: written by `tlbsim bugs --report DIR` -->";
    let (start, end) = (
        page.find(begin).unwrap(),
        page.find("<!-- end of bugs -->").unwrap(),
    );
    let block = &page[start..end];
    assert!(
        block.contains("| x86-lazy-freed-tables | b956575bed91 | `tlb_policy = \"x86-tlb-gen-before-b956575\"` | no stale walk | schedule 0 of 1000 | pass, 1000 schedules |"),
        "{block}"
    );
    assert!(block.contains("1 of 1 bugs found"), "{block}");
    assert!(
        !block.contains(" s |"),
        "no host seconds in the block: {block}"
    );
    // The host seconds follow the block.
    assert!(page[end..].contains("| x86-lazy-freed-tables | "), "{page}");
    // A page is a directory's file: standard output is refused first.
    let o = tlbsim(&["bugs", "--only", "b956575", "--report", "-"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--report -"), "{}", stderr(&o));
}
