//! KVM/arm64 (`arch/arm64/kvm`): the host side of virtual machines.

pub mod vmid;
