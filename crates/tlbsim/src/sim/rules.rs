//! The rules between settings: `[kernel]` keys against the profile, the
//! policy's architecture and the ASID allocator, as one table of named
//! rules ([`KERNEL_RULES`]), each blaming the key it names.

use super::SimError;
use crate::config::{Arch, Arm64FlushRangeLimit, KernelConfig, Profile, Thp};
use crate::hw::mem::Granule;
use crate::kernel::policy::AsidAllocator;

/// What a `[kernel]` rule judges: the settings, the machine they run on
/// (a guest's, inside a VM), and the ASID allocator.
pub(super) struct Setting<'a> {
    /// The `[kernel]` section.
    pub kcfg: &'a KernelConfig,
    /// The resolved profile.
    pub profile: &'a Profile,
    /// The ASID allocator.
    pub alloc: &'a dyn AsidAllocator,
    /// Does the allocator hand out ASIDs (not `"none"`)?
    pub allocates_asids: bool,
}

/// A rule: the `[kernel]` key it blames, and the check (`Err` is the
/// message).
struct Rule {
    key: &'static str,
    check: fn(&Setting) -> Result<(), String>,
}

/// Every rule between `[kernel]` keys and the machine, in the order they
/// are checked (the first broken one is reported).
const KERNEL_RULES: &[Rule] = &[
    Rule {
        key: "page_size_kib",
        check: page_size,
    },
    Rule {
        key: "arm64_flush_range_limit",
        check: flush_range_limit,
    },
    Rule {
        key: "thp",
        check: thp_fault_cost,
    },
    Rule {
        key: "thp_huge_zero_page",
        check: huge_zero_page,
    },
    Rule {
        key: "fault_around_bytes",
        check: fault_around,
    },
    Rule {
        key: "read_ahead_kb",
        check: read_ahead,
    },
    Rule {
        key: "memory_limit_pages",
        check: memory_limit,
    },
    Rule {
        key: "memory_min_pages",
        check: memory_min,
    },
    Rule {
        key: "kpti",
        check: kpti,
    },
    Rule {
        key: "asid_bits",
        check: enough_asids,
    },
    Rule {
        key: "nopcid",
        check: nopcid,
    },
    Rule {
        key: "nopcid_keeps_invlpgb",
        check: nopcid_keeps_invlpgb,
    },
    Rule {
        key: "arm64_tlb_flush_ignores_unshared",
        check: arm64_tlb_flush_ignores_unshared,
    },
    Rule {
        key: "pte_accessible_ignores_pending",
        check: pte_accessible_ignores_pending,
    },
];

/// `pte_accessible_ignores_pending` is x86's `pte_accessible()` before
/// 20841405940e (arm64's of that time read the young bit, which the model
/// has not).
fn pte_accessible_ignores_pending(s: &Setting) -> Result<(), String> {
    if s.kcfg.pte_accessible_ignores_pending && s.profile.arch != Arch::X86 {
        return Err(format!(
            "pte_accessible_ignores_pending is x86's pte_accessible() of Linux 3.8-3.12; profile \"{}\" is {}",
            s.profile.name, s.profile.arch
        ));
    }
    Ok(())
}

/// `arm64_tlb_flush_ignores_unshared` is arm64's `tlb_flush()` between
/// 8ce720d5bd91 and c2ff4764e03e: arm64, with the mmu_gather's
/// `unshared_tables` it ignores.
fn arm64_tlb_flush_ignores_unshared(s: &Setting) -> Result<(), String> {
    if !s.kcfg.arm64_tlb_flush_ignores_unshared {
        return Ok(());
    }
    if s.profile.arch != Arch::Arm64 {
        return Err(format!(
            "arm64_tlb_flush_ignores_unshared is arm64's tlb_flush(); profile \"{}\" is {}",
            s.profile.name, s.profile.arch
        ));
    }
    if s.kcfg.hugetlb_unshare_flush != crate::config::HugetlbUnshareFlush::UnsharedTables {
        return Err("arm64_tlb_flush_ignores_unshared ignores the mmu_gather's unshared_tables, which only hugetlb_unshare_flush = \"unshared-tables\" (8ce720d5bd91) has".into());
    }
    Ok(())
}

