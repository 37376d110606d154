//! `mutant-kvm-nofb-no-move-flush`: [`super::nofb`] without its flush of
//! a vCPU that moved: `HCR_EL2.FB` clear, and only mainline's flush when
//! another vCPU of the VM ran on this CPU last. A guest's local flush on
//! one CPU then leaves the VM's entries on the CPU the vCPU ran on before,
//! which it finds when it comes back. Breaks no stale walk (or hold) on
//! `experiments/seed003-vm-move.toml`: under the walk-cache reading that
//! file pins (`flush-on-ttbr-change`, for its v2 guests) the guest's own
//! TTBR0 writes drop the VM's stale walks, and what the vCPU finds is a
//! stale leaf (no stale hold); under the default (`asid-tagged`) it was a
//! stale walk.

use super::{KvmPolicy, KvmPolicyEntry};
use crate::observe::Invariant;

/// The mutant. See the module doc.
#[derive(Debug, Clone, Copy)]
pub struct NoFbNoMoveFlush;

impl KvmPolicy for NoFbNoMoveFlush {
    fn fb(&self) -> bool {
        false
    }
}

/// The registry entry of `mutant-kvm-nofb-no-move-flush`.
pub const ENTRY: KvmPolicyEntry = KvmPolicyEntry {
    name: "mutant-kvm-nofb-no-move-flush",
    description: "mutant: kvm-nofb without the flush of a vCPU that moved (FB clear, mainline flushes only)",
    requires: &[],
    breaks: Some((Invariant::NoStaleHold, "experiments/seed003-vm-move.toml")),
    new: || Box::new(NoFbNoMoveFlush),
};
