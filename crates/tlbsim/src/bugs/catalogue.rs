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
                speculation: 2,
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

/// x86's lazy `mm_cpumask` skipped a CPU between its CR3 write and its
/// `loaded_mm` store.
pub const CVE_2025_37964: Bug = Bug {
    id: "CVE-2025-37964",
    fix: "fea4e317f9e7",
    subject: "x86/mm: Eliminate window where TLB flushes may be inadvertently skipped",
    introduced: Some("6db2526c1d69"),
    versions: "v6.14 to v6.14.6, v6.13.4+, v6.12.16-v6.12.28, v6.6.79-v6.6.90, v6.1.129-v6.1.138, v5.15.179-v5.15.182",
    arch: Arch::X86,
    what: "should_flush_tlb() skips a CPU whose loaded_mm is LOADED_MM_SWITCHING: a CPU that read \
           the old tlb_gen and kept its PCID's entries gets no flush for an mprotect in between",
    kernels: Kernels::Policy {
        buggy: "x86-lazy-cpumask-6.14",
        fixed: "x86-lazy-cpumask",
    },
};

/// Before 4.13 a `MADV_DONTNEED` that found the PTEs another thread's
/// gather had cleared returned before that gather's flush.
pub const MADV_DONTNEED_NESTED: Bug = Bug {
    id: "madv-dontneed-nested",
    fix: "99baac21e458",
    subject: "mm: fix MADV_[FREE|DONTNEED] TLB flush miss problem",
    introduced: None,
    versions: "every kernel before v4.13 whose MADV_DONTNEED runs under mmap_sem for reading",
    arch: Arch::X86,
    what: "two threads MADV_DONTNEED one page: the second finds the PTE clear, gathers nothing, \
           flushes nothing and returns while the first's flush has not reached every CPU",
    kernels: Kernels::Setting {
        buggy: "kernel.gather_ignores_nested=true",
        fixed: "kernel.gather_ignores_nested=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/madv-dontneed-nested.toml"),
                strategy: Strategy::Dpor,
                schedules: 5_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// arm64's ASID fast path `xchg`ed its ASID over the 0 a concurrent
/// rollover had written (found by the allocator's TLA+ model).
pub const ARM64_ASID_XCHG: Bug = Bug {
    id: "arm64-asid-xchg-over-0",
    fix: "a8ffaaa060b8",
    subject: "arm64: asid: Do not replace active_asids if already 0",
    introduced: Some("5aec715d7d31"),
    versions: "from 5aec715d7d31 (2015, v4.4 or v4.5) to v4.14",
    arch: Arch::Arm64,
    what: "a CPU that checked the generation before a rollover xchg()s its old-generation ASID \
           over the rollover's 0; a second rollover reserves it, and two mms share one ASID",
    kernels: Kernels::Allocator {
        buggy: "arm64-asid-reserved-4.14",
        fixed: "arm64-asid-reserved",
    },
};

/// arm64 3.18 freed a single-user mm's page tables before invalidating
/// the walk caches that pointed at them.
pub const ARM64_TABLE_FREE_SINGLE_USER: Bug = Bug {
    id: "arm64-table-free-single-user",
    fix: "285994a62c80",
    subject: "arm64: Invalidate the TLB corresponding to intermediate page table levels",
    introduced: Some("5e5f6dc10546"),
    versions: "v3.18 to v3.19",
    arch: Arch::Arm64,
    what: "with fewer than two mm users tlb_remove_table() frees a page-table page at once, \
           before tlb_finish_mmu() invalidates: the CPU's walk cache still points at it",
    kernels: Kernels::Setting {
        buggy: "kernel.pgtable_free_tlbi=\"gather-all-levels\"",
        fixed: "kernel.pgtable_free_tlbi=\"sync-per-table\"",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/arm64-table-free-single-user.toml"
                ),
                strategy: Strategy::Random,
                schedules: 2_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// Before 4.19 `tlb_remove_table()` freed a single-user mm's page table
/// before the gather's flush; on x86 4.14-4.18 with `CONFIG_PARAVIRT`
/// nothing had invalidated the paging-structure caches by then.
pub const X86_TABLE_FREE_SINGLE_USER: Bug = Bug {
    id: "x86-table-free-single-user",
    fix: "a6f572084fbe",
    subject: "mm/tlb: Remove tlb_remove_table() non-concurrent condition",
    introduced: Some("267239116987"),
    versions: "x86 v4.14 to v4.18 built with CONFIG_PARAVIRT (RCU table freeing, 48a8b97cfd80)",
    arch: Arch::X86,
    what: "with fewer than two mm users tlb_remove_table() frees a page-table page at once, \
           before tlb_finish_mmu()'s flush: the CPU's paging-structure cache still points at it",
    kernels: Kernels::Setting {
        buggy: "kernel.table_free_single_user_at_once=true",
        fixed: "kernel.table_free_single_user_at_once=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/x86-table-free-single-user.toml"
                ),
                strategy: Strategy::Random,
                schedules: 2_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// arm64's `ASID(mm)` kept bits 15:8 of `context.id`, generation bits when
/// the kernel used fewer ASID bits than a CPU's hardware.
pub const ARM64_ASID_UNMASKED: Bug = Bug {
    id: "arm64-asid-bits-15-8",
    fix: "c0900d15d31c",
    subject: "arm64: Ensure bits ASID[15:8] are masked out when the kernel uses 8-bit ASIDs",
    introduced: None,
    versions: "arm64 before v6.13 (and the stable kernels until their backports), on CPUs \
               with 16-bit ASIDs under a kernel using fewer",
    arch: Arch::Arm64,
    what: "ASID(mm) = context.id & 0xffff carries the generation into the TLB tag: after a \
           rollover a thread switches in under another tag than its sibling on another CPU, \
           and the mm's flushes miss the sibling's entries",
    kernels: Kernels::Allocator {
        buggy: "arm64-asid-reserved-6.12",
        fixed: "arm64-asid-reserved",
    },
};

/// KVM/arm64 6.7-6.13 programmed `VTTBR_EL2` before the VMID was
/// allocated, and a second vCPU of a new VM ran under VMID 0.
pub const KVM_VTTBR_BEFORE_VMID: Bug = Bug {
    id: "kvm-vttbr-before-vmid",
    fix: "fa808ed4e199",
    subject: "KVM: arm64: Ensure a VMID is allocated before programming VTTBR_EL2",
    introduced: Some("934bf871f011"),
    versions: "v6.7 to v6.13 (stable: fixed in v6.13.6)",
    arch: Arch::Arm64,
    what: "two vCPUs of a new VM load at once: both program VTTBR_EL2 with the unallocated \
           VMID 0, only the one whose kvm_arm_vmid_update() allocated reloads it, and the \
           guest's TLBIs on one vCPU miss the other's entries",
    kernels: Kernels::Setting {
        buggy: "vm.kvm_policy=\"kvm-stock-6.13\"",
        fixed: "vm.kvm_policy=\"kvm-stock\"",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/kvm-vttbr-before-vmid.toml"),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// x86's `flush_tlb_func()` skipped reclaim's batched flush, whose
/// generation is 0 (tip and linux-next only).
pub const X86_BATCH_GEN_ZERO: Bug = Bug {
    id: "x86-batch-gen-zero",
    fix: "8f1d56f64f8d",
    subject: "x86/mm/tlb: Ignore f->new_tlb_gen when zero",
    introduced: Some("aa44284960d5"),
    versions: "tip x86/mm and linux-next, June-July 2022 (both commits reached Linux in v6.0: \
               no release had the bug)",
    arch: Arch::X86,
    what: "flush_tlb_func() returns early when f->new_tlb_gen <= local_tlb_gen, and reclaim's \
           arch_tlbbatch_flush() passes generation 0: no CPU performs the batched flush",
    kernels: Kernels::Policy {
        buggy: "x86-pcid-aa44284",
        fixed: "x86-pcid-6.0",
    },
};

/// ARM's allocator after ae120d9edfe9 let two CPUs run one mm under two
/// ASIDs after two rollovers.
pub const ARM_ASID_RESERVED_SYNC: Bug = Bug {
    id: "arm-asid-reserved-out-of-sync",
    fix: "40ee068ec09b",
    subject: "ARM: 8465/1: mm: keep reserved ASIDs in sync with mm after multiple rollovers",
    introduced: Some("ae120d9edfe9"),
    versions: "ARM from ae120d9edfe9 (v3.10/v3.11, stable 3.9) to v4.3; arm64 (the same allocator \
               since 5aec715d7d31) until 0ebea8088095",
    arch: Arch::Arm64,
    what: "a CPU keeps its generation-g reservation of mm p through two rollovers while p is \
           moved to g + 1 elsewhere; after the second, a switch to p misses the stale copy and \
           allocates a new number, so TLBIs by p's ASID miss the first CPU",
    kernels: Kernels::Allocator {
        buggy: "arm-asid-reserved-ae120d9",
        fixed: "arm-asid-reserved-40ee068",
    },
};

/// 4.13-5.16's bool `mm->tlb_flush_batched`: reclaim's `true`, stored
/// between another CPU's `flush_tlb_batched_pending()` flush and its store
/// of `false`, was lost.
pub const TLB_FLUSH_BATCHED_BOOL: Bug = Bug {
    id: "tlb-flush-batched-bool",
    fix: "5ee2fa2f0636",
    subject: "mm/rmap: fix potential batched TLB flush race",
    introduced: Some("3ea277194daa"),
    versions: "v4.13 to v5.16 (x86, the only architecture batching reclaim's flushes then)",
    arch: Arch::X86,
    what: "kswapd defers a second page's flush and stores tlb_flush_batched = true while an \
           mprotect, under another PTE table's lock, is between its flush_tlb_mm() and its \
           store of false: the mprotect then finds nothing pending at the second table and \
           returns while a translation of that page, cached after its flush, is live",
    kernels: Kernels::Setting {
        buggy: "kernel.tlb_flush_batched_bool=true",
        fixed: "kernel.tlb_flush_batched_bool=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/tlb-flush-batched-bool.toml"),
                strategy: Strategy::Dpor,
                schedules: 5_000,
                seed: 1,
                max_actions: 200_000,
                // The CPU must refill the page after the flush and before
                // kswapd clears it: 2 fills per schedule seldom land there.
                speculation: 20,
            },
        },
    },
};

/// Before 4.19 `tlb_remove_table()`'s fallback, when no batch page could
/// be allocated, freed the table after an IPI but before any TLB
/// invalidation.
pub const X86_TABLE_FREE_ONE: Bug = Bug {
    id: "x86-table-free-one",
    fix: "d86564a2f085",
    subject: "mm/tlb, x86/mm: Support invalidating TLB caches for RCU_TABLE_FREE",
    introduced: Some("9e52fc2b50de"),
    versions: "x86 v4.14 to v4.18 built with CONFIG_PARAVIRT, when GFP_NOWAIT allocations fail",
    arch: Arch::X86,
    what: "tlb_remove_table() cannot allocate its batch page: tlb_remove_table_one() IPIs the \
           other CPUs (which invalidates nothing) and frees the table while the \
           paging-structure caches still point at it",
    kernels: Kernels::Setting {
        buggy: "kernel.table_free_one_without_invalidate=true",
        fixed: "kernel.table_free_one_without_invalidate=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/x86-table-free-one.toml"),
                strategy: Strategy::Random,
                schedules: 2_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// 4.20-5.1: a nested gather's `tlb_finish_mmu()` forgot the page tables
/// its munmap had freed.
pub const GATHER_NESTED_RESET_RANGE: Bug = Bug {
    id: "gather-nested-reset-range",
    fix: "7a30df49f63a",
    subject: "mm: mmu_gather: remove __tlb_reset_range() for force flush",
    introduced: Some("dd2283f2605e"),
    versions: "v4.20 to v5.1 (stable 4.20+ until the backports)",
    arch: Arch::Arm64,
    what: "munmap zaps and frees page tables under the mmap_lock held for reading while \
           another thread's MADV_DONTNEED gathers: the nested tlb_finish_mmu() resets the \
           gather (__tlb_reset_range()) and flushes the call's range at the last level only, \
           so walk caches keep pointing at the freed tables",
    kernels: Kernels::Setting {
        buggy: "kernel.gather_nested_reset_range=true",
        fixed: "kernel.gather_nested_reset_range=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/gather-nested-reset-range.toml"
                ),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// 5.5-5.11: clearing the soft-dirty state write-protected every PTE and
/// flushed nothing.
pub const CLEAR_REFS_GATHER: Bug = Bug {
    id: "clear-refs-soft-dirty-no-flush",
    fix: "912efa17e512",
    subject: "mm: proc: Invalidate TLB after clearing soft-dirty page state",
    introduced: Some("0758cd830494"),
    versions: "v5.5 to v5.11 (and 4.19 stable, which took 0758cd830494)",
    arch: Arch::X86,
    what: "clear_refs_write() write-protects the PTEs inside a full-mm mmu_gather; since \
           nothing was added to it, tlb_finish_mmu() flushes nothing, and a CPU keeps \
           writing through its writable translation (writes the soft-dirty tracker misses)",
    kernels: Kernels::Setting {
        buggy: "kernel.clear_refs_gather=true",
        fixed: "kernel.clear_refs_gather=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/clear-refs-gather.toml"),
                strategy: Strategy::Random,
                schedules: 2_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// CVE-2025-22045: x86's `flush_tlb_range()` told lazy CPUs nothing when
/// `pmdp_collapse_flush()` retracted a page table.
pub const CVE_2025_22045: Bug = Bug {
    id: "CVE-2025-22045",
    fix: "3ef938c35035",
    subject: "x86/mm: Fix flush_tlb_range() when used for zapping normal PMDs",
    introduced: Some("016c4d92cd16"),
    versions: "x86 v4.20 to v6.14 (stable until the April 2025 backports), where khugepaged or \
               MADV_COLLAPSE retracts the page table of a file THP",
    arch: Arch::X86,
    what: "collapse_pte_mapped_thp() → pmdp_collapse_flush() → flush_tlb_range() passes \
           freed_tables = false: a CPU in lazy TLB mode is not interrupted and keeps the \
           retracted, freed PTE table in its paging-structure cache",
    kernels: Kernels::Setting {
        buggy: "kernel.flush_tlb_range_leaf_only=true",
        fixed: "kernel.flush_tlb_range_leaf_only=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/collapse-lazy.toml"),
                strategy: Strategy::Random,
                schedules: 2_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// khugepaged freed a retracted page table while a GUP-fast walk on
/// another CPU, interrupts off, could still read it.
pub const KHUGEPAGED_GUP_FAST: Bug = Bug {
    id: "khugepaged-gup-fast",
    fix: "2ba99c5e0881",
    subject: "mm/khugepaged: fix GUP-fast interaction by sending IPI",
    introduced: Some("ba76149f47d8"),
    versions: "v2.6.38 to v6.0 (stable until the backports) on architectures whose TLB flushes \
               send no IPI (arm64); MADV_COLLAPSE's path since 6.1-rc",
    arch: Arch::Arm64,
    what: "collapse_pte_mapped_thp() retracts a PTE table, flushes with broadcast TLBIs and \
           frees it; a GUP-fast walk on another CPU that read the PMD before then reads a PTE \
           in the freed table (no IPI held the free back)",
    kernels: Kernels::Setting {
        buggy: "kernel.khugepaged_no_table_sync=true",
        fixed: "kernel.khugepaged_no_table_sync=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/collapse-gup-fast.toml"),
                strategy: Strategy::Dpor,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// 3.8-4.5: `zap_huge_pmd()` dropped the huge zero page's reference
/// before the TLB flush, and its shrinker could free it under a live
/// translation.
pub const HUGE_ZERO_PUT_BEFORE_FLUSH: Bug = Bug {
    id: "huge-zero-put-before-flush",
    fix: "aa88b68c3b1d",
    subject: "thp: keep huge zero page pinned until tlb flush",
    introduced: Some("97ae17497e99"),
    versions: "v3.8 to v4.5",
    arch: Arch::Arm64,
    what: "MADV_DONTNEED (or munmap) of the huge zero page drops its reference before the \
           gather's flush; the shrinker, finding no other reference, frees the page while \
           another CPU's TLB still maps it",
    kernels: Kernels::Setting {
        buggy: "kernel.huge_zero_put_before_flush=true",
        fixed: "kernel.huge_zero_put_before_flush=false",
        breaks: Breaks {
            invariant: Invariant::NoUseAfterFree,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/huge-zero-put-before-flush.toml"
                ),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// x86's `switch_mm()` left the previous mm's `mm_cpumask` before
/// loading the next mm's CR3.
pub const X86_SWITCH_MM_CLEAR_PREV_FIRST: Bug = Bug {
    id: "x86-switch-mm-clear-prev-first",
    fix: "831d52bc1539",
    subject:
        "x86, mm: avoid possible bogus tlb entries by clearing prev mm_cpumask after switching mm",
    introduced: None,
    versions: "x86 from 2.4.0 until 831d52bc1539 (late 2011; the release is not verified here)",
    arch: Arch::X86,
    what: "a CPU switching from mm A to mm B clears itself from A's mm_cpumask while CR3 \
           still points at A's tables: a munmap of A on another CPU sends it no flush IPI and \
           frees a page table its paging-structure cache still reaches",
    kernels: Kernels::Policy {
        buggy: "x86-lazy-before-831d52b",
        fixed: "x86-lazy-4.13",
    },
};

/// CVE-2026-74674: page-table reclaim aimed its walk-cache flush one past
/// the freed table.
pub const CVE_2026_74674: Bug = Bug {
    id: "CVE-2026-74674",
    fix: "478a1c3abebf",
    subject: "mm: fix incorrect flush address in direct page table reclaim",
    introduced: Some("4c640eb4181c"),
    versions: "v7.0 to v7.1.8 (CONFIG_PT_RECLAIM: x86)",
    arch: Arch::X86,
    what: "MADV_DONTNEED over a whole PMD frees its empty PTE table with pte_free_tlb(tlb, \
           table, addr), addr one past the table's range: with nothing else cleared in the \
           call, the by-address flush misses the table a paging-structure cache still reaches",
    kernels: Kernels::Setting {
        buggy: "kernel.pt_reclaim_flush_past_end=true",
        fixed: "kernel.pt_reclaim_flush_past_end=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleWalk,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/pt-reclaim-flush-past-end.toml"
                ),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// 4.14-6.0: device migration flushed the PTEs it had replaced by
/// migration entries after dropping the PTE table's lock.
pub const MIGRATE_VMA_FLUSH_UNLOCKED: Bug = Bug {
    id: "migrate-vma-flush-unlocked",
    fix: "60bae7370896",
    subject: "mm/migrate_device.c: flush TLB while holding PTL",
    introduced: Some("8c3328f1f36a"),
    versions: "v4.14 (HMM) to v6.0-rc; stable 5.15.72 took the fix",
    arch: Arch::X86,
    what: "migrate_vma_collect_pmd() replaces a PTE by a migration entry and flushes after \
           pte_unmap_unlock(): a MADV_DONTNEED on another CPU finds no present PTE, flushes \
           nothing and returns while the migrating CPU still holds the translation",
    kernels: Kernels::Setting {
        buggy: "kernel.migrate_vma_flush_unlocked=true",
        fixed: "kernel.migrate_vma_flush_unlocked=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/migrate-vma-flush-unlocked.toml"
                ),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// CVE-2026-64229: with `nopcid`, x86 kept INVLPGB and issued it with a
/// PCID while `CR4.PCIDE` was clear (#GP).
pub const CVE_2026_64229: Bug = Bug {
    id: "CVE-2026-64229",
    fix: "44126343d58c",
    subject: "x86/mm: Disable broadcast TLB flush when PCID is disabled",
    introduced: Some("4afeb0ed1753"),
    versions: "x86 v6.15 to v7.1-rc4 booted with nopcid on CPUs with INVLPGB (AMD)",
    arch: Arch::X86,
    what: "nopcid leaves CR4.PCIDE clear but INVLPGB on: an mm active on more than three CPUs \
           gets a global ASID, and broadcast_tlb_flush() issues INVLPGB with a non-zero PCID, \
           which raises #GP (an oops in the flush)",
    kernels: Kernels::Setting {
        buggy: "kernel.nopcid_keeps_invlpgb=true",
        fixed: "kernel.nopcid_keeps_invlpgb=false",
        breaks: Breaks {
            invariant: Invariant::ValidTlbi,
            search: Search::Runs {
                experiment: crate::experiment_file!("experiments/bugs/invlpgb-nopcid.toml"),
                seeds: &[1, 2, 3],
            },
        },
    },
};

/// CVE-2021-4002 (3.6-5.15): an unmap that unshared a hugetlb PMD table
/// flushed nothing for it.
pub const CVE_2021_4002: Bug = Bug {
    id: "CVE-2021-4002",
    fix: "a4a118f2eead",
    subject: "hugetlbfs: flush TLBs correctly after huge_pmd_unshare",
    introduced: Some("24669e58477e"),
    versions: "v3.6 to v5.15 (fixed in v5.16-rc; stable 5.10, 5.4, 4.14 and 4.9 took the fix in \
               2021-11)",
    arch: Arch::Arm64,
    what: "__unmap_hugepage_range() unshares a PMD table another process shares \
           (huge_pmd_unshare() clears this mm's PUD) and adds nothing to the mmu_gather: munmap \
           returns with the unshared 1 GiB's translations still cached",
    kernels: Kernels::Setting {
        buggy: "kernel.hugetlb_unshare_flush=\"none\"",
        fixed: "kernel.hugetlb_unshare_flush=\"force-flush\"",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/hugetlb-unshare-no-flush.toml"
                ),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// CVE-2026-63875 (6.19-7.0.11 and the stable kernels that took
/// 8ce720d5bd91): arm64 invalidated only leaf entries after a hugetlb PMD
/// table was unshared.
pub const CVE_2026_63875: Bug = Bug {
    id: "CVE-2026-63875",
    fix: "c2ff4764e03e",
    subject: "arm64: tlb: Flush walk cache when unsharing PMD tables",
    introduced: Some("8ce720d5bd91"),
    versions: "arm64 v6.19 to v7.0.11; stable 6.18.13-6.18.34, 6.12.74-6.12.92, \
               6.6.127-6.6.142, 6.1.167-6.1.175, 5.15.203-5.15.209, 5.10.253-5.10.258",
    arch: Arch::Arm64,
    what: "tlb_flush() picks leaf-only TLBIs from tlb->freed_tables alone, ignoring \
           tlb->unshared_tables: after munmap unshares a hugetlb PMD table the walk caches keep \
           the PUD's entry to it (with FEAT_TLBIRANGE), and the CPU walks the other process's \
           table",
    kernels: Kernels::Setting {
        buggy: "kernel.arm64_tlb_flush_ignores_unshared=true",
        fixed: "kernel.arm64_tlb_flush_ignores_unshared=false",
        breaks: Breaks {
            invariant: Invariant::NoStaleHold,
            search: Search::Explore {
                experiment: crate::experiment_file!(
                    "experiments/bugs/hugetlb-unshare-leaf-only.toml"
                ),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// 3.8-3.12: x86's `pte_accessible()` ignored a NUMA scan's pending
/// flush, so migration skipped the flush of a `PROT_NONE` PTE.
pub const NUMA_PROTNONE_NO_FLUSH: Bug = Bug {
    id: "numa-protnone-migrate-no-flush",
    fix: "20841405940e",
    subject: "mm: fix TLB flush race between migration, and change_protection_range",
    introduced: Some("4daae3b4b9e4"),
    versions: "x86 v3.8 to v3.12 (NUMA balancing; fixed in the v3.13 cycle, stable 3.10.y)",
    arch: Arch::X86,
    what: "a NUMA scan makes a PTE PROT_NONE and has not flushed yet; migration's \
           ptep_clear_flush() finds the PTE inaccessible (pte_accessible() ignored the pending \
           flush), skips the flush, copies and frees the page while another CPU still writes \
           through its old translation",
    kernels: Kernels::Setting {
        buggy: "kernel.pte_accessible_ignores_pending=true",
        fixed: "kernel.pte_accessible_ignores_pending=false",
        breaks: Breaks {
            invariant: Invariant::NoUseAfterFree,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/numa-scan-protnone.toml"),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// 3.13-4.12: `mm->tlb_flush_pending` was a bool, cleared by the first of
/// two overlapping NUMA scans to finish.
pub const TLB_FLUSH_PENDING_BOOL: Bug = Bug {
    id: "tlb-flush-pending-bool",
    fix: "16af97dc5a89",
    subject: "mm: migrate: prevent racy access to tlb_flush_pending",
    introduced: Some("20841405940e"),
    versions: "v3.13 to v4.12 (fixed in v4.13, Cc stable)",
    arch: Arch::X86,
    what: "two threads' NUMA scans overlap under mmap_lock for reading; the first to finish \
           clears the bool mm->tlb_flush_pending while the other still owes its flush, so \
           migration skips the flush of a PROT_NONE PTE, copies the page and frees it while \
           another CPU still holds (and may write through) its old translation",
    kernels: Kernels::Setting {
        buggy: "kernel.tlb_flush_pending_bool=true",
        fixed: "kernel.tlb_flush_pending_bool=false",
        breaks: Breaks {
            invariant: Invariant::NoUseAfterFree,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/numa-scan-bool.toml"),
                strategy: Strategy::Random,
                schedules: 3_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// CVE-2022-41222: mremap moved a whole PTE table without the rmap locks,
/// under a reclaimer holding the table's own lock through the old VMA.
pub const CVE_2022_41222: Bug = Bug {
    id: "CVE-2022-41222",
    fix: "97113eb39fa7",
    subject: "mm/mremap: hold the rmap lock in write mode when moving page table entries.",
    introduced: Some("2c91bd4a4e2e"),
    versions: "v5.10 (arm64's HAVE_MOVE_PMD, 45544eee9606; x86 from v5.0) to v5.13.2 (fixed in v5.14 and v5.13.3; the 5.4 and 5.10 stable branches in 2022)",
    arch: Arch::Arm64,
    what: "mremap moves a PTE table whole under the PMD locks only (need_rmap_locks is false for \
           a new VMA) while reclaim, which reached the page through the old VMA and holds the \
           table's lock, clears the PTE that now maps the new address, flushes the old one \
           and frees the page: a CPU keeps the new translation",
    kernels: Kernels::Setting {
        buggy: "kernel.mremap_move_pmd=\"need-rmap-locks\"",
        fixed: "kernel.mremap_move_pmd=\"rmap-locks\"",
        breaks: Breaks {
            invariant: Invariant::NoUseAfterFree,
            search: Search::Explore {
                experiment: crate::experiment_file!("experiments/bugs/mremap-move-pmd.toml"),
                strategy: Strategy::Dpor,
                schedules: 5_000,
                seed: 1,
                max_actions: 200_000,
                speculation: 2,
            },
        },
    },
};

/// Every entry, in the order `tlbsim bugs` prints them.
pub const BUGS: &[Bug] = &[
    MPROTECT_VS_RECLAIM,
    CVE_2018_18281,
    X86_LAZY_FREED_TABLES,
    ARM_ASID_SUSPENDED_ANIMATION,
    ARM64_BATCHED_PENDING,
    CVE_2025_37964,
    MADV_DONTNEED_NESTED,
    ARM64_ASID_XCHG,
    ARM64_TABLE_FREE_SINGLE_USER,
    X86_TABLE_FREE_SINGLE_USER,
    ARM64_ASID_UNMASKED,
    KVM_VTTBR_BEFORE_VMID,
    X86_BATCH_GEN_ZERO,
    ARM_ASID_RESERVED_SYNC,
    TLB_FLUSH_BATCHED_BOOL,
    X86_TABLE_FREE_ONE,
    GATHER_NESTED_RESET_RANGE,
    CLEAR_REFS_GATHER,
    CVE_2025_22045,
    KHUGEPAGED_GUP_FAST,
    HUGE_ZERO_PUT_BEFORE_FLUSH,
    X86_SWITCH_MM_CLEAR_PREV_FIRST,
    CVE_2026_74674,
    MIGRATE_VMA_FLUSH_UNLOCKED,
    CVE_2026_64229,
    CVE_2021_4002,
    CVE_2026_63875,
    NUMA_PROTNONE_NO_FLUSH,
    TLB_FLUSH_PENDING_BOOL,
    CVE_2022_41222,
];
