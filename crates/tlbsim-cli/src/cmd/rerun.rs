//! `tlbsim rerun`: runs again the configuration a `run --json` result
//! recorded (resolved profile, kernel, workload with its defaults, checker
//! settings, seed, time limit), with no experiment file, and says whether
//! the result is the recorded one.

use super::run::print_and_write;
use crate::files::{check_outputs_or_report, path_word, Console};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::sim::RunConfig;

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
}

/// Reruns the recorded configuration; exit 1 if the result differs from
/// the recorded one, 2 if the file is not a run result.
pub fn run(args: Args) -> ExitCode {
    let name = args.result.display().to_string();
    let recorded = match read(&args.result) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg: RunConfig = match serde_json::from_value(recorded.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {name}: `run`: {e}");
            return ExitCode::from(2);
        }
    };
    let inputs = [("the result file", args.result.clone())];
    if let Err(code) = check_outputs_or_report(&inputs, &[("--json", args.json.as_deref())]) {
        return code;
    }
    let console = Console::new(&[args.json.as_deref()]);
    console.line(&format!("# tlbsim rerun {}", path_word(&args.result)));
    let t0 = Instant::now();
    let out = tlbsim::sim::run(&cfg.into_experiment(), &Default::default());
    let host = t0.elapsed().as_secs_f64();
    let o = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = print_and_write(&o, host, args.per_cpu, args.json.as_deref());
    let same = serde_json::to_value(&o).ok().as_ref() == Some(&recorded);
    if same {
        console.line("rerun: identical to the recorded result");
        code
    } else {
        console.line("rerun: DIFFERS from the recorded result (another tlbsim version?)");
        ExitCode::FAILURE
    }
}

/// The `run` object of a result file.
fn read(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    match v.get_mut("run") {
        Some(run) => Ok(run.take()),
        None => Err("no `run` object: not a result of `tlbsim run --json`".into()),
    }
}
