//! `tlbsim profiles`: the built-in machine profiles, or one as TOML.

use std::process::ExitCode;
use tlbsim::config::BUILTIN_PROFILES;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print this built-in profile's file (with its sources), a
    /// starting point for a profile of your own machine.
    #[arg(long)]
    show: Option<String>,
}

/// Lists the profiles, or prints the one `--show` names.
pub fn run(args: Args) -> ExitCode {
    match args.show {
        Some(name) => show(&name),
        None => list(),
    }
}

/// Prints the built-in profile `name`'s file; exit code 2 if there is none.
fn show(name: &str) -> ExitCode {
    match BUILTIN_PROFILES.iter().find(|(n, _)| *n == name) {
        Some((_, text)) => {
            out!("{text}");
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

/// One line per built-in profile: name, CPUs, sockets, description.
fn list() -> ExitCode {
    for (name, _) in BUILTIN_PROFILES {
        match tlbsim::config::builtin_profile(name) {
            Ok(p) => outln!(
                "{:<12} {:>5} CPUs  {} socket(s)  {}",
                p.name,
                p.topology.cpus,
                p.topology.sockets,
                p.description
            ),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
