//! Workloads: programs run as tasks, chosen by name in the experiment config.

pub mod asid_churn;
pub mod churn;
pub mod collapse;
pub mod flushbench;
pub mod hackbench;
pub mod hugetlb_share;
pub mod libtool_wrapper;
pub mod lifecycle;
pub mod migrate_bench;
pub mod mprotect;
pub mod numa_scan;
pub mod pageout_race;
pub mod replay;
pub mod swap_bench;
pub mod threads;
pub mod unixbench;
pub mod victim;

use crate::engine::rng::Streams;
use crate::engine::track::{Tracked, TrackedCell};
use crate::kernel::{TaskId, World};
use std::collections::BTreeMap;
use std::rc::Rc;

/// A workload: creates its tasks; the run ends when the root task exits.
pub trait Workload {
    /// Creates the tasks; returns the root task.
    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId;

    /// Checks the parameters against the machine before anything runs
    /// (CPU numbers within the profile's, the costs the workload needs);
    /// an error names the offending parameter first, in backquotes, as
    /// [`parse_params`] does.
    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        let _ = profile;
        Ok(())
    }

    /// A rough forecast of the run on a machine of `cpus` CPUs, from the
    /// parameters alone, made before anything runs. The default knows
    /// nothing ([`Estimate::default`]); a workload whose size its
    /// parameters set should say what they cost.
    fn estimate(&self, cpus: u32) -> Estimate {
        let _ = cpus;
        Estimate::default()
    }
}

/// What a workload's parameters will cost, roughly (within a factor of a
/// few), so that a run too large for tlbsim is refused before it starts
/// rather than stopped after minutes: the simulated events it drives, the
/// pages of simulated memory and the tasks it keeps alive at once. Each
/// figure is `None` when the workload does not estimate it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Driver events (`stats.events` of the result).
    pub events: Option<Figure>,
    /// Data pages alive at once, at most (4 KiB or the kernel's pages).
    pub live_pages: Option<Figure>,
    /// Tasks alive at once, at most.
    pub tasks: Option<Figure>,
}

/// One figure of an [`Estimate`]: its value, the parameter that drives it
/// (named in a refusal) and how it was reckoned, for people
/// ("32 processes x 10000 iterations x ~50 events").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    /// The value (saturating: a figure past `u64::MAX` is `u64::MAX`).
    pub value: u64,
    /// The workload parameter to blame.
    pub key: &'static str,
    /// The product it came from.
    pub how: String,
}

impl Figure {
    /// The product of `factors` ((value, what) pairs, e.g. (32,
    /// "processes")), saturating, blamed on `key`.
    pub fn product(key: &'static str, factors: &[(u64, &str)]) -> Figure {
        let value = factors
            .iter()
            .fold(1u64, |acc, (v, _)| acc.saturating_mul(*v));
        let how = factors
            .iter()
            .map(|(v, what)| format!("{v} {what}"))
            .collect::<Vec<_>>()
            .join(" x ");
        Figure { value, key, how }
    }

    /// The sum of `terms` (saturating), blamed on the key of the largest
    /// (the first of equals): the parameter that drives most of it. Its
    /// `how` lists the terms' products joined by " + ". `None` without
    /// terms.
    pub fn sum(terms: Vec<Figure>) -> Option<Figure> {
        let value = terms
            .iter()
            .fold(0u64, |acc, f| acc.saturating_add(f.value));
        let key = terms.iter().rev().max_by_key(|f| f.value)?.key;
        let how = terms
            .iter()
            .map(|f| f.how.as_str())
            .collect::<Vec<_>>()
            .join(" + ");
        Some(Figure { value, key, how })
    }
}

impl Estimate {
    /// This estimate for `n` copies of the workload (one per VM).
    pub fn times(self, n: u64, what: &str) -> Estimate {
        let scale = |f: Option<Figure>| {
            f.map(|f| {
                // A sum is multiplied whole.
                let how = if f.how.contains(" + ") {
                    format!("{n} {what} x ({})", f.how)
                } else {
                    format!("{n} {what} x {}", f.how)
                };
                Figure {
                    value: f.value.saturating_mul(n),
                    key: f.key,
                    how,
                }
            })
        };
        Estimate {
            events: scale(self.events),
            live_pages: scale(self.live_pages),
            tasks: scale(self.tasks),
        }
    }

    /// The figures past tlbsim's runtime limits
    /// ([`crate::config::limits::MAX_LIVE_PAGES`],
    /// [`crate::config::limits::MAX_TASKS`]), which the run would reach
    /// and stop at: an error naming the parameter first ("`pages`: ..."),
    /// as [`parse_params`] does.
    pub fn within_limits(&self) -> Result<(), String> {
        use crate::config::limits::{MAX_LIVE_PAGES, MAX_TASKS};
        let checks = [
            (
                &self.live_pages,
                MAX_LIVE_PAGES as u64,
                "pages of simulated memory in use",
            ),
            (&self.tasks, MAX_TASKS, "tasks alive"),
        ];
        for (f, max, what) in checks {
            if let Some(f) = f.as_ref().filter(|f| f.value > max) {
                return Err(format!(
                    "`{}`: {} = {} {what} at once would exceed tlbsim's limit of {max} (the run would stop there)",
                    f.key, f.how, f.value
                ));
            }
        }
        Ok(())
    }
}

