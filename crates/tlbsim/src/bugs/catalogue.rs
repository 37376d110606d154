//! The catalogue: one constant per real bug, each checked against its fix
//! commit's message (docs/bugs.md says how each was verified, and lists
//! the candidates the model cannot express yet, with the reason). A new
//! entry is a constant here plus, unless a `[kernel]` setting selects the
//! buggy code, the historical kernel's own file (a policy or allocator
//! whose registry entry declares what it breaks).

use super::{Bug, Kernels};
use crate::config::Arch;
use crate::kernel::registry::{Breaks, Search, Strategy};
use crate::observe::Invariant;

/// CVE-2018-18281: mremap flushed a moved clean PTE's old address only
/// after dropping the page-table locks.
pub const CVE_2018_18281: Bug = Bug {
    id: "CVE-2018-18281",
    fix: "eb66ae030829",
    subject: "mremap: properly flush TLB before releasing the page",
    introduced: Some("5d1904204c99"),
    versions: "v4.9 to v4.18",
    arch: Arch::Arm64,
    what: "move_ptes() flushes a clean PTE's old address after both PTE locks are dropped: \
           reclaim finds the page at its new address and frees it while another CPU \
           still uses the old translation",
    kernels: Kernels::Setting {
        buggy: "kernel.mremap_flush_unlocked=true",
        fixed: "kernel.mremap_flush_unlocked=false",
        breaks: Breaks {
            invariant: Invariant::NoUseAfterFree,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/seed001-mremap.toml"),
                strategy: Strategy::Random,
                schedules: 5_000,
                seed: 1,
                max_actions: 200_000,
            },
        },
    },
};

/// arm64's `arch_flush_tlb_batched_pending()` was a bare DSB (v6.6-v6.15).
pub const ARM64_BATCHED_PENDING: Bug = Bug {
    id: "arm64-batched-pending-dsb",
    fix: "4b634918384c",
    subject: "arm64/mm: Close theoretical race where stale TLB entry remains valid",
    introduced: Some("43b3dfdd0455"),
    versions: "v6.6 to v6.15",
    arch: Arch::Arm64,
    what: "flush_tlb_batched_pending() only waits for this CPU's TLBIs (DSB ISH): an mprotect \
           on another CPU returns while reclaim's deferred TLBI may still be in flight",
    kernels: Kernels::Policy {
        buggy: "arm64-tlbbatch-6.6",
        fixed: "arm64-tlbbatch",
    },
};

/// x86's reworked lazy TLB mode sent lazy CPUs no flush at all, even when
/// page tables were freed.
pub const X86_LAZY_FREED_TABLES: Bug = Bug {
    id: "x86-lazy-freed-tables",
    fix: "b956575bed91",
    subject: "x86/mm: Flush more aggressively in lazy TLB mode",
    introduced: Some("94b1b03b519b"),
    versions: "v4.14 release candidates (introduced and fixed in the v4.14 cycle)",
    arch: Arch::X86,
    what: "lazy CPUs get no flush IPI when munmap frees page tables: a lazy CPU's \
           paging-structure cache walks the freed table",
    kernels: Kernels::Policy {
        buggy: "x86-tlb-gen-before-b956575",
        fixed: "x86-tlb-gen",
    },
};

/// ARM's 2012 ASID allocator lost a CPU's reservation at a second rollover.
pub const ARM_ASID_SUSPENDED_ANIMATION: Bug = Bug {
    id: "arm-asid-suspended-animation",
    fix: "ae120d9edfe9",
    subject: "ARM: 7767/1: let the ASID allocator handle suspended animation",
    introduced: Some("b5466f872852"),
    versions: "v3.8 to v3.10",
    arch: Arch::Arm64,
    what: "flush_context() reserves what xchg(active_asids[cpu], 0) returns: a CPU that has \
           not switched since the last rollover returns 0 and loses its reservation, so its \
           running mm's ASID is given to another mm",
    kernels: Kernels::Allocator {
        buggy: "arm-asid-reserved-3.8",
        fixed: "arm64-asid-reserved",
    },
};

/// Linux 4.12 batched reclaim's flushes but an mprotect that found a PTE
/// reclaim had cleared did not wait for its deferred flush.
pub const MPROTECT_VS_RECLAIM: Bug = Bug {
    id: "mprotect-vs-reclaim",
    fix: "3ea277194daa",
    subject: "mm, mprotect: flush TLB if potentially racing with a parallel reclaim leaving stale TLB entries",
    introduced: Some("72b252aed506"),
    versions: "v4.3 to v4.12",
    arch: Arch::X86,
    what: "reclaim clears a PTE and defers its flush; an mprotect on another CPU finds the PTE \
           already clear, changes nothing and returns while that CPU still holds the translation",
    kernels: Kernels::Policy {
        buggy: "x86-lazy-legacy",
        fixed: "x86-lazy-4.13",
    },
};

/// Every entry, in the order `tlbsim bugs` prints them.
pub const BUGS: &[Bug] = &[
    MPROTECT_VS_RECLAIM,
    CVE_2018_18281,
    X86_LAZY_FREED_TABLES,
    ARM_ASID_SUSPENDED_ANIMATION,
    ARM64_BATCHED_PENDING,
];
