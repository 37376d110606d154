//! `tlbsim litmus FILE|DIR`: runs herd AArch64 VMSA litmus tests on
//! tlbsim's hardware model and compares each verdict with the
//! catalogue's (`kinds.txt`). The model side is `tlbsim::litmus`; this
//! file finds the files, runs them in parallel and prints.

use crate::files::{check_outputs_or_report, why, write_or_report};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tlbsim::litmus::catalogue::{parse_kinds, Kind};
use tlbsim::litmus::classify::{run_test, Class, TestResult};
use tlbsim::litmus::machine::Options;
use tlbsim::litmus::parse::parse;

/// The default bound on distinct states per search: every catalogue
/// test that runs stays well below it (docs/validation.md).
const MAX_STATES: u64 = 2_000_000;
/// The largest `--max-states` accepted: a visited state takes a few
/// hundred bytes, so this keeps one search within a few GiB.
const MAX_STATES_LIMIT: u64 = 10_000_000;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A `.litmus` file, or a directory of them (its `@all` lists the
    /// files when present; otherwise every `*.litmus` below it).
    pub path: PathBuf,
    /// The expected verdicts (`NAME Allowed|Forbidden|Required` a line);
    /// default: `kinds.txt` in the directory (or the file's directory).
    #[arg(long)]
    pub kinds: Option<PathBuf>,
    /// Print one line per test.
    #[arg(long)]
    pub verbose: bool,
    /// Write one row per test to this CSV file (whole or not at all).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Bound on the distinct states of one search; a test that reaches
    /// it is reported incomplete.
    #[arg(long, default_value_t = MAX_STATES)]
    pub max_states: u64,
    /// Run with every TLBI a no-op (the weakest TLB maintenance): the
    /// Forbidden outcomes then reached are the verdicts that rest on
    /// tlbsim's TLBI and DSB semantics.
    #[arg(long)]
    pub without_tlbi: bool,
}

/// One test file's result: read and run, or why not.
struct Row {
    file: String,
    result: Result<TestResult, String>,
}

pub fn run(a: Args) -> ExitCode {
    if !(1..=MAX_STATES_LIMIT).contains(&a.max_states) {
        eprintln!("error: --max-states must be between 1 and {MAX_STATES_LIMIT}");
        return ExitCode::from(2);
    }
    let opts = Options {
        tlbi: !a.without_tlbi,
    };
    let (root, files) = match list(&a.path) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kinds_path = a.kinds.clone().unwrap_or_else(|| root.join("kinds.txt"));
    let mut inputs: Vec<(&str, PathBuf)> = files
        .iter()
        .map(|f| ("the litmus test", f.clone()))
        .collect();
    inputs.push(("the kinds file", kinds_path.clone()));
    if let Err(c) = check_outputs_or_report(&inputs, &[("--csv", a.csv.as_deref())]) {
        return c;
    }
    let kinds = match std::fs::read_to_string(&kinds_path) {
        Ok(t) => match parse_kinds(&t) {
            Ok(k) => k,
            Err((line, m)) => {
                eprintln!("error: {}:{line}: {m}", kinds_path.display());
                return ExitCode::FAILURE;
            }
        },
        Err(e) if a.kinds.is_none() && e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            eprintln!("error: {}: cannot read: {}", kinds_path.display(), why(&e));
            return ExitCode::FAILURE;
        }
    };
    let rows: Vec<Row> = files
        .par_iter()
        .map(|f| run_file(f, &root, &kinds, a.max_states, opts))
        .collect();
    let text = summary(&a.path, &rows, a.verbose);
    out!("{text}");
    if let Some(csv) = &a.csv {
        if write_or_report(csv, csv_text(&rows).as_bytes()) != ExitCode::SUCCESS {
            return ExitCode::FAILURE;
        }
    }
    let bad = rows.iter().any(|r| match &r.result {
        Err(_) => true,
        Ok(t) => t.class == Class::Weaker,
    });
    if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The test files under `path`, in a fixed order, and the directory
/// holding `kinds.txt`.
fn list(path: &Path) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let meta = std::fs::metadata(path).map_err(|e| {
        format!(
            "{}: {} (the herdtools7 catalogue lives in ../shared/litmus/aarch64-VMSA/tests beside the checkout)",
            path.display(),
            why(&e)
        )
    })?;
    if meta.is_file() {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        return Ok((dir, vec![path.to_path_buf()]));
    }
    let all = path.join("@all");
    let mut files = Vec::new();
    if let Ok(t) = std::fs::read_to_string(&all) {
        for l in t
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            files.push(path.join(l));
        }
    } else {
        walk(path, &mut files).map_err(|e| format!("{}: {}", path.display(), why(&e)))?;
        files.sort();
    }
    if files.is_empty() {
        return Err(format!("{}: no .litmus files", path.display()));
    }
    Ok((path.to_path_buf(), files))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "litmus") {
            out.push(p);
        }
    }
    Ok(())
}

