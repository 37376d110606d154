//! Linux's own TLB bugs, found again (issue 37): a catalogue of real bugs,
//! each fixed by a known commit, as the benchmark of the checker. Each
//! entry names the buggy kernel as the model has it (a historical policy
//! or allocator, one file citing the fix, or a `[kernel]` setting that
//! selects the buggy code), its fixed counterpart, and the search that
//! must find the bug; [`run`] runs the search on both: the buggy kernel
//! must break the declared invariant, the fixed one must pass the same
//! search. `tlbsim bugs` prints the table.
//!
//! The entries are in [`catalogue`] (one constant each); running a
//! [`Search`] is [`search::run_search`], shared with the mutant tests.

pub mod catalogue;
pub mod search;

use crate::config::{Arch, Experiment};
use crate::kernel::registry::{find_allocator, find_policy, Breaks, Search};
use crate::observe::Invariant;
use search::{run_search, Searched};

/// One real bug.
#[derive(Debug, Clone, Copy)]
pub struct Bug {
    /// The CVE id, or a short name when it has none (`arm64-6.6-batched-pending`).
    pub id: &'static str,
    /// The fix commit (12 hex digits of Linus's tree).
    pub fix: &'static str,
    /// The fix commit's subject line.
    pub subject: &'static str,
    /// The commit that introduced the bug, when known.
    pub introduced: Option<&'static str>,
    /// The kernel versions that shipped it.
    pub versions: &'static str,
    /// The architecture whose kernel it is.
    pub arch: Arch,
    /// What goes wrong, in one line.
    pub what: &'static str,
    /// The buggy kernel, its fixed counterpart, and (for a setting) what
    /// the buggy one breaks.
    pub kernels: Kernels,
}

/// How an experiment is made to run the buggy or the fixed kernel.
#[derive(Debug, Clone, Copy)]
pub enum Kernels {
    /// Historical TLB policies: the buggy one's registry entry declares
    /// what it breaks and the search ([`crate::kernel::registry::PolicyEntry::breaks`]).
    Policy {
        /// `tlb_policy` of the buggy kernel.
        buggy: &'static str,
        /// `tlb_policy` of the fixed kernel.
        fixed: &'static str,
    },
    /// Historical ASID allocators, as [`Kernels::Policy`].
    Allocator {
        /// `asid_allocator` of the buggy kernel.
        buggy: &'static str,
        /// `asid_allocator` of the fixed kernel.
        fixed: &'static str,
    },
    /// A `[kernel]` setting that selects the buggy code (`--set` form,
    /// `kernel.KEY=VALUE`), the one that selects the fixed code, and
    /// what the buggy code breaks.
    Setting {
        /// The buggy kernel's setting.
        buggy: &'static str,
        /// The fixed kernel's setting.
        fixed: &'static str,
        /// The invariant and the search.
        breaks: Breaks,
    },
}

impl Bug {
    /// The invariant the buggy kernel breaks and the search that shows it;
    /// an error if a named policy or allocator is unknown or declares
    /// nothing.
    pub fn breaks(&self) -> Result<Breaks, String> {
        let (kind, name, breaks) = match self.kernels {
            Kernels::Setting { breaks, .. } => return Ok(breaks),
            Kernels::Policy { buggy, .. } => ("tlb_policy", buggy, find_policy(buggy)?.breaks),
            Kernels::Allocator { buggy, .. } => {
                ("asid_allocator", buggy, find_allocator(buggy)?.breaks)
            }
        };
        breaks.ok_or_else(|| format!("{kind} \"{name}\" declares no `breaks`"))
    }

    /// The experiment of `search` running the buggy (`fixed = false`) or
    /// the fixed kernel.
    pub fn experiment(&self, search: &Search, fixed: bool) -> Result<Experiment, String> {
        let (name, text) = search.experiment().text();
        let side = |buggy: &'static str, f: &'static str| if fixed { f } else { buggy };
        let parse = || -> Result<Experiment, String> {
            crate::config::parse_toml(name, text).map_err(|m| m.to_string())
        };
        match self.kernels {
            Kernels::Setting {
                buggy, fixed: f, ..
            } => crate::config::patch::apply_sets(text, &[side(buggy, f).to_string()])
                .map_err(|m| format!("{name}: {m}")),
            Kernels::Policy { buggy, fixed: f } => {
                let mut e = parse()?;
                e.kernel.tlb_policy = side(buggy, f).into();
                Ok(e)
            }
            Kernels::Allocator { buggy, fixed: f } => {
                let mut e = parse()?;
                e.kernel.asid_allocator = side(buggy, f).into();
                Ok(e)
            }
        }
    }

    /// What selects the buggy and the fixed kernel, for printing
    /// (`tlb_policy = "x"`, `kernel.key=value`).
    pub fn selectors(&self) -> (String, String) {
        match self.kernels {
            Kernels::Policy { buggy, fixed } => (
                format!("tlb_policy = \"{buggy}\""),
                format!("tlb_policy = \"{fixed}\""),
            ),
            Kernels::Allocator { buggy, fixed } => (
                format!("asid_allocator = \"{buggy}\""),
                format!("asid_allocator = \"{fixed}\""),
            ),
            Kernels::Setting { buggy, fixed, .. } => (buggy.to_string(), fixed.to_string()),
        }
    }
}

