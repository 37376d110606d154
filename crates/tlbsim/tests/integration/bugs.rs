//! The catalogue of Linux's own TLB bugs (`tlbsim::bugs`): each buggy
//! kernel breaks its declared invariant under its search, and the fixed
//! kernel passes the same search.

use tlbsim::bugs::{catalogue::BUGS, run, Bug};

fn failures(bugs: &[&Bug]) -> Vec<String> {
    let mut out = Vec::new();
    for b in bugs {
        let r = run(b).unwrap_or_else(|e| panic!("{}: {e}", b.id));
        if !r.found() {
            out.push(format!(
                "{}: not found with {} ({:?} in {} schedules)",
                b.id,
                r.declared,
                r.buggy.invariant(),
                r.buggy.runs
            ));
        }
        if let Some((i, f)) = &r.fixed.failure {
            out.push(format!("{}: the fixed kernel fails at {i}:\n{f}", b.id));
        }
    }
    out
}

/// The bounded subset the default test run keeps (each under 2 s).
#[test]
fn the_quick_bugs_are_found_and_their_fixes_pass() {
    let quick: Vec<&Bug> = BUGS
        .iter()
        .filter(|b| ["x86-lazy-freed-tables", "arm-asid-suspended-animation"].contains(&b.id))
        .collect();
    assert_eq!(quick.len(), 2);
    let f = failures(&quick);
    assert!(f.is_empty(), "{}", f.join("\n"));
}

/// The whole corpus (`tlbsim bugs`); `.ci/run` runs it.
#[test]
#[ignore = "long: the whole bug corpus; .ci/run runs it"]
fn every_catalogued_bug_is_found_and_its_fix_passes() {
    let all: Vec<&Bug> = BUGS.iter().collect();
    let f = failures(&all);
    assert!(f.is_empty(), "{}", f.join("\n"));
}
