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
    /// The acceptance criterion of the issue that asked for this row.
    pub accept: Accept,
}

/// When a before/after reproduction counts as reproduced (the criteria of
/// the issues that asked for the rows). Judged on the simulated before and
/// after values and the published ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Accept {
    /// No criterion.
    None,
    /// The simulated ratio (before / after) is within this many percent of
    /// the published ratio.
    RatioWithinPct(f64),
    /// The simulated ratio points the same way as the published one (both
    /// above 1 or both below) and differs from it by at most this many
    /// percentage points (ratios read as percentages: 1.094x = 109.4 %).
    RatioWithinPoints(f64),
    /// The simulated ratio is at least this.
    RatioAtLeast(f64),
    /// The simulated ratio is on the same side of 1 as the published one.
    SameDirection,
    /// The simulated before value is at least the first number and the
    /// after value at most the second (counts: "thousands" to "near zero").
    BeforeAtLeastAfterAtMost(f64, f64),
}

impl Accept {
    /// Whether `before`/`after` (simulated) meet the criterion, given the
    /// published ratio (NaN when none is published). `None` when there is
    /// no criterion or a value is not finite.
    pub fn judge(self, published_ratio: f64, before: f64, after: f64) -> Option<bool> {
        let ratio = before / after;
        let finite = |v: f64| v.is_finite().then_some(v);
        let side = |r: f64| r.partial_cmp(&1.0);
        match self {
            Accept::None => None,
            Accept::RatioWithinPct(pct) => {
                let (r, p) = (finite(ratio)?, finite(published_ratio)?);
                Some(((r - p) / p).abs() * 100.0 <= pct)
            }
            Accept::RatioWithinPoints(pp) => {
                let (r, p) = (finite(ratio)?, finite(published_ratio)?);
                Some(side(r) == side(p) && (r - p).abs() * 100.0 <= pp)
            }
            Accept::RatioAtLeast(x) => Some(finite(ratio)? >= x),
            Accept::SameDirection => {
                let (r, p) = (finite(ratio)?, finite(published_ratio)?);
                Some(side(r) == side(p) && side(p) != Some(std::cmp::Ordering::Equal))
            }
            Accept::BeforeAtLeastAfterAtMost(lo, hi) => {
                Some(finite(before)? >= lo && finite(after)? <= hi)
            }
        }
    }

    /// The criterion in words, for tables and JSON.
    pub fn describe(self) -> String {
        match self {
            Accept::None => "-".into(),
            Accept::RatioWithinPct(p) => format!("ratio within +-{p}% of published"),
            Accept::RatioWithinPoints(p) => {
                format!("ratio same way as published, within +-{p} points")
            }
            Accept::RatioAtLeast(x) => format!("ratio >= {x}"),
            Accept::SameDirection => "ratio same way as published".into(),
            Accept::BeforeAtLeastAfterAtMost(lo, hi) => {
                format!("before >= {lo}, after <= {hi}")
            }
        }
    }
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
        accept: Accept::RatioWithinPct(20.0),
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
        accept: Accept::RatioWithinPoints(5.0),
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
        accept: Accept::RatioWithinPoints(5.0),
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
        accept: Accept::BeforeAtLeastAfterAtMost(1000.0, 10.0),
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
        accept: Accept::BeforeAtLeastAfterAtMost(1000.0, 10.0),
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
        accept: Accept::RatioAtLeast(50.0),
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
        accept: Accept::SameDirection,
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
        accept: Accept::RatioWithinPct(20.0),
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
        accept: Accept::RatioWithinPct(20.0),
    },
];

#[cfg(test)]
mod tests {
    use super::Accept;

    #[test]
    fn acceptance_criteria_judge_as_the_issues_state() {
        // Seed 000 mprotect: 15.56x published.
        assert_eq!(
            Accept::RatioWithinPct(20.0).judge(15.56, 2.28, 0.145),
            Some(true)
        );
        assert_eq!(
            Accept::RatioWithinPct(20.0).judge(15.56, 2.28, 0.2),
            Some(false)
        );
        // tcmalloc 1.094x published: 1.001x is 9.3 points off.
        let pp = Accept::RatioWithinPoints(5.0);
        assert_eq!(pp.judge(1.094, 0.914, 0.913), Some(false));
        assert_eq!(pp.judge(1.103, 1.436, 1.357), Some(true));
        // Within the points but the wrong way.
        assert_eq!(pp.judge(1.02, 0.99, 1.0), Some(false));
        assert_eq!(
            Accept::RatioAtLeast(50.0).judge(f64::NAN, 3.3, 0.11),
            Some(false)
        );
        assert_eq!(
            Accept::RatioAtLeast(50.0).judge(f64::NAN, 6.0, 0.11),
            Some(true)
        );
        assert_eq!(Accept::SameDirection.judge(1.02, 1.01, 1.0), Some(true));
        assert_eq!(Accept::SameDirection.judge(1.02, 0.99, 1.0), Some(false));
        let ipis = Accept::BeforeAtLeastAfterAtMost(1000.0, 10.0);
        assert_eq!(ipis.judge(f64::NAN, 14.0, 0.0), Some(false));
        assert_eq!(ipis.judge(f64::NAN, 6619.0, 1.0), Some(true));
        assert_eq!(Accept::None.judge(1.0, 1.0, 1.0), None);
        assert_eq!(Accept::RatioWithinPct(20.0).judge(f64::NAN, 1.0, 1.0), None);
    }
}
