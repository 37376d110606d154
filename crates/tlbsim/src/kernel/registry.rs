//! The registries: every TLB policy and ASID allocator, each declared by an
//! entry in its own file (name, description, architecture, the hardware it
//! needs, the allocators it works with and, for a mutant or a historical
//! bug, the invariant it breaks and the search that shows it). This file
//! only lists the directories' lists, in a fixed order (the order `tlbsim
//! policies` prints); each directory lists its own entries with
//! `entries!`. Adding a policy = one file + its name in that list.

use super::policy::{AsidAllocator, TlbPolicy};
use super::{arm64, x86};
use crate::config::{Arch, KernelConfig, Profile};
use crate::observe::Invariant;

/// Declares the entry files of a directory and lists their entries: each
/// name is a module (`<name>.rs`) that declares `pub const ENTRY`, and
/// `LIST` is `&[&Type]` in the order given. A new policy, allocator or
/// mutant is one file plus its name in one of these lists.
macro_rules! entries {
    ($($(#[$doc:meta])* $vis:vis $list:ident: $ty:ty = [$($m:ident),* $(,)?];)*) => {
        $($(pub mod $m;)*)*
        $($(#[$doc])* $vis const $list: &[&$ty] = &[$(&$m::ENTRY),*];)*
    };
}
pub(crate) use entries;

/// Registered TLB-flush policies, by directory, in the order `tlbsim
/// policies` prints them (each directory lists its own).
pub const TLB_POLICY_GROUPS: &[&[&PolicyEntry]] = &[
    arm64::POLICIES,
    x86::POLICIES,
    arm64::mutants::POLICIES,
    x86::mutants::POLICIES,
];

/// Registered ASID allocators, by directory.
pub const ASID_ALLOCATOR_GROUPS: &[&[&AllocatorEntry]] = &[
    &[&super::policy::NO_ALLOCATOR],
    arm64::ALLOCATORS,
    arm64::mutants::ALLOCATORS,
];

/// Every registered TLB-flush policy, in order.
pub fn tlb_policies() -> impl Iterator<Item = &'static PolicyEntry> {
    TLB_POLICY_GROUPS.iter().flat_map(|g| g.iter().copied())
}

/// Every registered ASID allocator, in order.
pub fn asid_allocators() -> impl Iterator<Item = &'static AllocatorEntry> {
    ASID_ALLOCATOR_GROUPS.iter().flat_map(|g| g.iter().copied())
}

/// A hardware feature a policy may require of the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// x86 process-context identifiers (`x86.pcid`).
    Pcid,
    /// AMD broadcast invalidation, `INVLPGB`/`TLBSYNC` (`x86.invlpgb`).
    Invlpgb,
    /// arm64 range TLBIs, FEAT_TLBIRANGE (`arm64.tlbirange`).
    TlbiRange,
    /// TLBI by affinity, HiSilicon's broadcast-range register
    /// (`arm64.tlbi_affinity`).
    TlbiAffinity,
}

impl Feature {
    /// The name `tlbsim policies` prints.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Pcid => "PCID",
            Feature::Invlpgb => "INVLPGB",
            Feature::TlbiRange => "FEAT_TLBIRANGE",
            Feature::TlbiAffinity => "TLBI by affinity",
        }
    }

    /// The profile field that says whether the machine has it.
    pub fn field(self) -> &'static str {
        match self {
            Feature::Pcid => "x86.pcid",
            Feature::Invlpgb => "x86.invlpgb",
            Feature::TlbiRange => "arm64.tlbirange",
            Feature::TlbiAffinity => "arm64.tlbi_affinity",
        }
    }

    /// Does `p` have it? (False on a machine of the other architecture.)
    pub fn present(self, p: &Profile) -> bool {
        match self {
            Feature::Pcid => p.x86.as_ref().is_some_and(|x| x.pcid),
            Feature::Invlpgb => p.x86.as_ref().is_some_and(|x| x.invlpgb),
            Feature::TlbiRange => p.arm64.as_ref().is_some_and(|a| a.tlbirange),
            Feature::TlbiAffinity => p.arm64.as_ref().is_some_and(|a| a.tlbi_affinity),
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
    /// schedules from root seed `seed`, `max_actions` per schedule and
    /// `speculation` speculative fills per schedule (`--speculation`; 2 is
    /// the default).
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
        /// Speculative fills per schedule.
        speculation: u32,
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
    /// A file of the repository (`experiments/x.toml`, relative to its
    /// root) and its text, embedded when the library is built
    /// ([`experiment_file!`](crate::experiment_file)), so a search runs
    /// wherever the binary does.
    File(&'static str, &'static str),
    /// The TOML text itself.
    Inline(&'static str),
}

impl Search {
    /// The experiment the search runs.
    pub fn experiment(&self) -> Source {
        match *self {
            Search::Explore { experiment, .. } | Search::Runs { experiment, .. } => experiment,
        }
    }
}

impl Source {
    /// The name errors give (the file's path, or `inline.toml`) and the
    /// TOML text.
    pub fn text(&self) -> (&'static str, &'static str) {
        match *self {
            Source::File(path, text) => (path, text),
            Source::Inline(text) => ("inline.toml", text),
        }
    }
}

/// `Source::File` for a file of the repository, its text embedded at
/// build time: `experiment_file!("experiments/seed001-explore.toml")`.
#[macro_export]
macro_rules! experiment_file {
    ($path:literal) => {
        $crate::kernel::registry::Source::File(
            $path,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../", $path)),
        )
    };
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
    /// DPOR (no preemption bound; its walk at new states is POS).
    Dpor,
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
    tlb_policies()
        .find(|e| e.name == name)
        .ok_or_else(|| unknown("tlb_policy", name, tlb_policies().map(|e| e.name)))
}

/// The allocator named `name`; the error lists the known names.
pub fn find_allocator(name: &str) -> Result<&'static AllocatorEntry, String> {
    asid_allocators()
        .find(|e| e.name == name)
        .ok_or_else(|| unknown("asid_allocator", name, asid_allocators().map(|e| e.name)))
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
