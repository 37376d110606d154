//! The registries: every TLB policy and ASID allocator, each declared by an
//! entry in its own file (name, description, architecture, the hardware it
//! needs, the allocators it works with and, for a mutant or a historical
//! bug, the invariant it breaks and the search that shows it). This file
//! only lists the entries, one line each, in a fixed order (the order
//! `tlbsim policies` prints). Adding a policy = one file + one line here.

use super::policy::{AsidAllocator, TlbPolicy};
use super::{arm64, x86};
use crate::check::Invariant;
use crate::config::{Arch, KernelConfig, Profile};

/// Registered TLB-flush policies.
pub const TLB_POLICIES: &[&PolicyEntry] = &[
    &arm64::stock::ENTRY,
    &arm64::skip_v2::ENTRY,
    &arm64::skip_v1::ENTRY,
    &arm64::cpumask_tracking::ENTRY,
    &x86::legacy::ENTRY,
    &x86::tlb_gen::ENTRY,
    &x86::pcid::ENTRY,
    &x86::invlpgb::ENTRY,
    &x86::tlb_gen_before_b956575::ENTRY,
    &x86::mutants::gen_before_mask::ENTRY,
    &x86::mutants::invlpgb_no_transition::ENTRY,
    &arm64::mutants::range_no_broadcast::ENTRY,
    &arm64::skip_v2_posted::ENTRY,
    &arm64::mutants::free_before_sync::ENTRY,
];

/// Registered ASID allocators.
pub const ASID_ALLOCATORS: &[&AllocatorEntry] = &[
    &super::policy::NO_ALLOCATOR,
    &arm64::asid::ENTRY,
    &arm64::asid_ipi::ENTRY,
    &arm64::mutants::asid_no_reserve::ENTRY,
    &arm64::mutants::asid_plain_store::ENTRY,
    &arm64::mutants::asid_forget_cpu::ENTRY,
    &arm64::mutants::asid_ignore_reserved::ENTRY,
];

/// A hardware feature a policy may require of the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// x86 process-context identifiers (`x86.pcid`).
    Pcid,
    /// AMD broadcast invalidation, `INVLPGB`/`TLBSYNC` (`x86.invlpgb`).
    Invlpgb,
    /// arm64 range TLBIs, FEAT_TLBIRANGE (`arm64.tlbirange`).
    TlbiRange,
}

impl Feature {
    /// The name `tlbsim policies` prints.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Pcid => "PCID",
            Feature::Invlpgb => "INVLPGB",
            Feature::TlbiRange => "FEAT_TLBIRANGE",
        }
    }

    /// The profile field that says whether the machine has it.
    pub fn field(self) -> &'static str {
        match self {
            Feature::Pcid => "x86.pcid",
            Feature::Invlpgb => "x86.invlpgb",
            Feature::TlbiRange => "arm64.tlbirange",
        }
    }

    /// Does `p` have it? (False on a machine of the other architecture.)
    pub fn present(self, p: &Profile) -> bool {
        match self {
            Feature::Pcid => p.x86.as_ref().is_some_and(|x| x.pcid),
            Feature::Invlpgb => p.x86.as_ref().is_some_and(|x| x.invlpgb),
            Feature::TlbiRange => p.arm64.as_ref().is_some_and(|a| a.tlbirange),
        }
    }

    /// The error when `p` lacks it, naming the field:
    /// `profile "skylake-4c8t" has no INVLPGB (x86.invlpgb = false)`.
    pub fn missing(self, p: &Profile) -> String {
        let what = match self {
            Feature::Pcid => "PCIDs",
            f => f.name(),
        };
        format!(
            "profile \"{}\" has no {what} ({} = false)",
            p.name,
            self.field()
        )
    }
}

/// Which ASID allocators a policy works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocators {
    /// Any allocator of the policy's architecture (arm64: `switch_mm` calls
    /// `check_and_switch_context`).
    OfArch,
    /// Only `"none"`: the policy picks its tags itself (x86 PCIDs).
    PicksOwnTags,
}

/// How the table-driven mutant test finds a bug: the search to run, on an
/// experiment whose policy (or allocator) the entry's replaces. The same
/// search must pass the experiment's own (real) policy and allocator.
#[derive(Debug, Clone, Copy)]
pub enum Search {
    /// `tlbsim check`: the explorer with `strategy`, at most `schedules`
    /// schedules from root seed `seed`, `max_actions` per schedule (and 2
    /// speculative walks per step, the default).
    Explore {
        /// The experiment.
        experiment: Source,
        /// The explorer's strategy.
        strategy: Strategy,
        /// Schedule cap.
        schedules: u64,
        /// Root seed of the search.
        seed: u64,
        /// Step cap per schedule.
        max_actions: u64,
    },
    /// `tlbsim run` at each of `seeds`; every run must find the violation.
    Runs {
        /// The experiment.
        experiment: Source,
        /// Root seeds.
        seeds: &'static [u64],
    },
}

