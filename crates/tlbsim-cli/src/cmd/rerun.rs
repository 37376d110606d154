//! `tlbsim rerun`: runs again the configuration a `run --json` result
//! recorded (resolved profile, kernel, workload with its defaults, checker
//! settings, seed, time limit), with no experiment file, and says whether
//! the result is the recorded one.
//!
//! Exit codes: 0 the same result; 1 a different result (each changed field
//! named, old -> new) or a run that failed; 2 a file that is not a valid
//! result (not JSON, an unknown or missing key, a value this tlbsim
//! refuses), located by line and JSON path.

use super::run::print_and_write;
use crate::files::{check_outputs_or_report, path_word, Console};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::{CheckerConfig, KernelConfig, Profile, VmConfig, WorkloadConfig};
use tlbsim::driver::RunError;
use tlbsim::sim::{RunConfig, SimError};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A result written by `tlbsim run --json`.
    result: PathBuf,
    /// Write the new result as JSON to this file, or to standard output
    /// if "-" (the table and verdict then go to standard error); written
    /// as `run --json` writes.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print per-CPU rows even on large machines.
    #[arg(long)]
    per_cpu: bool,
    #[command(flatten)]
    bound: crate::bounds::WorkBound,
}

/// Changed fields listed by name before "and N more".
const MAX_LISTED: usize = 12;

/// Reruns the recorded configuration; exit 1 if the result differs from
/// the recorded one, 2 if the file is not a valid run result.
pub fn run(args: Args) -> ExitCode {
    let name = args.result.display().to_string();
    let max = tlbsim::config::limits::MAX_RESULT_FILE_BYTES;
    let text = match crate::input::read_limited(&args.result, max, "a result") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let rec = match parse(&name, &text) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let inputs = [("the result file", args.result.clone())];
    if let Err(code) = check_outputs_or_report(&inputs, &[("--json", args.json.as_deref())]) {
        return code;
    }
    let console = Console::new(&[args.json.as_deref()]);
    console.line(&format!("# tlbsim rerun {}", path_word(&args.result)));
    let mut exp = rec.config.clone().into_experiment();
    crate::files::read_workload_files(&mut exp);
    let t0 = Instant::now();
    let out = {
        let _bar = crate::progress::run(exp.experiment.max_sim_time_ns);
        crate::bounds::run(&exp, &Default::default(), &args.bound)
    };
    let host = t0.elapsed().as_secs_f64();
    let o = match out {
        Ok(o) => o,
        Err(e) => return failed(&e, &name, &text),
    };
    let code = print_and_write(&o, host, args.per_cpu, args.json.as_deref());
    let new = serde_json::to_value(&o).unwrap_or(Value::Null);
    let mut changes = Vec::new();
    diff("run", &rec.run, &new, &mut changes);
    if changes.is_empty() {
        console.line("rerun: identical to the recorded result");
        return code;
    }
    for line in differs(&changes, &rec.version) {
        console.line(&line);
    }
    ExitCode::FAILURE
}

/// The verdict lines of a result that differs in `changes` (JSON path,
/// recorded value, new value) from one recorded by tlbsim `version`.
fn differs(changes: &[(String, String, String)], version: &str) -> Vec<String> {
    let n = changes.len();
    let fields = if n == 1 { "field" } else { "fields" };
    let mut out = vec![format!(
        "rerun: DIFFERS from the recorded result in {n} {fields} (recorded -> now):"
    )];
    for (path, old, new) in changes.iter().take(MAX_LISTED) {
        out.push(format!("  {path}: {old} -> {new}"));
    }
    if n > MAX_LISTED {
        out.push(format!("  and {} more", n - MAX_LISTED));
    }
    let this = tlbsim::sim::VERSION;
    if version != this {
        out.push(format!(
            "rerun: the result was recorded by tlbsim {version}, this is tlbsim {this}: rerun it with tlbsim {version} to compare like with like"
        ));
    }
    out
}

/// A result file read back: the configuration to rerun, the recorded
/// `run` object, and the tlbsim version that wrote it.
struct Recorded {
    config: RunConfig,
    run: Value,
    version: String,
}

