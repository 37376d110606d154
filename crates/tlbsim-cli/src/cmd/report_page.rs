//! `tlbsim reproduce --report DIR`: a page people can read, DIR/index.md
//! (the published-vs-simulated table with the acceptance verdicts, as
//! `reproduce` prints it, and the sources), and one SVG figure per seed
//! (`seed000.svg`, ...): published beside simulated, row by row.
//!
//! The page leaves out host seconds, so that the same build gives the
//! same page and figures on every run.

use super::reproduce::met_word;
use crate::chart::{bar_chart_svg, BarRow};
use crate::files::{
    check_output, check_outputs_or_report, is_stdout, path_word, shell_word, write_atomic,
};
use std::fmt::Write;
use std::path::Path;
use std::process::ExitCode;
use tlbsim::reproduce::{Report, Row};

/// The page's file name in the report directory.
pub const INDEX: &str = "index.md";

/// Makes ready the report directory `dir` before any run, so that a bad
/// one is found before the work: creates it (and its parents) if needed,
/// and checks that a file can be created in it. Errors name `--report`
/// and the path; `-` (standard output) is refused: the page is several
/// files.
pub fn prepare(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    if is_stdout(dir) {
        return Err(format!(
            "--report {shown}: a directory is needed (the page and its figures are several files)"
        ));
    }
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(format!("--report {shown}: not a directory")),
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(dir).map_err(|e| {
            let why = crate::files::why(&e);
            format!("--report {shown}: cannot create the directory: {why}")
        })?,
    }
    check_output("--report", &dir.join(INDEX))
}

/// [`prepare`] on `dir` if given, printing the error; exit code 2.
pub fn prepare_or_report(dir: Option<&Path>) -> Result<(), ExitCode> {
    match dir.map(prepare) {
        Some(Err(e)) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(2))
        }
        _ => Ok(()),
    }
}

/// Before any work: the report directory `report` made ready
/// ([`prepare`]), then `--json`'s file and the page checked
/// ([`check_outputs_or_report`]); the error is printed, exit code 2.
pub fn check_outputs(report: Option<&Path>, json: Option<&Path>) -> Result<(), ExitCode> {
    prepare_or_report(report)?;
    let page = report.map(|d| d.join(INDEX));
    check_outputs_or_report(&[], &[("--json", json), ("--report", page.as_deref())])
}

/// Writes the figures, then the page (so that a page always has its
/// figures), each whole or not at all. `command` is the command line
/// shown on the page. Errors name the file.
pub fn write(dir: &Path, report: &Report, command: &str) -> Result<(), String> {
    let seeds = by_seed(&report.rows);
    for (seed, rows) in &seeds {
        let bars: Vec<BarRow> = rows.iter().map(|r| bar(r)).collect();
        let title = format!("{seed}: published vs simulated");
        let svg = bar_chart_svg(&title, &bars)?;
        write_atomic(&dir.join(format!("{seed}.svg")), svg.as_bytes())?;
    }
    let page = page(report, &seeds, command);
    write_atomic(&dir.join(INDEX), page.as_bytes())?;
    eprintln!("reproduce: report in {}", dir.join(INDEX).display());
    Ok(())
}

/// [`write`] on `dir` if given (from `reproduce --report DIR --only
/// ONLY`), printing the error; exit code 1.
pub fn write_or_report(
    dir: Option<&Path>,
    only: Option<&str>,
    report: &Report,
) -> Result<(), ExitCode> {
    let command = |d: &Path| {
        let only = only.map_or(String::new(), |o| format!(" --only {}", shell_word(o)));
        format!("tlbsim reproduce{only} --report {}", path_word(d))
    };
    match dir.map(|d| write(d, report, &command(d))) {
        Some(Err(e)) => {
            eprintln!("error: {e}");
            Err(ExitCode::FAILURE)
        }
        _ => Ok(()),
    }
}

/// The seed of an experiment: its name up to the first `-` (`seed000`).
fn seed_of(experiment: &str) -> &str {
    experiment.split('-').next().unwrap_or(experiment)
}

/// The rows grouped by seed, seeds and rows in table order.
fn by_seed(rows: &[Row]) -> Vec<(&str, Vec<&Row>)> {
    let mut seeds: Vec<(&str, Vec<&Row>)> = Vec::new();
    for r in rows {
        let seed = seed_of(r.experiment);
        match seeds.iter_mut().find(|(s, _)| *s == seed) {
            Some((_, v)) => v.push(r),
            None => seeds.push((seed, vec![r])),
        }
    }
    seeds
}

/// The verdict of a row's criterion in words, empty if it has none.
fn verdict(r: &Row) -> String {
    r.accept
        .as_ref()
        .map_or(String::new(), super::reproduce::verdict_text)
}

/// The bar-chart row of `r`: its metric and verdict as the label.
fn bar(r: &Row) -> BarRow {
    // The pair's verdict and criterion; the bars show the figures.
    let accept = match &r.accept {
        None => String::new(),
        Some(v) => format!("   [pair: {}, {}]", met_word(v), v.criterion),
    };
    BarRow {
        label: format!("{}: {}{accept}", r.experiment, r.metric),
        published: r.published,
        simulated: r.simulated,
        unit: r.unit.to_string(),
        // A ratio's bars start at 1 (no change), so that 1.094 and 1.009
        // differ as much as the changes they stand for.
        baseline: if r.unit == "x" { 1.0 } else { 0.0 },
        missed: r.accept.as_ref().is_some_and(|v| v.met == Some(false)),
    }
}