/// An experiment a [`Search`] runs.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// A file, relative to the repository root (`experiments/x.toml`).
    File(&'static str),
    /// The TOML text itself.
    Inline(&'static str),
}

/// An explorer strategy (`tlbsim check --strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly random schedules.
    Random,
    /// PCT with this depth.
    Pct(u32),
    /// Delay-bounded exhaustive search with this bound.
    Exhaustive(u32),
}

/// What a mutant or a historical bug breaks, and where the checker sees it.
#[derive(Debug, Clone, Copy)]
pub struct Breaks {
    /// The invariant the checker reports.
    pub invariant: Invariant,
    /// The search that finds it.
    pub search: Search,
}

/// A registered TLB policy.
#[derive(Debug, Clone, Copy)]
pub struct PolicyEntry {
    /// `tlb_policy = "<name>"`.
    pub name: &'static str,
    /// One line: what kernel or posting it models.
    pub description: &'static str,
    /// The architecture whose kernel it is (the profile must match).
    pub arch: Arch,
    /// Hardware features the profile must have.
    pub requires: &'static [Feature],
    /// The allocators it works with.
    pub allocators: Allocators,
    /// For a mutant or a historical bug: what it breaks.
    pub breaks: Option<Breaks>,
    /// Builds a fresh instance.
    pub new: fn() -> Box<dyn TlbPolicy>,
}

/// A registered ASID allocator.
#[derive(Debug, Clone, Copy)]
pub struct AllocatorEntry {
    /// `asid_allocator = "<name>"`.
    pub name: &'static str,
    /// One line: what kernel it models.
    pub description: &'static str,
    /// Its architecture; `None` for `"none"`, which allocates nothing.
    pub arch: Option<Arch>,
    /// For a mutant: what it breaks.
    pub breaks: Option<Breaks>,
    /// Builds one for the kernel config and the profile's ASID width.
    pub new: fn(&KernelConfig, u8) -> Box<dyn AsidAllocator>,
}

fn unknown(kind: &str, name: &str, names: impl Iterator<Item = &'static str>) -> String {
    let names: Vec<_> = names.collect();
    format!("unknown {kind} \"{name}\" (known: {})", names.join(", "))
}

/// The policy named `name`; the error lists the known names.
pub fn find_policy(name: &str) -> Result<&'static PolicyEntry, String> {
    TLB_POLICIES
        .iter()
        .copied()
        .find(|e| e.name == name)
        .ok_or_else(|| unknown("tlb_policy", name, TLB_POLICIES.iter().map(|e| e.name)))
}

/// The allocator named `name`; the error lists the known names.
pub fn find_allocator(name: &str) -> Result<&'static AllocatorEntry, String> {
    ASID_ALLOCATORS
        .iter()
        .copied()
        .find(|e| e.name == name)
        .ok_or_else(|| {
            unknown(
                "asid_allocator",
                name,
                ASID_ALLOCATORS.iter().map(|e| e.name),
            )
        })
}

/// Checks `policy` with `alloc` on `profile` from their entries alone:
/// architecture, allocator, then required features. The error is the
/// `[kernel]` key at fault and a message naming what to change.
pub fn check_combination(
    policy: &PolicyEntry,
    alloc: &AllocatorEntry,
    profile: &Profile,
) -> Result<(), (&'static str, String)> {
    let (name, arch) = (policy.name, policy.arch);
    if arch != profile.arch {
        return Err((
            "tlb_policy",
            format!(
                "tlb_policy \"{name}\" is an {arch} policy but profile \"{}\" is an {} machine",
                profile.name, profile.arch
            ),
        ));
    }
    let message = match (policy.allocators, alloc.arch) {
        (Allocators::PicksOwnTags, Some(_)) => Some(format!(
            "{arch} tlb_policy \"{name}\" picks its tags (PCIDs) itself: set asid_allocator = \"none\""
        )),
        (Allocators::OfArch, None) => Some(format!(
            "asid_allocator \"{}\" needs a tlb_policy that picks its tags itself (an x86 one), not \"{name}\"",
            alloc.name
        )),
        (Allocators::OfArch, Some(a)) if a != arch => Some(format!(
            "asid_allocator \"{}\" is an {a} allocator but tlb_policy \"{name}\" is an {arch} policy",
            alloc.name
        )),
        _ => None,
    };
    if let Some(m) = message {
        return Err(("asid_allocator", m));
    }
    match policy.requires.iter().find(|f| !f.present(profile)) {
        Some(f) => Err(("tlb_policy", f.missing(profile))),
        None => Ok(()),
    }
}
