//! One simulation run: builds the world from an experiment, runs the timing
//! driver with the checker attached, and returns every statistic.

use crate::config::{
    CheckerConfig, Experiment, ExperimentMeta, KernelConfig, MachineOverrides, Profile,
    WorkloadConfig,
};
use crate::driver::TimingDriver;
use crate::stats::{CpuStats, Summary};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

mod build;
mod error;
mod profile;
mod rules;
mod vm;

pub use build::{build, workload_of, Built};
pub use error::SimError;
pub use profile::resolve_profile;

/// Version of the tool, written into every result.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Options that override the experiment file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Root seed.
    pub seed: Option<u64>,
    /// CPU count.
    pub cpus: Option<u32>,
}

/// The checker's verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckerReport {
    /// The checker ran.
    pub enabled: bool,
    /// `"pass"`, `"violation"` or `"off"`.
    pub verdict: String,
    /// Events the checker examined.
    pub events_checked: u64,
    /// Events of history a violation report keeps (`[checker] history`).
    pub history: usize,
    /// Speculative walks were injected (`[checker] speculative_walks`; they
    /// change TLB contents, hence statistics).
    pub speculative_walks: bool,
}

/// Statistics of a run, ready to print or serialise.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatsReport {
    /// Sum over CPUs.
    pub total: CpuStats,
    /// Per CPU.
    pub per_cpu: Vec<CpuStats>,
    /// DVM Sync wait at the misc node before service (ns).
    pub dvm_sync_queue_wait_ns: Summary,
    /// flush_tlb_* call latency (ns).
    pub flush_latency_ns: Summary,
    /// ASID rollovers.
    pub asid_rollovers: u64,
    /// VMID rollovers (KVM's allocator; only with `[vm]`).
    #[serde(default, skip_serializing_if = "crate::stats::is_zero")]
    pub vmid_rollovers: u64,
    /// Page-table pages freed.
    pub tables_freed: u64,
    /// Huge pages mapped by faults.
    pub thp_fault_alloc: u64,
    /// Huge pages split into 4 KiB PTEs.
    pub thp_split_pmd: u64,
    /// Driver events processed.
    pub events: u64,
    /// Page reclaim and swap counters (left out when all zero).
    #[serde(skip_serializing_if = "crate::stats::ReclaimStats::is_empty")]
    pub reclaim: crate::stats::ReclaimStats,
    /// Per lock class: acquisitions and contended waits (ns).
    pub locks: std::collections::BTreeMap<String, LockReport>,
    /// Where simulated CPU time went, like `perf report`'s self time:
    /// largest first (`step::cpu_time`).
    pub cpu_time_by_function: Vec<FuncTime>,
    /// The same split by task name (comm), largest first; each task's
    /// functions with shares of that task's time (`perf report --comm`).
    pub cpu_time_by_task: Vec<TaskTime>,
}

/// Simulated CPU time of the tasks of one name ([`crate::step::cpu_time`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TaskTime {
    /// The task name (comm).
    pub comm: String,
    /// CPU time, summed over its tasks and CPUs (ns).
    pub ns: u64,
    /// Share of all CPUs' time over the run (%).
    pub share_pct: f64,
    /// Its time by function, shares of its own time.
    pub functions: Vec<FuncTime>,
}

/// Simulated CPU time of one thing the CPUs ran ([`crate::step::cpu_time`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FuncTime {
    /// The innermost kernel function (its Linux name), or `[user]`,
    /// `[idle]`, `[kernel]` (kernel code outside every named function).
    pub function: String,
    /// CPU time, summed over CPUs (ns).
    pub ns: u64,
    /// Share of all CPUs' time over the run (%).
    pub share_pct: f64,
}

/// `(function, ns)` pairs summed by function, as rows largest first (ties
/// by name), shares of their total.
fn cpu_time_rows<'a>(pairs: impl Iterator<Item = (&'a str, u64)>) -> Vec<FuncTime> {
    let mut by: std::collections::BTreeMap<&str, u64> = Default::default();
    for (f, ns) in pairs {
        *by.entry(f).or_default() += ns;
    }
    let total: u64 = by.values().sum();
    let mut rows: Vec<FuncTime> = by
        .into_iter()
        .filter(|(_, ns)| *ns > 0)
        .map(|(f, ns)| FuncTime {
            function: f.to_string(),
            ns,
            share_pct: ns as f64 * 100.0 / total.max(1) as f64,
        })
        .collect();
    rows.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.function.cmp(&b.function)));
    rows
}

