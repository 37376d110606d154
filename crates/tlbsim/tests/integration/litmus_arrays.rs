//! Litmus tests with array locations (issue 35, item 3): herd's own
//! array tests (`tests/fixtures/litmus/`, copied from herdtools7 with
//! herd's verdicts in `kinds.txt`) and small tests written here, run on
//! tlbsim's litmus machine. The verdicts written here are herd's, derived
//! by reasoning from its AArch64 VMSA model, as each test's comment says:
//! an array only changes which byte of a variable's page an access
//! names, so a test keeps the verdict of the scalar test it mirrors.

use std::path::Path;
use tlbsim::litmus::ast::{Loc, Test, Val};
use tlbsim::litmus::catalogue::{parse_kinds, Kind};
use tlbsim::litmus::classify::{run_test, Class};
use tlbsim::litmus::machine::{Machine, Options};
use tlbsim::litmus::parse::{parse, Unsupported};
use tlbsim::litmus::search::explore;

const MAX_STATES: u64 = 2_000_000;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litmus")
}

fn class_of(text: &str, expected: Kind) -> Class {
    let t = parse(text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    run_test(&t, Some(expected), MAX_STATES, Options::default()).class
}

/// Every herd array test in the fixtures runs to a verdict: herd's where
/// tlbsim models what decides it, and otherwise the documented classes
/// of the scalar catalogue (docs/validation.md): coRR over two elements
/// needs two loads reordered (SC-unreachable), and S+tlbi-sync's
/// permission fault after the flag needs the old read-only translation,
/// which tlbsim's completed TLBI removed (its scalar siblings,
/// `S+shoot+*_mmufault_db`, are "stronger" too).
#[test]
fn herd_s_array_tests_run_to_a_verdict() {
    let kinds =
        parse_kinds(&std::fs::read_to_string(fixtures().join("kinds.txt")).unwrap()).unwrap();
    let want = |name: &str| match name {
        "coRR-pte9-plus8" | "coRR+posw0w4+BBM" => Class::ScUnreachable,
        "S+tlbi-sync.ishptedb1p+popl" => Class::Stronger,
        _ => Class::Agree,
    };
    let mut n = 0;
    for (name, &kind) in &kinds {
        let text = std::fs::read_to_string(fixtures().join(format!("{name}.litmus"))).unwrap();
        let t = parse(&text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(!t.arrays.is_empty(), "{name} declares no array");
        let r = run_test(&t, Some(kind), MAX_STATES, Options::default());
        assert_eq!(r.class, want(name), "{name}: {r:?}");
        n += 1;
    }
    assert_eq!(n, 11);
}

/// Message passing over two elements of one array. herd: with `DMB ISH`
/// on both sides Forbidden (MP+dmbs; the elements are two locations);
/// without, Allowed (the stores or the loads reorder), which tlbsim's
/// sequentially consistent memory never does: SC-unreachable, as the
/// scalar MP of herd-aarch64.
const MP: &str = "AArch64 MP+dmbs-array
{
int a[2]={0,0};
0:X1=a; 1:X1=a;
}
 P0             | P1             ;
 MOV W0,#1      | LDR W2,[X1,#4] ;
 STR W0,[X1]    | DMB ISH        ;
 DMB ISH        | LDR W3,[X1]    ;
 STR W0,[X1,#4] |                ;
exists (1:X2=1 /\\ 1:X3=0)
";

#[test]
fn message_passing_over_two_elements() {
    assert_eq!(class_of(MP, Kind::Forbidden), Class::Agree);
    let plain = MP.replace("DMB ISH", "NOP    ");
    assert_eq!(class_of(&plain, Kind::Allowed), Class::ScUnreachable);
    // The outcome where the flag is seen and the data too is reached:
    // the elements are distinct locations, each keeping its own value.
    let seen = MP.replace("1:X3=0", "1:X3=1");
    assert_eq!(class_of(&seen, Kind::Allowed), Class::Agree);
}

/// Break-before-make over arrays: P0 invalidates the descriptor of
/// array `x`, completes a broadcast TLBI with `DSB ISH`, then sets
/// element 1 of flag array `f`; P1 sees the flag, `DSB ISH; ISB`, and
/// loads `x[1]`. herd: Forbidden not to fault (the catalogue's
/// D15347-MP+shoot+DSB-ISB); without the TLBI, Allowed (P1's TLB may
/// keep the entry it filled before P0's store): the TLBI of the array's
/// page reaches every element.
const SHOOT: &str = "AArch64 shoot-array
{
int x[2]={5,6};
int f[2];
0:X1=(oa:phy_x,valid:0); 0:X2=pte_x; 0:X3=x; 0:X8=f;
1:X3=x; 1:X8=f;
}
 P0              | P1             ;
 STR X1,[X2]     | LDR W7,[X8,#4] ;
 DSB ISH         | DSB ISH        ;
 LSR X9,X3,#12   | ISB            ;
 TLBI VAAE1IS,X9 | L0:            ;
 DSB ISH         | LDR W4,[X3,#4] ;
 MOV W7,#1       |                ;
 STR W7,[X8,#4]  |                ;
exists (1:X7=1 /\\ ~fault(P1:L0,x))
";

#[test]
fn a_tlbi_of_the_array_s_page_covers_every_element() {
    assert_eq!(class_of(SHOOT, Kind::Forbidden), Class::Agree);
    let noshoot = SHOOT.replace("TLBI VAAE1IS,X9", "NOP            ");
    assert_eq!(class_of(&noshoot, Kind::Allowed), Class::Agree);
    // The stale load reads the element it names, x[1] = 6.
    let stale = noshoot.replace("~fault(P1:L0,x))", "1:X4=6)");
    assert_eq!(class_of(&stale, Kind::Allowed), Class::Agree);
    let wrong = noshoot.replace("~fault(P1:L0,x))", "1:X4=5)");
    assert_eq!(class_of(&wrong, Kind::Forbidden), Class::Agree);
}

/// A descriptor remapped to another array's page: the same byte offset
/// of that page, its element of the same index (herd: `PA(x)` becomes
/// `PA(y)`; `x + 8` translates to `y + 8`). One thread, so Required.
#[test]
fn a_remapped_array_reads_the_other_array_s_element() {
    let text = "AArch64 remap-array
{
int x[3]={1,2,3};
int y[3]={5,6,7};
0:X1=(oa:phy_y); 0:X2=pte_x; 0:X3=x; 0:X5=2;
}
 P0                     ;
 STR X1,[X2]            ;
 DSB ISH                ;
 LSR X9,X3,#12          ;
 TLBI VAAE1IS,X9        ;
 DSB ISH                ;
 ISB                    ;
 LDR W4,[X3,X5,LSL #2]  ;
 MOV W6,#9              ;
 STR W6,[X3,#4]         ;
forall (0:X4=7 /\\ y={5,9,7} /\\ x={1,2,3})
";
    assert_eq!(class_of(text, Kind::Required), Class::Agree);
}

/// The run of `text` stops with an unsupported array access whose
/// message holds `want`.
fn refused(text: &str, want: &str) {
    let t = parse(text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let e = explore(&Machine::new(&t, Options::default()), MAX_STATES).unwrap_err();
    assert_eq!(e.why, Unsupported::ArrayLocation, "{e:?}");
    assert!(e.message.contains(want), "{want:?} not in {:?}", e.message);
}

fn one(init: &str, instr: &str) -> String {
    format!("AArch64 T\n{{\n{init}\n}}\n P0 ;\n {instr} ;\nexists (0:X2=0)\n")
}

/// What the model does not give meaning to is refused with the line
/// of the access, not run nor panicked on.
#[test]
fn accesses_the_model_does_not_run_are_refused_with_their_line() {
    let x = "int x[3]; 0:X1=x; 0:X3=3";
    refused(
        &one(x, "LDR W2,[X1,#12]"),
        "line 6: 4-byte access at x+12: out of the bounds of x, 3 elements of 4 bytes",
    );
    refused(&one(x, "LDR W2,[X1,X3,LSL #2]"), "out of the bounds of x");
    refused(
        &one(x, "LDR W2,[X1,#2]"),
        "line 6: 4-byte access at x+2: between two elements of x (4-byte int)",
    );
    refused(
        &one(x, "LDR X2,[X1,#4]"),
        "line 6: 8-byte access at x+4: x[1] is a 4-byte int (mixed-size access)",
    );
    refused(
        &one(x, "LDR W2,[X1,#-4]"),
        "line 6: address x+0 moved by -4 bytes leaves x's 4096-byte page",
    );
    // x's page remapped to scalar y's: byte 4 of y is no location.
    refused(
        &one(
            "int x[2]; y=1; 0:X1=x; [PTE(x)]=(oa:PA(y))",
            "LDR W2,[X1,#4]",
        ),
        "x+4 translates to y+4): y is not an array",
    );
    // A scalar keeps its old refusal of an offset.
    let t = parse(&one("0:X1=y", "LDR W2,[X1,#4]")).unwrap();
    let e = explore(&Machine::new(&t, Options::default()), MAX_STATES).unwrap_err();
    assert_eq!(e.why, Unsupported::ValueArithmetic, "{e:?}");
}

/// `ADD`/`SUB` move an element's address; `SXTW` sign-extends the
/// index register (herd's `[X0,W1,SXTW]` of LDR03, with a negative
/// index here).
#[test]
fn address_arithmetic_moves_within_the_array() {
    let text = "AArch64 arith
{
int64_t v[4]={10,11,12,13};
0:X1=v; 0:X2=-1;
}
 P0                     ;
 ADD X3,X1,#24          ;
 LDR X4,[X3]            ;
 SUB X3,X3,#8           ;
 LDR X5,[X3,W2,SXTW #3] ;
forall (0:X4=13 /\\ 0:X5=11 /\\ 0:X3=v[2])
";
    assert_eq!(class_of(text, Kind::Required), Class::Agree);
    let t: Test = parse(text).unwrap();
    assert!(t
        .init
        .contains(&(Loc::Reg(0, 1), Val::Va(t.arrays[0].var, 0))));
}
