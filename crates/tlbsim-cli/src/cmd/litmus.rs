//! `tlbsim litmus FILE|DIR`: runs herd AArch64 VMSA litmus tests on
//! tlbsim's hardware model and compares each verdict with the
//! catalogue's (`kinds.txt`). The model side is `tlbsim::litmus`; this
//! file finds the files, runs them in parallel and prints.

use crate::files::{check_outputs_or_report, why, write_or_report};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tlbsim::litmus::catalogue::{parse_kinds, Kind};
use tlbsim::litmus::classify::{run_test_within, Class, TestResult};
use tlbsim::litmus::machine::Options;
use tlbsim::litmus::parse::parse;
use tlbsim::litmus::search::Budget;

/// The default bound on distinct states per search: every catalogue
/// test that runs stays well below it (docs/validation.md).
const MAX_STATES: u64 = 2_000_000;
/// The largest `--max-states` accepted (a state costs ~100-200 bytes in
/// the store; `--max-memory` is the bound that protects the machine).
const MAX_STATES_LIMIT: u64 = 1_000_000_000;
/// The default `--max-memory`: 4 GiB, or half the machine's memory
/// (`MemTotal` in /proc/meminfo) when that is less.
const DEFAULT_MAX_MEMORY: u64 = 4 << 30;
/// The smallest `--max-memory` accepted.
const MIN_MAX_MEMORY: u64 = 1 << 20;
/// The environment variable naming the litmus collection: the folder
/// holding `aarch64-VMSA/tests` (`../shared/litmus` beside the checkout,
/// or a herdtools7 checkout's `catalogue/`).
pub const LITMUS_DIR_VAR: &str = "TLBSIM_LITMUS_DIR";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A `.litmus` file, or a directory of them (its `@all` lists the
    /// files when present; otherwise every `*.litmus` below it).
    /// Default: `$TLBSIM_LITMUS_DIR/aarch64-VMSA/tests`.
    pub path: Option<PathBuf>,
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
    /// it has no verdict (exit code 2).
    #[arg(long, default_value_t = MAX_STATES)]
    pub max_states: u64,
    /// Bound on the memory the searches hold at once (visited states and
    /// stacks of every test running), e.g. `512M`, `4G` (K, M, G, T:
    /// powers of 1024). A test that reaches it stops with no verdict
    /// (exit code 2). Default: 4G, or half the machine's memory if less.
    #[arg(long, value_parser = parse_size)]
    pub max_memory: Option<u64>,
    /// Run with every TLBI a no-op (the weakest TLB maintenance): the
    /// Forbidden outcomes then reached are the verdicts that rest on
    /// tlbsim's TLBI and DSB semantics.
    #[arg(long)]
    pub without_tlbi: bool,
}

/// `4G`, `512M`, `1.5G`, `4096`, `2GiB`: bytes (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        u => return Err(format!("unknown unit {u:?} (K, M, G or T)")),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 512M, 4G)"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    let bytes = bytes as u64;
    if bytes < MIN_MAX_MEMORY {
        return Err(format!("{s:?} is less than the smallest bound, 1M"));
    }
    Ok(bytes)
}

/// The machine's memory (`MemTotal` of /proc/meminfo), if readable.
fn mem_total() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let l = t.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `bytes` as a person reads a size.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// One test file's result: read and run, or why not.
struct Row {
    file: String,
    result: Result<TestResult, String>,
}

/// The path to run: the argument, or the catalogue under
/// `$TLBSIM_LITMUS_DIR`.
fn resolve_path(arg: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = arg {
        return Ok(p);
    }
    match std::env::var_os(LITMUS_DIR_VAR) {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d).join("aarch64-VMSA/tests")),
        _ => Err(format!(
            "no PATH given and {LITMUS_DIR_VAR} is not set: give a .litmus file or directory, \
             or set {LITMUS_DIR_VAR} to the litmus collection (the folder holding \
             aarch64-VMSA/tests: ../shared/litmus beside the checkout, or a herdtools7 \
             checkout's catalogue/)"
        )),
    }
}