/// `nopcid` is an x86 boot parameter.
fn nopcid(s: &Setting) -> Result<(), String> {
    if s.kcfg.nopcid && s.profile.arch != Arch::X86 {
        return Err(format!(
            "nopcid is an x86 boot parameter; profile \"{}\" is {}",
            s.profile.name, s.profile.arch
        ));
    }
    Ok(())
}

/// `nopcid_keeps_invlpgb` is what `nopcid` did to INVLPGB before
/// 44126343d58c: it needs `nopcid`.
fn nopcid_keeps_invlpgb(s: &Setting) -> Result<(), String> {
    if s.kcfg.nopcid_keeps_invlpgb && !s.kcfg.nopcid {
        return Err(
            "nopcid_keeps_invlpgb is what the nopcid boot parameter did to INVLPGB before 44126343d58c; set nopcid = true too".into(),
        );
    }
    Ok(())
}

/// The `[kernel]` settings that depend on the profile and the allocator
/// ([`KERNEL_RULES`]): the first broken rule, as an error of its key.
pub(super) fn check_kernel(s: &Setting) -> Result<(), SimError> {
    for r in KERNEL_RULES {
        (r.check)(s).map_err(|message| SimError::Field {
            section: "kernel".into(),
            key: r.key.into(),
            message,
        })?;
    }
    Ok(())
}

/// The `[kernel]` settings that model arm64 kernel versions, which an x86
/// policy has no use for: `(key, message)` of the first one set.
pub(super) fn check_arm64_only(
    kcfg: &KernelConfig,
    arch: Arch,
) -> Result<(), (&'static str, String)> {
    if arch == Arch::Arm64 {
        return Ok(());
    }
    let why = |what: &str| {
        format!(
            "{what} is an arm64 kernel behaviour; tlb_policy \"{}\" is x86",
            kcfg.tlb_policy
        )
    };
    if !kcfg.pgtable_free_tlbi.is_deferred() {
        return Err((
            "pgtable_free_tlbi",
            why("__flush_tlb_pgtable() per freed table"),
        ));
    }
    if kcfg.spurious_fault_flush {
        return Err((
            "spurious_fault_flush",
            why("flush_tlb_fix_spurious_fault() as flush_tlb_page()"),
        ));
    }
    Ok(())
}

/// `kernel.page_size_kib` (4 or 64 when parsed): 4, or 64 on arm64 (x86
/// has no 64 KiB base page; arm64's 16 KiB granule is not modelled), and
/// 64 without THP (no profile has the cost of a 512 MiB huge-page fault)
/// and without kswapd (reclaim was not reviewed for 64 KiB pages).
fn page_size(s: &Setting) -> Result<(), String> {
    let (kcfg, profile) = (s.kcfg, s.profile);
    match (kcfg.granule, profile.arch) {
        (Granule::K64, Arch::Arm64) if kcfg.memory_limit_pages.is_some() => Err(
            "reclaim (memory_limit_pages) is not modelled with 64 KiB pages yet: its per-page costs are 4 KiB figures".into(),
        ),
        (Granule::K64, Arch::Arm64) if kcfg.thp == Thp::Always => Err(
            "thp = \"always\" with 64 KiB pages is not modelled yet: its PMD blocks are 512 MiB, and the profile's thp_fault_ns is the cost of a 2 MiB fault".into(),
        ),
        (_, Arch::Arm64) => Ok(()),
        (g, _) if g == Granule::K4 => Ok(()),
        (_, arch) => Err(format!(
            "64 KiB pages are an arm64 kernel's (CONFIG_ARM64_64K_PAGES); profile \"{}\" is {arch}, whose base page is 4 KiB",
            profile.name
        )),
    }
}

/// `arm64_flush_range_limit = "max-tlb-range"` (Linux 4.1-4.19) needs an
/// arm64 profile without range TLBIs.
fn flush_range_limit(s: &Setting) -> Result<(), String> {
    if s.kcfg.arm64_flush_range_limit != Arm64FlushRangeLimit::MaxTlbRange {
        return Ok(());
    }
    match &s.profile.arm64 {
        None => Err(format!("profile \"{}\" is not arm64", s.profile.name)),
        Some(a) if a.tlbirange => Err(format!(
            "\"max-tlb-range\" is Linux 4.1-4.19's, which has no range TLBIs, but profile \"{}\" has tlbirange = true",
            s.profile.name
        )),
        Some(_) => Ok(()),
    }
}

