//! `tlbsim replay TRACE`: runs a recorded trace (the `replay` workload)
//! on a profile under a policy, with the checker on, and prints the run
//! table (elapsed, flushes, IPIs, page faults) with the trace's own
//! counts beside it as metrics.

use crate::files::{
    check_outputs_or_report, profile_file, set_args, set_profile, shell_word, Console,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::{apply_sets, builtin_profile, parse_toml, Arch, Experiment};
use tlbsim::sim::{RunOptions, SimError};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace (`tlbsim record`'s output).
    trace: PathBuf,
    /// Machine profile: a built-in name or a profile file (.toml).
    #[arg(long, default_value = "ampere-32")]
    profile: String,
    /// TLB policy (default: the profile architecture's stock policy:
    /// `arm64-stock`, or on x86 the recorded kernel's, `x86-lazy-cpumask`
    /// from Linux 6.13, `x86-tlb-gen` before).
    #[arg(long)]
    policy: Option<String>,
    /// Where the tasks run: `recorded` (the CPU each `run` event names, and
    /// the recorded order of tasks sharing a CPU) or `model` (the model's
    /// scheduler decides).
    #[arg(long, default_value = "recorded", value_parser = ["recorded", "model"])]
    placement: String,
    /// A sleep no recorded task ended (a timer, I/O, an untraced task):
    /// `timer` sleeps its recorded length on a timer, `drop` leaves it out.
    #[arg(long, default_value = "timer", value_parser = ["timer", "drop"])]
    untraced_sleeps: String,
    /// Number of CPUs (default: the profile's).
    #[arg(long)]
    cpus: Option<u32>,
    /// Root seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Set any key of the experiment, as SECTION.KEY=VALUE; repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// Write the full result as JSON to this file ("-": standard output).
    #[arg(long)]
    json: Option<PathBuf>,
    /// The bound on the run's estimated size.
    #[command(flatten)]
    bound: crate::bounds::WorkBound,
}

/// The experiment a replay runs, as TOML text.
pub fn experiment_text(trace: &Path, profile: &str) -> String {
    let t = trace.display().to_string();
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    format!(
        "[experiment]\nname = \"replay\"\nprofile = {}\n\n[checker]\nenabled = true\n\n[workload]\nname = \"replay\"\ntrace = {}\n",
        q(if profile.ends_with(".toml") { "ampere-32" } else { profile }),
        q(&t)
    )
}

/// The architecture of the experiment's profile (a file's, or a built-in's).
fn profile_arch(exp: &Experiment) -> Result<Arch, String> {
    match &exp.profile_data {
        Some(p) => Ok(p.arch),
        None => builtin_profile(&exp.experiment.profile)
            .map(|p| p.arch)
            .map_err(|e| e.to_string()),
    }
}

/// The x86 policy of the kernel the trace was recorded on (its `kernel`
/// line); `x86-tlb-gen` if it cannot be read (the workload reports why).
fn recorded_x86_policy(trace: &Path) -> &'static str {
    use std::io::BufRead;
    // The header comes first: no need to read the events.
    let release = std::fs::File::open(trace).ok().and_then(|f| {
        std::io::BufReader::new(f)
            .lines()
            .take(16)
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("kernel ").map(str::to_string))
    });
    tlbsim::kernel::x86::policy_of_release(release.as_deref().unwrap_or(""))
}

/// The policy the replay runs: `--policy`, or on an x86 profile the one
/// the trace's kernel release had (arm64: the experiment's); x86
/// policies pick their PCIDs themselves unless `--set` says otherwise.
/// An error is the profile's.
fn set_policy(exp: &mut Experiment, args: &Args) -> Result<(), String> {
    let policy = match &args.policy {
        Some(p) => Some(p.clone()),
        None => match profile_arch(exp)? {
            Arch::X86 => Some(recorded_x86_policy(&args.trace).to_string()),
            Arch::Arm64 => None,
        },
    };
    if let Some(p) = &policy {
        exp.kernel.tlb_policy = p.clone();
        let allocator_set = args
            .sets
            .iter()
            .any(|s| s.starts_with("kernel.asid_allocator"));
        if p.starts_with("x86-") && !allocator_set {
            exp.kernel.asid_allocator = "none".into();
        }
    }
    Ok(())
}

/// The command that replays this run again, its flags as given.
fn replay_command(args: &Args) -> String {
    let mut again = format!(
        "tlbsim replay {} --profile {} --seed {}",
        shell_word(&args.trace.display().to_string()),
        shell_word(&args.profile),
        args.seed
    );
    if let Some(p) = &args.policy {
        again.push_str(&format!(" --policy {}", shell_word(p)));
    }
    if let Some(c) = args.cpus {
        again.push_str(&format!(" --cpus {c}"));
    }
    if args.placement != "recorded" {
        again.push_str(&format!(" --placement {}", args.placement));
    }
    if args.untraced_sleeps != "timer" {
        again.push_str(&format!(" --untraced-sleeps {}", args.untraced_sleeps));
    }
    again.push_str(&set_args(&args.sets));
    again
}

/// Builds the experiment and runs it.
pub fn run(args: Args) -> ExitCode {
    let text = experiment_text(&args.trace, &args.profile);
    let name = "replay";
    let parsed: Result<Experiment, String> = if args.sets.is_empty() {
        parse_toml(name, &text).map_err(|e| e.to_string())
    } else {
        apply_sets(&text, &args.sets)
    };
    let mut exp = match parsed {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = set_profile(&mut exp, &args.profile, Path::new("")) {
        eprintln!("error: --profile {}: {e}", args.profile);
        return ExitCode::from(2);
    }
    exp.workload.params.insert(
        "placement".into(),
        toml::Value::String(args.placement.clone()),
    );
    exp.workload.params.insert(
        "untraced_sleeps".into(),
        toml::Value::String(args.untraced_sleeps.clone()),
    );
    if let Err(e) = set_policy(&mut exp, &args) {
        eprintln!("error: --profile {}: {e}", args.profile);
        return ExitCode::from(2);
    }
    crate::files::read_workload_files(&mut exp);
    let mut inputs = vec![("the trace", args.trace.clone())];
    inputs.extend(profile_file(&args.profile, Path::new("")).map(|p| ("--profile", p)));
    if let Err(code) = check_outputs_or_report(&inputs, &[("--json", args.json.as_deref())]) {
        return code;
    }
    let again = replay_command(&args);
    Console::new(&[args.json.as_deref()]).line(&format!("# {again}"));
    let opts = RunOptions {
        seed: Some(args.seed),
        cpus: args.cpus,
    };
    let t0 = Instant::now();
    match crate::bounds::run(&exp, &opts, &args.bound) {
        Ok(o) => {
            super::run::print_and_write(&o, t0.elapsed().as_secs_f64(), false, args.json.as_deref())
        }
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                SimError::Config(_) | SimError::Field { .. } | SimError::Flag { .. } => {
                    ExitCode::from(2)
                }
                SimError::Run(m) => {
                    if matches!(m, tlbsim::driver::RunError::Deadlock(_))
                        && args.placement == "recorded"
                    {
                        eprintln!("hint: the recorded order of tasks sharing a CPU could not be kept (docs/model.md, \"Trace replay\"); `--placement model` lets the model's scheduler place the tasks");
                    }
                    eprintln!("replay: {again}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