/// A `run --json` document: every key it has, and no other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    run: RunRecord,
    #[allow(dead_code)]
    elapsed_s: f64,
    #[allow(dead_code)]
    host: IgnoredAny,
}

/// The `run` object ([`tlbsim::sim::RunOutput`] serialised): the keys of
/// its configuration are read, the results only checked to be there.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunRecord {
    experiment: String,
    version: String,
    seed: u64,
    profile: Profile,
    kernel: KernelConfig,
    workload: WorkloadConfig,
    #[serde(default)]
    vm: Option<VmConfig>,
    max_sim_time_ns: u64,
    #[allow(dead_code)]
    elapsed_ns: u64,
    #[allow(dead_code)]
    stats: IgnoredAny,
    checker: CheckerRecord,
    #[allow(dead_code)]
    metrics: std::collections::BTreeMap<String, f64>,
}

/// The checker's report: its settings are read, its verdict checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckerRecord {
    enabled: bool,
    #[allow(dead_code)]
    verdict: String,
    #[allow(dead_code)]
    events_checked: u64,
    history: usize,
    speculative_walks: bool,
}

/// Reads the result file `name` whose text is `text`; an error names the
/// file, the line and the JSON path of what is wrong.
fn parse(name: &str, text: &str) -> Result<Recorded, String> {
    let raw: Value = serde_json::from_str(text)
        .map_err(|e| format!("{name}:{}: not JSON: {}", e.line(), bare(&e)))?;
    let de = &mut serde_json::Deserializer::from_str(text);
    let doc: Document = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        let what = "not a result of `tlbsim run --json`";
        match path.as_str() {
            "" | "." => format!("{name}:{}: {}: {what}", e.line(), bare(&e)),
            p => format!("{name}:{}: {p}: {}: {what}", e.line(), bare(&e)),
        }
    })?;
    let r = doc.run;
    let config = RunConfig {
        experiment: r.experiment,
        seed: r.seed,
        max_sim_time_ns: r.max_sim_time_ns,
        profile: r.profile,
        kernel: r.kernel,
        workload: r.workload,
        vm: r.vm,
        checker: CheckerConfig {
            enabled: r.checker.enabled,
            history: r.checker.history,
            speculative_walks: r.checker.speculative_walks,
        },
    };
    Ok(Recorded {
        config,
        run: raw.get("run").cloned().unwrap_or(Value::Null),
        version: r.version,
    })
}

/// A serde_json error's message without its " at line L column C" (the
/// line is given first).
fn bare(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Reports a rerun that failed with `e`: a value of the file this tlbsim
/// refuses is located in it (line and JSON path) and exits 2, as run
/// refuses bad input; a run that stopped (a violation) exits 1.
fn failed(e: &SimError, name: &str, text: &str) -> ExitCode {
    match e {
        // A run that outgrew tlbsim's limits was given too much.
        SimError::Run(RunError::Limit(_)) => {
            eprintln!("error: {name}: {e}");
            ExitCode::from(2)
        }
        SimError::Run(_) => {
            eprintln!("error: {name}: {e}");
            ExitCode::FAILURE
        }
        _ => {
            let at = json_path(e)
                .map(|p| match json_line(text, &p) {
                    Some(l) => format!("{name}:{l}: {p}"),
                    None => format!("{name}: {p}"),
                })
                .unwrap_or_else(|| name.to_string());
            // The JSON path names the field a field error is about.
            match e {
                SimError::Field { message, .. } => eprintln!("error: {at}: {message}"),
                _ => eprintln!("error: {at}: {e}"),
            }
            ExitCode::from(2)
        }
    }
}

/// The JSON path, in a result file, of the value `e` blames: a field of
/// `[kernel]`, `[workload]`, `[vm]`, `[checker]` is under `run`; a
/// profile's (`profile NAME: topology.cpus = 0 ...`) under `run.profile`.
fn json_path(e: &SimError) -> Option<String> {
    match e {
        SimError::Field { section, key, .. } => Some(match (section.as_str(), key.as_str()) {
            ("experiment", "name") => "run.experiment".to_string(),
            ("experiment", k) => format!("run.{k}"),
            // rerun sets the recorded CPU count again (a cut stays a cut).
            ("machine", k) => format!("run.profile.topology.{k}"),
            (s, k) => format!("run.{s}.{k}"),
        }),
        SimError::Config(m) => {
            let rest = m.strip_prefix("profile ")?.split_once(": ")?.1;
            let field = rest.split([' ', ',']).next()?;
            field.contains('.').then(|| format!("run.profile.{field}"))
        }
        _ => None,
    }
}

/// The line of the key at JSON `path` (`run.profile.topology.cpus`) in
/// `text`, found by looking for each key in turn after the previous one
/// (the result files `run --json` writes are pretty-printed, one key a
/// line); `None` when a key is not found.
fn json_line(text: &str, path: &str) -> Option<usize> {
    let mut at = 0;
    for key in path.split('.') {
        at += text[at..].find(&format!("\"{key}\":"))?;
    }
    Some(text[..at].matches('\n').count() + 1)
}

/// Appends to `out` every leaf where `new` differs from `old`, as (JSON
/// path, old, new), in the order of the keys (serde_json's maps are
/// sorted) and of array elements; a key or element one side lacks is
/// "(absent)".
fn diff(path: &str, old: &Value, new: &Value, out: &mut Vec<(String, String, String)>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff(&p, x, y, out),
                    (x, y) => out.push((p, shown(x), shown(y))),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let p = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff(&p, x, y, out),
                    (x, y) => out.push((p, shown(x), shown(y))),
                }
            }
        }
        (a, b) if a != b => out.push((path.to_string(), shown(Some(a)), shown(Some(b)))),
        _ => {}
    }
}

