//! `tlbsim sweep`: one experiment over CPU counts, policies, profiles,
//! optionally a workload parameter and seeds, written as a CSV; finished
//! points kept in a directory (`--resume`) so that a killed sweep resumes,
//! and split into shards (`--shard`) that `tlbsim merge` joins.
//!
//! `points` parses the arguments into points; `table` makes the CSV and
//! the summary; `store` keeps finished points; `lock` keeps two sweeps
//! from running the same points in one directory at once.

use crate::files::{check_outputs, experiment_inputs, load, profile_file, write_atomic};
use points::{build_jobs, check_jobs, check_names, parse_plan, Job, Plan};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use store::{Manifest, Store};
use table::Row;
use tlbsim::config::Experiment;
use tlbsim::sim::SimError;

mod lock;
mod points;
pub mod store;
pub mod table;

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
    /// Run every point once per seed: A..B (inclusive) or S1,S2,...; the
    /// CSV has one row per point and seed (column `seed`), the runs of a
    /// point together. Without it each point runs with the experiment's
    /// seed.
    #[arg(long, value_name = "A..B|S1,S2,...")]
    seeds: Option<String>,
    /// Output CSV file, or standard output if "-". A file is replaced
    /// whole or not at all (a symbolic link's target is replaced); a
    /// device or FIFO is written in place. Required, except with --shard.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Also write a summary CSV ("-": standard output): one row per point
    /// over its seeds, with the mean and sample standard deviation of
    /// each number column (like `perf stat -r`).
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// Also write the CSV's rows as a JSON array of objects, one per row,
    /// keyed by column, numbers as numbers ("-": standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Keep each finished point in DIR (created if needed) and take the
    /// points already there instead of running them again: a sweep killed
    /// at any moment and run again with the same arguments writes the
    /// same CSV. A DIR that holds another sweep (other experiment text,
    /// --set, points, seeds, version) is refused, and so is a sweep
    /// started while another runs points of its own there (shards of one
    /// sweep, e.g. 1/2 and 2/2, may run there at once).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Run only shard I of N: the points numbered I, I+N, I+2N, ... (from
    /// 1, in CSV order). Needs --resume DIR, where the shard keeps its
    /// points (shards may share DIR); writes no CSV: `tlbsim merge DIR...
    /// --csv OUT` joins the shards into the CSV one sweep would write.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Set any key of the experiment file, as SECTION.KEY=VALUE (VALUE
    /// in TOML syntax, e.g. kernel.kpti=false, workload.iterations=500);
    /// repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// The bound on each point's estimated size.
    #[command(flatten)]
    bound: crate::bounds::WorkBound,
}

/// Why a command stopped: a message and its exit code (2: bad input,
/// found before any work; 1: a run or a write failed).
pub struct Stop {
    /// The exit code.
    pub code: u8,
    /// One line, without `error: `.
    pub message: String,
}

impl Stop {
    /// Bad input (exit code 2).
    pub fn usage(message: impl Into<String>) -> Stop {
        Stop {
            code: 2,
            message: message.into(),
        }
    }

    /// A failed run or write (exit code 1).
    pub fn failure(message: impl Into<String>) -> Stop {
        Stop {
            code: 1,
            message: message.into(),
        }
    }

    /// Prints the error; the exit code.
    pub fn report(self) -> ExitCode {
        eprintln!("error: {}", self.message);
        ExitCode::from(self.code)
    }
}

/// Runs the sweep's points (those of `--shard`, less those `--resume`'s
/// directory holds) and writes the CSV in sweep order (and the summary).
/// Every argument, output and point is checked before the first run (exit
/// code 2); a failed run or write exits 1.
pub fn run(args: Args) -> ExitCode {
    match sweep(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(stop) => stop.report(),
    }
}

