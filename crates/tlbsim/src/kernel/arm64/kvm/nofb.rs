//! `kvm-nofb`: the 2020 RFC that upstream rejected ("KVM: arm64: Don't
//! force broadcast tlbi when guest is running", Nianyao Tang and Shaokun
//! Zhang, kvmarm, 22 Oct 2020): `HCR_FB` dropped from `HCR_GUEST_FLAGS`,
//! and `kvm_arch_vcpu_load()` flushes the VM's entries on this CPU also
//! when the vCPU last ran on another CPU (`*last_ran != vcpu_id ||
//! vcpu->cpu != cpu`), so that what the guest flushed locally elsewhere
//! is not found here. Marc Zyngier's objection: it "breaks uniprocessor
//! semantics for I-cache invalidation" (not modelled: no I-cache).

use super::{Kvm, KvmPolicy, KvmPolicyEntry};
use crate::hw::{CpuId, CpuVec};
use crate::kernel::World;
use crate::engine::track::Tracked;

/// The policy: per VM and vCPU, the CPU it last loaded on (`vcpu->cpu`).
#[derive(Debug)]
pub struct NoFb {
    last_cpu: Tracked<Vec<CpuVec<Option<CpuId>>>>,
}

impl Default for NoFb {
    fn default() -> Self {
        NoFb {
            last_cpu: Tracked::fresh(Vec::new()),
        }
    }
}

impl KvmPolicy for NoFb {
    fn fb(&self) -> bool {
        false
    }

    fn init(&self, _host: &World, vms: usize, vcpus: usize) {
        *self.last_cpu.borrow_mut() = vec![CpuVec::filled(vcpus, None); vms + 1];
    }

    fn flush_on_load(&self, kvm: &Kvm, vcpu: CpuId, cpu: CpuId) -> bool {
        let mut l = self.last_cpu.borrow_mut();
        let last = &mut l[kvm.guest.id as usize][vcpu];
        last.replace(cpu).is_some_and(|c| c != cpu)
    }
}

/// The registry entry of `kvm-nofb`.
pub const ENTRY: KvmPolicyEntry = KvmPolicyEntry {
    name: "kvm-nofb",
    description: "2020 RFC (rejected): HCR_EL2.FB clear, a vCPU that moved flushes the VM locally on load",
    requires: &[],
    breaks: None,
    new: || Box::new(NoFb::default()),
};
