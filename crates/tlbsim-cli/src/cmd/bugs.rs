//! `tlbsim bugs`: runs the catalogue of Linux's own TLB bugs
//! ([`tlbsim::bugs`]): each bug's search on the buggy kernel, which must
//! break the declared invariant, then on the fixed kernel, which must
//! pass it. Prints a table and, if asked, a JSON array and a page
//! ([`super::bugs_page`]).

use super::{bugs_page, report_page};
use crate::files::{write_or_report, Console};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use tlbsim::bugs::search::Searched;
use tlbsim::bugs::{select, Bug, BugRun};
use tlbsim::kernel::registry::{Search, Strategy};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also write the results as a JSON array to this file, or to standard
    /// output if "-" (the table then goes to standard error); written as
    /// `run --json` writes. It holds no host times (deterministic).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only bugs whose id, fix commit or buggy kernel contains this text.
    #[arg(long)]
    only: Option<String>,
    /// List the catalogue (id, fix, versions, kernels, search) without
    /// running anything.
    #[arg(long)]
    list: bool,
    /// Also write a page people can read, DIR/index.md: the table, whose
    /// block between two markers is deterministic (schedules, no host
    /// times; README.md embeds it), then each search's host seconds.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// Runs the selected bugs; exit status 1 when any is not found or its
