//! `arm-asid-reserved-40ee068`: `arm-asid-reserved-ae120d9` with
//! 40ee068ec09b ("ARM: 8465/1: mm: keep reserved ASIDs in sync with mm
//! after multiple rollovers", Will Deacon, 2015, `Cc: stable`; arm64 took
//! the same fix as 0ebea8088095): `new_context()`'s
//! `check_update_reserved_asid(asid, newasid)` moves every CPU's reserved
//! copy of the mm's old id to the new generation when it hits one, so a
//! later switch still finds it. The fixed counterpart of
//! `arm-asid-reserved-ae120d9` in `tlbsim bugs`.

use super::asid_3_8::{Asid38, Fixes};
use crate::kernel::registry::AllocatorEntry;

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm-asid-reserved-40ee068",
    description: "arm-asid-reserved-ae120d9 with 40ee068ec09b (4.4): reserved copies follow the mm into the new generation",
    arch: Some(crate::config::Arch::Arm64),
    breaks: None,
    new: |_, bits| Box::new(Asid38::with_fixes(bits, Fixes::SyncReserved)),
};