/// State the tasks of a workload share, with a location of its own
/// ([`Tracked::fresh`]).
pub fn shared<T>(v: T) -> Rc<Tracked<T>> {
    Rc::new(Tracked::fresh(v))
}

/// A flag or counter the tasks of a workload share, with a location of its
/// own.
pub fn shared_cell<T: Copy>(v: T) -> Rc<TrackedCell<T>> {
    Rc::new(TrackedCell::fresh(v))
}

/// Workload parameters as given in the config.
pub type Params = BTreeMap<String, toml::Value>;

pub use crate::config::Files;

/// A workload built from its parameters, with the parameters it runs with.
pub struct Resolved {
    /// The workload.
    pub workload: Box<dyn Workload>,
    /// Every parameter, defaults filled in, as the workload parsed them.
    pub params: Params,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Boxes `w`, whose serialised form is its resolved parameters (each
/// workload's parameter struct is the workload and derives `Serialize`).
pub(crate) fn resolved<W: Workload + serde::Serialize + 'static>(w: W) -> Result<Resolved, String> {
    let params = match toml::Value::try_from(&w) {
        Ok(toml::Value::Table(t)) => t.into_iter().collect(),
        Ok(other) => return Err(format!("parameters serialise as {other}, not a table")),
        Err(e) => return Err(format!("parameters do not serialise: {e}")),
    };
    Ok(Resolved {
        workload: Box::new(w),
        params,
    })
}

/// A registered workload: declared in its own file.
#[derive(Debug, Clone, Copy)]
pub struct WorkloadEntry {
    /// `[workload] name = "<name>"`.
    pub name: &'static str,
    /// One line: what it runs and reports.
    pub description: &'static str,
    /// Builds it from its parameters and the files they name (read by the
    /// caller), with the parameters it runs with; errors name the
    /// offending one.
    pub new: fn(&Params, &Files) -> Result<Resolved, String>,
    /// The kernel page sizes (`kernel.page_size_kib`) it was written for:
    /// [`ANY_PAGE_SIZE`] when its addresses and lengths follow the
    /// kernel's page size where the program it models would (each choice
    /// listed in docs/model.md, Workloads), [`PAGE_SIZE_4K_ONLY`] when it
    /// still assumes 4 KiB pages (a run with another size is refused).
    pub page_sizes_kib: &'static [u32],
}

/// [`WorkloadEntry::page_sizes_kib`] of a workload reviewed for every
/// page size the model has.
pub const ANY_PAGE_SIZE: &[u32] = &[4, 64];
/// [`WorkloadEntry::page_sizes_kib`] of a workload that assumes 4 KiB
/// pages.
pub const PAGE_SIZE_4K_ONLY: &[u32] = &[4];

/// Registered workloads, one line each, in the order `tlbsim policies`
/// prints them.
pub const WORKLOADS: &[&WorkloadEntry] = &[
    &mprotect::ENTRY,
    &asid_churn::ENTRY,
    &churn::ENTRY,
    &flushbench::MADV_MIGRATE_ENTRY,
    &flushbench::PTHREAD_MMAP_ENTRY,
    &flushbench::TLB_FLUSH_ENTRY,
    &hackbench::ENTRY,
    &lifecycle::SORT_COMPUTE_ENTRY,
    &lifecycle::TCMALLOC_ENTRY,
    &victim::ENTRY,
    &threads::ENTRY,
    &collapse::ENTRY,
    &hugetlb_share::ENTRY,
    &swap_bench::ENTRY,
    &pageout_race::ENTRY,
    &migrate_bench::ENTRY,
    &numa_scan::ENTRY,
    &unixbench::ENTRY,
    &replay::ENTRY,
];

/// Builds a workload by name from its parameters and the files they name
/// ([`crate::config::WorkloadConfig::files`]), with its resolved
/// parameters. Errors name the offending field.
pub fn build(name: &str, params: &Params, files: &Files) -> Result<Resolved, String> {
    let Some(e) = WORKLOADS.iter().find(|e| e.name == name) else {
        let names: Vec<_> = WORKLOADS.iter().map(|e| e.name).collect();
        return Err(format!(
            "unknown workload \"{name}\" (known: {})",
            names.join(", ")
        ));
    };
    let r = (e.new)(params, files)?;
    check_bounds(&r.params)?;
    Ok(r)
}

/// Parameters that count tasks (processes or threads the workload
/// creates), bounded by [`crate::config::limits::MAX_TASKS`].
const TASK_COUNTS: &[&str] = &[
    "threads",
    "processes",
    "tasks",
    "execers",
    "users",
    "loaders",
    "groups",
    "fds",
    "copies",
    "instances",
    "shells",
];

/// Every parameter within tlbsim's limits ([`crate::config::limits`]), by
/// what its name says it is: a duration (`..._ns`), a size (`...pages`,
/// `..._bytes`, `..._kib`, `..._mib`, in 4 KiB pages) or a task count
/// ([`TASK_COUNTS`]). The error names the parameter first ("`pages`:
/// ..."), as [`parse_params`] does.
fn check_bounds(params: &Params) -> Result<(), String> {
    use crate::config::limits::{MAX_PARAM_PAGES, MAX_TASKS, MAX_WORKLOAD_NS};
    let page = crate::hw::mem::PAGE_SIZE_4K;
    for (key, v) in params {
        let Some(n) = v.as_integer() else { continue };
        let n = u64::try_from(n).unwrap_or(0);
        let (value, max, unit) = if key.ends_with("_ns") {
            (n, MAX_WORKLOAD_NS, "ns")
        } else if key.ends_with("pages") {
            (n, MAX_PARAM_PAGES, "pages")
        } else if key.ends_with("_bytes") {
            (n.div_ceil(page), MAX_PARAM_PAGES, "pages")
        } else if key.ends_with("_kib") {
            (n.div_ceil(page / 1024), MAX_PARAM_PAGES, "pages")
        } else if key.ends_with("_mib") {
            (n.saturating_mul(256), MAX_PARAM_PAGES, "pages")
        } else if TASK_COUNTS.contains(&key.as_str()) {
            (n, MAX_TASKS, "tasks")
        } else {
            continue;
        };
        if value > max {
            let shown = if value == n {
                format!("{n}")
            } else {
                format!("{n} ({value} {unit})")
            };
            return Err(format!(
                "`{key}`: {shown} exceeds tlbsim's limit of {max} {unit}"
            ));
        }
    }
    Ok(())
}

/// Deserialises workload parameters into `T` (which should deny unknown
/// fields). An error names the offending parameter first, in backquotes
/// ("`iterations`: invalid value: ..."), so that callers can point at its
/// line; serde's own messages name it only for unknown or missing fields.
pub fn parse_params<T: for<'de> serde::Deserialize<'de>>(p: &Params) -> Result<T, String> {
    let table: toml::Table = p.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let message = e.inner().message().trim().to_string();
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            message
        } else {
            format!("`{path}`: {message}")
        }
    })
}

