//! `tlbsim sweep`: one experiment over CPU counts, policies, profiles and
//! optionally a workload parameter, written as a CSV.

use crate::files::{check_output_or_report, load_or_report, set_profile, write_or_report};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::{builtin_profile, is_profile_path, Experiment};
use tlbsim::kernel::registry::{check_combination, find_allocator, find_policy};
use tlbsim::sim::{resolve_profile, RunOptions, RunOutput, SimError};

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

/// A swept workload parameter: its name and values.
type SweptParam = (String, Vec<toml::Value>);

/// One point of the sweep.
struct Job {
    /// Profile as given (built-in name or file).
    profile: String,
    /// CPU count (`None`: the profile's own).
    cpus: Option<u32>,
    policy: String,
    /// The swept parameter's CSV cell with its comma, or empty.
    param_cell: String,
    exp: Experiment,
}

impl Job {
    /// How progress and errors name the point.
    fn label(&self) -> String {
        format!(
            "{} {} CPUs {} {}",
            self.profile,
            self.cpus.map_or("profile".to_string(), |n| n.to_string()),
            self.policy,
            self.param_cell.trim_end_matches(',')
        )
        .trim_end()
        .to_string()
    }
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

/// `--cpus` and `--param` parsed.
fn parse_cpus_and_param(args: &Args) -> Result<(Vec<Option<u32>>, Option<SweptParam>), String> {
    let cpus = args
        .cpus
        .iter()
        .map(|c| match c.as_str() {
            "profile" => Ok(None),
            n => n
                .parse::<u32>()
                .map(Some)
                .map_err(|_| format!("--cpus: \"{n}\" is not a CPU count or \"profile\"")),
        })
        .collect::<Result<Vec<_>, String>>();
    let param = args.param.as_deref().map(parse_param).transpose();
    // The --cpus error first, as both are reported together.
    Ok((cpus?, param?))
}

/// Parses `--param NAME=V1,V2,...`; each value is TOML (a bare word that
/// is not valid TOML is taken as a string).
fn parse_param(s: &str) -> Result<SweptParam, String> {
    let (name, vals) = s
        .split_once('=')
        .ok_or_else(|| format!("--param: \"{s}\" is not NAME=V1,V2,..."))?;
    let name = name.trim();
    if name.is_empty() || vals.trim().is_empty() {
        return Err(format!("--param: \"{s}\" is not NAME=V1,V2,..."));
    }
    let values = vals
        .split(',')
        .map(|v| {
            let v = v.trim();
            toml::from_str::<toml::Table>(&format!("x = {v}"))
                .ok()
                .and_then(|t| t.get("x").cloned())
                .unwrap_or_else(|| toml::Value::String(v.to_string()))
        })
        .collect();
    Ok((name.to_string(), values))
}

/// Every point of the sweep, in CSV order: profiles, then CPU counts,
/// then parameter values, then policies. Exit code 2 on a bad profile.
fn build_jobs(
    exp0: &Experiment,
    profiles: &[String],
    cpus: &[Option<u32>],
    param: Option<&SweptParam>,
    policies: &[String],
) -> Result<Vec<Job>, ExitCode> {
    let values: Vec<Option<&toml::Value>> = match param {
        Some((_, v)) => v.iter().map(Some).collect(),
        None => vec![None],
    };
    let mut jobs = Vec::new();
    for prof in profiles {
        for &n in cpus {
            for value in &values {
                for pol in policies {
                    let mut exp = exp0.clone();
                    // A --profiles file is relative to the working directory.
                    if let Err(e) = set_profile(&mut exp, prof, Path::new("")) {
                        eprintln!("error: --profiles {prof}: {e}");
                        return Err(ExitCode::from(2));
                    }
                    exp.kernel.tlb_policy = pol.clone();
                    let mut param_cell = String::new();
                    if let (Some((name, _)), Some(v)) = (param, value) {
                        match name.split_once('.') {
                            None => {
                                exp.workload.params.insert(name.clone(), (*v).clone());
                            }
                            Some((section, key)) => {
                                exp = match set_key(&exp, section, key, v) {
                                    Ok(e) => e,
                                    Err(e) => {
                                        eprintln!("error: --param {name}: {e}");
                                        return Err(ExitCode::from(2));
                                    }
                                }
                            }
                        }
                        param_cell = format!("{},", v.to_string().trim_matches('"'));
                    }
                    jobs.push(Job {
                        profile: prof.clone(),
                        cpus: n,
                        policy: pol.clone(),
                        param_cell,
                        exp,
                    });
                }
            }
        }
    }
    Ok(jobs)
}

/// Checks every `--policies` name against the registry and every built-in
/// `--profiles` name (profile files are read by [`build_jobs`], also before
/// any run). The error names the flag and the value, and lists the known
/// names.
fn check_names(policies: &[String], profiles: &[String]) -> Result<(), String> {
    for p in policies {
        find_policy(p).map_err(|e| format!("--policies {p}: {e}"))?;
    }
    for p in profiles.iter().filter(|p| !is_profile_path(p)) {
        builtin_profile(p).map_err(|e| format!("--profiles {p}: {}", e.message))?;
    }
    Ok(())
}

/// Checks each point as a run checks it before simulating (see
/// [`check_job`]), so that a bad point stops the sweep before the first
/// run rather than after the others ran. The error is the point's label
/// and the run's error, located in `file` (whose text is `text`).
fn check_jobs(jobs: &[Job], file: &str, text: &str) -> Result<(), String> {
    for job in jobs {
        check_job(job).map_err(|e| format!("{}: {}", job.label(), e.located(file, text)))?;
    }
    Ok(())
}

/// The checks of a point that need no simulated machine, each one that
/// `tlbsim::sim::run` makes before it simulates: the profile with the
/// point's CPU count, the policy and allocator on it, and the workload's
/// parameters (on the profile, for a run without VMs). A point that passes
/// may still fail in the run's other checks.
fn check_job(job: &Job) -> Result<(), SimError> {
    let exp = &job.exp;
    let opts = RunOptions {
        seed: None,
        cpus: job.cpus,
    };
    let profile = resolve_profile(exp, &opts)?;
    let field = |section: &str, key: &str, message: String| SimError::Field {
        section: section.into(),
        key: key.into(),
        message,
    };
    let k = &exp.kernel;
    let policy = find_policy(&k.tlb_policy).map_err(|e| field("kernel", "tlb_policy", e))?;
    let alloc =
        find_allocator(&k.asid_allocator).map_err(|e| field("kernel", "asid_allocator", e))?;
    check_combination(policy, alloc, &profile).map_err(|(key, m)| field("kernel", key, m))?;
    let wl = tlbsim::workload::build(&exp.workload.name, &exp.workload.params)
        .map_err(|e| SimError::Config(format!("[workload] {e}")))?;
    if exp.vm.is_none() {
        wl.workload
            .check(&profile)
            .map_err(|e| SimError::Config(format!("[workload] {e}")))?;
    }
    Ok(())
}

/// `exp` with `[section] key = v` (a `--param SECTION.KEY=...` value, as
/// `--set` would give it).
fn set_key(
    exp: &Experiment,
    section: &str,
    key: &str,
    v: &toml::Value,
) -> Result<Experiment, String> {
    let mut t = toml::Table::try_from(exp).map_err(|e| e.to_string())?;
    let s = t
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(s) = s else {
        return Err(format!("[{section}] is not a table"));
    };
    s.insert(key.to_string(), v.clone());
    let mut out: Experiment = toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    out.profile_data = exp.profile_data.clone();
    Ok(out)
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

/// The CSV's columns up to the workload's metrics (which the first run
/// names).
fn csv_header(param: Option<&SweptParam>) -> String {
    let mut out = String::from("profile,sockets,cpus,policy,");
    if let Some((name, _)) = param {
        out.push_str(name);
        out.push(',');
    }
    out.push_str(
        "elapsed_s,flushes_broadcast,flushes_local,flushes_skipped,dvm_syncs,dvm_ops_received,sync_queue_wait_mean_ns,flush_latency_median_ns,flush_latency_mean_ns,checker,function_call_ipis,tlbi_broadcast",
    );
    out
}

/// One CSV line: the point, its counts and the metrics `names` (empty
/// cells for those the run lacks).
fn csv_line(job: &Job, o: &RunOutput, names: &[String]) -> String {
    let t = &o.stats.total;
    let metrics: String = names
        .iter()
        .map(|m| match o.metrics.get(m) {
            Some(v) => format!(",{v:.3}"),
            None => ",".to_string(),
        })
        .collect();
    format!(
        "{},{},{},{},{}{:.6},{},{},{},{},{},{:.1},{},{:.1},{},{},{}{metrics}\n",
        job.profile,
        o.profile.topology.sockets,
        o.profile.topology.cpus,
        job.policy,
        job.param_cell,
        o.elapsed_ns as f64 / 1e9,
        t.flushes_broadcast,
        t.flushes_local,
        t.flushes_skipped,
        t.dvm_syncs,
        t.dvm_ops_received,
        o.stats.dvm_sync_queue_wait_ns.mean,
        o.stats.flush_latency_ns.median,
        o.stats.flush_latency_ns.mean,
        o.checker.verdict,
        t.ipi_call + t.ipi_call_single,
        t.tlbi_broadcast
    )
}