/// A value as one short piece of text.
fn shown(v: Option<&Value>) -> String {
    const MAX: usize = 60;
    let Some(v) = v else {
        return "(absent)".into();
    };
    let s = v.to_string();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_difference_names_each_leaf_in_key_order() {
        let old = json!({"b": 1, "a": {"x": [1, 2], "y": "s"}, "gone": true});
        let new = json!({"b": 2, "a": {"x": [1, 3, 4], "y": "s"}, "added": null});
        let mut out = Vec::new();
        diff("run", &old, &new, &mut out);
        let got: Vec<String> = out
            .iter()
            .map(|(p, a, b)| format!("{p}: {a} -> {b}"))
            .collect();
        assert_eq!(
            got,
            [
                "run.a.x[1]: 2 -> 3",
                "run.a.x[2]: (absent) -> 4",
                "run.added: (absent) -> null",
                "run.b: 1 -> 2",
                "run.gone: true -> (absent)",
            ]
        );
    }

    #[test]
    fn many_differences_are_cut_and_a_version_is_suggested_only_when_it_differs() {
        let changes: Vec<_> = (0..20)
            .map(|i| (format!("run.k{i:02}"), "1".to_string(), "2".to_string()))
            .collect();
        let same = differs(&changes, tlbsim::sim::VERSION);
        assert_eq!(same.len(), 1 + MAX_LISTED + 1);
        assert_eq!(same.last().unwrap(), "  and 8 more");
        assert!(!same
            .iter()
            .any(|l| l.contains("version") || l.contains("recorded by")));
        let other = differs(&changes[..1], "0.0.1");
        assert_eq!(
            other[0],
            "rerun: DIFFERS from the recorded result in 1 field (recorded -> now):"
        );
        assert!(
            other[2].starts_with("rerun: the result was recorded by tlbsim 0.0.1, this is tlbsim "),
            "{other:?}"
        );
    }

    #[test]
    fn json_paths_are_found_on_their_lines() {
        let text = "{\n  \"run\": {\n    \"profile\": {\n      \"topology\": {\n        \"cpus\": 0\n      }\n    }\n  }\n}\n";
        assert_eq!(json_line(text, "run.profile.topology.cpus"), Some(5));
        assert_eq!(json_line(text, "run.kernel"), None);
        let e = SimError::Config("profile ampere-32: topology.cpus = 0 (must be 1..=4096)".into());
        assert_eq!(json_path(&e).as_deref(), Some("run.profile.topology.cpus"));
    }
}