fn run_file(f: &Path, root: &Path, kinds: &BTreeMap<String, Kind>, max: u64, opts: Options) -> Row {
    let file = f.strip_prefix(root).unwrap_or(f).display().to_string();
    let text = match std::fs::read_to_string(f) {
        Ok(t) => t,
        Err(e) => {
            return Row {
                result: Err(format!("{}: cannot read: {}", f.display(), why(&e))),
                file,
            }
        }
    };
    let result = match parse(&text) {
        Ok(t) => Ok(run_test(&t, kinds.get(&t.name).copied(), max, opts)),
        Err(e) => match e.unsupported {
            Some(u) => Ok(TestResult {
                name: text.split_whitespace().nth(1).unwrap_or(&file).to_string(),
                expected: None,
                got: None,
                class: Class::Unsupported(u, format!("line {}: {}", e.line, e.message)),
                states: 0,
            }),
            None => Err(format!("{}:{}: {}", f.display(), e.line, e.message)),
        },
    };
    Row { file, result }
}

fn kind(k: Option<Kind>) -> &'static str {
    k.map_or("-", Kind::name)
}

/// The summary table, the disagreements and, with `verbose`, a line per
/// test.
fn summary(path: &Path, rows: &[Row], verbose: bool) -> String {
    let mut s = String::new();
    let ok: Vec<&TestResult> = rows.iter().filter_map(|r| r.result.as_ref().ok()).collect();
    let count = |c: &dyn Fn(&Class) -> bool| ok.iter().filter(|t| c(&t.class)).count();
    let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &ok {
        if let Class::Unsupported(u, _) = &t.class {
            *by_reason.entry(u.describe()).or_default() += 1;
        }
    }
    let unsupported: usize = by_reason.values().sum();
    let agree_by = |k: Kind| {
        ok.iter()
            .filter(|t| t.class == Class::Agree && t.expected == Some(k))
            .count()
    };
    let _ = writeln!(
        s,
        "litmus: {} test files from {}",
        rows.len(),
        path.display()
    );
    let _ = writeln!(
        s,
        "  {:<58} {:>5}",
        "run to a verdict",
        ok.len() - unsupported - count(&|c| *c == Class::Incomplete)
    );
    let _ = writeln!(s, "  {:<58} {:>5}", "unsupported", unsupported);
    for (why, n) in &by_reason {
        let _ = writeln!(s, "    {:<56} {:>5}", why, n);
    }
    let _ = writeln!(
        s,
        "  {:<58} {:>5}",
        format!(
            "agree (Allowed {}, Forbidden {}, Required {})",
            agree_by(Kind::Allowed),
            agree_by(Kind::Forbidden),
            agree_by(Kind::Required)
        ),
        count(&|c| *c == Class::Agree)
    );
    let rows_of = [
        (Class::ScUnreachable, "Allowed, SC-unreachable by design"),
        (Class::Weaker, "disagree: Forbidden reached (tlbsim weaker)"),
        (
            Class::Stronger,
            "disagree: Allowed staleness unreached (stronger)",
        ),
        (Class::Incomplete, "incomplete (state bound)"),
        (Class::NoExpected, "no expected verdict"),
    ];
    for (c, label) in &rows_of {
        let _ = writeln!(s, "  {:<58} {:>5}", label, count(&|x| x == c));
    }
    let errors: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.result.as_ref().err().map(String::as_str))
        .collect();
    let _ = writeln!(s, "  {:<58} {:>5}", "malformed (parse error)", errors.len());
    for e in &errors {
        let _ = writeln!(s, "error: {e}");
    }
    for r in rows {
        let Ok(t) = &r.result else { continue };
        let show =
            verbose || matches!(t.class, Class::Weaker | Class::Stronger | Class::Incomplete);
        if show {
            let _ = writeln!(s, "{}", line(r, t));
        }
    }
    s
}

fn line(r: &Row, t: &TestResult) -> String {
    let detail = match &t.class {
        Class::Unsupported(_, m) => format!(": {m}"),
        _ => String::new(),
    };
    format!(
        "{:<14} {:<50} expected {:<9} tlbsim {:<9} states {}{detail}  [{}]",
        t.class.name(),
        t.name,
        kind(t.expected),
        kind(t.got),
        t.states,
        r.file
    )
}

fn csv_text(rows: &[Row]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record([
        "file", "name", "expected", "tlbsim", "class", "states", "detail",
    ]);
    for r in rows {
        let rec = match &r.result {
            Ok(t) => [
                r.file.clone(),
                t.name.clone(),
                kind(t.expected).to_string(),
                kind(t.got).to_string(),
                t.class.name().to_string(),
                t.states.to_string(),
                match &t.class {
                    Class::Unsupported(_, m) => m.clone(),
                    _ => String::new(),
                },
            ],
            Err(e) => [
                r.file.clone(),
                String::new(),
                String::new(),
                String::new(),
                "malformed".to_string(),
                "0".to_string(),
                e.clone(),
            ],
        };
        let _ = w.write_record(&rec);
    }
    String::from_utf8(w.into_inner().expect("in-memory writer")).expect("UTF-8 fields")
}
