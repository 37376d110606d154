//! `tlbsim check`: explore schedules of an experiment under the checker,
//! or replay one.

use crate::files::{
    check_outputs_or_report, experiment_inputs, load_or_report, path_word, set_args, set_profile,
    shell_word, write_or_report, Console, Overrides,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::limits::{MAX_ACTIONS, MAX_PCT_DEPTH};
use tlbsim::config::Experiment;
use tlbsim::explore::{CheckOptions, CheckReport, Outcome, Strategy, DEFAULT_MAX_SPIN};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    experiment: PathBuf,
    /// random, pct, exhaustive (bounded by --preemptions) or dpor
    /// (partial-order reduced, no preemption bound).
    #[arg(long, default_value = "random")]
    strategy: String,
    /// Most schedules to run (at least 1).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    schedules: u64,
    /// Seed of the schedule choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// PCT bug depth (1 to 1000).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PCT_DEPTH)))]
    depth: u32,
    /// Exhaustive search: most preemptions per schedule.
    #[arg(long, default_value_t = 2)]
    preemptions: u32,
    /// Actions per schedule before it is cut off (1 to 10,000,000).
    #[arg(long, default_value_t = 200_000, value_parser = max_actions)]
    max_actions: usize,
    /// DPOR only: cut a schedule after this many actions in a row, each
    /// touching what its CPU's previous action touched, while another
    /// CPU's next action slept (spin loops waiting for a CPU the schedule
    /// no longer runs); and at new states a CPU whose last this many
    /// actions did so yields to the others (1 to 10,000,000).
    #[arg(long, default_value_t = DEFAULT_MAX_SPIN, value_parser = max_actions)]
    max_spin: usize,
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
    /// Also write the search's result as JSON to this file, or to
    /// standard output if "-" (the report then goes to standard error).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Set any key of the experiment file, as SECTION.KEY=VALUE (VALUE
    /// in TOML syntax, e.g. kernel.kpti=false, workload.iterations=500);
    /// repeatable.
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    sets: Vec<String>,
    /// On a violation (found or replayed), also write it as a herd
    /// AArch64 litmus test to this file (arm64 stale translations only;
    /// else "cannot export: ..." and exit 2).
    #[arg(long, value_name = "FILE")]
    export_litmus: Option<PathBuf>,
    /// DPOR only: also stop after this many seconds of wall-clock time (1
    /// to 604,800) and say how far the search got (not deterministic).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    time_limit: Option<u64>,
}

