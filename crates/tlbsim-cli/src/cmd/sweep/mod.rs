//! `tlbsim sweep`: one experiment over CPU counts, policies, profiles and
//! optionally a workload parameter, written as a CSV.

use crate::files::{check_output_or_report, load_or_report, write_or_report};
use points::{build_jobs, check_jobs, check_names, parse_cpus_and_param, Job};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use table::{csv_header, csv_line};
use tlbsim::sim::{RunOptions, RunOutput, SimError};

mod points;
mod table;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    experiment: PathBuf,
    /// CPU counts, comma-separated ("profile": the profile's own count).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64,128,256")]
    cpus: Vec<String>,
    /// A parameter to sweep too: a workload parameter as NAME=V1,V2,...,
    /// or any key of the experiment file as SECTION.KEY=V1,V2,... (values
    /// in TOML syntax, e.g. tasks=1,2,4 or vm.count=1,2,4); it becomes a
    /// CSV column.
    #[arg(long)]
    param: Option<String>,
    /// TLB policies, comma-separated (`tlbsim policies` lists them).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "arm64-stock,arm64-skip-broadcast-v2,arm64-cpumask-tracking"
    )]
    policies: Vec<String>,
    /// Profiles, comma-separated: built-in names or profile files
    /// ending in .toml.
    #[arg(long, value_delimiter = ',', default_value = "ampere-32,ampere-2s")]
    profiles: Vec<String>,
    /// Output CSV file, or standard output if "-". A file is replaced
    /// whole or not at all (a symbolic link's target is replaced); a
    /// device or FIFO is written in place.
    #[arg(long)]
    csv: PathBuf,
    /// Set any key of the experiment file, as SECTION.KEY=VALUE (VALUE
    /// in TOML syntax, e.g. kernel.kpti=false, workload.iterations=500);
    /// repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
}

/// Runs every point of the sweep and writes the CSV in sweep order. Every
/// argument, the output and every point's configuration are checked
/// before the first run (exit code 2).
pub fn run(args: Args) -> ExitCode {
    let (cpus, param) = match parse_cpus_and_param(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (exp0, text) = match load_or_report(&args.experiment, &args.sets) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if let Err(code) = check_output_or_report("--csv", Some(&args.csv)) {
        return code;
    }
    if let Err(e) = check_names(&args.policies, &args.profiles) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let jobs = match build_jobs(&exp0, &args.profiles, &cpus, param.as_ref(), &args.policies) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let file = args.experiment.display().to_string();
    if let Err(e) = check_jobs(&jobs, &file, &text) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let results = run_jobs(&jobs);
    let mut out = csv_header(param.as_ref());
    // The workload's metrics become the last columns (named after the
    // first run's; every run of a sweep runs the same workload).
    let mut metric_names: Option<Vec<String>> = None;
    for (job, r) in jobs.iter().zip(results) {
        let o = match r {
            Ok(o) => o,
            Err(e) => {
                eprintln!(
                    "error: {}: {}",
                    job.label(),
                    e.located_with_sets(&file, &text, &args.sets)
                );
                return ExitCode::FAILURE;
            }
        };
        let names = metric_names.get_or_insert_with(|| {
            let v: Vec<String> = o.metrics.keys().cloned().collect();
            for m in &v {
                out.push_str(&format!(",{m}"));
            }
            out.push('\n');
            v
        });
        out.push_str(&csv_line(job, &o, names));
    }
    write_or_report(&args.csv, out.as_bytes())
}

/// Runs the jobs in parallel (each run is deterministic and independent),
/// reporting progress; the results in job order.
fn run_jobs(jobs: &[Job]) -> Vec<Result<RunOutput, SimError>> {
    use rayon::prelude::*;
    eprintln!(
        "sweep: {} runs on {} threads",
        jobs.len(),
        rayon::current_num_threads()
    );
    jobs.par_iter()
        .map(|job| {
            let t0 = Instant::now();
            let opts = RunOptions {
                seed: None,
                cpus: job.cpus,
            };
            let r = tlbsim::sim::run(&job.exp, &opts);
            eprintln!(
                "  {}: {} ({:.1} s host)",
                job.label(),
                match &r {
                    Ok(o) => format!("{:.6} s simulated", o.elapsed_ns as f64 / 1e9),
                    Err(_) => "failed".to_string(),
                },
                t0.elapsed().as_secs_f64()
            );
            r
        })
        .collect()
}
