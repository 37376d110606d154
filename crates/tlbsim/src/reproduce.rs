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

/// The patched side of a before/after reproduction: the same experiment
/// file with the kernel component the seed changed swapped.
#[derive(Debug, Clone, Copy)]
pub struct Patched {
    /// `kernel.tlb_policy` of the patched kernel, if it changes.
    pub policy: Option<&'static str>,
    /// `kernel.asid_allocator` of the patched kernel, if it changes.
    pub allocator: Option<&'static str>,
    /// The published value with the patch (NaN: not published).
    pub published: f64,
    /// The before/after ratio row.
    pub ratio: Ratio,
}

/// Whether and how to compare the before/after ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ratio {
    /// No ratio row.
    None,
    /// Ratio of the two published values.
    OfPublished,
    /// Only the ratio was published.
    Published(f64),
}

impl Patched {
    const fn policy(policy: &'static str, published: f64) -> Self {
        Self {
            policy: Some(policy),
            allocator: None,
            published,
            ratio: Ratio::OfPublished,
        }
    }
    const fn allocator(allocator: &'static str, published: f64, ratio: Ratio) -> Self {
        Self {
            policy: None,
            allocator: Some(allocator),
            published,
            ratio,
        }
    }
}

fn cpu_ipis(o: &RunOutput, cpu: usize) -> f64 {
    o.stats
        .per_cpu
        .get(cpu)
        .map(|c| (c.ipi_call + c.ipi_call_single) as f64)
        .unwrap_or(0.0)
}

fn asid_lock_max_wait_us(o: &RunOutput) -> f64 {
    o.stats
        .locks
        .get("cpu_asid_lock")
        .map(|l| l.contended_wait_ns.max as f64 / 1e3)
        .unwrap_or(0.0)
}

fn iteration_us(o: &RunOutput) -> f64 {
    o.metrics.get("iteration_us").copied().unwrap_or(f64::NAN)
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
        patched: Some(Patched::policy("arm64-skip-broadcast-v2", 0.13941)),
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
        patched: Some(Patched::policy("arm64-skip-broadcast-v2", 0.90510)),
    },
    Reproduction {
        experiment: "seed000-sort-compute",
        toml: include_str!("../../../experiments/seed000-sort-compute.toml"),
        metric: "elapsed",
        unit: "s",
        published: 1.8094,
        source: "seed 000 v2 cover letter (sort-compute: 256 shells x 32 sort)",
        extract: elapsed_s,
        patched: Some(Patched::policy("arm64-skip-broadcast-v2", 1.64025)),
    },
    Reproduction {
        experiment: "seed002-hackbench",
        toml: include_str!("../../../experiments/seed002-hackbench.toml"),
        metric: "function-call IPIs, CPU0",
        unit: "count",
        published: 6619.0,
        source: "seed 002 cover letter (/proc/interrupts, Single function call interrupts)",
        extract: |o| cpu_ipis(o, 0),
        patched: Some(Patched::allocator("arm64-asid-reserved", 1.0, Ratio::None)),
    },
    Reproduction {
        experiment: "seed002-hackbench",
        toml: include_str!("../../../experiments/seed002-hackbench.toml"),
        metric: "function-call IPIs, CPU1",
        unit: "count",
        published: 1123.0,
        source: "seed 002 cover letter (/proc/interrupts, Single function call interrupts)",
        extract: |o| cpu_ipis(o, 1),
        patched: Some(Patched::allocator("arm64-asid-reserved", 3.0, Ratio::None)),
    },
    Reproduction {
        experiment: "seed002-hackbench",
        toml: include_str!("../../../experiments/seed002-hackbench.toml"),
        metric: "cpu_asid_lock worst wait",
        unit: "us",
        published: 734.0,
        source: "seed 002 cover letter (\"waittime varies between 0.5 and 734 us\")",
        extract: asid_lock_max_wait_us,
        patched: Some(Patched::allocator("arm64-asid-reserved", 4.6, Ratio::OfPublished)),
    },
    Reproduction {
        experiment: "seed002-hackbench",
        toml: include_str!("../../../experiments/seed002-hackbench.toml"),
        metric: "hackbench time",
        unit: "s",
        published: f64::NAN,
        source: "seed 002 cover letter (\"~2% improvement in hackbench scores\"; only the ratio is published)",
        extract: elapsed_s,
        patched: Some(Patched::allocator("arm64-asid-reserved", f64::NAN, Ratio::Published(1.02))),
    },
    Reproduction {
        experiment: "seed004-madv-migrate",
        toml: include_str!("../../../experiments/seed004-madv-migrate.toml"),
        metric: "iteration",
        unit: "us",
        published: 21.6,
        source: "seed 004 (MADV_DONTNEED; touch; sched_setaffinity to the other CPU; KVM guest)",
        extract: iteration_us,
        patched: Some(Patched::policy("x86-tlb-gen", 13.4)),
    },
    Reproduction {
        experiment: "seed004-pthread-mmap",
        toml: include_str!("../../../experiments/seed004-pthread-mmap.toml"),
        metric: "elapsed",
        unit: "s",
        published: 1.9,
        source: "seed 004 (Vitaly's pthread_mmap, 8 threads on four cores, 100 rounds, 256M; \"or so\")",
        extract: elapsed_s,
        patched: Some(Patched::policy("x86-tlb-gen", 1.1)),
    },
];