/// `Stats::cpu_time` by task name, largest first (ties by name).
fn cpu_time_tasks(cpu_time: &[(String, &'static str, u64)]) -> Vec<TaskTime> {
    let total: u64 = cpu_time.iter().map(|r| r.2).sum();
    let comms: std::collections::BTreeSet<&str> = cpu_time.iter().map(|r| r.0.as_str()).collect();
    let mut tasks: Vec<TaskTime> = comms
        .into_iter()
        .map(|comm| {
            let mine = || cpu_time.iter().filter(move |r| r.0 == comm);
            let ns: u64 = mine().map(|r| r.2).sum();
            TaskTime {
                comm: comm.to_string(),
                ns,
                share_pct: ns as f64 * 100.0 / total.max(1) as f64,
                functions: cpu_time_rows(mine().map(|r| (r.1, r.2))),
            }
        })
        .filter(|t| t.ns > 0)
        .collect();
    tasks.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.comm.cmp(&b.comm)));
    tasks
}

/// Statistics of one lock class.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LockReport {
    /// Acquisitions.
    pub acquisitions: u64,
    /// Waits of the acquisitions that found it taken (ns).
    pub contended_wait_ns: Summary,
    /// Exclusive hold times (ns).
    pub hold_ns: Summary,
}

/// Everything a run produces (host time is added by the caller).
#[derive(Debug, Clone, Serialize)]
pub struct RunOutput {
    /// Experiment name.
    pub experiment: String,
    /// Tool version.
    pub version: String,
    /// Root seed used.
    pub seed: u64,
    /// Resolved profile.
    pub profile: Profile,
    /// Kernel configuration.
    pub kernel: KernelConfig,
    /// Workload configuration: every parameter the workload ran with, the
    /// given ones as written and the others at their defaults.
    pub workload: WorkloadConfig,
    /// The virtual machines the workload ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<crate::config::VmConfig>,
    /// The simulated-time limit (`[experiment] max_sim_time_ns`): past it
    /// the run stops with an error.
    pub max_sim_time_ns: u64,
    /// Simulated time until the workload's root task exited (ns).
    pub elapsed_ns: u64,
    /// Statistics.
    pub stats: StatsReport,
    /// Checker verdict.
    pub checker: CheckerReport,
    /// Results the workload reported (e.g. `victim_slowdown_pct`).
    pub metrics: std::collections::BTreeMap<String, f64>,
}

/// The configuration a [`RunOutput`] records, read back from its serialised
/// form (the `run` object of `tlbsim run --json`; other keys are ignored):
/// the resolved profile, kernel, workload with defaults, checker settings,
/// seed and time limit. [`RunConfig::into_experiment`] gives an experiment
/// that reruns it to the same results.
#[derive(Debug, Clone, Deserialize)]
pub struct RunConfig {
    /// Experiment name.
    pub experiment: String,
    /// Root seed used.
    pub seed: u64,
    /// Simulated-time limit (ns).
    pub max_sim_time_ns: u64,
    /// The profile as run (overrides applied).
    pub profile: Profile,
    /// Kernel configuration.
    pub kernel: KernelConfig,
    /// Workload with every parameter.
    pub workload: WorkloadConfig,
    /// The virtual machines, if any.
    #[serde(default)]
    pub vm: Option<crate::config::VmConfig>,
    /// Checker settings (the verdict beside them is ignored).
    #[serde(deserialize_with = "checker_settings")]
    pub checker: CheckerConfig,
}

/// Reads `enabled`, `history` and `speculative_walks` of a
/// [`CheckerReport`], ignoring its results.
fn checker_settings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<CheckerConfig, D::Error> {
    #[derive(Deserialize)]
    struct Settings {
        enabled: bool,
        history: usize,
        speculative_walks: bool,
    }
    let s = Settings::deserialize(d)?;
    Ok(CheckerConfig {
        enabled: s.enabled,
        history: s.history,
        speculative_walks: s.speculative_walks,
    })
}

impl RunConfig {
    /// The experiment that reruns this configuration: the recorded profile
    /// as [`Experiment::profile_data`] (so no overrides are applied again)
    /// and the recorded seed.
    pub fn into_experiment(self) -> Experiment {
        Experiment {
            experiment: ExperimentMeta {
                name: self.experiment,
                description: String::new(),
                profile: self.profile.name.clone(),
                seed: self.seed,
                max_sim_time_ns: self.max_sim_time_ns,
            },
            // The recorded CPU count, set again (no change): a machine cut
            // from a profile by `--cpus` stays a cut for validation.
            machine: MachineOverrides {
                cpus: Some(self.profile.topology.cpus),
                ..MachineOverrides::default()
            },
            kernel: self.kernel,
            workload: self.workload,
            checker: self.checker,
            vm: self.vm,
            profile_data: Some(self.profile),
        }
    }
}

