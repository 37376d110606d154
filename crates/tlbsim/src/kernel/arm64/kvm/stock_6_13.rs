//! `kvm-stock-6.13`: `kvm-stock` as Linux 6.7 to 6.13 (and 6.14 before
//! its -rc fix, stable before 6.13.6) loaded a vCPU: 934bf871f011 ("KVM:
//! arm64: Load the stage-2 MMU context in kvm_vcpu_load_vhe()") wrote
//! `VTTBR_EL2` in `kvm_vcpu_load_vhe()` with the VMID as it stood, and
//! `kvm_arm_vmid_update()` came later, in the run loop, reloading the
//! stage-2 context only when that call allocated the VMID. Two vCPUs of a
//! new VM (VMID 0, unallocated) load at once: one allocates and reloads,
//! the other finds the VMID allocated, reloads nothing and enters the
//! guest under VMID 0. The guest's TLB invalidations issued on the first
//! vCPU carry the real VMID and miss the second's entries. fa808ed4e199
//! ("KVM: arm64: Ensure a VMID is allocated before programming
//! VTTBR_EL2") made `kvm_arch_vcpu_load()` update the VMID first, as
//! `kvm-stock` does.

use super::stock::Stock;
use super::{KvmPolicy, KvmPolicyEntry};
use crate::observe::Invariant;

/// The policy. See the module doc.
#[derive(Debug, Clone, Copy)]
pub struct Stock613;

impl KvmPolicy for Stock613 {
    fn fb(&self) -> bool {
        Stock.fb()
    }

    fn vttbr_before_vmid_update(&self) -> bool {
        true
    }
}

/// The registry entry of `kvm-stock-6.13`.
pub const ENTRY: KvmPolicyEntry = KvmPolicyEntry {
    name: "kvm-stock-6.13",
    description: "KVM/arm64 of 6.7-6.13 (before fa808ed4e199): VTTBR_EL2 programmed before the VMID is allocated",
    requires: &[],
    breaks: Some((Invariant::NoStaleHold, "experiments/bugs/kvm-vttbr-before-vmid.toml")),
    new: || Box::new(Stock613),
};
