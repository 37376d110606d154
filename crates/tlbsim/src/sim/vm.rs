//! Virtual machines: `[vm]` checked against the machine, and the VMs
//! started on the host (KVM/arm64).

use super::rules::{check_kernel, Setting};
use super::SimError;
use crate::config::{KernelConfig, Profile};
use crate::engine::rng::Streams;
use crate::hw::mem::Granule;
use crate::hw::CpuId;
use crate::kernel::{TaskId, World};
use crate::step::Guests;
use crate::workload::Workload;
use std::rc::Rc;

/// Creates the VMs of `vm` on host `w` (VM `v` from 1, its vCPUs pinned
/// to CPUs `(v - 1) * vcpus` on), each guest kernel from `new_kernel`;
/// returns them and the host's doorbell handler.
pub(super) fn start_vms(
    w: &Rc<World>,
    vm: &crate::config::VmConfig,
    kcfg: &KernelConfig,
    new_kernel: impl Fn() -> (
        Box<dyn crate::kernel::policy::TlbPolicy>,
        Box<dyn crate::kernel::policy::AsidAllocator>,
    ),
) -> Guests {
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
            let cpus: Vec<CpuId> = (v * n..(v + 1) * n)
                .map(|c| CpuId::from_index(c % w.ncpus()))
                .collect();
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
    Guests {
        vms,
        doorbell: Some(doorbell),
    }
}

/// The workload's root task in each guest of `guests`, set up with the
/// guest's own streams (`vm<id>`) and random stream.
pub(super) fn guest_roots(
    guests: &Guests,
    workload: &dyn Workload,
    streams: &Streams,
) -> Vec<(Rc<World>, TaskId)> {
    guests
        .vms
        .iter()
        .map(|kvm| {
            let s = streams.child(&format!("vm{}", kvm.guest.id));
            kvm.guest.seed_random(&s);
            (Rc::clone(&kvm.guest), workload.setup(&kvm.guest, &s))
        })
        .collect()
}

/// VMID width: the model's VMIDs are 8 bits (no `FEAT_VMID16`).
const VMID_BITS: u8 = 8;

/// `[vm]` against the machine: an arm64 profile with KVM's costs, VMIDs
/// and CPUs for every VM (vCPUs pinned one to one), a KVM policy the
/// machine has the hardware for, `[kernel]` settings modelled inside VMs,
/// and guests whose ASID allocator has more ASIDs than vCPUs.
pub(super) fn check_vms(
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
    kvm_host(profile).map_err(|m| field("count", m))?;
    vm_count(vm, profile).map_err(|m| field("count", m))?;
    vcpus(vm, profile).map_err(|m| field("vcpus", m))?;
    let entry = crate::kernel::arm64::kvm::find_kvm_policy(&vm.kvm_policy)
        .map_err(|e| field("kvm_policy", e))?;
    if let Some(f) = entry.requires.iter().find(|f| !f.present(profile)) {
        return Err(field(
            "kvm_policy",
            format!("\"{}\" needs {}", entry.name, f.missing(profile)),
        ));
    }
    kernel_in_vms(kcfg).map_err(|(key, message)| SimError::Field {
        section: "kernel".into(),
        key: key.into(),
        message,
    })?;
    let mut guest = profile.clone();
    guest.topology.cpus = vm.vcpus;
    check_kernel(&Setting {
        kcfg,
        profile: &guest,
        alloc,
        allocates_asids: true,
    })
}

/// VMs run on KVM/arm64, with the profile's world-switch costs.
fn kvm_host(profile: &Profile) -> Result<(), String> {
    if profile.arch != crate::config::Arch::Arm64 {
        return Err(format!(
            "profile \"{}\" is not arm64: VMs are modelled on KVM/arm64 only",
            profile.name
        ));
    }
    if profile.virt.is_none() {
        return Err(format!(
            "profile \"{}\" has no [virt] section (KVM's world-switch costs), which VMs need",
            profile.name
        ));
    }
    Ok(())
}

/// `count`: one VMID each, and more usable VMIDs than CPUs.
fn vm_count(vm: &crate::config::VmConfig, profile: &Profile) -> Result<(), String> {
    let vmids = (1u64 << VMID_BITS) - 1;
    if vm.count == 0 || u64::from(vm.count) > vmids {
        return Err(format!(
            "must be 1 to {vmids} (one {VMID_BITS}-bit VMID each; VMID 0 is the host's)"
        ));
    }
    if vmids <= u64::from(profile.topology.cpus) {
        return Err(format!(
            "{vmids} usable VMIDs are not more than the {} CPUs (arch/arm64/kvm/vmid.c needs more)",
            profile.topology.cpus
        ));
    }
    Ok(())
}

/// `vcpus`: at least one, within tlbsim's limit over every VM, and a CPU
/// for each when pinned one to one.
fn vcpus(vm: &crate::config::VmConfig, profile: &Profile) -> Result<(), String> {
    if vm.vcpus == 0 {
        return Err("must be >= 1".into());
    }
    let max = crate::config::limits::MAX_VCPUS;
    let total = u64::from(vm.count) * u64::from(vm.vcpus);
    if total > max {
        return Err(format!(
            "count x vcpus = {total} vCPUs exceed tlbsim's limit of {max}"
        ));
    }
    let pinned = vm.placement == crate::config::Placement::Pinned;
    if pinned && total > u64::from(profile.topology.cpus) {
        return Err(format!(
            "count x vcpus = {total} vCPUs pinned one to one, but the machine has {} CPUs",
            profile.topology.cpus
        ));
    }
    Ok(())
}

/// The `[kernel]` settings not modelled inside VMs: `(key, message)`.
fn kernel_in_vms(kcfg: &KernelConfig) -> Result<(), (&'static str, String)> {
    if kcfg.memory_limit_pages.is_some() {
        return Err((
            "memory_limit_pages",
            "reclaim is not modelled inside VMs yet".into(),
        ));
    }
    if kcfg.granule != Granule::K4 {
        return Err((
            "page_size_kib",
            format!(
                "{} KiB pages are not modelled with [vm] yet (stage 2 and the guests' kernels run 4 KiB pages only)",
                kcfg.granule.page_size_kib()
            ),
        ));
    }
    Ok(())
}
