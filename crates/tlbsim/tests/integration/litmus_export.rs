//! An explorer counterexample exported as a litmus test (issue 19 item
//! 4): the events kept are the mutant's, and the test's condition is
//! reached on tlbsim's litmus runner while the fixed variant's is not.

use super::common;
use tlbsim::explore::{check, CheckOptions, Strategy};
use tlbsim::litmus::ast::{Test, TlbiKind};
use tlbsim::litmus::export::{capture, plan, Access, Step};
use tlbsim::litmus::{machine, parse, print, search};

fn reached(t: &Test) -> bool {
    let text = print::print(t, "").unwrap();
    let back = parse::parse(&text).unwrap();
    let m = machine::Machine::new(&back, machine::Options::default());
    let o = search::explore(&m, 2_000_000).unwrap();
    assert!(!o.incomplete);
    o.some
}

#[test]
fn a_local_range_flush_exports_as_a_local_tlbi_whose_stale_store_is_reached() {
    let exp = common::arm64(
        "mutant-range-no-broadcast",
        2,
        "name = \"threads\"\nthreads = 2\niterations = 3\nop = \"mprotect\"",
    );
    let opts = CheckOptions {
        strategy: Strategy::Exhaustive(2),
        schedules: 100_000,
        seed: 1,
        max_actions: 50_000,
        max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
        speculation: 2,
        cpus: None,
    };
    let f = check(&exp, &opts)
        .unwrap()
        .failure
        .expect("the mutant is caught");
    let cap = capture(&exp, None, &f.schedule).unwrap();
    let p = plan(&cap).unwrap();
    assert_ne!(p.writer, p.holder);
    assert_eq!(
        p.access,
        Access::StoreNoFault,
        "mprotect made the page read-only"
    );
    assert!(
        p.steps.contains(&Step::Tlbi(TlbiKind::VaLast, false)),
        "the mutant's local TLBI VALE1: {:?}",
        p.steps
    );
    assert!(!p.steps.contains(&Step::Dsb), "no DSB ISH: {:?}", p.steps);
    assert!(reached(&p.test("t")));
    assert!(!reached(&p.fixed("t")));
}
