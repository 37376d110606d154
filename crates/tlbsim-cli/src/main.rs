//! The `tlbsim` command: one file per command under `cmd/`, each with its
//! arguments and a `run`; shared file handling in `files`; the run table
//! and JSON document in `report`; standard output through `out`, whose
//! errors become the exit code.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

// First, so that `out!` and `outln!` are in scope in every module.
#[macro_use]
mod out;

mod bounds;
mod chart;
mod cleanup;
mod cmd;
mod files;
mod input;
mod progress;
mod report;

/// tlbsim: a laboratory for TLB maintenance on many-core machines: what
/// a TLB-flush or ASID change costs on a modelled machine, and whether it
/// is correct.
#[derive(Parser, Debug)]
#[command(version, after_help = BY_TASK)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The commands grouped by what they are for, after the list in `--help`
/// (a test checks that it names every command).
const BY_TASK: &str = "\
Commands by task:
  cost          run, sweep, merge, plot, rerun, reproduce
  correctness   check, litmus, bugs
  machines      profiles, policies, calibrate, validate-host, bench
  programs      record, replay

Start with `tlbsim reproduce` (the seeds' published results, simulated),
then README.md's first ten minutes.";

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run one experiment and print a perf-stat-like table.
    Run(cmd::run::Args),
    /// Run again the configuration a `run --json` result recorded, and say
    /// whether the result is the same.
    Rerun(cmd::rerun::Args),
    /// Run an experiment over CPU counts, policies, profiles and seeds;
    /// write a CSV (resumable after a kill, or split into shards).
    Sweep(cmd::sweep::Args),
    /// Join the points that shards of a sweep kept (`sweep --shard I/N
    /// --resume DIR`) into the CSV the whole sweep would write.
    Merge(cmd::merge::Args),
    /// Explore schedules of an experiment under the checker (the explorer:
    /// which CPU steps next, when TLBIs arrive, speculative fills).
    Check(cmd::check::Args),
    /// Run herd AArch64 VMSA litmus tests (a file, or a directory with
    /// its kinds.txt) on tlbsim's hardware model and compare each verdict
    /// with the architecture's.
    Litmus(cmd::litmus::Args),
    /// Find Linux's own TLB bugs again: each catalogued bug's search on
    /// the buggy kernel and on its fix.
    Bugs(cmd::bugs::Args),
    /// List the built-in machine profiles, or print one as TOML.
    Profiles(cmd::profiles::Args),
    /// List the registered policies and workloads.
    Policies(cmd::policies::Args),
    /// Measure the simulator itself on a fixed set of runs: events/s,
    /// host ns per event and peak RSS, with and without the checker.
    Bench(cmd::bench::Args),
    /// Measure this host with built-in microbenchmarks and write a
    /// machine profile for it (`-o FILE`; unmeasurable values are copied
    /// from the nearest built-in profile, and say so).
    Calibrate(cmd::calibrate::Args),
    /// Run every published experiment and print published vs simulated.
    Reproduce(cmd::reproduce::Args),
    /// Draw a sweep's CSV as a line chart (SVG): two columns as x and y,
    /// one line per group.
    Plot(cmd::plot::Args),
    /// Record a command's scheduling, memory-map and page-fault events
    /// with perf into a tlbsim trace (docs/trace-format.md).
    Record(cmd::record::Args),
    /// Replay a recorded trace on a profile under a policy, checker on.
    Replay(cmd::replay::Args),
    /// `tlbsim record`'s overhead probe (run by `record` itself).
    #[command(hide = true)]
    RecordProbe,
    /// Run will-it-scale's tlb_flush1/2/3 loops on this host and in the
    /// simulator; print measured vs predicted loops/s and shootdowns.
    ValidateHost(cmd::validate_host::Args),
}

fn main() -> ExitCode {
    quiet_broken_pipe();
    cleanup::install();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return out::finish(clap_exit(e)),
    };
    let code = match cli.cmd {
        Cmd::Run(a) => cmd::run::run(a),
        Cmd::Rerun(a) => cmd::rerun::run(a),
        Cmd::Sweep(a) => cmd::sweep::run(a),
        Cmd::Merge(a) => cmd::merge::run(a),
        Cmd::Check(a) => cmd::check::run(a),
        Cmd::Litmus(a) => cmd::litmus::run(a),
        Cmd::Bugs(a) => cmd::bugs::run(a),
        Cmd::Profiles(a) => cmd::profiles::run(a),
        Cmd::Policies(a) => cmd::policies::run(a),
        Cmd::Reproduce(a) => cmd::reproduce::run(a),
        Cmd::Bench(a) => cmd::bench::run(a),
        Cmd::Calibrate(a) => cmd::calibrate::run(a),
        Cmd::Plot(a) => cmd::plot::run(a),
        Cmd::Record(a) => cmd::record::run(a),
        Cmd::Replay(a) => cmd::replay::run(a),
        Cmd::RecordProbe => cmd::record_probe::run(),
        Cmd::ValidateHost(a) => cmd::validate_host::run(a),
    };
    cleanup::wait_if_exiting();
    out::finish(code)
}

/// Ends a command line clap did not run: an error on standard error with
/// exit code 2; `--help` and `--version` on standard output, through
/// [`out!`] (so that a write error is reported) unless it is a terminal,
/// where clap prints them in colour.
fn clap_exit(e: clap::Error) -> ExitCode {
    use std::io::IsTerminal;
    if e.use_stderr() || std::io::stdout().is_terminal() {
        e.exit();
    }
    out!("{}", e.render());
    ExitCode::SUCCESS
}

/// `tlbsim ... | head`: a closed stdout ends the program quietly, like
/// other Unix tools, instead of with a panic message.
fn quiet_broken_pipe() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or("");
        if msg.contains("Broken pipe") {
            std::process::exit(i32::from(out::BROKEN_PIPE_EXIT));
        }
        default_hook(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::{Cli, BY_TASK};
    use clap::CommandFactory;

    #[test]
    fn help_names_every_command_by_task() {
        let cmd = Cli::command();
        let grouped: Vec<&str> = BY_TASK
            .lines()
            .skip(1)
            .take_while(|l| !l.is_empty())
            .flat_map(|l| l.split_whitespace().skip(1))
            .map(|w| w.trim_end_matches(','))
            .collect();
        let visible: Vec<&str> = cmd
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name())
            .collect();
        let mut a = grouped.clone();
        let mut b = visible.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "every visible command in one group, once");
        let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
        assert!(
            about.starts_with("tlbsim: a laboratory for TLB maintenance"),
            "{about}"
        );
    }
}
