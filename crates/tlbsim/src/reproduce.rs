//! The published results tlbsim reproduces, with the built-in experiment
//! that reproduces each. `tlbsim reproduce` runs them.

use crate::sim::RunOutput;

/// One published figure and how to compute the simulated counterpart.
#[derive(Debug, Clone, Copy)]
pub struct Reproduction {
    /// Experiment name (also the file name under `experiments/`).
    pub experiment: &'static str,
    /// The experiment's TOML text (built in).
    pub toml: &'static str,
    /// What is compared.
    pub metric: &'static str,
    /// Unit of `published` and of the simulated value.
    pub unit: &'static str,
    /// The published value.
    pub published: f64,
    /// Where it was published.
    pub source: &'static str,
    /// Extracts the simulated value from a run.
    pub extract: fn(&RunOutput) -> f64,
}

/// Every reproduction, in table order.
pub const REPRODUCTIONS: &[Reproduction] = &[Reproduction {
    experiment: "seed000-mprotect",
    toml: include_str!("../../../experiments/seed000-mprotect.toml"),
    metric: "elapsed, stock",
    unit: "s",
    published: 2.1696,
    source: "seed 000 (perf stat -r 10, for-each-cpu.sh ./mprotect-threaded 10000)",
    extract: |o| o.elapsed_ns as f64 / 1e9,
}];
