//! `tlbsim check ... --export-litmus FILE`: the failing schedule written
//! as a herd AArch64 litmus test (issue 19 item 4; docs/validation.md,
//! "Counterexamples as litmus tests"). The library builds the test
//! (`tlbsim::litmus::export`); this writes it, whole or not at all, after
//! checking on tlbsim's own litmus runner that its condition is reachable
//! and that the fixed variant's is not.

use crate::files::{write_or_report, STDOUT};
use std::path::Path;
use std::process::ExitCode;
use tlbsim::config::Experiment;
use tlbsim::litmus::ast::Test;
use tlbsim::litmus::export::{capture, plan, CannotExport};
use tlbsim::litmus::{machine, parse, print, search};

/// Refuses an `--export-litmus` path that is standard output (the report
/// goes there); exit code 2. (`check` checks the path as its other
/// outputs, with `files::check_outputs`.)
pub fn check_path(path: Option<&Path>) -> Result<(), ExitCode> {
    if path.is_some_and(|p| p.as_os_str() == STDOUT) {
        eprintln!("error: --export-litmus: give a file name (standard output carries the report)");
        return Err(ExitCode::from(2));
    }
    Ok(())
}

/// What the comment block names besides the violation.
pub struct Source<'a> {
    /// The experiment file as given.
    pub file: &'a Path,
    /// The command that replays the schedule.
    pub replay: &'a str,
}

/// States of a litmus search here: the exported tests have two threads
/// of a dozen instructions (a few thousand states).
const MAX_STATES: u64 = 2_000_000;

/// Is `test`'s condition reachable on tlbsim's litmus runner? Printed and
/// parsed again first, so what is judged is what the file holds.
fn reachable(test: &Test) -> Result<bool, String> {
    let text = print::print(test, "").map_err(|e| e.to_string())?;
    let t = parse::parse(&text).map_err(|e| format!("the printed test does not parse: {e:?}"))?;
    let m = machine::Machine::new(&t, machine::Options::default());
    let o = search::explore(&m, MAX_STATES).map_err(|e| format!("{e:?}"))?;
    if o.incomplete && !o.some {
        return Err(format!("the search stopped at {MAX_STATES} states"));
    }
    Ok(o.some)
}

/// The test's name: `tlbsim-POLICY-EXPERIMENT`, in herd's letters.
fn test_name(exp: &Experiment) -> String {
    format!("tlbsim-{}-{}", exp.kernel.tlb_policy, exp.experiment.name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "+-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The litmus text of `schedule`'s violation, or why there is none.
pub fn litmus_text(
    exp: &Experiment,
    cpus: Option<u32>,
    schedule: &str,
    src: &Source<'_>,
) -> Result<String, CannotExport> {
    let cap = capture(exp, cpus, schedule)?;
    let p = plan(&cap)?;
    let name = test_name(exp);
    let test = p.test(&name);
    let fixed = p.fixed(&name);
    let bad = |e: String| CannotExport(format!("the test built does not run here: {e}"));
    let (got, fixed_got) = (
        reachable(&test).map_err(bad)?,
        reachable(&fixed).map_err(bad)?,
    );
    if !got || fixed_got {
        return Err(CannotExport(format!(
            "the test built does not capture the violation on tlbsim's litmus runner \
             (condition {}; with flush_tlb_page()'s sequence added, {})",
            if got { "reachable" } else { "unreachable" },
            if fixed_got {
                "reachable"
            } else {
                "unreachable"
            },
        )));
    }
    let v = &cap.violation;
    let comment = format!(
        "Exported by tlbsim check --export-litmus from an explorer counterexample.\n\
         experiment: {} ({}), profile {}, seed {}\n\
         policy: {}, allocator: {}\n\
         invariant: {}\n{}\n\
         replay: {}\n\n{}\n\n\
         On tlbsim (tlbsim litmus FILE): the condition is reachable. With Linux's\n\
         flush_tlb_page() sequence (DSB ISHST; TLBI VALE1IS; DSB ISH) added to P0 and\n\
         every TLBI made shareable, it is not. herd7 -variant vmsa FILE is expected to\n\
         find it reachable (Allowed) too: P0's TLB maintenance does not remove the old\n\
         translation before the access at L0.",
        exp.experiment.name,
        src.file.display(),
        exp.experiment.profile,
        exp.experiment.seed,
        exp.kernel.tlb_policy,
        exp.kernel.asid_allocator,
        v.invariant,
        v.detail,
        src.replay,
        p.legend(),
    );
    print::print(&test, &comment).map_err(|e| CannotExport(e.to_string()))
}

/// Writes `schedule`'s violation to `path` as a litmus test; prints where,
/// or (exit 2) why not.
pub fn write(
    exp: &Experiment,
    cpus: Option<u32>,
    schedule: &str,
    src: &Source<'_>,
    path: &Path,
) -> ExitCode {
    match litmus_text(exp, cpus, schedule, src) {
        Ok(text) => {
            let code = write_or_report(path, text.as_bytes());
            if code == ExitCode::SUCCESS {
                eprintln!("litmus test written to {}", path.display());
            }
            code
        }
        Err(e) => {
            eprintln!("error: --export-litmus: {e}");
            ExitCode::from(2)
        }
    }
}