/// Adds, for each metric every VM reported (`vm<i>.<name>`), its mean
/// over the VMs as `<name>`, and its lowest and highest as
/// `<name>.vm_min` and `<name>.vm_max`.
fn mean_over_vms(m: &mut std::collections::BTreeMap<String, f64>, vms: usize) {
    let names: Vec<String> = m
        .keys()
        .filter_map(|k| k.strip_prefix("vm1."))
        .map(str::to_string)
        .collect();
    for name in names {
        let vals: Vec<f64> = (1..=vms)
            .filter_map(|v| m.get(&format!("vm{v}.{name}")).copied())
            .collect();
        if vals.len() != vms {
            continue;
        }
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        m.insert(format!("{name}.vm_min"), lo);
        m.insert(format!("{name}.vm_max"), hi);
        m.insert(name, vals.iter().sum::<f64>() / vms as f64);
    }
}

/// Runs `exp`.
pub fn run(exp: &Experiment, opts: &RunOptions) -> Result<RunOutput, SimError> {
    run_built(exp, build(exp, opts)?)
}

/// Runs `built`, the world [`build`] made of `exp` (a caller that looks
/// at [`Built::estimate`] first, to refuse a run too large).
pub fn run_built(exp: &Experiment, built: Built) -> Result<RunOutput, SimError> {
    let done = built.done();
    let Built {
        world: w,
        profile,
        seed,
        workload,
        ..
    } = &built;
    let (w, profile, seed, workload) = (Rc::clone(w), profile.clone(), *seed, workload.clone());
    let kcfg = exp.kernel.clone();
    let mut d = TimingDriver::new(w.clone(), exp.experiment.max_sim_time_ns);
    d.add_vms(&built.guests);
    d.set_speculative_walks(exp.checker.enabled && exp.checker.speculative_walks);
    let elapsed = d.run_until(done);
    crate::progress::PROGRESS.run_done();
    let elapsed = elapsed.map_err(SimError::Run)?;
    if !built.guests.vms.is_empty() {
        mean_over_vms(&mut w.stats.borrow_mut().metrics, built.guests.vms.len());
    }
    let st = w.stats.borrow();
    let events_checked = w
        .observer
        .borrow()
        .as_ref()
        .map(|o| o.events_seen())
        .unwrap_or(0);
    Ok(RunOutput {
        experiment: exp.experiment.name.clone(),
        version: VERSION.to_string(),
        seed,
        profile,
        kernel: kcfg,
        workload,
        vm: exp.vm.clone(),
        max_sim_time_ns: exp.experiment.max_sim_time_ns,
        elapsed_ns: elapsed,
        metrics: st.metrics.clone(),
        stats: StatsReport {
            total: st.total(),
            per_cpu: st.per_cpu(),
            dvm_sync_queue_wait_ns: st.dvm_sync_queue_wait_ns.summary(),
            flush_latency_ns: st.flush_latency_ns.summary(),
            asid_rollovers: st.asid_rollovers,
            vmid_rollovers: st.vmid_rollovers,
            tables_freed: st.tables_freed,
            thp_fault_alloc: st.thp_fault_alloc,
            thp_split_pmd: st.thp_split_pmd,
            events: st.events,
            reclaim: st.reclaim,
            locks: st
                .locks
                .iter()
                .map(|(n, l)| {
                    (
                        n.to_string(),
                        LockReport {
                            acquisitions: l.acquisitions,
                            contended_wait_ns: l.contended_wait_ns.summary(),
                            hold_ns: l.hold_ns.summary(),
                        },
                    )
                })
                .collect(),
            cpu_time_by_function: cpu_time_rows(st.cpu_time.iter().map(|r| (r.1, r.2))),
            cpu_time_by_task: cpu_time_tasks(&st.cpu_time),
        },
        checker: CheckerReport {
            enabled: exp.checker.enabled,
            verdict: if exp.checker.enabled { "pass" } else { "off" }.into(),
            events_checked,
            history: exp.checker.history,
            speculative_walks: exp.checker.speculative_walks,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::SimError;

    #[test]
    fn the_walk_cache_reading_is_a_machine_setting_of_arm64_profiles() {
        use crate::config::{parse_toml, Experiment, WalkCacheAfterTtbrWrite};
        let exp = |profile: &str, machine: &str| {
            format!(
                "[experiment]\nname = \"x\"\nprofile = \"{profile}\"\n[machine]\n{machine}\n[workload]\nname = \"threads\"\n"
            )
        };
        let resolve = |text: &str| {
            let e: Experiment = parse_toml("x.toml", text).map_err(|e| e.to_string())?;
            super::resolve_profile(&e, &super::RunOptions::default())
                .map_err(|e| e.located("x.toml", text))
        };
        let p = resolve(&exp("ampere-32", "")).unwrap();
        assert_eq!(
            p.arm64().walk_cache_after_ttbr_write,
            WalkCacheAfterTtbrWrite::AsidTagged
        );
        // The default is left out of the resolved profile (goldens).
        assert!(!toml::to_string(&p).unwrap().contains("walk_cache_after"));
        let set = "walk_cache_after_ttbr_write = \"flush-on-ttbr-change\"";
        let p = resolve(&exp("ampere-32", set)).unwrap();
        assert_eq!(
            p.arm64().walk_cache_after_ttbr_write,
            WalkCacheAfterTtbrWrite::FlushOnTtbrChange
        );
        assert!(toml::to_string(&p)
            .unwrap()
            .contains("walk_cache_after_ttbr_write = \"flush-on-ttbr-change\""));
        let bad = resolve(&exp("ampere-32", "walk_cache_after_ttbr_write = \"vipt\"")).unwrap_err();
        assert!(
            bad.contains("walk_cache_after_ttbr_write") && bad.contains("asid-tagged"),
            "{bad}"
        );
        let x86 = resolve(&exp("skylake-4c8t", set)).unwrap_err();
        assert!(
            x86.contains("[machine] walk_cache_after_ttbr_write") && x86.contains("not arm64"),
            "{x86}"
        );
    }

    #[test]
    fn a_topology_an_override_breaks_is_blamed_on_the_override() {
        use crate::config::{parse_toml, Experiment};
        let text = |machine: &str| {
            format!("[experiment]\nname = \"x\"\nprofile = \"ampere-2s\"\n[machine]\n{machine}\n[workload]\nname = \"threads\"\n")
        };
        let resolve = |machine: &str, cpus: Option<u32>| {
            let t = text(machine);
            let e: Experiment = parse_toml("x.toml", &t).unwrap();
            let opts = super::RunOptions { seed: None, cpus };
            super::resolve_profile(&e, &opts).map_err(|e| e.located("x.toml", &t))
        };
        // ampere-2s: 64 CPUs, 2 sockets, clusters of 2.
        assert!(resolve("cpus = 8", None).is_ok());
        let e = resolve("sockets = 3", None).unwrap_err();
        assert!(
            e.starts_with("x.toml:5: [machine] sockets: topology.sockets = 3 does not divide topology.cpus = 64 evenly"),
            "{e}"
        );
        // A cut may be uneven (3 CPUs of 2 sockets), but needs a CPU per die.
        assert!(resolve("cpus = 3", None).is_ok() && resolve("", Some(7)).is_ok());
        let e = resolve("dies_per_socket = 2", Some(2)).unwrap_err();
        assert!(
            e.starts_with("x.toml:5: [machine] dies_per_socket: topology.dies_per_socket = 2 (must be 1..=cpus per socket)"),
            "{e}"
        );
    }

    #[test]
    fn every_experiment_of_the_repository_resolves() {
        // The topology checks must accept the published experiments (their
        // cuts such as ampere-32 with 3 CPUs included).
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let e: crate::config::Experiment = crate::config::parse_toml("x", &text).unwrap();
                super::resolve_profile(&e, &Default::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 20, "{n} experiments");
    }

    #[test]
    fn located_errors_name_file_line_and_field() {
        let text = "[experiment]\nname = \"x\"\n[kernel]\ntlb_policy = \"nope\"\n";
        let field = |section: &str, key: &str| SimError::Field {
            section: section.into(),
            key: key.into(),
            message: "bad".into(),
        };
        assert_eq!(
            field("kernel", "tlb_policy").located("x.toml", text),
            "x.toml:4: [kernel] tlb_policy: bad"
        );
        assert_eq!(
            field("machine", "cpus").located("x.toml", text),
            "x.toml: [machine] cpus: bad"
        );
        assert_eq!(
            SimError::Config("profile p: wrong".into()).located("x.toml", text),
            "x.toml: profile p: wrong"
        );
    }
}
