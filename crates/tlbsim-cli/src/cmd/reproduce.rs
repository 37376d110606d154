//! `tlbsim reproduce`: prints the library's reproduction rows
//! ([`tlbsim::reproduce::Plan`]) as a table and, if asked, a JSON array.

use super::report_page;
use crate::files::{write_or_report, Console};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use tlbsim::reproduce::{Acceptance, Plan, Row, Verdict};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also write the rows as a JSON array to this file, or to standard
    /// output if "-" (the table then goes to standard error); written as
    /// `run --json` writes.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only experiments whose name contains this text.
    #[arg(long)]
    only: Option<String>,
    /// Exit with status 1 when any acceptance criterion is missed (for CI
    /// jobs that track the reproductions).
    #[arg(long)]
    strict: bool,
    /// Also write a page to this directory (created if needed): index.md,
    /// the table with the verdicts, and a figure per seed (seed000.svg,
    /// ...) of published vs simulated.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// Runs the selected reproductions and prints published vs simulated.
pub fn run(args: Args) -> ExitCode {
    let plan = match Plan::select(args.only.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: --only {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(code) = report_page::check_outputs(args.report.as_deref(), args.json.as_deref()) {
        return code;
    }
    let console = Console::new(&[args.json.as_deref()]);
    eprintln!(
        "reproduce: {} simulations on {} threads",
        plan.simulations(),
        rayon::current_num_threads()
    );
    let report = {
        let _bar =
            crate::progress::count("simulations", plan.simulations() as u64, |s| s.runs_done);
        plan.run()
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    for line in table(&report.rows) {
        console.line(&line);
    }
    console.line(&format!("\n{}", summary(&report.acceptance)));
    if let Err(code) =
        report_page::write_or_report(args.report.as_deref(), args.only.as_deref(), &report)
    {
        return code;
    }
    let written = match args.json {
        Some(j) => {
            let rows: Vec<Value> = report.rows.iter().map(json_row).collect();
            let bytes = serde_json::to_vec_pretty(&rows).expect("serialisable");
            write_or_report(&j, &bytes)
        }
        None => ExitCode::SUCCESS,
    };
    let a = &report.acceptance;
    if args.strict && a.met < a.total && written == ExitCode::SUCCESS {
        eprintln!(
            "reproduce --strict: {} of {} criteria missed",
            a.total - a.met,
            a.total
        );
        return ExitCode::FAILURE;
    }
    written
}

/// A value of the table ([`tlbsim::reproduce::num`]): `-` when not
/// published.
pub(super) fn cell(v: f64) -> String {
    tlbsim::reproduce::num(v)
}

/// The error column: `+5.4%`, or `-` when nothing is published.
pub(super) fn error_cell(r: &Row) -> String {
    if r.error_pct.is_finite() {
        format!("{:+.1}%", r.error_pct)
    } else {
        "-".into()
    }
}

/// A verdict in words: `ok`, `MISS` or `-` (not judgeable), the criterion,
/// and the simulated figures it judged.
pub(super) fn verdict_text(v: &Verdict) -> String {
    format!("{} ({}): {}", met_word(v), v.criterion, v.figures)
}

/// `ok`, `MISS`, or `-` when the criterion could not be judged.
pub(super) fn met_word(v: &Verdict) -> &'static str {
    match v.met {
        Some(true) => "ok",
        Some(false) => "MISS",
        None => "-",
    }
}

/// The printed table: a header, one line per row with each column as wide
/// as its widest cell, and after the row that closes a judged before/after
/// pair, its verdict on a line of its own (it judges the pair, so it
/// belongs to neither row). Host seconds are `-` on rows whose run an
/// earlier row reports, and on ratio rows.
fn table(rows: &[Row]) -> Vec<String> {
    let header = [
        "experiment",
        "metric",
        "unit",
        "published",
        "simulated",
        "error",
        "host s",
        "checker",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            let host = if r.host_s > 0.0 {
                format!("{:.2}", r.host_s)
            } else {
                "-".into()
            };
            [
                r.experiment.to_string(),
                r.metric.clone(),
                r.unit.to_string(),
                cell(r.published),
                cell(r.simulated),
                error_cell(r),
                host,
                r.checker.clone(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for c in &cells {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    let line = |c: &[&str]| {
        let mut s = String::new();
        for (i, (text, w)) in c.iter().zip(width).enumerate() {
            // Text columns left, numbers right; the last column unpadded.
            match i {
                0 | 1 => s.push_str(&format!("{text:<w$}  ")),
                7 => s.push_str(text),
                _ => s.push_str(&format!("{text:>w$}  ")),
            }
        }
        s
    };
    let mut out = vec![line(&header)];
    for (r, c) in rows.iter().zip(&cells) {
        out.push(line(&c.each_ref().map(String::as_str)));
        if let Some(v) = &r.accept {
            out.push(format!(
                "{:w$}  accept: {}",
                "",
                verdict_text(v),
                w = width[0]
            ));
        }
    }
    out
}

/// `acceptance: M of N criteria met`, then `; missed:` and each missed
/// pair on a line of its own.
pub(super) fn summary(a: &Acceptance) -> String {
    let mut s = format!("acceptance: {} of {} criteria met", a.met, a.total);
    if !a.missed.is_empty() {
        s.push_str("; missed:");
        for m in &a.missed {
            s.push_str("\n  ");
            s.push_str(m);
        }
    }
    s
}

/// One JSON row (no host time: the file is deterministic). Built with
/// `json!`, whose object keys are sorted.
fn json_row(r: &Row) -> Value {
    let num = |v: f64| {
        if v.is_finite() {
            json!(v)
        } else {
            Value::Null
        }
    };
    let mut row = json!({
        "experiment": r.experiment, "metric": r.metric, "unit": r.unit,
        "published": num(r.published), "simulated": num(r.simulated),
        "error_pct": num(r.error_pct), "source": r.source, "checker": r.checker,
    });
    if let Some(v) = &r.accept {
        row["accept"] = json!({ "criterion": v.criterion, "met": v.met, "figures": v.figures });
    }
    row
}
