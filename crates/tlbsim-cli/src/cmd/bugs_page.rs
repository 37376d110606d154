//! `tlbsim bugs --report DIR`: a page people can read, DIR/index.md: the
//! corpus's table between two markers (what README.md embeds, and a test
//! keeps current), then the host seconds each search took.
//!
//! The block between the markers is deterministic (schedules, not
//! seconds): the same build writes the same block on every host. The
//! host seconds below it are this run's.

use super::report_page::INDEX;
use crate::files::{path_word, write_atomic};
use std::fmt::Write;
use std::path::Path;
use tlbsim::bugs::search::Searched;
use tlbsim::bugs::{Bug, BugRun};
use tlbsim::kernel::registry::Search;

/// The line before the table (README.md's block starts with it).
pub const BUGS_BEGIN: &str = "<!-- bugs: written by `tlbsim bugs --report DIR` -->";
/// The line after it.
pub const BUGS_END: &str = "<!-- end of bugs -->";

/// Writes DIR/index.md whole or not at all; errors name the file.
pub fn write(dir: &Path, runs: &[(&Bug, BugRun)]) -> Result<(), String> {
    let mut page = String::new();
    let _ = writeln!(page, "# Linux's own TLB bugs, found again\n");
    let _ = writeln!(
        page,
        "`tlbsim bugs --report {}`: each bug's search on the buggy kernel, which must \
         break the declared invariant, then the same search on the kernel with the fix, \
         which must pass it. `tlbsim bugs --list` gives each search in full.\n",
        path_word(dir)
    );
    page.push_str(&block(runs));
    let _ = writeln!(
        page,
        "\n## Host seconds\n\nOf this run, on this host (they differ from run to run; \
         the table above does not):\n"
    );
    let _ = writeln!(
        page,
        "| bug | buggy kernel's search | fixed kernel's search |"
    );
    let _ = writeln!(page, "|---|---|---|");
    for (b, r) in runs {
        let _ = writeln!(
            page,
            "| {} | {:.1} s | {:.1} s |",
            b.id, r.buggy.host_s, r.fixed.host_s
        );
    }
    let path = dir.join(INDEX);
    write_atomic(&path, page.as_bytes())?;
    eprintln!("bugs: report in {}", path.display());
    Ok(())
}

/// The table between [`BUGS_BEGIN`] and [`BUGS_END`], markers included,
/// and the count of bugs found and fixes passed.
pub fn block(runs: &[(&Bug, BugRun)]) -> String {
    let mut s = format!("{BUGS_BEGIN}\n\n");
    s.push_str("| bug | fix | buggy kernel | breaks | found at | fixed kernel, same search |\n");
    s.push_str("|---|---|---|---|---|---|\n");
    for (b, r) in runs {
        let (buggy, _) = b.selectors();
        let (kind, budget) = kind(b);
        let breaks = r
            .buggy
            .invariant()
            .map_or("nothing".into(), |i| i.to_string());
        let found = match &r.buggy.failure {
            Some((i, _)) => format!("{kind} {i} of {budget}"),
            None => format!("NOT FOUND in {budget} {kind}s"),
        };
        let _ = writeln!(
            s,
            "| {} | {} | `{buggy}` | {breaks} | {found} | {} |",
            b.id,
            b.fix,
            fixed(&r.fixed, kind)
        );
    }
    let ok = runs.iter().filter(|(_, r)| r.ok()).count();
    let _ = writeln!(
        s,
        "\n{ok} of {} bugs found with their declared invariant and passed by their fixed kernel.\n\n{BUGS_END}",
        runs.len()
    );
    s
}

/// What `b`'s search counts (a schedule of the explorer with its
/// strategy, or a timing run) and how many it allows (0 if its entry is
/// broken).
pub fn kind(b: &Bug) -> (&'static str, u64) {
    match b.breaks().map(|x| x.search) {
        Ok(Search::Explore {
            strategy,
            schedules,
            ..
        }) => match strategy {
            tlbsim::kernel::registry::Strategy::Dpor => ("DPOR schedule", schedules),
            _ => ("schedule", schedules),
        },
        Ok(Search::Runs { seeds, .. }) => ("timing run", seeds.len() as u64),
        Err(_) => ("schedule", 0),
    }
}

/// The fixed kernel's verdict: `pass, 3000 schedules` (`complete` when the
/// search ran out of schedules to try), or where it failed.
fn fixed(s: &Searched, kind: &str) -> String {
    match (&s.failure, s.invariant()) {
        (None, _) if s.complete => format!("pass, {} {kind}s, complete", s.runs),
        (None, _) => format!("pass, {} {kind}s", s.runs),
        (Some((i, _)), Some(inv)) => format!("FAIL at {kind} {i}: {inv}"),
        (Some((i, _)), None) => format!("DEADLOCK at {kind} {i}"),
    }
}
