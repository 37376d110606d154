//! `kvm-stock`: KVM/arm64 as mainline Linux has it: `HCR_EL2.FB` set for
//! every guest (`HCR_GUEST_FLAGS`), so that a guest's TLBIs, local ones
//! included, reach every CPU of the inner-shareable domain.

use super::{KvmPolicy, KvmPolicyEntry};

/// The policy. See the module doc.
#[derive(Debug, Clone, Copy)]
pub struct Stock;

impl KvmPolicy for Stock {
    fn fb(&self) -> bool {
        true
    }
}

/// The registry entry of `kvm-stock`.
pub const ENTRY: KvmPolicyEntry = KvmPolicyEntry {
    name: "kvm-stock",
    description: "mainline KVM/arm64: HCR_EL2.FB set, guests' TLBIs broadcast to every CPU",
    requires: &[],
    breaks: None,
    new: || Box::new(Stock),
};