/// [`run`], returning why it stopped.
fn sweep(args: &Args) -> Result<(), Stop> {
    let plan = parse_plan(
        &args.cpus,
        args.param.as_deref(),
        args.seeds.as_deref(),
        args.shard.as_deref(),
    )
    .map_err(Stop::usage)?;
    check_flags(args, &plan).map_err(Stop::usage)?;
    let (exp0, text) = load(&args.experiment, &args.sets).map_err(Stop::usage)?;
    check_names(&args.policies, &args.profiles).map_err(Stop::usage)?;
    let jobs = build_jobs(&exp0, &args.profiles, &args.policies, &plan).map_err(Stop::usage)?;
    check_outputs(
        &inputs(args, &exp0, jobs.len()),
        &[
            ("--csv", args.csv.as_deref()),
            ("--summary", args.summary.as_deref()),
            ("--json", args.json.as_deref()),
        ],
    )
    .map_err(Stop::usage)?;
    let file = args.experiment.display().to_string();
    let large = check_jobs(&jobs, (&file, &text), &args.sets, args.bound.max_events)
        .map_err(Stop::usage)?;
    let param = plan.param.as_ref().map(|(name, _)| name.as_str());
    let width = table::width(param);
    let store = match &args.resume {
        Some(dir) => {
            Some(Store::create(dir, manifest(args, &plan, &text, &jobs)?).map_err(Stop::usage)?)
        }
        None => None,
    };
    // Held until the sweep ends, so that no other sweep runs its points.
    let _claim = match &store {
        Some(s) => Some(lock::claim(s.dir(), plan.shard, jobs.len()).map_err(Stop::usage)?),
        None => None,
    };
    let wanted = |i: &usize| plan.shard.is_none_or(|s| s.holds(*i));
    let mut rows: Vec<Option<Row>> = vec![None; jobs.len()];
    if let Some(store) = &store {
        for i in (0..jobs.len()).filter(wanted) {
            rows[i] = store.load(i, width).map_err(Stop::usage)?;
        }
    }
    let todo: Vec<usize> = (0..jobs.len())
        .filter(wanted)
        .filter(|&i| rows[i].is_none())
        .collect();
    announce(&jobs, &plan, store.as_ref(), todo.len());
    if let Some(note) = large {
        eprintln!("{note}");
    }
    let done = run_points(&jobs, &todo, store.as_ref());
    for (&i, r) in todo.iter().zip(done) {
        rows[i] = Some(r.map_err(|e| e.stop(&jobs[i], &file, &text, &args.sets))?);
    }
    if let (Some(s), Some(store)) = (plan.shard, &store) {
        eprintln!(
            "sweep: shard {}/{} finished in {}; `tlbsim merge` joins the shards' directories into the CSV",
            s.index,
            s.count,
            store.dir().display()
        );
        return Ok(());
    }
    let rows: Vec<Row> = rows.into_iter().flatten().collect();
    write_outputs(
        (args.csv.as_deref(), args.summary.as_deref()),
        args.json.as_deref(),
        param,
        &rows,
        plan.runs_per_point(),
    )
}

/// The files the sweep reads or keeps (for `files::check_outputs`): the
/// experiment file, its profile file, the `--profiles` files and, with
/// `--resume DIR`, the manifest and the `points` point files there.
fn inputs(args: &Args, exp0: &Experiment, points: usize) -> Vec<(&'static str, PathBuf)> {
    let mut v = experiment_inputs(&args.experiment, exp0, None);
    v.extend(
        args.profiles
            .iter()
            .filter_map(|p| profile_file(p, Path::new("")))
            .map(|p| ("--profiles", p)),
    );
    if let Some(dir) = &args.resume {
        v.extend(store::files(dir, points).map(|p| ("a file of --resume", p)));
    }
    v
}

/// The flags that go together: `--shard` needs `--resume` and writes no
/// CSV; without `--shard`, `--csv` or `--json` is required.
fn check_flags(args: &Args, plan: &Plan) -> Result<(), String> {
    if plan.shard.is_some() {
        if args.resume.is_none() {
            return Err(
                "--shard: needs --resume DIR, where the shard keeps its points for `tlbsim merge`"
                    .into(),
            );
        }
        for (flag, given) in [
            ("--csv", args.csv.is_some()),
            ("--summary", args.summary.is_some()),
            ("--json", args.json.is_some()),
        ] {
            if given {
                return Err(format!("{flag}: a shard writes none; `tlbsim merge DIR... --csv FILE` joins the shards' points"));
            }
        }
    } else if args.csv.is_none() && args.json.is_none() {
        return Err(
            "--csv FILE (or --json FILE) is required (or --shard I/N with --resume DIR)".into(),
        );
    }
    Ok(())
}

