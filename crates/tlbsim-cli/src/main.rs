//! The `tlbsim` command.

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::{
    apply_sets, find_key_line, is_profile_path, parse_profile, parse_toml, Experiment,
    BUILTIN_PROFILES,
};
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
        /// TLB policy (overrides [kernel] tlb_policy).
        #[arg(long)]
        policy: Option<String>,
        /// Machine profile (overrides [experiment] profile): a built-in
        /// name, or a profile file ending in .toml (see `profiles --show`).
        #[arg(long)]
        profile: Option<String>,
        /// Write the full result as JSON to this file.
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
    },
    /// Run an experiment over CPU counts, policies and profiles; write a CSV.
    Sweep {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// CPU counts, comma-separated ("profile": the profile's own count).
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64,128,256")]
        cpus: Vec<String>,
        /// A workload parameter to sweep too, as NAME=V1,V2,... (values in
        /// TOML syntax, e.g. tasks=1,2,4); it becomes a CSV column.
        #[arg(long)]
        param: Option<String>,
        /// TLB policies, comma-separated.
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
        /// Output CSV file (written whole or not at all).
        #[arg(long)]
        csv: PathBuf,
        /// Set any key of the experiment file, as SECTION.KEY=VALUE (VALUE
        /// in TOML syntax, e.g. kernel.kpti=false, workload.iterations=500);
        /// repeatable.
        #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Explore schedules of an experiment under the checker (the explorer:
    /// which CPU steps next, when TLBIs arrive, speculative fills).
    Check {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// random, pct or exhaustive.
        #[arg(long, default_value = "random")]
        strategy: String,
        /// Most schedules to run.
        #[arg(long, default_value_t = 1000)]
        schedules: u64,
        /// Seed of the schedule choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// PCT bug depth.
        #[arg(long, default_value_t = 3)]
        depth: u32,
        /// Exhaustive search: most preemptions per schedule.
        #[arg(long, default_value_t = 2)]
        preemptions: u32,
        /// Actions per schedule before it is cut off.
        #[arg(long, default_value_t = 200_000)]
        max_actions: usize,
        /// Speculative fills per schedule.
        #[arg(long, default_value_t = 2)]
        speculation: u32,
        /// Number of CPUs (overrides the profile).
        #[arg(long)]
        cpus: Option<u32>,
        /// TLB policy (overrides [kernel] tlb_policy).
        #[arg(long)]
        policy: Option<String>,
        /// ASID allocator (overrides [kernel] asid_allocator).
        #[arg(long)]
        allocator: Option<String>,
        /// Machine profile (overrides [experiment] profile): a built-in
        /// name, or a profile file ending in .toml.
        #[arg(long)]
        profile: Option<String>,
        /// Re-run one schedule, as printed by a failing check.
        #[arg(long)]
        replay: Option<String>,
        /// Set any key of the experiment file, as SECTION.KEY=VALUE (VALUE
        /// in TOML syntax, e.g. kernel.kpti=false, workload.iterations=500);
        /// repeatable.
        #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
        sets: Vec<String>,
    },
    /// List the built-in machine profiles, or print one as TOML.
    Profiles {
        /// Print this built-in profile's file (with its sources), a
        /// starting point for a profile of your own machine.
        #[arg(long)]
        show: Option<String>,
    },
    /// List the registered policies and workloads.
    Policies,
    /// Run every published experiment and print published vs simulated.
    Reproduce {
        /// Also write the rows as a JSON array to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Only experiments whose name contains this text.
        #[arg(long)]
        only: Option<String>,
    },
}

