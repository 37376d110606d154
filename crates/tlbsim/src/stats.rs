//! Named counters and histograms that the model fills. Printing is the CLI's
//! business.

use crate::engine::Ns;
use crate::hw::{CpuId, CpuVec};
use serde::Serialize;

/// Per-CPU event counts.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CpuStats {
    /// Local (non-shareable) TLBI instructions.
    pub tlbi_local: u64,
    /// Broadcast (inner-shareable) TLBI instructions.
    pub tlbi_broadcast: u64,
    /// DSB ISH barriers.
    pub dsb_ish: u64,
    /// DVM Syncs sent to the misc node.
    pub dvm_syncs: u64,
    /// DVM operations received from other CPUs.
    pub dvm_ops_received: u64,
    /// User accesses that hit the TLB.
    pub tlb_hits: u64,
    /// User accesses that missed the TLB.
    pub tlb_misses: u64,
    /// Page walks.
    pub page_walks: u64,
    /// Table levels read by walks (a guest's stage-2 reads included).
    pub walk_levels: u64,
    /// Walks shortened by the walk cache.
    pub walk_cache_hits: u64,
    /// Context switches.
    pub context_switches: u64,
    /// System calls.
    pub syscalls: u64,
    /// Page faults taken.
    pub page_faults: u64,
    /// Reschedule IPIs sent.
    pub ipis_sent: u64,
    /// Reschedule IPIs received (`/proc/interrupts` "Rescheduling interrupts").
    pub ipi_resched: u64,
    /// Function-call IPIs received from a call to several CPUs
    /// ("Function call interrupts").
    pub ipi_call: u64,
    /// Function-call IPIs received from a call to one CPU ("Single function
    /// call interrupts").
    pub ipi_call_single: u64,
    /// Timer tick interrupts taken (`/proc/interrupts` "LOC: Local timer
    /// interrupts"); left out of the JSON when zero (no tick modelled).
    #[serde(skip_serializing_if = "is_zero")]
    pub timer_ticks: u64,
    /// Time not spent in the idle task (ns).
    pub busy_ns: u64,
    /// User-mm flushes sent to every CPU (policy decision).
    pub flushes_broadcast: u64,
    /// User-mm flushes done on this CPU only (policy decision).
    pub flushes_local: u64,
    /// User-mm flushes skipped: no CPU could hold the translations.
    pub flushes_skipped: u64,
    /// Local whole-ASID flushes on switch-in because this CPU was marked
    /// stale (seed 000).
    pub stale_switch_flushes: u64,
    /// Writes of the translation base: `TTBR0_EL1` on arm64, `CR3` on x86.
    pub ttbr_writes: u64,
    /// x86 `CR3` writes that flushed their PCID's entries (no NOFLUSH bit).
    pub cr3_flushes: u64,
}

impl CpuStats {
    /// Adds `o` into `self`.
    pub fn add(&mut self, o: &CpuStats) {
        self.tlbi_local += o.tlbi_local;
        self.tlbi_broadcast += o.tlbi_broadcast;
        self.dsb_ish += o.dsb_ish;
        self.dvm_syncs += o.dvm_syncs;
        self.dvm_ops_received += o.dvm_ops_received;
        self.tlb_hits += o.tlb_hits;
        self.tlb_misses += o.tlb_misses;
        self.page_walks += o.page_walks;
        self.walk_levels += o.walk_levels;
        self.walk_cache_hits += o.walk_cache_hits;
        self.context_switches += o.context_switches;
        self.syscalls += o.syscalls;
        self.page_faults += o.page_faults;
        self.ipis_sent += o.ipis_sent;
        self.ipi_resched += o.ipi_resched;
        self.ipi_call += o.ipi_call;
        self.ipi_call_single += o.ipi_call_single;
        self.timer_ticks += o.timer_ticks;
        self.busy_ns += o.busy_ns;
        self.flushes_broadcast += o.flushes_broadcast;
        self.flushes_local += o.flushes_local;
        self.flushes_skipped += o.flushes_skipped;
        self.stale_switch_flushes += o.stale_switch_flushes;
        self.ttbr_writes += o.ttbr_writes;
        self.cr3_flushes += o.cr3_flushes;
    }
}

