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
#[cfg(test)]
use super::search::explore;
use super::search::{explore_within, Budget, Outcome};

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
    /// The search stopped at the memory bound ([`Budget`]) before
    /// deciding.
    MemoryBound,
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
            Class::MemoryBound => "memory-bound",
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

/// Runs `test` on hardware that behaves as `opts` says (the default:
/// tlbsim's), with at most `max_states` states per search, and
/// classifies the result against `expected`. Memory is not bounded:
/// [`run_test_within`] bounds it.
pub fn run_test(test: &Test, expected: Option<Kind>, max_states: u64, opts: Options) -> TestResult {
    run_test_within(test, expected, max_states, &Budget::new(u64::MAX), opts)
}

/// The class of an undecided search: which bound stopped it.
fn cut_short(o: &Outcome) -> Class {
    if o.memory_bound {
        Class::MemoryBound
    } else {
        Class::Incomplete
    }
}

/// [`run_test`], its searches holding no more memory than `budget`
/// allows: a search stopped by it leaves the test [`Class::MemoryBound`]
/// unless a witness already decided the verdict.
pub fn run_test_within(
    test: &Test,
    expected: Option<Kind>,
    max_states: u64,
    budget: &Budget,
    opts: Options,
) -> TestResult {
    let mut r = TestResult {
        name: test.name.clone(),
        expected,
        got: None,
        class: Class::Incomplete,
        states: 0,
    };
    let m = Machine::new(test, opts);
    let o = match explore_within(&m, max_states, budget) {
        Ok(o) => o,
        Err(e) => {
            r.class = unsupported(e);
            return r;
        }
    };
    r.states = o.states;
    r.got = verdict(test.quant, &o);
    let (Some(exp), Some(got)) = (expected, r.got) else {
        r.class = if r.got.is_none() && o.memory_bound {
            Class::MemoryBound
        } else if expected.is_none() {
            Class::NoExpected
        } else {
            cut_short(&o)
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
            match explore_within(&weak, max_states, budget) {
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
                        cut_short(&w)
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

#[cfg(test)]
mod tests {
    //! Small tests in herd's format, written for these checks (not
    //! copies of catalogue tests), whose verdicts follow from the Arm
    //! ARM's rules for break-before-make with a broadcast TLBI.
    use super::*;
    use crate::litmus::machine::Action;
    use crate::litmus::parse::parse;
    use crate::litmus::search::replay;

    /// P0 invalidates x's entry, `DSB ISH`, `TLBI VAAE1IS`, `DSB ISH`,
    /// then sets a flag; P1 sees the flag and loads x. Once the TLBI is
    /// complete no CPU may translate x with the old entry: the load must
    /// fault. Forbidden: a TLBI that missed a CPU, or a DSB that did not
    /// wait for it, reaches it.
    const SHOOTDOWN: &str = "AArch64 shootdown
{
pte_x=(oa:phy_x);
0:X1=(oa:phy_x,valid:0); 0:X2=pte_x; 0:X3=x; 0:X8=z;
1:X3=x; 1:X8=z;
}
 P0              | P1             ;
 STR X1,[X2]     | LDR W7,[X8]    ;
 DSB ISH         | L0:            ;
 LSR X9,X3,#12   | LDR W4,[X3]    ;
 TLBI VAAE1IS,X9 |                ;
 DSB ISH         |                ;
 MOV W7,#1       |                ;
 STR W7,[X8]     |                ;
exists(1:X7=1 /\\ ~fault(P1:L0,x))
";

    fn run(text: &str) -> (Test, Outcome) {
        let t = parse(text).expect("test parses");
        let m = Machine::new(&t, Options::default());
        let o = explore(&m, 100_000).expect("test runs");
        (t, o)
    }

    #[test]
    fn completed_broadcast_tlbi_forbids_the_stale_translation() {
        let (t, o) = run(SHOOTDOWN);
        assert!(!o.incomplete);
        assert!(o.finals > 0);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Forbidden));
        let r = run_test(&t, Some(Kind::Forbidden), 100_000, Options::default());
        assert_eq!(r.class, Class::Agree);
    }

    #[test]
    fn without_the_tlbi_the_stale_translation_is_allowed() {
        // The same test without the TLBI: P1's TLB may hold x's old
        // entry (a speculative fill before P0's store) and use it after
        // the flag: the classic missing shootdown.
        let text = SHOOTDOWN.replace(" TLBI VAAE1IS,X9 |", " NOP             |");
        let (t, o) = run(&text);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Allowed));
    }

    #[test]
    fn a_tlbi_in_flight_may_not_have_reached_a_cpu_before_the_dsb() {
        // The flag is set before the DSB: P1 may see it while the TLBI
        // has not reached it yet, and use its cached entry. Allowed
        // staleness, reached only if the TLBI's arrival is a choice.
        let text = SHOOTDOWN.replace(
            " DSB ISH         |                ;\n MOV W7,#1",
            " MOV W6,#0       |                ;\n MOV W7,#1",
        );
        let (t, o) = run(&text);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Allowed));
        // The schedule, by hand: P1 fills x's entry, P0 runs to the flag
        // store with the TLBI still on its way, P1 reads the flag and
        // translates x with the entry it holds.
        let m = Machine::new(&t, Options::default());
        let x = t.syms.iter().position(|s| s == "x").unwrap() as u16;
        let mut s = vec![Action::Fill { cpu: 1, var: x }];
        s.extend([Action::Step(0); 7]);
        s.extend([Action::Step(1); 2]);
        let st = replay(&m, &s).unwrap();
        assert!(m.is_final(&st));
        assert!(m.eval(&st, &t.cond));
    }

    #[test]
    fn dsb_ish_completes_only_the_issuers_tlbis() {
        // P1 executes DSB ISH too, but it is P0's TLBI in flight: P1's
        // barrier does not wait for it, and P1 may still use its entry.
        let text = "AArch64 other-dsb
{
0:X1=(oa:phy_x,valid:0); 0:X2=pte_x; 0:X3=x; 0:X8=z;
1:X3=x; 1:X8=z;
}
 P0              | P1          ;
 STR X1,[X2]     | LDR W7,[X8] ;
 DSB ISH         | DSB ISH     ;
 LSR X9,X3,#12   | L0:         ;
 TLBI VAAE1IS,X9 | LDR W4,[X3] ;
 MOV W7,#1       |             ;
 STR W7,[X8]     |             ;
 DSB ISH         |             ;
exists(1:X7=1 /\\ ~fault(P1:L0,x))
";
        let (t, o) = run(text);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Allowed));
    }

    #[test]
    fn unreached_allowed_outcomes_are_sorted_by_the_no_tlbi_run() {
        // Allowed by Arm only through load-load reordering (MP with no
        // barrier on the reader): unreachable on sequentially
        // consistent memory, TLBI or not.
        let mp = "AArch64 mp-data
{
0:X1=x; 0:X2=y; 1:X1=x; 1:X2=y;
}
 P0          | P1          ;
 MOV W0,#1   | LDR W3,[X2] ;
 STR W0,[X1] | LDR W4,[X1] ;
 STR W0,[X2] |             ;
exists(1:X3=1 /\\ 1:X4=0)
";
        let t = parse(mp).unwrap();
        assert_eq!(
            run_test(&t, Some(Kind::Allowed), 100_000, Options::default()).class,
            Class::ScUnreachable
        );
        // The shootdown with an Allowed expectation: reachable once the
        // TLBI is removed, so tlbsim would be stronger.
        let t = parse(SHOOTDOWN).unwrap();
        assert_eq!(
            run_test(&t, Some(Kind::Allowed), 100_000, Options::default()).class,
            Class::Stronger
        );
        // And Forbidden reached is weaker.
        let text = SHOOTDOWN.replace(" TLBI VAAE1IS,X9 |", " NOP             |");
        let t = parse(&text).unwrap();
        assert_eq!(
            run_test(&t, Some(Kind::Forbidden), 100_000, Options::default()).class,
            Class::Weaker
        );
    }

    #[test]
    fn an_evicted_entry_is_walked_again() {
        // P1 remaps x to y's page with no TLBI. P0's first load caches
        // the old translation (x's page, 0); its second load sees the
        // new one (y's page, 1) only if the TLB dropped the entry in
        // between, which a TLB may do at any time.
        let text = "AArch64 evict
{
y=1;
0:X1=x; 1:X2=pte_x; 1:X3=(oa:phy_y);
}
 P0          | P1          ;
 LDR W2,[X1] | STR X3,[X2] ;
 LDR W4,[X1] |             ;
exists(0:X2=0 /\\ 0:X4=1)
";
        let (t, o) = run(text);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Allowed));
        let m = Machine::new(&t, Options::default());
        let x = t.syms.iter().position(|s| s == "x").unwrap() as u16;
        let s = [
            Action::Step(0),
            Action::Step(1),
            Action::Evict { cpu: 0, var: x },
            Action::Step(0),
        ];
        let st = replay(&m, &s).unwrap();
        assert!(m.is_final(&st) && m.eval(&st, &t.cond));
    }

    #[test]
    fn a_fault_without_handler_ends_the_thread_and_is_recorded() {
        let text = "AArch64 fault-ends
{
pte_x=(oa:phy_x,valid:0);
0:X1=x;
}
 P0          ;
 L0:         ;
 LDR W2,[X1] ;
 MOV W3,#1   ;
forall(fault(P0:L0,x,MMU:Translation) /\\ 0:X3=0)
";
        let (t, o) = run(text);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Required));
    }

    #[test]
    fn a_store_through_a_read_only_entry_takes_a_permission_fault() {
        let text = "AArch64 perm
{
pte_x=(oa:phy_x,db:0);
0:X1=x;
}
 P0          ;
 MOV W0,#1   ;
 L0:         ;
 STR W0,[X1] ;
forall(fault(P0:L0,x,MMU:Permission) /\\ x=0)
";
        let (t, o) = run(text);
        assert_eq!(verdict(t.quant, &o), Some(Kind::Required));
    }
}