/// `thp = "always"` needs the profile's cost of a 2 MiB fault.
fn thp_fault_cost(s: &Setting) -> Result<(), String> {
    if s.kcfg.thp == Thp::Always && s.profile.kernel.thp_fault_ns.is_none() {
        return Err(format!(
            "profile \"{}\" has no kernel.thp_fault_ns (the cost of a 2 MiB fault), which thp = \"always\" needs",
            s.profile.name
        ));
    }
    Ok(())
}

/// The huge zero page needs `thp = "always"`.
fn huge_zero_page(s: &Setting) -> Result<(), String> {
    if !s.kcfg.thp_huge_zero_page.is_off() && s.kcfg.thp != Thp::Always {
        return Err("the huge zero page needs thp = \"always\"".into());
    }
    Ok(())
}

/// `fault_around_bytes`: a power of two, at most a PMD of the granule.
fn fault_around(s: &Setting) -> Result<(), String> {
    let pmd_bytes = s.kcfg.granule.pmd_size();
    let b = s.kcfg.fault_around_bytes;
    if !b.is_power_of_two() || b > pmd_bytes {
        return Err(format!(
            "{b} (must be a power of two, at most the {pmd_bytes}-byte PMD)"
        ));
    }
    Ok(())
}

/// `read_ahead_kb`: within tlbsim's limit.
fn read_ahead(s: &Setting) -> Result<(), String> {
    let max = crate::config::limits::MAX_READ_AHEAD_KB;
    if s.kcfg.read_ahead_kb > max {
        return Err(format!(
            "{} exceeds tlbsim's limit of {max} KiB",
            s.kcfg.read_ahead_kb
        ));
    }
    Ok(())
}

/// `memory_limit_pages`: at least one page, and a profile with reclaim's
/// costs (`[swap]`), which kswapd needs.
fn memory_limit(s: &Setting) -> Result<(), String> {
    match s.kcfg.memory_limit_pages {
        Some(_) if s.profile.swap.is_none() => Err(format!(
            "profile \"{}\" has no [swap] section (reclaim and zram costs), which kswapd needs",
            s.profile.name
        )),
        _ => Ok(()),
    }
}

/// `memory_min_pages`: with `memory_limit_pages` (kswapd's watermark),
/// and not below it.
fn memory_min(s: &Setting) -> Result<(), String> {
    match (s.kcfg.memory_min_pages, s.kcfg.memory_limit_pages) {
        (None, _) => Ok(()),
        (Some(_), None) => Err("needs memory_limit_pages (kswapd's watermark) too".into()),
        (Some(min), Some(limit)) if min < limit => {
            Err(format!("must be >= memory_limit_pages ({limit})"))
        }
        _ => Ok(()),
    }
}

/// `kpti`: an allocator that hands out ASID pairs, and at least 3 ASID
/// bits.
fn kpti(s: &Setting) -> Result<(), String> {
    if !s.kcfg.kpti {
        return Ok(());
    }
    if !s.alloc.supports_kpti() {
        return Err(format!(
            "asid_allocator \"{}\" does not support kpti",
            s.kcfg.asid_allocator
        ));
    }
    if s.profile.tlb.asid_bits < 3 {
        return Err("kpti needs asid_bits >= 3".into());
    }
    Ok(())
}

/// More usable ASIDs than CPUs, or rollover cannot find a free one
/// (arch/arm64/mm/context.c relies on `NUM_USER_ASIDS > NR_CPUS`).
fn enough_asids(s: &Setting) -> Result<(), String> {
    let (kcfg, profile) = (s.kcfg, s.profile);
    let usable = ((1u64 << profile.tlb.asid_bits) >> u32::from(kcfg.kpti)) - 1;
    if s.allocates_asids && usable <= u64::from(profile.topology.cpus) {
        return Err(format!(
            "{} usable ASIDs with asid_bits = {}{} is not more than the {} CPUs",
            usable,
            profile.tlb.asid_bits,
            if kcfg.kpti { " and kpti" } else { "" },
            profile.topology.cpus
        ));
    }
    Ok(())
}