/// Samples of a quantity, kept as an exact value → count map while they
/// take at most [`MAX_DISTINCT`] distinct values (every run so far): the
/// summary is then exact, the same as sorting every sample. Past that the
/// samples move into an HDR histogram of 3 significant digits (`coarse`),
/// so that memory stays bounded however long the run: the count, minimum,
/// maximum and mean stay exact, the median and p99 are then within 0.1 %.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    counts: std::collections::BTreeMap<u64, u64>,
    n: u64,
    coarse: Option<Box<Coarse>>,
}

/// Distinct values [`Samples`] keeps exactly.
pub const MAX_DISTINCT: usize = 1 << 16;

/// [`Samples`] past [`MAX_DISTINCT`] distinct values.
#[derive(Debug, Clone)]
struct Coarse {
    h: hdrhistogram::Histogram<u64>,
    min: u64,
    max: u64,
    sum: f64,
}

impl Coarse {
    /// The exact samples `counts`, moved into a histogram.
    fn from_counts(counts: &std::collections::BTreeMap<u64, u64>) -> Box<Coarse> {
        let mut c = Box::new(Coarse {
            // Every u64 a sample can be below 2^63 (nanoseconds: 292
            // years); larger ones are clamped there.
            h: hdrhistogram::Histogram::new_with_bounds(1, u64::MAX / 2, 3)
                .expect("valid bounds and significant digits"),
            min: u64::MAX,
            max: 0,
            sum: 0.0,
        });
        for (&v, &n) in counts {
            c.record_n(v, n);
        }
        c
    }

    fn record_n(&mut self, v: u64, n: u64) {
        self.h.saturating_record_n(v, n);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v as f64 * n as f64;
    }
}

/// Summary of [`Samples`].
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min: u64,
    /// Median (lower middle).
    pub median: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Samples {
    /// Records one sample.
    pub fn record(&mut self, v: u64) {
        self.n += 1;
        if let Some(c) = self.coarse.as_mut() {
            c.record_n(v, 1);
            return;
        }
        *self.counts.entry(v).or_insert(0) += 1;
        if self.counts.len() > MAX_DISTINCT {
            self.coarse = Some(Coarse::from_counts(&self.counts));
            self.counts = Default::default();
        }
    }

    /// The sample of rank `i` (0-based) in ascending order; `i < n`.
    fn rank(&self, i: u64) -> u64 {
        let mut seen = 0;
        for (&v, &c) in &self.counts {
            seen += c;
            if i < seen {
                return v;
            }
        }
        unreachable!("rank {i} of {} samples", self.n)
    }

    /// Summarises the samples: median and p99 are the samples of rank
    /// `(n-1)/2` and `(n-1)*99/100`; the mean adds the samples in ascending
    /// order, as a sorted array would.
    pub fn summary(&self) -> Summary {
        let n = self.n;
        if n == 0 {
            return Summary::default();
        }
        if let Some(c) = &self.coarse {
            return Summary {
                count: n,
                min: c.min,
                median: c.h.value_at_quantile(0.5),
                p99: c.h.value_at_quantile(0.99),
                max: c.max,
                mean: c.sum / n as f64,
            };
        }
        let mut sum = 0.0f64;
        for (&v, &c) in &self.counts {
            for _ in 0..c {
                sum += v as f64;
            }
        }
        let p99 = ((u128::from(n) - 1) * 99 / 100) as u64;
        Summary {
            count: n,
            min: *self.counts.keys().next().expect("non-empty"),
            median: self.rank((n - 1) / 2),
            p99: self.rank(p99),
            max: *self.counts.keys().next_back().expect("non-empty"),
            mean: sum / n as f64,
        }
    }
}

/// Acquisitions and contended waits of one class of locks.
#[derive(Debug, Clone, Default)]
pub struct LockStats {
    /// Acquisitions (shared or exclusive).
    pub acquisitions: u64,
    /// Wait of each acquisition that found the lock taken, until it was
    /// handed over (ns).
    pub contended_wait_ns: Samples,
    /// Time each exclusive hold lasted, acquisition to release (ns).
    pub hold_ns: Samples,
}

