//! Building a run: every setting validated ([`super::rules`],
//! [`super::vm`]), then the world, its checker, its VMs and the workload's
//! tasks made.

use super::rules::{check_arm64_only, check_kernel, Setting};
use super::vm::{check_vms, guest_roots, start_vms};
use super::{resolve_profile, RunOptions, SimError};
use crate::check::Checker;
use crate::config::{Experiment, Profile, WorkloadConfig};
use crate::engine::rng::Streams;
use crate::kernel::registry::{check_combination, find_allocator, find_policy};
use crate::kernel::{TaskId, TaskState, World};
use crate::step::Guests;
use crate::workload;
use std::rc::Rc;

/// A world built from an experiment, its tasks created, ready for a driver.
pub struct Built {
    /// The world (the host kernel).
    pub world: Rc<World>,
    /// The workload's root task in each kernel that runs it (the host, or
    /// every VM's guest): the run ends when they have all exited.
    pub roots: Vec<(Rc<World>, TaskId)>,
    /// The virtual machines, if the experiment has `[vm]`, as the drivers
    /// take them.
    pub guests: Guests,
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
    check_kernel(&Setting {
        kcfg: &kcfg,
        profile: &profile,
        alloc: alloc.as_ref(),
        allocates_asids: alloc_entry.arch.is_some(),
    })?;
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
    let (roots, guests) = match &exp.vm {
        None => (
            vec![(Rc::clone(&w), wl.workload.setup(&w, &streams))],
            Guests {
                vms: vec![],
                doorbell: None,
            },
        ),
        Some(vm) => {
            let new_kernel = || {
                let p = (policy_entry.new)();
                (p, (alloc_entry.new)(&kcfg, profile.tlb.asid_bits))
            };
            let guests = start_vms(&w, vm, &kcfg, new_kernel);
            (guest_roots(&guests, wl.workload.as_ref(), &streams), guests)
        }
    };
    Ok(Built {
        world: w,
        roots,
        guests,
        profile,
        seed,
        workload: exp.workload.with_defaults(wl.params),
        estimate,
    })
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
    let kib = exp.kernel.granule.page_size_kib() as u32;
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
    let wl = workload::build(
        &exp.workload.name,
        &exp.workload.params,
        &exp.workload.files,
    )
    .map_err(blame)?;
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