/// `s` as the text of a Markdown table cell (`|` escaped, no newline).
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The markers around [`criteria_table`] on the page; README.md carries
/// the same block between the same markers, and a test keeps the two equal.
pub const CRITERIA_BEGIN: &str = "<!-- criteria: written by `tlbsim reproduce --report DIR` -->";
/// See [`CRITERIA_BEGIN`].
pub const CRITERIA_END: &str = "<!-- end of criteria -->";

/// One Markdown line per judged before/after pair: the experiment, the
/// pair, the criterion, the simulated figures it judged and the verdict;
/// between [`CRITERIA_BEGIN`] and [`CRITERIA_END`], ending in the summary.
pub fn criteria_table(report: &Report) -> String {
    let mut s = format!("{CRITERIA_BEGIN}\n\n");
    s.push_str("| experiment | compared | criterion | simulated | verdict |\n");
    s.push_str("|---|---|---|---|---|\n");
    for r in &report.rows {
        let Some(v) = &r.accept else { continue };
        let met = match v.met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "-",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {met} |",
            md(r.experiment),
            md(&v.pair),
            md(&v.criterion),
            md(&v.figures),
        );
    }
    let a = &report.acceptance;
    let _ = writeln!(s, "\n{} of {} criteria met.\n", a.met, a.total);
    s.push_str(CRITERIA_END);
    s.push('\n');
    s
}

/// The Markdown page: the command, the criteria, the table of every row
/// (each verdict on a line after the pair it judges), a figure per seed,
/// the sources.
fn page(report: &Report, seeds: &[(&str, Vec<&Row>)], command: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# tlbsim reproduce: published vs simulated\n");
    let _ = writeln!(
        s,
        "Written by `{command}` (tlbsim {}). Host seconds are left out, so that the page is the same on every run.\n",
        env!("CARGO_PKG_VERSION")
    );
    s.push_str(&criteria_table(report));
    s.push_str("\n## Every row\n\n");
    s.push_str("| experiment | metric | unit | published | simulated | error | checker |\n");
    s.push_str("|---|---|---|--:|--:|--:|---|\n");
    for r in &report.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            md(r.experiment),
            md(&r.metric),
            md(r.unit),
            super::reproduce::cell(r.published),
            super::reproduce::cell(r.simulated),
            super::reproduce::error_cell(r),
            md(&r.checker),
        );
        if r.accept.is_some() {
            let v = verdict(r).replace("MISS", "**MISS**");
            let _ = writeln!(s, "| | accept: {} | | | | | |", md(&v));
        }
    }
    for (seed, rows) in seeds {
        let _ = writeln!(
            s,
            "\n## {seed}\n\n![{seed}: published vs simulated]({seed}.svg)\n"
        );
        let _ = writeln!(s, "Sources:\n");
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for r in rows {
            if !seen.contains(&(r.experiment, r.source)) {
                seen.push((r.experiment, r.source));
                let _ = writeln!(s, "- {}: {}", r.experiment, r.source);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{by_seed, page, seed_of};
    use tlbsim::reproduce::{Acceptance, Report, Row, Verdict};

    fn row(experiment: &'static str, published: f64, accept: Option<bool>) -> Row {
        Row {
            experiment,
            metric: "m | n".into(),
            unit: "s",
            published,
            simulated: 2.0,
            error_pct: (2.0 - published) / published * 100.0,
            host_s: 1.5,
            checker: "pass".into(),
            source: "src",
            accept: accept.map(|a| Verdict {
                pair: "m: a -> b".into(),
                criterion: "crit".into(),
                met: Some(a),
                figures: "before 2".into(),
            }),
        }
    }

    #[test]
    fn rows_are_grouped_by_seed_in_table_order() {
        assert_eq!(seed_of("seed003-vms"), "seed003");
        let rows = [
            row("seed001-a", 1.0, None),
            row("seed000-b", 1.0, None),
            row("seed001-c", f64::NAN, Some(false)),
        ];
        let seeds = by_seed(&rows);
        let names: Vec<_> = seeds.iter().map(|(s, v)| (*s, v.len())).collect();
        assert_eq!(names, [("seed001", 2), ("seed000", 1)]);
        let report = Report {
            acceptance: Acceptance::of(&rows),
            rows: rows.to_vec(),
        };
        let p = page(&report, &seeds, "tlbsim reproduce --report r");
        // The verdict on a line of its own after the row closing the pair.
        assert!(
            p.contains(
                "| seed001-c | m \\| n | s | - | 2.000 | - | pass |\n\
                 | | accept: **MISS** (crit): before 2 | | | | | |\n"
            ),
            "{p}"
        );
        assert!(
            p.contains("| seed001-c | m: a -> b | crit | before 2 | **missed** |"),
            "{p}"
        );
        assert!(p.contains("\n0 of 1 criteria met.\n"), "{p}");
        assert!(p.contains("![seed000: published vs simulated](seed000.svg)"));
        assert!(!p.contains("1.5"), "no host seconds: {p}");
    }
}
