//! One simulation run: builds the world from an experiment, runs the timing
//! driver with the checker attached, and returns every statistic.

use crate::check::Checker;
use crate::config::{
    builtin_profile, CheckerConfig, Experiment, ExperimentMeta, KernelConfig, MachineOverrides,
    Profile, WorkloadConfig,
};
use crate::driver::{RunError, TimingDriver};
use crate::engine::rng::Streams;
use crate::kernel::arm64::kvm::Kvm;
use crate::kernel::registry::{check_combination, find_allocator, find_policy};
use crate::kernel::TaskId;
use crate::kernel::{TaskState, World};
use crate::stats::{CpuStats, Summary};
use crate::workload;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

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

/// A failed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// The configuration is invalid (message names the field).
    Config(String),
    /// A field of the experiment file is invalid.
    Field {
        /// TOML section (`kernel`, `workload`, ...).
        section: String,
        /// Key within the section.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An option the caller gave in [`RunOptions`] (a command-line flag)
    /// is invalid.
    Flag {
        /// The flag and its value as given (`--cpus 5000`).
        flag: String,
        /// What is wrong.
        message: String,
    },
    /// The run stopped.
    Run(RunError),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Config(m) => write!(f, "{m}"),
            SimError::Field {
                section,
                key,
                message,
            } => write!(f, "[{section}] {key}: {message}"),
            SimError::Flag { flag, message } => write!(f, "{flag}: {message}"),
            SimError::Run(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SimError {}

impl SimError {
    /// The error as a person can act on it, located in the experiment file
    /// `file` whose text is `text`: a field error names the file, the line
    /// of the key (when found) and the field (`x.toml:12: [kernel] kpti:
    /// ...`); a configuration error names the file; a run error is given
    /// as is.
    pub fn located(&self, file: &str, text: &str) -> String {
        self.located_with_sets(file, text, &[])
    }

    /// [`SimError::located`] for an experiment file changed by `--set
    /// SECTION.KEY=VALUE` arguments `sets`: a field that one of them set is
    /// blamed on that argument, not on a line of the file.
    pub fn located_with_sets(&self, file: &str, text: &str, sets: &[String]) -> String {
        match self {
            SimError::Field {
                section,
                key,
                message,
            } if sets.iter().any(|s| set_names(s, section, key)) => {
                let set = sets
                    .iter()
                    .rev()
                    .find(|s| set_names(s, section, key))
                    .expect("found above");
                format!("--set {set}: [{section}] {key}: {message}")
            }
            SimError::Field {
                section,
                key,
                message,
            } => match crate::config::find_key_line(text, section, key) {
                Some(l) => format!("{file}:{l}: [{section}] {key}: {message}"),
                None => format!("{file}: [{section}] {key}: {message}"),
            },
            SimError::Config(m) => format!("{file}: {m}"),
            SimError::Flag { .. } | SimError::Run(_) => self.to_string(),
        }
    }
}

/// Does the `--set` argument `set` (`SECTION.KEY=VALUE`) set `section.key`?
fn set_names(set: &str, section: &str, key: &str) -> bool {
    set.split_once('=')
        .and_then(|(path, _)| path.trim().split_once('.'))
        .is_some_and(|(s, k)| s.trim() == section && k.trim() == key)
}

/// Resolves the profile of `exp` with overrides applied and validated.
pub fn resolve_profile(exp: &Experiment, opts: &RunOptions) -> Result<Profile, SimError> {
    let mut p = match &exp.profile_data {
        Some(p) => p.clone(),
        None if crate::config::is_profile_path(&exp.experiment.profile) => {
            return Err(SimError::Field {
                section: "experiment".into(),
                key: "profile".into(),
                message: format!(
                    "\"{}\" is a profile file, which the caller must load (Experiment::profile_data)",
                    exp.experiment.profile
                ),
            })
        }
        None => builtin_profile(&exp.experiment.profile).map_err(|e| SimError::Field {
            section: "experiment".into(),
            key: "profile".into(),
            message: e.message,
        })?,
    };
    let cpus_ok = |c: u32| {
        let max = crate::config::limits::MAX_CPUS;
        (1..=max)
            .contains(&c)
            .then_some(())
            .ok_or_else(|| format!("{c} CPUs (must be 1..={max})"))
    };
    if let Some(c) = exp.machine.cpus {
        cpus_ok(c).map_err(|message| SimError::Field {
            section: "machine".into(),
            key: "cpus".into(),
            message,
        })?;
    }
    if exp.machine.walk_cache_after_ttbr_write.is_some() && p.arm64.is_none() {
        return Err(SimError::Field {
            section: "machine".into(),
            key: "walk_cache_after_ttbr_write".into(),
            message: format!(
                "profile {} is not arm64: the setting describes arm64's TTBR0 and walk cache",
                p.name
            ),
        });
    }
    p.apply(&exp.machine);
    if let Some(c) = opts.cpus {
        cpus_ok(c).map_err(|message| SimError::Flag {
            flag: format!("--cpus {c}"),
            message,
        })?;
        p.topology.cpus = c;
    }
    if let Some(b) = exp.kernel.asid_bits {
        p.tlb.asid_bits = b;
    }
    if let Some(hz) = exp.kernel.hz {
        p.kernel.hz = Some(hz);
    }
    if p.kernel.hz.is_none() {
        // No tick: its cost is unused and left out of the resolved
        // profile, so that results without a tick read as before it
        // existed (issue 17).
        p.kernel.tick_handler_ns = None;
    }
    let cut = exp.machine.cpus.is_some() || opts.cpus.is_some();
    p.validate_resolved(cut)
        .map_err(|m| blame_topology(m, &p.name, &exp.machine, opts))?;
    Ok(p)
}

/// The error of a resolved profile `name` that failed validation with
/// `message`, blamed on what changed its topology: the `[machine]` key the
/// message names (`topology.sockets` → `[machine] sockets`), else `--cpus`,
/// else `[machine] cpus`; otherwise the profile's own.
fn blame_topology(
    message: String,
    name: &str,
    machine: &MachineOverrides,
    opts: &RunOptions,
) -> SimError {
    let field = message
        .split([' ', ','])
        .next()
        .and_then(|f| f.strip_prefix("topology."))
        .unwrap_or("");
    let set = match field {
        "sockets" => machine.sockets.is_some(),
        "dies_per_socket" => machine.dies_per_socket.is_some(),
        "cpus" => machine.cpus.is_some() && opts.cpus.is_none(),
        _ => false,
    };
    let blamed = set || opts.cpus.is_some() || machine.cpus.is_some();
    if field.is_empty() || !blamed {
        return SimError::Config(format!("profile {name}: {message}"));
    }
    let message = format!("{message} (profile {name})");
    let in_machine = |key: &str| SimError::Field {
        section: "machine".into(),
        key: key.into(),
        message: message.clone(),
    };
    match (set, opts.cpus) {
        (true, _) => in_machine(field),
        (false, Some(c)) => SimError::Flag {
            flag: format!("--cpus {c}"),
            message,
        },
        (false, None) => in_machine("cpus"),
    }
}

/// A world built from an experiment, its tasks created, ready for a driver.
pub struct Built {
    /// The world (the host kernel).
    pub world: Rc<World>,
    /// The workload's root task in each kernel that runs it (the host, or
    /// every VM's guest): the run ends when they have all exited.
    pub roots: Vec<(Rc<World>, TaskId)>,
    /// The virtual machines, if the experiment has `[vm]`, as the drivers
    /// take them.
    pub guests: crate::step::Guests,
    /// The resolved profile.
    pub profile: Profile,
    /// The root seed used.
    pub seed: u64,
    /// The workload as run: its parameters with defaults filled in.
    pub workload: WorkloadConfig,
    /// What the workload's parameters forecast (over every VM that runs
    /// it), already checked against tlbsim's runtime limits; callers may
    /// bound the events further before running.
    pub estimate: workload::Estimate,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("roots", &self.roots.len())
            .finish()
    }
}

impl Built {
    /// Have the root tasks exited?
    pub fn done(&self) -> impl Fn(&World) -> bool {
        let exited = |w: &World, root: TaskId| {
            matches!(
                w.k.borrow().tasks[root].state,
                TaskState::Zombie | TaskState::Dead
            )
        };
        // Asked after every event: the host's root alone is looked up in
        // the world the driver passes.
        let host_only = self.guests.vms.is_empty().then(|| self.roots[0].1);
        let roots = self.roots.clone();
        move |w: &World| match host_only {
            Some(root) => exited(w, root),
            None => roots.iter().all(|(g, root)| exited(g, *root)),
        }
    }

    /// Drops every kernel's task futures and programs, so that the worlds
    /// can be freed (see [`World::teardown`]).
    pub fn teardown(&self) {
        self.world.teardown();
        for kvm in &self.guests.vms {
            kvm.guest.teardown();
        }
    }
}

/// Builds the world of `exp` (policies, checker, workload tasks) after
/// validating every field.
pub fn build(exp: &Experiment, opts: &RunOptions) -> Result<Built, SimError> {
    // Before any of the machine's state is made (the policies and
    // allocators below are): a rebuilt machine numbers its containers
    // as the first one did, so footprints compare across schedules.
    crate::engine::state::new_machine();
    let profile = resolve_profile(exp, opts)?;
    let seed = opts.seed.unwrap_or(exp.experiment.seed);
    let kcfg = exp.kernel.clone();
    let field = |section: &str, key: &str, message: String| SimError::Field {
        section: section.into(),
        key: key.into(),
        message,
    };
    crate::config::limits::at_most(
        "history",
        exp.checker.history,
        crate::config::limits::MAX_HISTORY,
    )
    .map_err(|m| field("checker", "history", m))?;
    let policy_entry =
        find_policy(&kcfg.tlb_policy).map_err(|e| field("kernel", "tlb_policy", e))?;
    let alloc_entry =
        find_allocator(&kcfg.asid_allocator).map_err(|e| field("kernel", "asid_allocator", e))?;
    check_combination(policy_entry, alloc_entry, &profile)
        .map_err(|(key, message)| field("kernel", key, message))?;
    let policy = (policy_entry.new)();
    let alloc = (alloc_entry.new)(&kcfg, profile.tlb.asid_bits);
    debug_assert_eq!(policy.arch(), policy_entry.arch, "{}", policy_entry.name);
    check_kernel(&kcfg, &profile, alloc.as_ref(), alloc_entry.arch.is_some())?;
    check_arm64_only(&kcfg, policy_entry.arch)
        .map_err(|(key, message)| field("kernel", key, message))?;
    if let Some(vm) = &exp.vm {
        check_vms(vm, &kcfg, &profile, alloc.as_ref())?;
    }
    let (wl, estimate) = workload_of(exp, &profile)?;
    let w = World::new(profile.clone(), kcfg.clone(), policy, alloc);
    if exp.checker.enabled {
        *w.observer.borrow_mut() = Some(Box::new(Checker::new(w.ncpus(), exp.checker.history)));
    }
    if kcfg.memory_limit_pages.is_some() {
        crate::kernel::mm::vmscan::start_kswapd(&w);
    }
    let streams = Streams::new(seed);
    w.seed_random(&streams);
    let (roots, vms, doorbell) = match &exp.vm {
        None => (
            vec![(Rc::clone(&w), wl.workload.setup(&w, &streams))],
            vec![],
            None,
        ),
        Some(vm) => {
            let new_kernel = || {
                let p = (policy_entry.new)();
                (p, (alloc_entry.new)(&kcfg, profile.tlb.asid_bits))
            };
            let (vms, doorbell) = start_vms(&w, vm, &kcfg, new_kernel);
            let roots = vms
                .iter()
                .map(|kvm| {
                    let s = streams.child(&format!("vm{}", kvm.guest.id));
                    kvm.guest.seed_random(&s);
                    (Rc::clone(&kvm.guest), wl.workload.setup(&kvm.guest, &s))
                })
                .collect();
            (roots, vms, Some(doorbell))
        }
    };
    Ok(Built {
        world: w,
        roots,
        guests: crate::step::Guests { vms, doorbell },
        profile,
        seed,
        workload: exp.workload.with_defaults(wl.params),
        estimate,
    })
}

/// Creates the VMs of `vm` on host `w` (VM `v` from 1, its vCPUs pinned
/// to CPUs `(v - 1) * vcpus` on), each guest kernel from `new_kernel`;
/// returns them and the host's doorbell handler.
fn start_vms(
    w: &Rc<World>,
    vm: &crate::config::VmConfig,
    kcfg: &KernelConfig,
    new_kernel: impl Fn() -> (
        Box<dyn crate::kernel::policy::TlbPolicy>,
        Box<dyn crate::kernel::policy::AsidAllocator>,
    ),
) -> (Vec<Rc<Kvm>>, usize) {
    use crate::kernel::arm64::kvm;
    let vmids = Rc::new(
        kvm::vmid::VmidAllocator::new(w, VMID_BITS).expect("VMID bits checked by check_vms"),
    );
    let entry = kvm::find_kvm_policy(&vm.kvm_policy).expect("checked by check_vms");
    let kvm_policy: Rc<dyn kvm::KvmPolicy> = Rc::from((entry.new)());
    kvm_policy.init(w, vm.count as usize, vm.vcpus as usize);
    let doorbell = w.register_ipi_handler(Rc::new(kvm::kvm_vgic_v4_doorbell));
    let n = vm.vcpus as usize;
    let pinned = vm.placement == crate::config::Placement::Pinned;
    let vms = (0..vm.count as usize)
        .map(|v| {
            let (policy, asid) = new_kernel();
            let cpus: Vec<usize> = (v * n..(v + 1) * n).map(|c| c % w.ncpus()).collect();
            let kvm = kvm::create_vm(
                w,
                v as u32 + 1,
                &cpus,
                kcfg.clone(),
                policy,
                asid,
                &kvm_policy,
                &vmids,
                w.ncpus() + v * n,
            );
            if !pinned {
                kvm::unpin_vcpus(w, &kvm);
            }
            kvm
        })
        .collect();
    (vms, doorbell)
}

/// VMID width: the model's VMIDs are 8 bits (no `FEAT_VMID16`).
const VMID_BITS: u8 = 8;

/// `[vm]` against the machine: an arm64 profile with KVM's costs, VMIDs
/// and CPUs for every VM (vCPUs pinned one to one), and guests whose ASID
/// allocator has more ASIDs than vCPUs.
fn check_vms(
    vm: &crate::config::VmConfig,
    kcfg: &KernelConfig,
    profile: &Profile,
    alloc: &dyn crate::kernel::policy::AsidAllocator,
) -> Result<(), SimError> {
    let field = |key: &str, message: String| SimError::Field {
        section: "vm".into(),
        key: key.into(),
        message,
    };
    if profile.arch != crate::config::Arch::Arm64 {
        return Err(field(
            "count",
            format!(
                "profile \"{}\" is not arm64: VMs are modelled on KVM/arm64 only",
                profile.name
            ),
        ));
    }
    if profile.virt.is_none() {
        return Err(field(
            "count",
            format!(
                "profile \"{}\" has no [virt] section (KVM's world-switch costs), which VMs need",
                profile.name
            ),
        ));
    }
    let vmids = (1u64 << VMID_BITS) - 1;
    if vm.count == 0 || u64::from(vm.count) > vmids {
        return Err(field(
            "count",
            format!("must be 1 to {vmids} (one {VMID_BITS}-bit VMID each; VMID 0 is the host's)"),
        ));
    }
    if vmids <= u64::from(profile.topology.cpus) {
        return Err(field("count", format!("{vmids} usable VMIDs are not more than the {} CPUs (arch/arm64/kvm/vmid.c needs more)", profile.topology.cpus)));
    }
    if vm.vcpus == 0 {
        return Err(field("vcpus", "must be >= 1".into()));
    }
    let max = crate::config::limits::MAX_VCPUS;
    let total = u64::from(vm.count) * u64::from(vm.vcpus);
    if total > max {
        return Err(field(
            "vcpus",
            format!("count x vcpus = {total} vCPUs exceed tlbsim's limit of {max}"),
        ));
    }
    let entry = crate::kernel::arm64::kvm::find_kvm_policy(&vm.kvm_policy)
        .map_err(|e| field("kvm_policy", e))?;
    if let Some(f) = entry.requires.iter().find(|f| !f.present(profile)) {
        return Err(field(
            "kvm_policy",
            format!("\"{}\" needs {}", entry.name, f.missing(profile)),
        ));
    }
    let need = u64::from(vm.count) * u64::from(vm.vcpus);
    let pinned = vm.placement == crate::config::Placement::Pinned;
    if pinned && need > u64::from(profile.topology.cpus) {
        return Err(field(
            "vcpus",
            format!(
                "count x vcpus = {need} vCPUs pinned one to one, but the machine has {} CPUs",
                profile.topology.cpus
            ),
        ));
    }
    if kcfg.memory_limit_pages.is_some() {
        return Err(SimError::Field {
            section: "kernel".into(),
            key: "memory_limit_pages".into(),
            message: "reclaim is not modelled inside VMs yet".into(),
        });
    }
    if kcfg.page_size_kib != 4 {
        return Err(SimError::Field {
            section: "kernel".into(),
            key: "page_size_kib".into(),
            message: format!(
                "{} KiB pages are not modelled with [vm] yet (stage 2 and the guests' kernels run 4 KiB pages only)",
                kcfg.page_size_kib
            ),
        });
    }
    let mut guest = profile.clone();
    guest.topology.cpus = vm.vcpus;
    check_kernel(kcfg, &guest, alloc, true)
}

/// The `[kernel]` settings that model arm64 kernel versions, which an x86
/// policy has no use for: `(key, message)` of the first one set.
fn check_arm64_only(
    kcfg: &KernelConfig,
    arch: crate::config::Arch,
) -> Result<(), (&'static str, String)> {
    if arch == crate::config::Arch::Arm64 {
        return Ok(());
    }
    let why = |what: &str| {
        format!(
            "{what} is an arm64 kernel behaviour; tlb_policy \"{}\" is x86",
            kcfg.tlb_policy
        )
    };
    if !kcfg.pgtable_free_tlbi.is_deferred() {
        return Err((
            "pgtable_free_tlbi",
            why("__flush_tlb_pgtable() per freed table"),
        ));
    }
    if kcfg.spurious_fault_flush {
        return Err((
            "spurious_fault_flush",
            why("flush_tlb_fix_spurious_fault() as flush_tlb_page()"),
        ));
    }
    Ok(())
}

/// The `[kernel]` settings that depend on the profile and the allocator:
/// THP needs the profile's 2 MiB fault cost, KPTI an allocator that hands
/// out ASID pairs and at least 3 ASID bits, and an ASID allocator more
/// usable ASIDs than CPUs.
fn check_kernel(
    kcfg: &KernelConfig,
    profile: &Profile,
    alloc: &dyn crate::kernel::policy::AsidAllocator,
    allocates_asids: bool,
) -> Result<(), SimError> {
    let field = |key: &str, message: String| SimError::Field {
        section: "kernel".into(),
        key: key.into(),
        message,
    };
    check_page_size(kcfg, profile).map_err(|m| field("page_size_kib", m))?;
    if kcfg.arm64_flush_range_limit == crate::config::Arm64FlushRangeLimit::MaxTlbRange {
        match &profile.arm64 {
            None => {
                return Err(field(
                    "arm64_flush_range_limit",
                    format!("profile \"{}\" is not arm64", profile.name),
                ))
            }
            Some(a) if a.tlbirange => {
                return Err(field(
                    "arm64_flush_range_limit",
                    format!(
                        "\"max-tlb-range\" is Linux 4.1-4.19's, which has no range TLBIs, but profile \"{}\" has tlbirange = true",
                        profile.name
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if kcfg.thp == crate::config::Thp::Always && profile.kernel.thp_fault_ns.is_none() {
        return Err(field(
            "thp",
            format!(
                "profile \"{}\" has no kernel.thp_fault_ns (the cost of a 2 MiB fault), which thp = \"always\" needs",
                profile.name
            ),
        ));
    }
    if !kcfg.thp_huge_zero_page.is_off() && kcfg.thp != crate::config::Thp::Always {
        return Err(field(
            "thp_huge_zero_page",
            "the huge zero page needs thp = \"always\"".into(),
        ));
    }
    let pmd_bytes = kcfg.granule().pmd_size();
    if !kcfg.fault_around_bytes.is_power_of_two() || kcfg.fault_around_bytes > pmd_bytes {
        return Err(field(
            "fault_around_bytes",
            format!(
                "{} (must be a power of two, at most the {pmd_bytes}-byte PMD)",
                kcfg.fault_around_bytes
            ),
        ));
    }
    if kcfg.read_ahead_kb > crate::config::limits::MAX_READ_AHEAD_KB {
        return Err(field(
            "read_ahead_kb",
            format!(
                "{} exceeds tlbsim's limit of {} KiB",
                kcfg.read_ahead_kb,
                crate::config::limits::MAX_READ_AHEAD_KB
            ),
        ));
    }
    if let Some(limit) = kcfg.memory_limit_pages {
        if limit == 0 {
            return Err(field("memory_limit_pages", "must be >= 1 (pages)".into()));
        }
        if profile.swap.is_none() {
            return Err(field(
                "memory_limit_pages",
                format!(
                    "profile \"{}\" has no [swap] section (reclaim and zram costs), which kswapd needs",
                    profile.name
                ),
            ));
        }
    }
    if let Some(min) = kcfg.memory_min_pages {
        match kcfg.memory_limit_pages {
            None => {
                return Err(field(
                    "memory_min_pages",
                    "needs memory_limit_pages (kswapd's watermark) too".into(),
                ))
            }
            Some(limit) if min < limit => {
                return Err(field(
                    "memory_min_pages",
                    format!("must be >= memory_limit_pages ({limit})"),
                ))
            }
            _ => {}
        }
    }
    if kcfg.kpti && !alloc.supports_kpti() {
        return Err(field(
            "kpti",
            format!(
                "asid_allocator \"{}\" does not support kpti",
                kcfg.asid_allocator
            ),
        ));
    }
    if kcfg.kpti && profile.tlb.asid_bits < 3 {
        return Err(field("kpti", "kpti needs asid_bits >= 3".into()));
    }
    // More usable ASIDs than CPUs, or rollover cannot find a free one
    // (arch/arm64/mm/context.c relies on NUM_USER_ASIDS > NR_CPUS).
    let usable = ((1u64 << profile.tlb.asid_bits) >> u32::from(kcfg.kpti)) - 1;
    if allocates_asids && usable <= u64::from(profile.topology.cpus) {
        return Err(field(
            "asid_bits",
            format!(
                "{} usable ASIDs with asid_bits = {}{} is not more than the {} CPUs",
                usable,
                profile.tlb.asid_bits,
                if kcfg.kpti { " and kpti" } else { "" },
                profile.topology.cpus
            ),
        ));
    }
    Ok(())
}

/// `kernel.page_size_kib`: 4, or 64 on arm64 (x86 has no 64 KiB base
/// page; arm64's 16 KiB granule is not modelled), and 64 without THP
/// (no profile has the cost of a 512 MiB huge-page fault) and without
/// kswapd (reclaim was not reviewed for 64 KiB pages).
fn check_page_size(kcfg: &KernelConfig, profile: &Profile) -> Result<(), String> {
    match (kcfg.page_size_kib, profile.arch) {
        (64, crate::config::Arch::Arm64) if kcfg.memory_limit_pages.is_some() => Err(
            "reclaim (memory_limit_pages) is not modelled with 64 KiB pages yet: its per-page costs are 4 KiB figures".into(),
        ),
        (64, crate::config::Arch::Arm64) if kcfg.thp == crate::config::Thp::Always => Err(
            "thp = \"always\" with 64 KiB pages is not modelled yet: its PMD blocks are 512 MiB, and the profile's thp_fault_ns is the cost of a 2 MiB fault".into(),
        ),
        (4, _) | (64, crate::config::Arch::Arm64) => Ok(()),
        (64, arch) => Err(format!(
            "64 KiB pages are an arm64 kernel's (CONFIG_ARM64_64K_PAGES); profile \"{}\" is {arch}, whose base page is 4 KiB",
            profile.name
        )),
        (kib, _) => Err(format!("{kib} KiB pages (must be 4 or 64)")),
    }
}

/// Builds the workload of `exp`; an error names the offending parameter.
/// The workload of `exp` on the host `profile` (with the run's CPU
/// count), built from its parameters and checked against the machine it
/// runs on (a guest of `[vm] vcpus` CPUs with `[vm]`), with its forecast:
/// on the host's CPUs, or on each VM's vCPUs times the VMs. An error
/// names the workload parameter to blame, also for a forecast past the
/// limits a run cannot pass ([`workload::Estimate::within_limits`]).
pub fn workload_of(
    exp: &Experiment,
    profile: &Profile,
) -> Result<(workload::Resolved, workload::Estimate), SimError> {
    let (wl, estimate) = match &exp.vm {
        None => {
            let wl = build_workload(exp, profile)?;
            let e = wl.workload.estimate(profile.topology.cpus);
            (wl, e)
        }
        Some(vm) => {
            let mut guest_profile = profile.clone();
            guest_profile.topology.cpus = vm.vcpus;
            let wl = build_workload(exp, &guest_profile)?;
            let e = wl.workload.estimate(vm.vcpus);
            (wl, e.times(u64::from(vm.count), "VMs"))
        }
    };
    estimate
        .within_limits()
        .map_err(|m| workload_field(exp, m))?;
    Ok((wl, estimate))
}

fn build_workload(exp: &Experiment, profile: &Profile) -> Result<workload::Resolved, SimError> {
    let kib = exp.kernel.page_size_kib;
    if let Some(e) = workload::WORKLOADS
        .iter()
        .find(|e| e.name == exp.workload.name && !e.page_sizes_kib.contains(&kib))
    {
        return Err(SimError::Field {
            section: "kernel".into(),
            key: "page_size_kib".into(),
            message: format!(
                "workload \"{}\" is modelled with {} KiB pages only, not {kib} KiB (docs/model.md, Workloads)",
                e.name,
                e.page_sizes_kib.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ")
            ),
        });
    }
    let blame = |e: String| workload_field(exp, e);
    let wl = workload::build(&exp.workload.name, &exp.workload.params).map_err(blame)?;
    wl.workload.check(profile).map_err(blame)?;
    Ok(wl)
}

/// A workload's error `e` as the `[workload]` field it blames: the first
/// backquoted word that is a parameter of the file (`parse_params` puts it
/// first as "`key`: ..."), or else the word the message starts with (a
/// parameter left at its default), or else `name`.
fn workload_field(exp: &Experiment, e: String) -> SimError {
    let leading = e
        .strip_prefix('`')
        .and_then(|r| r.split_once('`'))
        .map(|(k, _)| k)
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    let key = e
        .split('`')
        .skip(1)
        .step_by(2)
        .find(|k| exp.workload.params.contains_key(*k))
        .or(leading);
    let (key, message) = match key {
        Some(k) => {
            let prefix = format!("`{k}`: ");
            (k, e.strip_prefix(&prefix).unwrap_or(&e).to_string())
        }
        None => ("name", e.clone()),
    };
    SimError::Field {
        section: "workload".into(),
        key: key.into(),
        message,
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