fn main() -> ExitCode {
    // `tlbsim ... | head`: a closed stdout ends the program quietly, like
    // other Unix tools, instead of with a panic message.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or("");
        if msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            experiment,
            seed,
            cpus,
            policy,
            profile,
            json,
            per_cpu,
            sets,
        } => cmd_run(
            &experiment,
            seed,
            cpus,
            Overrides {
                policy,
                profile,
                sets,
            },
            json.as_deref(),
            per_cpu,
        ),
        Cmd::Check {
            experiment,
            strategy,
            schedules,
            seed,
            depth,
            preemptions,
            max_actions,
            speculation,
            cpus,
            policy,
            allocator,
            profile,
            replay,
            sets,
        } => {
            let strategy = match strategy.as_str() {
                "random" => tlbsim::explore::Strategy::Random,
                "pct" => tlbsim::explore::Strategy::Pct(depth),
                "exhaustive" => tlbsim::explore::Strategy::Exhaustive(preemptions),
                other => {
                    eprintln!("error: --strategy {other:?}: expected random, pct or exhaustive");
                    return ExitCode::from(2);
                }
            };
            let opts = tlbsim::explore::CheckOptions {
                strategy,
                schedules,
                seed,
                max_actions,
                speculation,
                cpus,
            };
            cmd_check(
                &experiment,
                &opts,
                Overrides {
                    policy,
                    profile,
                    sets,
                },
                allocator,
                replay.as_deref(),
            )
        }
        Cmd::Sweep {
            experiment,
            cpus,
            param,
            policies,
            profiles,
            csv,
            sets,
        } => {
            let cpus: Result<Vec<Option<u32>>, String> =
                cpus.iter()
                    .map(|c| match c.as_str() {
                        "profile" => Ok(None),
                        n => n.parse::<u32>().map(Some).map_err(|_| {
                            format!("--cpus: \"{n}\" is not a CPU count or \"profile\"")
                        }),
                    })
                    .collect();
            let param = match param.as_deref().map(parse_param) {
                Some(Err(e)) => Err(e),
                Some(Ok(p)) => Ok(Some(p)),
                None => Ok(None),
            };
            match (cpus, param) {
                (Ok(c), Ok(p)) => cmd_sweep(
                    &experiment,
                    &c,
                    p.as_ref(),
                    &policies,
                    &profiles,
                    &csv,
                    &sets,
                ),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Profiles { show: Some(name) } => {
            match BUILTIN_PROFILES.iter().find(|(n, _)| *n == name) {
                Some((_, text)) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                None => {
                    let names: Vec<_> = BUILTIN_PROFILES.iter().map(|(n, _)| *n).collect();
                    eprintln!(
                        "error: --show {name:?}: no such built-in profile (built-in: {})",
                        names.join(", ")
                    );
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Profiles { show: None } => {
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
            print_policies();
            ExitCode::SUCCESS
        }
        Cmd::Reproduce { json, only } => cmd_reproduce(json.as_deref(), only.as_deref()),
    }
}

/// `tlbsim policies`: every registered policy, allocator and workload with
/// its description; policies and allocators also with their architecture,
/// the hardware features they require and, for a mutant or a historical
/// bug, the invariant it breaks.
fn print_policies() {
    use tlbsim::kernel::registry::{Allocators, ASID_ALLOCATORS, TLB_POLICIES};
    let breaks = |b: &Option<tlbsim::kernel::registry::Breaks>| {
        b.map(|b| format!("; breaks: {}", b.invariant))
            .unwrap_or_default()
    };
    println!("tlb_policy:");
    for e in TLB_POLICIES {
        let req: Vec<_> = e.requires.iter().map(|f| f.name()).collect();
        let req = if req.is_empty() {
            String::new()
        } else {
            format!("; requires: {}", req.join(", "))
        };
        let alloc = match e.allocators {
            Allocators::OfArch => "",
            Allocators::PicksOwnTags => "; asid_allocator: none",
        };
        println!("  {:<34} {}", e.name, e.description);
        println!("  {:<34} [{}{req}{alloc}{}]", "", e.arch, breaks(&e.breaks));
    }
    println!("asid_allocator:");
    for e in ASID_ALLOCATORS {
        let arch = e.arch.map_or("any".to_string(), |a| a.to_string());
        println!("  {:<34} {}", e.name, e.description);
        println!("  {:<34} [{arch}{}]", "", breaks(&e.breaks));
    }
    println!("workload:");
    for e in tlbsim::workload::WORKLOADS {
        println!("  {:<34} {}", e.name, e.description);
    }
}

/// Reads and parses an experiment file; errors name file, line and field.
/// [`load`], printing the error; exit code 2 (bad input) on failure.
fn load_or_report(path: &Path, sets: &[String]) -> Result<(Experiment, String), ExitCode> {
    load(path, sets).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

fn load(path: &Path, sets: &[String]) -> Result<(Experiment, String), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let mut exp: Experiment = parse_toml(&name, &text).map_err(|e| e.to_string())?;
    if !sets.is_empty() {
        exp = apply_sets(&text, sets)?;
    }
    if is_profile_path(&exp.experiment.profile) {
        // A profile file is relative to the experiment file.
        let base = path.parent().unwrap_or(Path::new(""));
        let spec = exp.experiment.profile.clone();
        set_profile(&mut exp, &spec, base).map_err(|e| {
            match find_key_line(&text, "experiment", "profile") {
                Some(l) => format!("{name}:{l}: [experiment] profile: {e}"),
                None => format!("{name}: [experiment] profile: {e}"),
            }
        })?;
    }
    Ok((exp, text))
}

/// Points `exp` at the machine profile `spec`: a built-in profile name, or
/// a profile file (ending in `.toml`) relative to `base`, which is read and
/// parsed here (the library does no I/O). Errors name the profile file,
/// line and field.
fn set_profile(exp: &mut Experiment, spec: &str, base: &Path) -> Result<(), String> {
    exp.experiment.profile = spec.to_string();
    exp.profile_data = None;
    if is_profile_path(spec) {
        let file = base.join(spec);
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read profile file {shown}: {e}"))?;
        let p = parse_profile(&shown, &text).map_err(|e| e.to_string())?;
        // Check the file's own values here, so that errors point into it
        // (messages start with the field, e.g. "topology.cpus = 0 ...").
        p.validate().map_err(|m| {
            let line = m
                .split([' ', ','])
                .next()
                .and_then(|f| f.split_once('.'))
                .and_then(|(section, key)| find_key_line(&text, section, key));
            match line {
                Some(l) => format!("{shown}:{l}: {m}"),
                None => format!("{shown}: {m}"),
            }
        })?;
        exp.profile_data = Some(p);
    }
    Ok(())
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

/// Command-line overrides of an experiment file.
struct Overrides {
    policy: Option<String>,
    profile: Option<String>,
    /// `--set SECTION.KEY=VALUE` arguments.
    sets: Vec<String>,
}

/// `s` quoted for a shell command line if it needs it.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-=,/:+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn cmd_check(
    path: &Path,
    opts: &tlbsim::explore::CheckOptions,
    ov: Overrides,
    allocator: Option<String>,
    replay: Option<&str>,
) -> ExitCode {
    let (mut exp, text) = match load_or_report(path, &ov.sets) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let mut base = format!("tlbsim check {}", path.display());
    for set in &ov.sets {
        base.push_str(&format!(" --set {}", shell_word(set)));
    }
    if let Some(p) = ov.profile {
        base.push_str(&format!(" --profile {p}"));
        if let Err(e) = set_profile(&mut exp, &p, Path::new("")) {
            eprintln!("error: --profile {p}: {e}");
            return ExitCode::from(2);
        }
    }
    let policy = ov.policy;
    if let Some(c) = opts.cpus {
        base.push_str(&format!(" --cpus {c}"));
    }
    if let Some(p) = policy {
        base.push_str(&format!(" --policy {p}"));
        exp.kernel.tlb_policy = p;
    }
    if let Some(a) = allocator {
        base.push_str(&format!(" --allocator {a}"));
        exp.kernel.asid_allocator = a;
    }
    if let Some(s) = replay {
        return match tlbsim::explore::check_replay(&exp, opts.cpus, s) {
            Ok(tlbsim::explore::Outcome::Violation(r)) => {
                println!("replayed: checker violation:\n{r}");
                ExitCode::FAILURE
            }
            Ok(o) => {
                println!("replayed: {o:?}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    let t0 = Instant::now();
    let rep = match tlbsim::explore::check(&exp, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "error: {}",
                describe(&e, &path.display().to_string(), &text)
            );
            return ExitCode::from(2);
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{} schedules ({} complete, {} cut at {} actions{}), {} actions ({} IPIs taken), {:.1} s: {:.0} schedules/s, {:.2} M actions/s",
        rep.schedules,
        rep.completed,
        rep.bounded,
        opts.max_actions,
        if rep.exhausted { "; search exhausted" } else { "" },
        rep.actions,
        rep.interrupts,
        secs,
        rep.schedules as f64 / secs.max(1e-9),
        rep.actions as f64 / secs.max(1e-9) / 1e6
    );
    if matches!(opts.strategy, tlbsim::explore::Strategy::Exhaustive(_))
        && !rep.exhausted
        && rep.failure.is_none()
    {
        println!(
            "note: the exhaustive search is NOT complete: it stopped at --schedules {}; raise it to finish",
            rep.schedules
        );
    }
    match rep.failure {
        None => {
            println!("checker: pass");
            ExitCode::SUCCESS
        }
        Some(f) => {
            println!("schedule {} fails:\n{}", f.index, f.report);
            println!("replay: {base} --replay '{}'", f.schedule);
            ExitCode::FAILURE
        }
    }
}

/// A swept workload parameter: its name and values.
type SweptParam = (String, Vec<toml::Value>);

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

fn cmd_sweep(
    path: &Path,
    cpus: &[Option<u32>],
    param: Option<&SweptParam>,
    policies: &[String],
    profiles: &[String],
    csv: &Path,
    sets: &[String],
) -> ExitCode {
    let (exp0, text) = match load_or_report(path, sets) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let values: Vec<Option<&toml::Value>> = match param {
        Some((_, v)) => v.iter().map(Some).collect(),
        None => vec![None],
    };
    let mut out = String::from("profile,sockets,cpus,policy,");
    if let Some((name, _)) = param {
        out.push_str(name);
        out.push(',');
    }
    out.push_str(
        "elapsed_s,flushes_broadcast,flushes_local,flushes_skipped,dvm_syncs,dvm_ops_received,sync_queue_wait_mean_ns,flush_latency_median_ns,flush_latency_mean_ns,checker,function_call_ipis,tlbi_broadcast",
    );
    // The workload's metrics become the last columns (named after the
    // first run's; every run of a sweep runs the same workload).
    let mut metric_names: Option<Vec<String>> = None;
    // Every point of the sweep, in CSV order; run in parallel (each run is
    // deterministic and independent), written in this order.
    let mut jobs = Vec::new();
    for prof in profiles {
        for &n in cpus {
            for value in &values {
                for pol in policies {
                    let mut exp = exp0.clone();
                    // A --profiles file is relative to the working directory.
                    if let Err(e) = set_profile(&mut exp, prof, Path::new("")) {
                        eprintln!("error: --profiles {prof}: {e}");
                        return ExitCode::from(2);
                    }
                    exp.kernel.tlb_policy = pol.clone();
                    let mut pcol = String::new();
                    if let (Some((name, _)), Some(v)) = (param, value) {
                        exp.workload.params.insert(name.clone(), (*v).clone());
                        pcol = format!("{},", v.to_string().trim_matches('"'));
                    }
                    jobs.push((prof, n, pol, pcol, exp));
                }
            }
        }
    }
    eprintln!(
        "sweep: {} runs on {} threads",
        jobs.len(),
        rayon::current_num_threads()
    );
    let results: Vec<Result<RunOutput, SimError>> = {
        use rayon::prelude::*;
        jobs.par_iter()
            .map(|(prof, n, pol, pcol, exp)| {
                let t0 = Instant::now();
                let r = run(
                    exp,
                    &RunOptions {
                        seed: None,
                        cpus: *n,
                    },
                );
                eprintln!(
                    "  {prof} {} CPUs {pol} {}: {} ({:.1} s host)",
                    n.map_or("profile".to_string(), |n| n.to_string()),
                    pcol.trim_end_matches(','),
                    match &r {
                        Ok(o) => format!("{:.6} s simulated", o.elapsed_ns as f64 / 1e9),
                        Err(_) => "failed".to_string(),
                    },
                    t0.elapsed().as_secs_f64()
                );
                r
            })
            .collect()
    };
    for ((prof, n, pol, pcol, _), r) in jobs.iter().zip(results) {
        let o = match r {
            Ok(o) => o,
            Err(e) => {
                eprintln!(
                    "error: {prof} {} CPUs {pol} {}: {}",
                    n.map_or("profile".to_string(), |n| n.to_string()),
                    pcol.trim_end_matches(','),
                    describe(&e, &path.display().to_string(), &text)
                );
                return ExitCode::FAILURE;
            }
        };
        let n = o.profile.topology.cpus;
        let t = &o.stats.total;
        let names = metric_names.get_or_insert_with(|| {
            let v: Vec<String> = o.metrics.keys().cloned().collect();
            for m in &v {
                out.push_str(&format!(",{m}"));
            }
            out.push('\n');
            v
        });
        let metrics: String = names
            .iter()
            .map(|m| match o.metrics.get(m) {
                Some(v) => format!(",{v:.3}"),
                None => ",".to_string(),
            })
            .collect();
        let line = format!(
            "{prof},{},{n},{pol},{pcol}{:.6},{},{},{},{},{},{:.1},{},{:.1},{},{},{}{metrics}\n",
            o.profile.topology.sockets,
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
        );
        out.push_str(&line);
    }
    if let Err(e) = write_atomic(csv, out.as_bytes()) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn cmd_run(
    path: &Path,
    seed: Option<u64>,
    cpus: Option<u32>,
    ov: Overrides,
    json: Option<&Path>,
    per_cpu: bool,
) -> ExitCode {
    let (mut exp, text) = match load_or_report(path, &ov.sets) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let opts = RunOptions { seed, cpus };
    let seed_used = seed.unwrap_or(exp.experiment.seed);
    let mut replay = format!("tlbsim run {} --seed {seed_used}", path.display());
    for set in &ov.sets {
        replay.push_str(&format!(" --set {}", shell_word(set)));
    }
    if let Some(c) = cpus {
        replay.push_str(&format!(" --cpus {c}"));
    }
    if let Some(p) = ov.policy {
        replay.push_str(&format!(" --policy {p}"));
        exp.kernel.tlb_policy = p;
    }
    if let Some(p) = ov.profile {
        replay.push_str(&format!(" --profile {p}"));
        // A --profile file is relative to the working directory.
        if let Err(e) = set_profile(&mut exp, &p, Path::new("")) {
            eprintln!("error: --profile {p}: {e}");
            return ExitCode::from(2);
        }
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

/// A reproduction run and its host seconds, or the error.
type RunResult = Result<(RunOutput, f64), String>;

fn reproduce_run(file: &str, toml: &str, p: Option<&tlbsim::reproduce::Patched>) -> RunResult {
    let mut exp: Experiment = parse_toml(file, toml).map_err(|e| e.to_string())?;
    if let Some(p) = p {
        if let Some(x) = p.policy {
            exp.kernel.tlb_policy = x.to_string();
        }
        if let Some(x) = p.allocator {
            exp.kernel.asid_allocator = x.to_string();
        }
    }
    let t0 = Instant::now();
    let o = run(&exp, &RunOptions::default()).map_err(|e| describe(&e, file, toml))?;
    Ok((o, t0.elapsed().as_secs_f64()))
}

/// One printed and JSON row of `tlbsim reproduce`.
struct Row<'a> {
    experiment: &'a str,
    metric: String,
    unit: &'a str,
    published: f64,
    simulated: f64,
    host_s: f64,
    checker: &'a str,
    source: &'a str,
    /// The acceptance criterion and whether it is met (rows that
    /// carry one: the ratio row, or the patched row when there is none).
    accept: Option<(String, Option<bool>)>,
}

fn cmd_reproduce(json: Option<&Path>, only: Option<&str>) -> ExitCode {
    let selected: Vec<_> = tlbsim::reproduce::REPRODUCTIONS
        .iter()
        .filter(|r| only.is_none_or(|o| r.experiment.contains(o)))
        .collect();
    if selected.is_empty() {
        let mut names: Vec<_> = tlbsim::reproduce::REPRODUCTIONS
            .iter()
            .map(|r| r.experiment)
            .collect();
        names.dedup();
        eprintln!(
            "error: --only {:?} matches no experiment (known: {})",
            only.unwrap_or_default(),
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    println!(
        "{:<22} {:<48} {:>5} {:>10} {:>10} {:>8}  {:>7}",
        "experiment", "metric", "unit", "published", "simulated", "error", "host s"
    );
    let mut rows = Vec::new();
    let mut judged: Vec<(String, String, bool)> = Vec::new();
    let mut print = |r: Row| {
        let err_pct = (r.simulated - r.published) / r.published * 100.0;
        let fmt = |v: f64| {
            if v.is_nan() {
                "-".to_string()
            } else {
                format!("{v:.4}")
            }
        };
        let err = if err_pct.is_finite() {
            format!("{err_pct:+.1}%")
        } else {
            "-".into()
        };
        let accept = match &r.accept {
            Some((what, Some(true))) => format!("   accept: ok ({what})"),
            Some((what, Some(false))) => format!("   accept: MISS ({what})"),
            Some((what, None)) => format!("   accept: - ({what})"),
            None => String::new(),
        };
        println!(
            "{:<22} {:<48} {:>5} {:>10} {:>10} {:>8}  {:>7.2}   checker: {}{}",
            r.experiment,
            r.metric,
            r.unit,
            fmt(r.published),
            fmt(r.simulated),
            err,
            r.host_s,
            r.checker,
            accept
        );
        if let Some((_, Some(met))) = &r.accept {
            judged.push((r.experiment.to_string(), r.metric.clone(), *met));
        }
        let num = |v: f64| {
            if v.is_finite() {
                serde_json::json!(v)
            } else {
                serde_json::Value::Null
            }
        };
        let mut row = serde_json::json!({
            "experiment": r.experiment, "metric": r.metric, "unit": r.unit,
            "published": num(r.published), "simulated": num(r.simulated),
            "error_pct": num(err_pct), "source": r.source, "checker": r.checker,
        });
        if let Some((what, met)) = &r.accept {
            row["accept"] = serde_json::json!({ "criterion": what, "met": met });
        }
        rows.push(row);
    };
    // Every distinct (experiment, kernel) run, done up front in parallel
    // (each run is deterministic and independent), then shared by its rows.
    let key = |r: &tlbsim::reproduce::Reproduction, p: Option<&tlbsim::reproduce::Patched>| {
        format!(
            "{}|{:?}|{:?}",
            r.experiment,
            p.and_then(|p| p.policy),
            p.and_then(|p| p.allocator)
        )
    };
    let mut jobs: std::collections::BTreeMap<String, _> = Default::default();
    for r in &selected {
        jobs.entry(key(r, None)).or_insert((*r, None));
        if let Some(p) = r.patched {
            jobs.entry(key(r, Some(&p))).or_insert((*r, Some(p)));
        }
    }
    eprintln!(
        "reproduce: {} simulations on {} threads",
        jobs.len(),
        rayon::current_num_threads()
    );
    let done: Vec<(String, RunResult)> = {
        use rayon::prelude::*;
        let jobs: Vec<_> = jobs.into_iter().collect();
        jobs.into_par_iter()
            .map(|(k, (r, p))| {
                let file = format!("<built-in experiments/{}.toml>", r.experiment);
                (k, reproduce_run(&file, r.toml, p.as_ref()))
            })
            .collect()
    };
    let mut cache: std::collections::BTreeMap<String, (RunOutput, f64)> = Default::default();
    for (k, res) in done {
        match res {
            Ok(x) => {
                cache.insert(k, x);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // Host time is reported on the first row that uses a run.
    let mut reported = std::collections::BTreeSet::new();
    let mut get = |r: &tlbsim::reproduce::Reproduction,
                   p: Option<&tlbsim::reproduce::Patched>|
     -> Result<(RunOutput, f64, bool), String> {
        let k = key(r, p);
        let (o, h) = cache.get(&k).ok_or_else(|| format!("no run for {k}"))?;
        let first = reported.insert(k);
        Ok((o.clone(), if first { *h } else { 0.0 }, !first))
    };
    for r in selected {
        let (o, host, _) = match get(r, None) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let before = (r.extract)(&o);
        let base = match r.patched.and_then(|p| p.allocator) {
            Some(_) => o.kernel.asid_allocator.clone(),
            None => o.kernel.tlb_policy.clone(),
        };
        print(Row {
            experiment: r.experiment,
            metric: format!("{}, {base}", r.metric),
            unit: r.unit,
            published: r.published,
            simulated: before,
            host_s: host,
            checker: &o.checker.verdict,
            source: r.source,
            accept: None,
        });
        let Some(p) = r.patched else { continue };
        let (po, phost, _) = match get(r, Some(&p)) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let after = (r.extract)(&po);
        let name = p.policy.or(p.allocator).unwrap_or("patched");
        let published_ratio = match p.ratio {
            tlbsim::reproduce::Ratio::None => f64::NAN,
            tlbsim::reproduce::Ratio::OfPublished => r.published / p.published,
            tlbsim::reproduce::Ratio::Published(x) => x,
        };
        let verdict = (r.accept != tlbsim::reproduce::Accept::None).then(|| {
            (
                r.accept.describe(),
                r.accept.judge(published_ratio, before, after),
            )
        });
        let ratio_row = p.ratio != tlbsim::reproduce::Ratio::None;
        print(Row {
            experiment: r.experiment,
            metric: format!("{}, {name}", r.metric),
            unit: r.unit,
            published: p.published,
            simulated: after,
            host_s: phost,
            checker: &po.checker.verdict,
            source: r.source,
            accept: if ratio_row { None } else { verdict.clone() },
        });
        if !ratio_row {
            continue;
        }
        print(Row {
            experiment: r.experiment,
            metric: format!("{} ratio (before / after)", r.metric),
            unit: "x",
            published: published_ratio,
            simulated: before / after,
            host_s: 0.0,
            checker: "-",
            source: r.source,
            accept: verdict,
        });
    }
    let missed: Vec<_> = judged
        .iter()
        .filter(|(_, _, met)| !met)
        .map(|(e, m, _)| format!("{e} ({m})"))
        .collect();
    println!(
        "\nacceptance: {} of {} criteria met{}",
        judged.len() - missed.len(),
        judged.len(),
        if missed.is_empty() {
            String::new()
        } else {
            format!("; missed: {}", missed.join(", "))
        }
    );
    if let Some(j) = json {
        let bytes = serde_json::to_vec_pretty(&rows).expect("serialisable");
        if let Err(e) = write_atomic(j, &bytes) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
