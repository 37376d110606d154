//! `tlbsim run`: one experiment, printed as a perf-stat-like table.

use crate::files::{
    check_outputs_or_report, experiment_inputs, load_or_report, path_word, set_args, set_profile,
    shell_word, write_or_report, Console, Overrides,
};
use crate::report;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::Experiment;
use tlbsim::driver::RunError;
use tlbsim::sim::{RunOptions, RunOutput, SimError};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    experiment: PathBuf,
    /// Root seed (overrides [experiment] seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Number of CPUs (overrides the profile).
    #[arg(long)]
    cpus: Option<u32>,
    /// TLB policy (overrides [kernel] tlb_policy).
    #[arg(long)]
    policy: Option<String>,
    /// Machine profile (overrides [experiment] profile): a built-in
    /// name, or a profile file ending in .toml (see `profiles --show`).
    #[arg(long)]
    profile: Option<String>,
    /// Write the full result as JSON to this file, or to standard output
    /// if "-" (the table then goes to standard error). A file is replaced
    /// whole or not at all (a symbolic link's target is replaced); a
    /// device or FIFO is written in place.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print per-CPU rows even on large machines.
    #[arg(long)]
    per_cpu: bool,
    /// Set any key of the experiment file, as SECTION.KEY=VALUE (VALUE
    /// in TOML syntax, e.g. kernel.kpti=false, workload.iterations=500);
    /// repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    #[command(flatten)]
    bound: crate::bounds::WorkBound,
}

/// Runs the experiment, prints its table and writes the JSON if asked.
pub fn run(args: Args) -> ExitCode {
    let ov = Overrides {
        policy: args.policy,
        profile: args.profile,
        sets: args.sets,
    };
    let sets = ov.sets.clone();
    let (mut exp, text) = match load_or_report(&args.experiment, &ov.sets) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let opts = RunOptions {
        seed: args.seed,
        cpus: args.cpus,
    };
    let inputs = experiment_inputs(&args.experiment, &exp, ov.profile.as_deref());
    let replay = match apply(&mut exp, &args.experiment, &opts, ov) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let Err(code) = check_outputs_or_report(&inputs, &[("--json", args.json.as_deref())]) {
        return code;
    }
    Console::new(&[args.json.as_deref()]).line(&format!("# {replay}"));
    let t0 = Instant::now();
    let out = {
        let _bar = crate::progress::run(exp.experiment.max_sim_time_ns);
        crate::bounds::run(&exp, &opts, &args.bound)
    };
    let host = t0.elapsed().as_secs_f64();
    match out {
        Ok(o) => print_and_write(&o, host, args.per_cpu, args.json.as_deref()),
        Err(e) => {
            let file = args.experiment.display().to_string();
            eprintln!("error: {}", e.located_with_sets(&file, &text, &sets));
            match e {
                SimError::Run(RunError::Violation(_)) => {
                    eprintln!("replay: {replay}");
                    ExitCode::FAILURE
                }
                // A run that outgrew tlbsim's limits was given too much.
                SimError::Run(RunError::Limit(_)) => ExitCode::from(2),
                SimError::Run(_) => ExitCode::FAILURE,
                SimError::Config(_) | SimError::Field { .. } | SimError::Flag { .. } => {
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// Applies the command-line overrides to `exp` and returns the command
/// that replays the run (seed included); exit code 2 on a bad profile.
fn apply(
    exp: &mut Experiment,
    path: &Path,
    opts: &RunOptions,
    ov: Overrides,
) -> Result<String, ExitCode> {
    let seed_used = opts.seed.unwrap_or(exp.experiment.seed);
    let mut replay = format!("tlbsim run {} --seed {seed_used}", path_word(path));
    replay.push_str(&set_args(&ov.sets));
    if let Some(c) = opts.cpus {
        replay.push_str(&format!(" --cpus {c}"));
    }
    if let Some(p) = ov.policy {
        replay.push_str(&format!(" --policy {}", shell_word(&p)));
        exp.kernel.tlb_policy = p;
    }
    if let Some(p) = ov.profile {
        replay.push_str(&format!(" --profile {}", shell_word(&p)));
        // A --profile file is relative to the working directory.
        if let Err(e) = set_profile(exp, &p, Path::new("")) {
            eprintln!("error: --profile {p}: {e}");
            return Err(ExitCode::from(2));
        }
    }
    Ok(replay)
}

/// Prints the table of a finished run (on standard error if `json` is
/// `-`) and writes its JSON to `json`.
pub fn print_and_write(o: &RunOutput, host_s: f64, per_cpu: bool, json: Option<&Path>) -> ExitCode {
    Console::new(&[json]).print(&report::table(o, host_s, per_cpu));
    match json {
        Some(j) => {
            let v = report::json(o, host_s);
            let bytes = serde_json::to_vec_pretty(&v).expect("serialisable");
            write_or_report(j, &bytes)
        }
        None => ExitCode::SUCCESS,
    }
}
