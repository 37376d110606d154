//! Helpers shared by the integration tests.
#![allow(dead_code)]

use tlbsim::config::{parse_toml, Experiment};
use tlbsim::sim::{run, RunOptions, RunOutput, SimError};

/// A test experiment on `cpus` CPUs of `profile` with `policy`;
/// `kernel_extra` adds `[kernel]` lines, `workload` is the `[workload]`
/// body and `extra` follows it (e.g. a `[checker]` section).
pub fn experiment(
    profile: &str,
    policy: &str,
    cpus: u32,
    kernel_extra: &str,
    workload: &str,
    extra: &str,
) -> Experiment {
    let text = format!(
        "[experiment]\nname = \"t\"\nprofile = \"{profile}\"\n[machine]\ncpus = {cpus}\n[kernel]\ntlb_policy = \"{policy}\"\n{kernel_extra}[workload]\n{workload}\n{extra}"
    );
    parse_toml("test.toml", &text).expect("valid test config")
}

/// Runs `e` with root seed `seed`.
pub fn run_seed(e: &Experiment, seed: u64) -> Result<RunOutput, SimError> {
    run(
        e,
        &RunOptions {
            seed: Some(seed),
            cpus: None,
        },
    )
}