pub fn run(a: Args) -> ExitCode {
    if !(1..=MAX_STATES_LIMIT).contains(&a.max_states) {
        eprintln!("error: --max-states must be between 1 and {MAX_STATES_LIMIT}");
        return ExitCode::from(2);
    }
    let max_memory = a.max_memory.unwrap_or_else(|| {
        mem_total().map_or(DEFAULT_MAX_MEMORY, |t| DEFAULT_MAX_MEMORY.min(t / 2))
    });
    let opts = Options {
        tlbi: !a.without_tlbi,
    };
    let path = match resolve_path(a.path.clone()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (root, files) = match list(&path) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let kinds_path = a.kinds.clone().unwrap_or_else(|| root.join("kinds.txt"));
    let mut inputs: Vec<(&str, PathBuf)> = files
        .iter()
        .map(|f| ("the litmus test", f.clone()))
        .collect();
    inputs.push(("the kinds file", kinds_path));
    if let Err(c) = check_outputs_or_report(&inputs, &[("--csv", a.csv.as_deref())]) {
        return c;
    }
    let kinds = match read_kinds(a.kinds.as_deref(), &root) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let budget = Budget::new(max_memory);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let rows: Vec<Row> = std::thread::scope(|s| {
        s.spawn(|| show_progress(&budget, &done, files.len(), &stop));
        let rows = files
            .par_iter()
            .map(|f| {
                let r = run_file(f, &root, &kinds, a.max_states, &budget, opts);
                done.fetch_add(1, Relaxed);
                r
            })
            .collect();
        stop.store(true, Relaxed);
        rows
    });
    let text = summary(&path, &rows, a.verbose);
    out!("{text}");
    if let Some(csv) = &a.csv {
        if write_or_report(csv, csv_text(&rows).as_bytes()) != ExitCode::SUCCESS {
            return ExitCode::FAILURE;
        }
    }
    exit_code(&rows, files.len() == 1, a.max_states, max_memory)
}

/// The expected verdicts: `--kinds`, or `kinds.txt` in `root` if there.
fn read_kinds(flag: Option<&Path>, root: &Path) -> Result<BTreeMap<String, Kind>, String> {
    let path = flag.map_or_else(|| root.join("kinds.txt"), Path::to_path_buf);
    match std::fs::read_to_string(&path) {
        Ok(t) => parse_kinds(&t).map_err(|(line, m)| format!("{}:{line}: {m}", path.display())),
        Err(e) if flag.is_none() && e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("{}: cannot read: {}", path.display(), why(&e))),
    }
}