/// Page reclaim and swap counters, named as in `/proc/vmstat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReclaimStats {
    /// Folios reclaimed (freed) by reclaim.
    pub pgsteal: u64,
    /// Folios reclaim isolated but kept (locked, mapped again or
    /// referenced meanwhile) and put back.
    pub kept: u64,
    /// Pages written to swap.
    pub pswpout: u64,
    /// Pages read from swap.
    pub pswpin: u64,
    /// Unmapped PTEs whose flush reclaim deferred to its batch.
    pub flush_deferred: u64,
    /// Batch flushes (`arch_tlbbatch_flush()`).
    pub batch_flushes: u64,
    /// Folios moved to another node (`pgmigrate_success`).
    pub pgmigrate_success: u64,
    /// Direct reclaims: allocations that reclaimed themselves
    /// (`allocstall`). Left out of the JSON when zero.
    #[serde(skip_serializing_if = "crate::stats::is_zero")]
    pub allocstall: u64,
}

/// For `skip_serializing_if`: a counter that stayed zero.
pub fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ReclaimStats {
    /// Nothing was reclaimed or swapped (the report then leaves it out).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Everything the model counts during a run.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Per-CPU counters, except the DVM operations counted by
    /// [`Stats::dvm_received_by_all`]: read them with [`Stats::per_cpu`].
    pub cpu: CpuVec<CpuStats>,
    /// DVM operations that reached every CPU, counted once each instead of
    /// once per target (so that a broadcast costs O(1) here, not O(CPUs)).
    dvm_to_all: u64,
    /// Per CPU: how many of `dvm_to_all` it issued (an issuer does not
    /// receive its own).
    dvm_to_all_issued: CpuVec<u64>,
    /// Time a DVM Sync waited at the misc node before service (ns).
    pub dvm_sync_queue_wait_ns: Samples,
    /// Latency of each flush_tlb_* call, entry to return (ns).
    pub flush_latency_ns: Samples,
    /// ASID rollovers.
    pub asid_rollovers: u64,
    /// VMID rollovers (KVM's allocator, `kernel/arm64/kvm/vmid.rs`).
    pub vmid_rollovers: u64,
    /// Page-table pages freed.
    pub tables_freed: u64,
    /// Huge pages mapped by faults (`/proc/vmstat` thp_fault_alloc).
    pub thp_fault_alloc: u64,
    /// Huge pages split into 4 KiB PTEs (`/proc/vmstat` thp_split_pmd).
    pub thp_split_pmd: u64,
    /// Events processed by the driver.
    pub events: u64,
    /// Page reclaim and swap counters.
    pub reclaim: ReclaimStats,
    /// Lock statistics by lock class name, in the order of first use (a
    /// handful of classes, found by a scan that compares the name's address
    /// before its text: cheaper than a map on every acquisition).
    pub locks: Vec<(&'static str, LockStats)>,
    /// Simulated CPU time by task name (comm) and what the CPU ran: the
    /// innermost kernel function ([`crate::kernel::Ctx::func`]), `[user]`,
    /// `[idle]`, or `[kernel]` outside any named function (ns, summed over
    /// CPUs; in the order of first use).
    pub cpu_time: Vec<(String, &'static str, Ns)>,
    /// Results a workload reports itself (name → value; the name carries
    /// the unit, e.g. `victim_slowdown_pct`).
    pub metrics: std::collections::BTreeMap<String, f64>,
}

impl Stats {
    /// Zeroed stats for `ncpus` CPUs.
    pub fn new(ncpus: usize) -> Self {
        Self {
            cpu: CpuVec::filled(ncpus, CpuStats::default()),
            dvm_to_all_issued: CpuVec::filled(ncpus, 0),
            ..Default::default()
        }
    }

    /// The statistics of the lock class `name`.
    pub fn lock(&mut self, name: &'static str) -> &mut LockStats {
        let by_address = self.locks.iter().position(|(n, _)| std::ptr::eq(*n, name));
        let found = by_address.or_else(|| self.locks.iter().position(|(n, _)| *n == name));
        let i = match found {
            Some(i) => i,
            None => {
                self.locks.push((name, LockStats::default()));
                self.locks.len() - 1
            }
        };
        &mut self.locks[i].1
    }

    /// Adds `ns` of CPU time of `comm` in `label` to [`Stats::cpu_time`].
    pub fn add_cpu_time(&mut self, comm: &str, label: &'static str, ns: Ns) {
        match self
            .cpu_time
            .iter_mut()
            .find(|(c, l, _)| *l == label && c == comm)
        {
            Some(row) => row.2 += ns,
            None => self.cpu_time.push((comm.to_string(), label, ns)),
        }
    }

    /// A DVM operation `issuer` sent reached every CPU: each other CPU
    /// received one (`dvm_ops_received`).
    pub fn dvm_received_by_all(&mut self, issuer: CpuId) {
        self.dvm_to_all += 1;
        self.dvm_to_all_issued[issuer] += 1;
    }

    /// The per-CPU counters, complete.
    pub fn per_cpu(&self) -> Vec<CpuStats> {
        let mut cpus = self.cpu.to_vec();
        for (c, issued) in cpus.iter_mut().zip(self.dvm_to_all_issued.iter()) {
            c.dvm_ops_received += self.dvm_to_all - issued;
        }
        cpus
    }

    /// Sum over CPUs.
    pub fn total(&self) -> CpuStats {
        let mut t = CpuStats::default();
        for c in &self.per_cpu() {
            t.add(c);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_exact() {
        let mut s = Samples::default();
        for v in [5, 1, 9, 3] {
            s.record(v);
        }
        let m = s.summary();
        assert_eq!((m.count, m.min, m.median, m.max), (4, 1, 3, 9));
        assert_eq!(m.mean, 4.5);
    }

    /// The summary a sorted array of every sample gives (the definition).
    fn sorted_summary(mut v: Vec<u64>) -> Summary {
        v.sort_unstable();
        let n = v.len();
        Summary {
            count: n as u64,
            min: v[0],
            median: v[(n - 1) / 2],
            p99: v[((n - 1) * 99) / 100],
            max: v[n - 1],
            mean: v.iter().map(|x| *x as f64).sum::<f64>() / n as f64,
        }
    }

    #[test]
    fn the_count_map_summarises_exactly_as_sorting_every_sample() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        for n in [1usize, 2, 3, 99, 100, 101, 1_000, 12_345] {
            // Few distinct values (repeats) and many, with large ones that
            // make the floating-point sum order matter.
            for spread in [5u64, 1 << 40] {
                let v: Vec<u64> = (0..n).map(|_| rng.gen_range(0..spread) * 977).collect();
                let mut s = Samples::default();
                for &x in &v {
                    s.record(x);
                }
                assert_eq!(s.summary(), sorted_summary(v), "n {n} spread {spread}");
            }
        }
    }

    #[test]
    fn past_the_distinct_value_limit_memory_stops_growing_and_quantiles_stay_close() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64::seed_from_u64(9);
        let n = 3 * MAX_DISTINCT;
        let v: Vec<u64> = (0..n).map(|_| rng.gen_range(1..1u64 << 40)).collect();
        let mut s = Samples::default();
        for &x in &v {
            s.record(x);
        }
        assert!(
            s.coarse.is_some() && s.counts.is_empty(),
            "switched to the histogram"
        );
        let (got, want) = (s.summary(), sorted_summary(v));
        assert_eq!(
            (got.count, got.min, got.max),
            (want.count, want.min, want.max)
        );
        let close = |a: u64, b: u64| (a as f64 - b as f64).abs() <= b as f64 * 1e-3;
        assert!(
            close(got.median, want.median),
            "{} vs {}",
            got.median,
            want.median
        );
        assert!(close(got.p99, want.p99), "{} vs {}", got.p99, want.p99);
        assert!((got.mean - want.mean).abs() <= want.mean * 1e-9);
    }
}