/// The outcome of one bug's two searches.
#[derive(Debug, Clone)]
pub struct BugRun {
    /// The invariant the entry declares.
    pub declared: Invariant,
    /// The buggy kernel's search.
    pub buggy: Searched,
    /// The fixed kernel's search (the same one).
    pub fixed: Searched,
}

impl BugRun {
    /// The buggy kernel broke the declared invariant.
    pub fn found(&self) -> bool {
        self.buggy.invariant() == Some(self.declared)
    }

    /// Found, and the fixed kernel passed.
    pub fn ok(&self) -> bool {
        self.found() && self.fixed.failure.is_none()
    }
}

/// Runs `bug`'s search on its buggy kernel, then on its fixed one.
pub fn run(bug: &Bug) -> Result<BugRun, String> {
    let breaks = bug.breaks()?;
    let one = |fixed| -> Result<Searched, String> {
        let e = bug.experiment(&breaks.search, fixed)?;
        run_search(&e, &breaks.search).map_err(|err| err.to_string())
    };
    Ok(BugRun {
        declared: breaks.invariant,
        buggy: one(false)?,
        fixed: one(true)?,
    })
}

/// The entries whose id, fix commit or buggy kernel contains `only`
/// (every entry for `None`), in catalogue order.
pub fn select(only: Option<&str>) -> Vec<&'static Bug> {
    catalogue::BUGS
        .iter()
        .filter(|b| {
            only.is_none_or(|o| {
                let (buggy, _) = b.selectors();
                b.id.contains(o) || b.fix.starts_with(o) || buggy.contains(o)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::registry::Source;

    fn hex12(s: &str) -> bool {
        s.len() == 12
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    /// Every entry names its commits as 12 hex digits, has a unique id,
    /// declares what it breaks, and builds both experiments; a buggy
    /// policy or allocator is a historical entry and its fix a real one,
    /// of the bug's architecture.
    #[test]
    fn every_entry_is_well_formed() {
        let mut ids = std::collections::BTreeSet::new();
        for b in catalogue::BUGS {
            assert!(ids.insert(b.id), "{} twice", b.id);
            assert!(hex12(b.fix), "{}: fix {}", b.id, b.fix);
            assert!(b.introduced.is_none_or(hex12), "{}: introduced", b.id);
            let breaks = b.breaks().unwrap_or_else(|e| panic!("{}: {e}", b.id));
            for fixed in [false, true] {
                let e = b.experiment(&breaks.search, fixed).expect("experiment");
                let p = find_policy(&e.kernel.tlb_policy).expect("policy");
                assert_eq!(p.arch, b.arch, "{}", b.id);
            }
            match b.kernels {
                Kernels::Policy { buggy, fixed } => {
                    assert!(find_policy(buggy).unwrap().breaks.is_some());
                    assert!(find_policy(fixed).unwrap().breaks.is_none());
                }
                Kernels::Allocator { buggy, fixed } => {
                    assert!(find_allocator(buggy).unwrap().breaks.is_some());
                    assert!(find_allocator(fixed).unwrap().breaks.is_none());
                }
                Kernels::Setting { buggy, fixed, .. } => {
                    let key = |s: &str| s.split_once('=').map(|(k, _)| k.to_string());
                    assert_eq!(key(buggy), key(fixed), "{}: one setting", b.id);
                    assert_ne!(buggy, fixed);
                }
            }
        }
    }

    /// Every experiment file under `experiments/bugs/` is some entry's
    /// search, embedded from the path it names.
    #[test]
    fn every_bug_experiment_file_is_searched() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments/bugs");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("experiments/bugs")
            .map(|e| {
                format!(
                    "experiments/bugs/{}",
                    e.unwrap().file_name().to_string_lossy()
                )
            })
            .collect();
        files.sort();
        let mut used: Vec<String> = catalogue::BUGS
            .iter()
            .filter_map(|b| match b.breaks().ok()?.search.experiment() {
                Source::File(path, _) if path.starts_with("experiments/bugs/") => {
                    Some(path.to_string())
                }
                _ => None,
            })
            .collect();
        used.sort();
        used.dedup();
        assert_eq!(files, used, "a file in experiments/bugs/ no entry searches");
    }

    /// `--only` matches an id, a fix commit's prefix or the buggy kernel.
    #[test]
    fn select_matches_id_fix_and_kernel() {
        assert_eq!(select(None).len(), catalogue::BUGS.len());
        assert_eq!(select(Some("CVE-2018-18281"))[0].fix, "eb66ae030829");
        assert_eq!(select(Some("4b634918"))[0].id, "arm64-batched-pending-dsb");
        assert_eq!(select(Some("arm-asid-reserved-3.8")).len(), 1);
        assert!(select(Some("no such bug")).is_empty());
    }
}
