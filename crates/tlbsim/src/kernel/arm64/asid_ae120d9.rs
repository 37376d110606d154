//! `arm-asid-reserved-ae120d9`: `arm-asid-reserved-3.8` with ae120d9edfe9
//! ("ARM: 7767/1: let the ASID allocator handle suspended animation",
//! 3.11, `Cc: stable # 3.9`): in `flush_context()`, a CPU other than the
//! rolling one whose `atomic64_xchg(&active_asids[i], 0)` returns 0 (it
//! went through a rollover without switching since) keeps its reserved
//! ASID, "the only trace we have of the process it is still running".
//!
//! That made a reservation outlive a second rollover, and opened the hole
//! 40ee068ec09b ("ARM: 8465/1: mm: keep reserved ASIDs in sync with mm
//! after multiple rollovers", 4.4) closed: CPU x runs a thread of mm p
//! through two rollovers, reserving p's generation-g id; between them
//! CPU y switches to p, hits that reservation and gives p the same number
//! in generation g + 1; after the second rollover CPU y's next switch to p
//! compares p's g + 1 id with CPU x's generation-g reservation, misses,
//! and allocates a new number while CPU x still runs p under the old one.
//! TLBIs by the mm's ASID then miss CPU x. The 3.11 file had other
//! changes too (docs/research/issue37-next-bugs.md), which this does not
//! take.

use super::asid_3_8::{Asid38, Fixes};
use crate::kernel::registry::{AllocatorEntry, Breaks, Search, Strategy};
use crate::observe::Invariant;

/// The registry entry.
pub const ENTRY: AllocatorEntry = AllocatorEntry {
    name: "arm-asid-reserved-ae120d9",
    description: "arm-asid-reserved-3.8 with ae120d9edfe9 (3.11, stable 3.9): reservations survive rollovers but are not moved to the mm's new generation",
    arch: Some(crate::config::Arch::Arm64),
    breaks: Some(Breaks {
        invariant: Invariant::NoStaleHold,
        search: Search::Explore {
            experiment: crate::experiment_file!("experiments/seed002-explore.toml"),
            strategy: Strategy::Dpor,
            schedules: 5_000,
            seed: 1,
            max_actions: 50_000,
            speculation: 2,
        },
    }),
    new: |_, bits| Box::new(Asid38::with_fixes(bits, Fixes::KeepReserved)),
};
