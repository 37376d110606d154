//! The verdict of one test on tlbsim's hardware, compared with the
//! architecture's, and the class of a disagreement (docs/validation.md,
//! "Litmus tests (issue 19)").
//!
//! tlbsim's data memory is sequentially consistent, so an outcome the
//! architecture allows only through reordering of memory accesses cannot
//! be reached. The criterion that sorts an Allowed-but-unreached outcome
//! is mechanical: run the test again with every TLBI made a no-op (the
//! weakest TLB maintenance there is). If the outcome is still
//! unreachable, no staleness of translations, however long, gives it:
//! it needs memory accesses (data, or a walk's descriptor read) out of
//! program order, and is *SC-unreachable by design*. If it becomes
//! reachable, tlbsim's TLBIs or DSBs remove a translation the
//! architecture lets the CPU keep: tlbsim is *stronger* than Arm there.

use super::ast::{Quant, Test};
use super::catalogue::Kind;
use super::machine::{Machine, Options, RunError};
use super::parse::Unsupported;
use super::search::{explore, Outcome};

/// How a test's result compares with the expected verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// Same verdict.
    Agree,
    /// Allowed by Arm, unreachable on tlbsim even with TLBIs removed: it
    /// needs reordering of memory accesses, which tlbsim's sequentially
    /// consistent memory cannot give.
    ScUnreachable,
    /// Forbidden (or not Required) by Arm, reached on tlbsim: tlbsim's
    /// hardware is weaker than Arm's.
    Weaker,
    /// Allowed by Arm, unreached on tlbsim, reachable with TLBIs
    /// removed: tlbsim's TLB maintenance is stronger than Arm's.
    Stronger,
    /// The search hit its state bound before deciding.
    Incomplete,
    /// The test uses something the model does not run.
    Unsupported(Unsupported, String),
    /// The catalogue gives no expected verdict for the test.
    NoExpected,
}

impl Class {
    /// A short name for tables and CSV.
    pub fn name(&self) -> &'static str {
        match self {
            Class::Agree => "agree",
            Class::ScUnreachable => "sc-unreachable",
            Class::Weaker => "weaker",
            Class::Stronger => "stronger",
            Class::Incomplete => "incomplete",
            Class::Unsupported(..) => "unsupported",
            Class::NoExpected => "no-expected",
        }
    }
}

/// One test's result.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// Test name.
    pub name: String,
    /// Expected verdict.
    pub expected: Option<Kind>,
    /// tlbsim's verdict, when the search decided it.
    pub got: Option<Kind>,
    /// The comparison.
    pub class: Class,
    /// States the search visited (both searches, when the second ran).
    pub states: u64,
}

/// tlbsim's verdict from a search's outcome, if decided: a witness found
/// decides even when the search was cut short.
pub fn verdict(q: Quant, o: &Outcome) -> Option<Kind> {
    match q {
        Quant::Exists | Quant::NotExists if o.some => Some(Kind::Allowed),
        Quant::Forall if o.some_not => Some(Kind::Allowed),
        _ if o.incomplete => None,
        Quant::Exists | Quant::NotExists => Some(Kind::Forbidden),
        Quant::Forall => Some(Kind::Required),
    }
}

fn unsupported(e: RunError) -> Class {
    Class::Unsupported(e.why, e.message)
}

/// Runs `test` with at most `max_states` states per search and
/// classifies the result against `expected`.
pub fn run_test(test: &Test, expected: Option<Kind>, max_states: u64) -> TestResult {
    let mut r = TestResult {
        name: test.name.clone(),
        expected,
        got: None,
        class: Class::Incomplete,
        states: 0,
    };
    let m = Machine::new(test, Options::default());
    let o = match explore(&m, max_states) {
        Ok(o) => o,
        Err(e) => {
            r.class = unsupported(e);
            return r;
        }
    };
    r.states = o.states;
    r.got = verdict(test.quant, &o);
    let (Some(exp), Some(got)) = (expected, r.got) else {
        r.class = if expected.is_none() {
            Class::NoExpected
        } else {
            Class::Incomplete
        };
        return r;
    };
    r.class = match (exp, got) {
        (e, g) if e == g => Class::Agree,
        (Kind::Forbidden | Kind::Required, Kind::Allowed) => Class::Weaker,
        // Arm allows an outcome tlbsim never reached: the condition
        // (exists) or its negation (forall).
        (Kind::Allowed, _) => {
            let weak = Machine::new(test, Options { tlbi: false });
            match explore(&weak, max_states) {
                Err(e) => unsupported(e),
                Ok(w) => {
                    r.states += w.states;
                    let reached = match test.quant {
                        Quant::Forall => w.some_not,
                        _ => w.some,
                    };
                    if reached {
                        Class::Stronger
                    } else if w.incomplete {
                        Class::Incomplete
                    } else {
                        Class::ScUnreachable
                    }
                }
            }
        }
        // Required by the catalogue for an `exists` test, or the like:
        // no meaning here.
        _ => Class::NoExpected,
    };
    r
}