/// Explores the schedules (or replays `--replay`) and prints the report;
/// a failure prints the command that replays it.
pub fn run(args: Args) -> ExitCode {
    let opts = match options(&args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Err(code) = check_flags(&args) {
        return code;
    }
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
    let inputs = experiment_inputs(&args.experiment, &exp, ov.profile.as_deref());
    let outputs = [
        ("--json", args.json.as_deref()),
        ("--export-litmus", args.export_litmus.as_deref()),
    ];
    if let Err(code) = check_outputs_or_report(&inputs, &outputs) {
        return code;
    }
    let base = match apply(&mut exp, &args.experiment, &opts, ov, args.allocator) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let export = args
        .export_litmus
        .as_deref()
        .map(|p| (p, args.experiment.as_path()));
    if let Some(s) = args.replay {
        return replay(&exp, opts.cpus, &s, &base, export);
    }
    let t0 = Instant::now();
    let rep = {
        let _bar = crate::progress::count("schedules", opts.schedules, |s| s.schedules);
        match args.time_limit {
            Some(secs) => {
                tlbsim::explore::check_for(&exp, &opts, std::time::Duration::from_secs(secs))
            }
            None => tlbsim::explore::check(&exp, &opts),
        }
    };
    let rep = match rep {
        Ok(r) => r,
        Err(e) => {
            let file = args.experiment.display().to_string();
            eprintln!("error: {}", e.located_with_sets(&file, &text, &sets));
            return ExitCode::from(2);
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    let console = Console::new(&[args.json.as_deref()]);
    let doc = args
        .json
        .as_ref()
        .map(|_| json_report(&exp, &rep, &opts, secs, &base));
    let failed = rep.failure.as_ref().map(|f| f.schedule.clone());
    let code = print_report(&console, rep, &opts, secs, &base);
    let code = match (export, failed) {
        (Some(paths), Some(s)) => match export_litmus(&exp, opts.cpus, &s, &base, paths) {
            c if c == ExitCode::SUCCESS => code,
            failed => failed,
        },
        (Some(_), None) => {
            eprintln!("--export-litmus: no violation found, nothing written");
            code
        }
        _ => code,
    };
    write_json(args.json, doc, code)
}

/// The flags that refuse each other or a bad value, before the
/// experiment is loaded (a schedule that cannot be replayed among them).
fn check_flags(args: &Args) -> Result<(), ExitCode> {
    if let Some(Err(e)) = args.replay.as_deref().map(tlbsim::explore::parse_schedule) {
        eprintln!("error: --replay: {e}");
        return Err(ExitCode::from(2));
    }
    if args.time_limit.is_some() && args.strategy != "dpor" {
        eprintln!("error: --time-limit: only with --strategy dpor");
        return Err(ExitCode::from(2));
    }
    if args.replay.is_some() && args.json.is_some() {
        eprintln!("error: --json: not with --replay (a replay prints its outcome)");
        return Err(ExitCode::from(2));
    }
    super::export_litmus::check_path(args.export_litmus.as_deref())
}

/// Writes the JSON report `doc` to `path` when asked; the exit code is
/// `code` unless the write fails.
fn write_json(path: Option<PathBuf>, doc: Option<serde_json::Value>, code: ExitCode) -> ExitCode {
    match (path, doc) {
        (Some(path), Some(doc)) => {
            let bytes = serde_json::to_vec_pretty(&doc).expect("serialisable");
            match write_or_report(&path, &bytes) {
                c if c == ExitCode::SUCCESS => code,
                failed => failed,
            }
        }
        _ => code,
    }
}

/// The search as JSON: the experiment, the options, the counts, the
/// verdict and, for a failure, its schedule, report and replay command;
/// host time apart (`host`), as `run --json` keeps it.
fn json_report(
    exp: &Experiment,
    rep: &CheckReport,
    opts: &CheckOptions,
    secs: f64,
    base: &str,
) -> serde_json::Value {
    let strategy = match opts.strategy {
        Strategy::Random => serde_json::json!({ "name": "random" }),
        Strategy::Pct(d) => serde_json::json!({ "name": "pct", "depth": d }),
        Strategy::Exhaustive(p) => serde_json::json!({ "name": "exhaustive", "preemptions": p }),
        Strategy::Dpor => serde_json::json!({
            "name": "dpor",
            "pruned": rep.pruned,
            "max_spin": opts.max_spin,
            "spun": rep.spun,
            "peak_states": rep.dpor_peak_states,
            "choices_left": rep.dpor_choices_left,
            "time_limited": rep.time_limited,
        }),
    };
    let failure = rep.failure.as_ref().map(|f| {
        serde_json::json!({
            "index": f.index,
            "schedule": f.schedule,
            "report": f.report.to_string(),
            "replay": replay_command(base, &f.schedule),
        })
    });
    serde_json::json!({
        "experiment": exp.experiment.name,
        "version": env!("CARGO_PKG_VERSION"),
        "options": {
            "strategy": strategy,
            "schedules": opts.schedules,
            "seed": opts.seed,
            "max_actions": opts.max_actions,
            "speculation": opts.speculation,
            "cpus": opts.cpus,
        },
        "schedules": rep.schedules,
        "completed": rep.completed,
        "bounded": rep.bounded,
        "actions": rep.actions,
        "interrupts": rep.interrupts,
        "exhausted": rep.exhausted,
        "verdict": if rep.failure.is_some() { "fail" } else { "pass" },
        "failure": failure,
        "host": { "seconds": secs },
    })
}

/// `--max-actions` and `--max-spin`: 1 to [`MAX_ACTIONS`].
fn max_actions(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n == 0 || n > MAX_ACTIONS {
        return Err(format!("must be 1..={MAX_ACTIONS}"));
    }
    Ok(n)
}

/// The explorer's options from the arguments; exit code 2 on an unknown
/// strategy.
fn options(args: &Args) -> Result<CheckOptions, ExitCode> {
    let strategy = match args.strategy.as_str() {
        "random" => Strategy::Random,
        "pct" => Strategy::Pct(args.depth),
        "exhaustive" => Strategy::Exhaustive(args.preemptions),
        "dpor" => Strategy::Dpor,
        other => {
            eprintln!("error: --strategy {other:?}: expected random, pct, exhaustive or dpor");
            return Err(ExitCode::from(2));
        }
    };
    Ok(CheckOptions {
        strategy,
        schedules: args.schedules,
        seed: args.seed,
        max_actions: args.max_actions,
        max_spin: args.max_spin,
        speculation: args.speculation,
        cpus: args.cpus,
    })
}

/// Applies the command-line overrides to `exp` and returns the command a
/// replay starts with (`--replay` is appended); exit code 2 on a bad
/// profile.
fn apply(
    exp: &mut Experiment,
    path: &Path,
    opts: &CheckOptions,
    ov: Overrides,
    allocator: Option<String>,
) -> Result<String, ExitCode> {
    let mut base = format!("tlbsim check {}", path_word(path));
    base.push_str(&set_args(&ov.sets));
    if let Some(p) = ov.profile {
        base.push_str(&format!(" --profile {}", shell_word(&p)));
        if let Err(e) = set_profile(exp, &p, Path::new("")) {
            eprintln!("error: --profile {p}: {e}");
            return Err(ExitCode::from(2));
        }
    }
    if let Some(c) = opts.cpus {
        base.push_str(&format!(" --cpus {c}"));
    }
    if let Some(p) = ov.policy {
        base.push_str(&format!(" --policy {}", shell_word(&p)));
        exp.kernel.tlb_policy = p;
    }
    if let Some(a) = allocator {
        base.push_str(&format!(" --allocator {}", shell_word(&a)));
        exp.kernel.asid_allocator = a;
    }
    Ok(base)
}

/// Writes the violation of `schedule` as a litmus test to `paths.0`
/// (`paths.1` is the experiment file the comment names).
fn export_litmus(
    exp: &Experiment,
    cpus: Option<u32>,
    schedule: &str,
    base: &str,
    paths: (&Path, &Path),
) -> ExitCode {
    let replay = replay_command(base, schedule);
    let src = super::export_litmus::Source {
        file: paths.1,
        replay: &replay,
    };
    super::export_litmus::write(exp, cpus, schedule, &src, paths.0)
}

/// Re-runs the one schedule `schedule` and prints its outcome; with
/// `export`, writes its violation as a litmus test.
fn replay(
    exp: &Experiment,
    cpus: Option<u32>,
    schedule: &str,
    base: &str,
    export: Option<(&Path, &Path)>,
) -> ExitCode {
    match tlbsim::explore::check_replay(exp, cpus, schedule) {
        Ok(Outcome::Violation(r)) => {
            outln!("replayed: checker violation:\n{r}");
            match export {
                Some(paths) => match export_litmus(exp, cpus, schedule, base, paths) {
                    c if c == ExitCode::SUCCESS => ExitCode::FAILURE,
                    failed => failed,
                },
                None => ExitCode::FAILURE,
            }
        }
        Ok(o) => {
            outln!("replayed: {o:?}");
            if export.is_some() {
                eprintln!("--export-litmus: no violation, nothing written");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Prints the search's counts and rates, whether an exhaustive search was
/// cut short, and the verdict; a failure with its replay command (`base`
/// plus the schedule).
fn print_report(
    out: &Console,
    rep: CheckReport,
    opts: &CheckOptions,
    secs: f64,
    base: &str,
) -> ExitCode {
    out.line(&format!(
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
    ));
    if matches!(opts.strategy, Strategy::Exhaustive(_)) && !rep.exhausted && rep.failure.is_none() {
        out.line(&format!(
            "note: the exhaustive search is NOT complete: it stopped at --schedules {}; raise it to finish",
            rep.schedules
        ));
    }
    if opts.strategy == Strategy::Dpor {
        let spun = match rep.spun {
            0 => String::new(),
            n => format!(", {n} cut after {} spinning actions", opts.max_spin),
        };
        out.line(&format!(
            "dpor: {} of them stopped early by sleep sets{spun}; {}",
            rep.pruned,
            match (rep.exhausted, rep.failure.is_some()) {
                (true, _) if rep.bounded + rep.spun > 0 => format!(
                    "search complete up to its cuts: every class of equivalent schedules was run, {} of them cut (raise --max-actions or --max-spin to see further)",
                    rep.bounded + rep.spun
                ),
                (true, _) =>
                    "search complete: every class of equivalent schedules was run".to_string(),
                (false, true) => "stopped at the first failure".to_string(),
                (false, false) if rep.time_limited => format!(
                    "search NOT complete: it stopped at --time-limit after {} schedules",
                    rep.schedules
                ),
                (false, false) => format!(
                    "search NOT complete: it stopped at --schedules {}; raise it to finish",
                    rep.schedules
                ),
            }
        ));
        let left = if rep.exhausted || rep.failure.is_some() {
            String::new()
        } else {
            format!(
                "; {} backtrack choices left (each at least one more schedule)",
                rep.dpor_choices_left
            )
        };
        out.line(&format!(
            "dpor: the explored tree held at most {} states{left}",
            rep.dpor_peak_states
        ));
    }
    match rep.failure {
        None => {
            out.line("checker: pass");
            ExitCode::SUCCESS
        }
        Some(f) => {
            out.line(&format!("schedule {} fails:\n{}", f.index, f.report));
            out.line(&format!("replay: {}", replay_command(base, &f.schedule)));
            ExitCode::FAILURE
        }
    }
}

/// The command that replays `schedule`: `base` (the command line of the
/// search, its words quoted) and `--replay` with the schedule quoted.
pub fn replay_command(base: &str, schedule: &str) -> String {
    format!("{base} --replay {}", shell_word(schedule))
}

#[cfg(test)]
mod tests {
    use super::replay_command;
    use crate::files::path_word;
    use std::path::Path;

    #[test]
    fn a_replay_command_quotes_a_path_with_a_space_and_a_quote() {
        let base = format!("tlbsim check {}", path_word(Path::new("my runs/it's.toml")));
        assert_eq!(
            replay_command(&base, "s0*2 d1"),
            "tlbsim check 'my runs/it'\\''s.toml' --replay 's0*2 d1'"
        );
    }
}
