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
    /// A second, patched kernel to compare against (same file and profile,
    /// only `kernel.tlb_policy` differs).
    pub patched: Option<Patched>,
}

/// The patched side of a before/after reproduction.
#[derive(Debug, Clone, Copy)]
pub struct Patched {
    /// TLB policy of the patched kernel.
    pub policy: &'static str,
    /// The published value with the patch.
    pub published: f64,
}

fn elapsed_s(o: &RunOutput) -> f64 {
    o.elapsed_ns as f64 / 1e9
}

/// Every reproduction, in table order.
pub const REPRODUCTIONS: &[Reproduction] = &[
    Reproduction {
        experiment: "seed000-mprotect",
        toml: include_str!("../../../experiments/seed000-mprotect.toml"),
        metric: "elapsed",
        unit: "s",
        published: 2.1696,
        source:
            "seed 000 v2 cover letter (perf stat -r 10, for-each-cpu.sh ./mprotect-threaded 10000)",
        extract: elapsed_s,
        patched: Some(Patched {
            policy: "arm64-skip-broadcast-v2",
            published: 0.13941,
        }),
    },
    Reproduction {
        experiment: "seed000-tcmalloc",
        toml: include_str!("../../../experiments/seed000-tcmalloc.toml"),
        metric: "elapsed",
        unit: "s",
        published: 0.99018,
        source:
            "seed 000 v2 cover letter (for-each-cpu.sh tcmalloc_large_heap_fragmentation_unittest)",
        extract: elapsed_s,
        patched: Some(Patched {
            policy: "arm64-skip-broadcast-v2",
            published: 0.90510,
        }),
    },
    Reproduction {
        experiment: "seed000-sort-compute",
        toml: include_str!("../../../experiments/seed000-sort-compute.toml"),
        metric: "elapsed",
        unit: "s",
        published: 1.8094,
        source: "seed 000 v2 cover letter (sort-compute: 256 shells x 32 sort)",
        extract: elapsed_s,
        patched: Some(Patched {
            policy: "arm64-skip-broadcast-v2",
            published: 1.64025,
        }),
    },
];