/// `Workload::check` of a workload that migrates between NUMA nodes: the
/// profile must have a `[numa]` section with 2 or more nodes.
pub(crate) fn needs_two_nodes(
    profile: &crate::config::Profile,
    workload: &str,
) -> Result<(), String> {
    match &profile.numa {
        Some(n) if n.nodes >= 2 => Ok(()),
        _ => Err(format!(
            "profile \"{}\" has no [numa] section with 2 or more nodes, which {workload} needs",
            profile.name
        )),
    }
}

/// `taskset -c cpu`: the mask of that one CPU (`sched_setaffinity`).
pub(crate) fn only_cpu(w: &World, cpu: crate::hw::CpuId) -> crate::hw::cpumask::CpuMask {
    let mut m = crate::hw::cpumask::CpuMask::new(w.ncpus());
    m.set(cpu);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_is_blamed_on_its_largest_term_and_multiplied_whole() {
        let small = Figure::product("rounds", &[(20, "rounds"), (1_600, "events")]);
        let large = Figure::product("q_iterations", &[(200, "Q iterations"), (1_100, "events")]);
        let f = Figure::sum(vec![small.clone(), large]).unwrap();
        assert_eq!(f.value, 252_000);
        assert_eq!(f.key, "q_iterations");
        assert_eq!(
            f.how,
            "20 rounds x 1600 events + 200 Q iterations x 1100 events"
        );
        // Equal terms: the first is blamed.
        let twin = Figure::product("execs", &[(32_000, "events")]);
        assert_eq!(Figure::sum(vec![small, twin]).unwrap().key, "rounds");
        assert_eq!(Figure::sum(vec![]), None);
        // Saturating.
        let huge = Figure::product("iterations", &[(u64::MAX, "iterations")]);
        assert_eq!(
            Figure::sum(vec![huge.clone(), huge]).unwrap().value,
            u64::MAX
        );

        let e = Estimate {
            events: Some(f),
            ..Estimate::default()
        }
        .times(2, "VMs");
        let f = e.events.unwrap();
        assert_eq!(f.value, 504_000);
        assert_eq!(
            f.how,
            "2 VMs x (20 rounds x 1600 events + 200 Q iterations x 1100 events)"
        );
    }
}