/// The exit code, with a line on standard error for each test that
/// gave no verdict for a bound: 1 if a verdict disagrees with the
/// catalogue (tlbsim weaker); else 2 if a test hit `--max-states` or
/// `--max-memory` (given too much, as `run`'s limits), or if the one
/// file run is malformed (bad input); else 0. In a directory run a
/// malformed or unsupported file is reported and skipped: it does not
/// change the exit code.
fn exit_code(rows: &[Row], single: bool, max_states: u64, max_memory: u64) -> ExitCode {
    let mut limit = false;
    for r in rows {
        let Ok(t) = &r.result else { continue };
        match t.class {
            Class::MemoryBound => eprintln!(
                "error: {}: test {} stopped at the memory bound (--max-memory {}) after {} states \
                 explored, with no verdict; the bound is shared by the tests running at once \
                 (RAYON_NUM_THREADS): raise it, or run the test alone",
                r.file,
                t.name,
                size(max_memory),
                t.states
            ),
            Class::Incomplete => eprintln!(
                "error: {}: test {} stopped at the state bound (--max-states {max_states}) after \
                 {} states explored, with no verdict",
                r.file, t.name, t.states
            ),
            _ => continue,
        }
        limit = true;
    }
    let weaker = rows
        .iter()
        .filter(|r| matches!(&r.result, Ok(t) if t.class == Class::Weaker))
        .count();
    if weaker > 0 {
        eprintln!(
            "error: {weaker} test{} reached an outcome the catalogue forbids (tlbsim weaker; listed above)",
            if weaker == 1 { "" } else { "s" }
        );
    }
    let weaker = weaker > 0;
    let malformed = rows.iter().filter_map(|r| r.result.as_ref().err());
    let mut malformed = malformed.peekable();
    let malformed = malformed.peek().is_some();
    if single {
        for r in rows {
            if let Err(e) = &r.result {
                eprintln!("error: {e}");
            }
        }
    }
    if weaker {
        ExitCode::FAILURE
    } else if limit || (single && malformed) {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// Shows the run's progress on standard error until `stop`: a spinner
/// on a terminal; off one, a line every 10 s once the run has taken 5 s
/// (short runs print nothing).
fn show_progress(budget: &Budget, done: &AtomicUsize, total: usize, stop: &AtomicBool) {
    let t0 = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        b.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
        b
    });
    let mut next_line = Duration::from_secs(5);
    while !stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let line = format!(
            "litmus: {}/{total} files, {} states explored, {} of {} held, {:.0} s",
            done.load(Relaxed),
            budget.states_explored(),
            size(budget.held_bytes()),
            size(budget.limit_bytes()),
            t0.elapsed().as_secs_f64()
        );
        match &bar {
            Some(b) => {
                b.set_message(line);
                b.tick();
            }
            None if t0.elapsed() >= next_line => {
                eprintln!("{line}");
                next_line += Duration::from_secs(10);
            }
            None => {}
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// The test files under `path`, in a fixed order, and the directory
/// holding `kinds.txt`.
fn list(path: &Path) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let meta = std::fs::metadata(path).map_err(|e| {
        format!(
            "{}: {} (the herdtools7 catalogue lives in ../shared/litmus/aarch64-VMSA/tests beside \
             the checkout; {LITMUS_DIR_VAR} can name the collection elsewhere)",
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

fn run_file(
    f: &Path,
    root: &Path,
    kinds: &BTreeMap<String, Kind>,
    max: u64,
    budget: &Budget,
    opts: Options,
) -> Row {
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
    let name = text.split_whitespace().nth(1).unwrap_or(&file);
    let result = match parse(&text) {
        Ok(t) => Ok(run_test_within(
            &t,
            kinds.get(&t.name).copied(),
            max,
            budget,
            opts,
        )),
        Err(e) => match e.unsupported {
            Some(u) => Ok(TestResult {
                name: name.to_string(),
                expected: kinds.get(name).copied(),
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
        ok.len() - unsupported - count(&|c| matches!(c, Class::Incomplete | Class::MemoryBound))
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
        (Class::MemoryBound, "incomplete (memory bound)"),
        (Class::NoExpected, "no expected verdict"),
    ];
    for (c, label) in &rows_of {
        let _ = writeln!(s, "  {:<58} {:>5}", label, count(&|x| x == c));
    }
    s + &details(rows, verbose)
}

/// The malformed files' count and errors, then a line per test that
/// disagrees or is incomplete (every test with `verbose`).
fn details(rows: &[Row], verbose: bool) -> String {
    let mut s = String::new();
    let errors: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.result.as_ref().err().map(String::as_str))
        .collect();
    let _ = writeln!(
        s,
        "  {:<58} {:>5}",
        "malformed (parse error; skipped)",
        errors.len()
    );
    for e in &errors {
        let _ = writeln!(s, "malformed: {e}");
    }
    for r in rows {
        let Ok(t) = &r.result else { continue };
        let show = verbose
            || matches!(
                t.class,
                Class::Weaker | Class::Stronger | Class::Incomplete | Class::MemoryBound
            );
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
