//! `kvm-dvmbm`: TLBI by affinity as openEuler's KVM drives it
//! (`arch/arm64/kvm/hisilicon/hisi_virt.c`, `kvm_tlbi_dvmbm_vcpu_load`;
//! docs/research/seed003-kvm-dvmbm.md §1.4). `HCR_EL2.FB` stays set, but
//! each CPU's `LSUDVMBM_EL2` limits a guest's broadcasts to the VM's
//! `sched_cpus`: the union of its vCPU threads' allowed CPUs
//! (`current->cpus_ptr`), recomputed when a vCPU loads with an affinity
//! other than at its last put. When the union changes, the VM's entries
//! are flushed everywhere (`kvm_flush_remote_tlbs`) and every vCPU is
//! asked to reload its register (`KVM_REQ_RELOAD_TLBI_DVMBM`; running
//! ones are kicked, nobody waits). The register is enabled on load and
//! disabled on put (the host, at EL2, is not limited by it).

use super::{kvm_flush_remote_tlbs, kvm_make_all_cpus_request, Kvm, KvmPolicy, KvmPolicyEntry};
use crate::engine::exec::KFuture;
use crate::hw::cpumask::CpuMask;
use crate::hw::{CpuId, CpuVec};
use crate::kernel::registry::Feature;
use crate::kernel::{Ctx, LockId, World};
use crate::engine::track::Tracked;
use std::cell::Cell;

/// One VM's DVMBM state.
#[derive(Debug, Clone)]
struct VmState {
    /// `vcpu->arch.sched_cpus`, by vCPU.
    sched_cpus: CpuVec<CpuMask>,
    /// `vcpu->arch.pre_sched_cpus`, by vCPU (empty: never put).
    pre_sched_cpus: CpuVec<CpuMask>,
    /// `kvm->arch.sched_cpus`: the VM's mask (empty: none yet).
    vm_cpus: CpuMask,
    /// `kvm->arch.sched_lock`.
    lock: LockId,
}

/// The policy. See the module doc.
#[derive(Debug)]
pub struct Dvmbm {
    vms: Tracked<Vec<VmState>>,
    ncpus: Cell<usize>, // untracked: set once at init: not state an action changes
}

impl Default for Dvmbm {
    fn default() -> Self {
        Dvmbm {
            vms: Tracked::fresh(Vec::new()),
            ncpus: Cell::new(0), // untracked: set once at init: not state an action changes
        }
    }
}

impl Dvmbm {
    /// `kvm_hisi_reload_lsudvmbm` / the write at the end of the load:
    /// this CPU's register gets the VM's mask, under `sched_lock`.
    async fn write_register(&self, ctx: &Ctx, vm: usize) {
        let lock = self.vms.borrow()[vm].lock;
        ctx.spin_lock(lock).await;
        let mask = self.vms.borrow()[vm].vm_cpus.clone();
        ctx.write_dvm_affinity(Some(mask)).await;
        ctx.spin_unlock(lock).await;
    }
}

impl KvmPolicy for Dvmbm {
    fn fb(&self) -> bool {
        true
    }

    fn init(&self, host: &World, vms: usize, vcpus: usize) {
        let n = host.ncpus();
        self.ncpus.set(n);
        *self.vms.borrow_mut() = (0..=vms)
            .map(|_| VmState {
                sched_cpus: CpuVec::filled(vcpus, CpuMask::new(n)),
                pre_sched_cpus: CpuVec::filled(vcpus, CpuMask::new(n)),
                vm_cpus: CpuMask::new(n),
                lock: host.new_lock("sched_lock"),
            })
            .collect();
    }

    fn vcpu_load<'a>(&'a self, ctx: &'a Ctx, kvm: &'a Kvm, vcpu: CpuId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let _f = ctx.func(crate::label!("kvm_tlbi_dvmbm_vcpu_load"));
            let vm = kvm.guest.id as usize;
            // cpumask_copy(vcpu->arch.sched_cpus, current->cpus_ptr)
            let allowed = ctx.w.k.borrow().tasks[ctx.task]
                .affinity
                .clone()
                .unwrap_or_else(|| CpuMask::full(self.ncpus.get()));
            let fast = {
                let mut v = self.vms.borrow_mut();
                let st = &mut v[vm];
                st.sched_cpus[vcpu] = allowed;
                st.sched_cpus[vcpu] == st.pre_sched_cpus[vcpu]
            };
            if fast {
                self.write_register(ctx, vm).await;
                return;
            }
            let lock = self.vms.borrow()[vm].lock;
            ctx.spin_lock(lock).await;
            let changed = {
                let mut v = self.vms.borrow_mut();
                let st = &mut v[vm];
                let mut mask = CpuMask::new(self.ncpus.get());
                for m in &st.sched_cpus {
                    mask.or_with(m);
                }
                let changed = mask != st.vm_cpus;
                st.vm_cpus = mask;
                changed
            };
            if changed {
                // "Perform a heavy invalidation for this VMID."
                kvm_flush_remote_tlbs(ctx).await;
                kvm_make_all_cpus_request(ctx, kvm, vcpu).await;
            }
            let mask = self.vms.borrow()[vm].vm_cpus.clone();
            ctx.write_dvm_affinity(Some(mask)).await;
            ctx.spin_unlock(lock).await;
        })
    }

    fn vcpu_put<'a>(&'a self, ctx: &'a Ctx, kvm: &'a Kvm, vcpu: CpuId) -> KFuture<'a, ()> {
        Box::pin(async move {
            let vm = kvm.guest.id as usize;
            {
                let mut v = self.vms.borrow_mut();
                let st = &mut v[vm];
                st.pre_sched_cpus[vcpu] = st.sched_cpus[vcpu].clone();
            }
            // The enable bit cleared: the host's broadcasts go everywhere.
            ctx.write_dvm_affinity(None).await;
        })
    }

    fn check_requests<'a>(&'a self, ctx: &'a Ctx, kvm: &'a Kvm, vcpu: CpuId) -> KFuture<'a, ()> {
        Box::pin(async move {
            if kvm.requests[vcpu].replace(false) {
                // KVM_REQ_RELOAD_TLBI_DVMBM
                self.write_register(ctx, kvm.guest.id as usize).await;
            }
        })
    }
}

/// The registry entry of `kvm-dvmbm`.
pub const ENTRY: KvmPolicyEntry = KvmPolicyEntry {
    name: "kvm-dvmbm",
    description: "openEuler KVM with TLBI by affinity: a guest's broadcasts reach the union of its vCPU threads' allowed CPUs",
    requires: &[Feature::TlbiAffinity],
    breaks: None,
    new: || Box::new(Dvmbm::default()),
};
