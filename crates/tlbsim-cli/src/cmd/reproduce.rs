//! `tlbsim reproduce`: prints the library's reproduction rows
//! ([`tlbsim::reproduce::Plan`]) as a table and, if asked, a JSON array.

use super::report_page;
use crate::files::{check_outputs_or_report, write_or_report, Console};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use tlbsim::reproduce::{Acceptance, Plan, Row};

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
    if let Err(code) = report_page::prepare_or_report(args.report.as_deref()) {
        return code;
    }
    let page = args.report.as_ref().map(|d| d.join(report_page::INDEX));
    let outputs = [
        ("--json", args.json.as_deref()),
        ("--report", page.as_deref()),
    ];
    if let Err(code) = check_outputs_or_report(&[], &outputs) {
        return code;
    }
    let console = Console::new(&[args.json.as_deref()]);
    console.line(&format!(
        "{:<22} {:<48} {:>5} {:>10} {:>10} {:>8}  {:>7}",
        "experiment", "metric", "unit", "published", "simulated", "error", "host s"
    ));
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
    for r in &report.rows {
        console.line(&table_line(r));
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

/// A value of the table: `-` when not published.
pub(super) fn cell(v: f64) -> String {
    if v.is_nan() {
        "-".to_string()
    } else {
        format!("{v:.4}")
    }
}

/// One printed row.
fn table_line(r: &Row) -> String {
    let err = if r.error_pct.is_finite() {
        format!("{:+.1}%", r.error_pct)
    } else {
        "-".into()
    };
    let accept = match &r.accept {
        Some((what, Some(true))) => format!("   accept: ok ({what})"),
        Some((what, Some(false))) => format!("   accept: MISS ({what})"),
        Some((what, None)) => format!("   accept: - ({what})"),
        None => String::new(),
    };
    format!(
        "{:<22} {:<48} {:>5} {:>10} {:>10} {:>8}  {:>7.2}   checker: {}{}",
        r.experiment,
        r.metric,
        r.unit,
        cell(r.published),
        cell(r.simulated),
        err,
        r.host_s,
        r.checker,
        accept
    )
}

/// `acceptance: M of N criteria met[; missed: ...]`.
pub(super) fn summary(a: &Acceptance) -> String {
    let missed = if a.missed.is_empty() {
        String::new()
    } else {
        format!("; missed: {}", a.missed.join(", "))
    };
    format!("acceptance: {} of {} criteria met{missed}", a.met, a.total)
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
    if let Some((what, met)) = &r.accept {
        row["accept"] = json!({ "criterion": what, "met": met });
    }
    row
}
