//! The `tlbsim` command.

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::{find_key_line, parse_toml, Experiment, BUILTIN_PROFILES};
use tlbsim::sim::{run, RunOptions, RunOutput, SimError};

mod report;

/// tlbsim: a laboratory for TLB maintenance on many-core machines.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run one experiment and print a perf-stat-like table.
    Run {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// Root seed (overrides [experiment] seed).
        #[arg(long)]
        seed: Option<u64>,
        /// Number of CPUs (overrides the profile).
        #[arg(long)]
        cpus: Option<u32>,
        /// Write the full result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Print per-CPU rows even on large machines.
        #[arg(long)]
        per_cpu: bool,
    },
    /// List the built-in machine profiles.
    Profiles,
    /// List the registered policies and workloads.
    Policies,
    /// Run every published experiment and print published vs simulated.
    Reproduce {
        /// Also write the rows as a JSON array to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            experiment,
            seed,
            cpus,
            json,
            per_cpu,
        } => cmd_run(&experiment, seed, cpus, json.as_deref(), per_cpu),
        Cmd::Profiles => {
            for (name, _) in BUILTIN_PROFILES {
                match tlbsim::config::builtin_profile(name) {
                    Ok(p) => println!(
                        "{:<12} {:>5} CPUs  {} socket(s)  {}",
                        p.name, p.topology.cpus, p.topology.sockets, p.description
                    ),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Cmd::Policies => {
            println!("tlb_policy:");
            for (n, d, _) in tlbsim::kernel::policy::TLB_POLICIES {
                println!("  {n:<28} {d}");
            }
            println!("asid_allocator:");
            for (n, d, _) in tlbsim::kernel::policy::ASID_ALLOCATORS {
                println!("  {n:<28} {d}");
            }
            println!("workload:");
            for (n, d, _) in tlbsim::workload::WORKLOADS {
                println!("  {n:<28} {d}");
            }
            ExitCode::SUCCESS
        }
        Cmd::Reproduce { json } => cmd_reproduce(json.as_deref()),
    }
}

/// Reads and parses an experiment file; errors name file, line and field.
fn load(path: &Path) -> Result<(Experiment, String), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let exp: Experiment = parse_toml(&name, &text).map_err(|e| e.to_string())?;
    Ok((exp, text))
}

/// Formats a run error, locating config fields in the file.
fn describe(err: &SimError, file: &str, text: &str) -> String {
    match err {
        SimError::Field {
            section,
            key,
            message,
        } => match find_key_line(text, section, key) {
            Some(l) => format!("{file}:{l}: [{section}] {key}: {message}"),
            None => format!("{file}: [{section}] {key}: {message}"),
        },
        SimError::Config(m) => format!("{file}: {m}"),
        SimError::Run(e) => e.to_string(),
    }
}

/// Writes `bytes` to `path` whole or not at all (temp file + rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("out"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).map_err(|e| format!("{}: cannot write: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: cannot write: {e}", path.display())
    })
}

fn cmd_run(
    path: &Path,
    seed: Option<u64>,
    cpus: Option<u32>,
    json: Option<&Path>,
    per_cpu: bool,
) -> ExitCode {
    let (exp, text) = match load(path) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = RunOptions { seed, cpus };
    let seed_used = seed.unwrap_or(exp.experiment.seed);
    let mut replay = format!("tlbsim run {} --seed {seed_used}", path.display());
    if let Some(c) = cpus {
        replay.push_str(&format!(" --cpus {c}"));
    }
    println!("# {replay}");
    let t0 = Instant::now();
    let out = run(&exp, &opts);
    let host = t0.elapsed().as_secs_f64();
    match out {
        Ok(o) => {
            print!("{}", report::table(&o, host, per_cpu));
            if let Some(j) = json {
                let v = report::json(&o, host);
                let bytes = serde_json::to_vec_pretty(&v).expect("serialisable");
                if let Err(e) = write_atomic(j, &bytes) {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: {}",
                describe(&e, &path.display().to_string(), &text)
            );
            match e {
                SimError::Run(tlbsim::driver::RunError::Violation(_)) => {
                    eprintln!("replay: {replay}");
                    ExitCode::FAILURE
                }
                SimError::Run(_) => ExitCode::FAILURE,
                SimError::Config(_) | SimError::Field { .. } => ExitCode::from(2),
            }
        }
    }
}

fn cmd_reproduce(json: Option<&Path>) -> ExitCode {
    let mut rows = Vec::new();
    println!(
        "{:<22} {:<18} {:>5} {:>12} {:>12} {:>8}  {:>9}",
        "experiment", "metric", "unit", "published", "simulated", "error", "host s"
    );
    for r in tlbsim::reproduce::REPRODUCTIONS {
        let file = format!("<built-in experiments/{}.toml>", r.experiment);
        let exp: Experiment = match parse_toml(&file, r.toml) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let t0 = Instant::now();
        let o: RunOutput = match run(&exp, &RunOptions::default()) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("error: {}", describe(&e, &file, r.toml));
                return ExitCode::FAILURE;
            }
        };
        let sim = (r.extract)(&o);
        let err_pct = (sim - r.published) / r.published * 100.0;
        println!(
            "{:<22} {:<18} {:>5} {:>12.4} {:>12.4} {:>+7.1}%  {:>9.2}   checker: {}",
            r.experiment,
            r.metric,
            r.unit,
            r.published,
            sim,
            err_pct,
            t0.elapsed().as_secs_f64(),
            o.checker.verdict
        );
        rows.push(serde_json::json!({
            "experiment": r.experiment,
            "metric": r.metric,
            "unit": r.unit,
            "published": r.published,
            "simulated": sim,
            "error_pct": err_pct,
            "source": r.source,
            "checker": o.checker.verdict,
        }));
    }
    if let Some(j) = json {
        let bytes = serde_json::to_vec_pretty(&rows).expect("serialisable");
        if let Err(e) = write_atomic(j, &bytes) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
