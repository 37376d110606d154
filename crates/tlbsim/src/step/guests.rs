//! The virtual machines of a run as the drivers take them: each VM's guest
//! kernel and vCPU threads, and the host's doorbell handler. The drivers
//! add the vCPUs as contexts before the first step; they need nothing else
//! of how the run was built.

use super::Cpus;
use crate::kernel::arm64::kvm::Kvm;
use crate::kernel::World;
use std::rc::Rc;

/// A run's virtual machines (none without `[vm]`).
#[derive(Default, Clone)]
pub struct Guests {
    /// The virtual machines, in creation order (their contexts follow the
    /// physical CPUs in this order: `Kvm::cx_base`).
    pub vms: Vec<Rc<Kvm>>,
    /// The host IPI handler that rings a vCPU's doorbell (`Some` when
    /// there are VMs).
    pub doorbell: Option<usize>,
}

impl std::fmt::Debug for Guests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guests")
            .field("vms", &self.vms.len())
            .field("doorbell", &self.doorbell)
            .finish()
    }
}

impl Guests {
    /// Adds the VMs' vCPUs to `cpus` as contexts, with their doorbells.
    pub fn add_to(&self, cpus: &mut Cpus) {
        for kvm in &self.vms {
            let base = cpus.add_guest(Rc::clone(&kvm.guest));
            assert_eq!(base, kvm.cx_base, "contexts are added in creation order");
            let doorbell = self.doorbell.expect("a VM has a doorbell handler");
            for (vcpu, &t) in kvm.vcpu_threads.borrow().iter_cpus() {
                cpus.set_doorbell(kvm.vcpu_cx(vcpu), doorbell, t.index());
            }
        }
    }

    /// The vCPUs of every VM.
    pub fn vcpus(&self) -> usize {
        self.vms.iter().map(|k| k.guest.ncpus()).sum()
    }

    /// Does some vCPU thread float over the host's CPUs (no affinity), so
    /// that the host scheduler slices it with others?
    pub fn any_vcpu_floats(&self, host: &World) -> bool {
        self.vms.iter().any(|k| {
            k.vcpu_threads
                .borrow()
                .iter()
                .any(|&t| host.k.borrow().tasks[t].affinity.is_none())
        })
    }
}