/// fixed kernel fails.
pub fn run(args: Args) -> ExitCode {
    let bugs = select(args.only.as_deref());
    if bugs.is_empty() {
        eprintln!(
            "error: --only {:?} matches no bug (known: {})",
            args.only.unwrap_or_default(),
            select(None)
                .iter()
                .map(|b| b.id)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return ExitCode::from(2);
    }
    if args.list {
        for b in &bugs {
            list(b);
        }
        return ExitCode::SUCCESS;
    }
    if let Err(code) = report_page::check_outputs(args.report.as_deref(), args.json.as_deref()) {
        return code;
    }
    let console = Console::new(&[args.json.as_deref()]);
    let budget: u64 = bugs.iter().map(|b| 2 * schedules(b)).sum();
    let mut runs = Vec::new();
    {
        let bar = crate::progress::count("schedules (at most)", budget, |s| s.schedules);
        for b in &bugs {
            match tlbsim::bugs::run(b) {
                Ok(r) => {
                    bar.eprintln(&format!("{}: {}", b.id, outcome(&r)));
                    runs.push((*b, r));
                }
                Err(e) => {
                    eprintln!("error: bug {}: {e}", b.id);
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    for line in table(&runs) {
        console.line(&line);
    }
    let ok = runs.iter().filter(|(_, r)| r.ok()).count();
    console.line(&format!(
        "\n{ok} of {} bugs found with their declared invariant and passed by their fixed kernel",
        runs.len()
    ));
    if let Some(dir) = &args.report {
        if let Err(e) = bugs_page::write(dir, &runs) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let written = match args.json {
        Some(j) => {
            let rows: Vec<Value> = runs.iter().map(|(b, r)| json_row(b, r)).collect();
            let bytes = serde_json::to_vec_pretty(&rows).expect("serialisable");
            write_or_report(&j, &bytes)
        }
        None => ExitCode::SUCCESS,
    };
    if ok < runs.len() && written == ExitCode::SUCCESS {
        return ExitCode::FAILURE;
    }
    written
}

/// The schedules (or runs) of `b`'s search, 0 if its entry is broken.
fn schedules(b: &Bug) -> u64 {
    bugs_page::kind(b).1
}

/// `--list`: one bug's catalogue entry.
fn list(b: &Bug) {
    let (buggy, fixed) = b.selectors();
    outln!("{}  (fix {} \"{}\")", b.id, b.fix, b.subject);
    outln!(
        "  {} {}; introduced by {}",
        b.arch,
        b.versions,
        b.introduced.unwrap_or("(unknown)")
    );
    outln!("  {}", b.what);
    match b.breaks() {
        Ok(br) => outln!(
            "  buggy: {buggy}; fixed: {fixed}; breaks {}; search: {}",
            br.invariant,
            search_text(&br.search)
        ),
        Err(e) => outln!("  buggy: {buggy}; fixed: {fixed}; error: {e}"),
    }
}

/// A search in words: `random, 2000 schedules from seed 1 (experiments/x.toml)`.
fn search_text(s: &Search) -> String {
    let (name, _) = s.experiment().text();
    match *s {
        Search::Explore {
            strategy,
            schedules,
            seed,
            max_actions,
            speculation,
            ..
        } => format!(
            "{} {schedules} schedules from seed {seed}, at most {max_actions} actions, \
             {speculation} speculative fills ({name})",
            strategy_name(strategy)
        ),
        Search::Runs { seeds, .. } => format!("timing runs, seeds {seeds:?} ({name})"),
    }
}

fn strategy_name(s: Strategy) -> String {
    match s {
        Strategy::Random => "random".into(),
        Strategy::Pct(d) => format!("pct-{d}"),
        Strategy::Exhaustive(b) => format!("exhaustive (bound {b})"),
        Strategy::Dpor => "dpor".into(),
    }
}

/// One line: found at which schedule, and the fixed kernel's verdict.
fn outcome(r: &BugRun) -> String {
    format!("{}; fixed: {}", found_text(r), fixed_text(&r.fixed))
}

fn found_text(r: &BugRun) -> String {
    match (&r.buggy.failure, r.buggy.invariant()) {
        (None, _) => format!("NOT FOUND in {} schedules", r.buggy.runs),
        (Some((i, _)), Some(inv)) if inv == r.declared => {
            format!("found {inv} at schedule {i}")
        }
        (Some((i, _)), Some(inv)) => {
            format!(
                "WRONG INVARIANT at schedule {i}: {inv} (declared {})",
                r.declared
            )
        }
        (Some((i, _)), None) => format!("DEADLOCK at schedule {i}"),
    }
}

fn fixed_text(s: &Searched) -> String {
    match (&s.failure, s.invariant()) {
        (None, _) if s.complete => format!("pass, complete ({} schedules)", s.runs),
        (None, _) => format!("pass ({} schedules)", s.runs),
        (Some((i, _)), Some(inv)) => format!("FAIL at schedule {i}: {inv}"),
        (Some((i, _)), None) => format!("DEADLOCK at schedule {i}"),
    }
}

/// The printed table, each column as wide as its widest cell.
fn table(runs: &[(&Bug, BugRun)]) -> Vec<String> {
    let header = [
        "bug",
        "fix",
        "buggy kernel",
        "found",
        "host s",
        "fixed kernel",
        "fixed",
    ];
    let cells: Vec<[String; 7]> = runs
        .iter()
        .map(|(b, r)| {
            let (buggy, fixed) = b.selectors();
            [
                b.id.to_string(),
                b.fix.to_string(),
                buggy,
                found_text(r),
                format!("{:.1}", r.buggy.host_s),
                fixed,
                format!("{}, {:.1} s", fixed_text(&r.fixed), r.fixed.host_s),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for c in &cells {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    let line = |c: [&str; 7]| {
        let mut s = String::new();
        for (i, (text, w)) in c.iter().zip(width).enumerate() {
            match i {
                4 => s.push_str(&format!("{text:>w$}  ")),
                6 => s.push_str(text),
                _ => s.push_str(&format!("{text:<w$}  ")),
            }
        }
        s
    };
    let mut out = vec![line(header)];
    out.extend(cells.iter().map(|c| line(c.each_ref().map(String::as_str))));
    out
}

/// One JSON object per bug (keys sorted by `json!`), no host times.
fn json_row(b: &Bug, r: &BugRun) -> Value {
    let (buggy, fixed) = b.selectors();
    let searched = |s: &Searched| {
        json!({
            "failure_at": s.failure.as_ref().map(|(i, _)| *i),
            "invariant": s.invariant().map(|i| i.name()),
            "deadlock": s.failure.is_some() && s.invariant().is_none(),
            "schedules": s.runs,
            "complete": s.complete,
        })
    };
    let search = b
        .breaks()
        .map(|x| search_text(&x.search))
        .unwrap_or_default();
    json!({
        "id": b.id, "fix": b.fix, "subject": b.subject, "introduced": b.introduced,
        "versions": b.versions, "arch": b.arch.to_string(), "what": b.what,
        "buggy_kernel": buggy, "fixed_kernel": fixed,
        "declared_invariant": r.declared.name(), "search": search,
        "found": r.found(), "buggy": searched(&r.buggy), "fixed": searched(&r.fixed),
    })
}