/// The manifest of the sweep (see [`Manifest`]): the experiment's `text`,
/// the arguments and the points `jobs`.
fn manifest(args: &Args, plan: &Plan, text: &str, jobs: &[Job]) -> Result<Manifest, Stop> {
    let mut profile_files = Vec::new();
    for p in args
        .profiles
        .iter()
        .filter(|p| tlbsim::config::is_profile_path(p))
    {
        let t = std::fs::read_to_string(p).map_err(|e| {
            Stop::usage(format!(
                "--profiles {p}: cannot read: {}",
                crate::files::why(&e)
            ))
        })?;
        profile_files.push((p.clone(), t));
    }
    Ok(Manifest {
        format: store::FORMAT.into(),
        version: tlbsim::sim::VERSION.into(),
        experiment: text.into(),
        sets: args.sets.clone(),
        param: plan.param.as_ref().map(|(n, _)| n.clone()),
        seeds: plan.seeds.clone(),
        points: jobs.iter().map(Job::label).collect(),
        profile_files,
    })
}

/// Says on standard error what the sweep is about to run.
fn announce(jobs: &[Job], plan: &Plan, store: Option<&Store>, todo: usize) {
    let mine = (0..jobs.len())
        .filter(|&i| plan.shard.is_none_or(|s| s.holds(i)))
        .count();
    let shard = match plan.shard {
        Some(s) => format!(
            "shard {}/{}: {mine} of {} points",
            s.index,
            s.count,
            jobs.len()
        ),
        None => format!("{mine} points"),
    };
    let kept = match store {
        Some(s) => format!(", {} finished in {}", mine - todo, s.dir().display()),
        None => String::new(),
    };
    eprintln!(
        "sweep: {shard}{kept}; {todo} runs on {} threads",
        rayon::current_num_threads()
    );
}

/// Writes the CSV of `rows` to `csv`, their summary (over `per_point`
/// seeds each) to `summary` and the CSV's rows as JSON to `json`.
pub fn write_outputs(
    (csv, summary): (Option<&Path>, Option<&Path>),
    json: Option<&Path>,
    param: Option<&str>,
    rows: &[Row],
    per_point: usize,
) -> Result<(), Stop> {
    if let Some(path) = json {
        let bytes = table::json_bytes(param, rows).map_err(Stop::failure)?;
        write_atomic(path, &bytes).map_err(Stop::failure)?;
    }
    if let Some(path) = csv {
        let bytes = table::csv_bytes(param, rows).map_err(Stop::failure)?;
        write_atomic(path, &bytes).map_err(Stop::failure)?;
    }
    if let Some(path) = summary {
        let bytes = table::summary_bytes(param, rows, per_point).map_err(Stop::failure)?;
        write_atomic(path, &bytes).map_err(Stop::failure)?;
    }
    Ok(())
}

/// Why a point did not finish.
enum PointError {
    /// Its run failed.
    Run(SimError),
    /// Its file could not be written.
    Save(String),
    /// Not run: another point's file could not be written.
    Skipped,
}

impl PointError {
    /// The error of `job` as the sweep reports it; the run's error is
    /// located in the experiment `file` (whose text is `text`) or `sets`.
    fn stop(self, job: &Job, file: &str, text: &str, sets: &[String]) -> Stop {
        match self {
            PointError::Run(e) => Stop::failure(job.error(&e, (file, text), sets)),
            PointError::Save(m) => Stop::failure(m),
            PointError::Skipped => Stop::failure(format!("{}: not run", job.label())),
        }
    }
}

/// Runs the points `todo` (indices into `jobs`) in parallel (each run is
/// deterministic and independent), reporting progress, and keeps each
/// finished one in `store` as soon as it finishes; the rows in the order
/// of `todo`. After a point's file fails to be written, the points not yet
/// started are skipped.
fn run_points(jobs: &[Job], todo: &[usize], store: Option<&Store>) -> Vec<Result<Row, PointError>> {
    use rayon::prelude::*;
    let failed = AtomicBool::new(false);
    let bar = crate::progress::count("points", todo.len() as u64, |s| s.runs_done);
    todo.par_iter()
        .map(|&i| {
            if failed.load(Ordering::Relaxed) {
                return Err(PointError::Skipped);
            }
            let job = &jobs[i];
            let t0 = Instant::now();
            let r = tlbsim::sim::run(&job.exp, &job.options());
            bar.eprintln(&format!(
                "  {}: {} ({:.1} s host)",
                job.label(),
                match &r {
                    Ok(o) => format!("{:.6} s simulated", o.elapsed_ns as f64 / 1e9),
                    Err(_) => "failed".to_string(),
                },
                t0.elapsed().as_secs_f64()
            ));
            let row = Row::new(job, &r.map_err(PointError::Run)?);
            if let Some(s) = store {
                s.save(i, &row).map_err(|e| {
                    failed.store(true, Ordering::Relaxed);
                    PointError::Save(e)
                })?;
            }
            Ok(row)
        })
        .collect()
}
