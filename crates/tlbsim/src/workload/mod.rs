//! Workloads: programs run as tasks, chosen by name in the experiment config.

pub mod asid_churn;
pub mod churn;
pub mod flushbench;
pub mod hackbench;
pub mod lifecycle;
pub mod mprotect;
pub mod threads;
pub mod victim;

use crate::engine::rng::Streams;
use crate::kernel::{TaskId, World};
use std::collections::BTreeMap;
use std::rc::Rc;

/// A workload: creates its tasks; the run ends when the root task exits.
pub trait Workload {
    /// Creates the tasks; returns the root task.
    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId;
}

/// Workload parameters as given in the config.
pub type Params = BTreeMap<String, toml::Value>;

type Ctor = fn(&Params) -> Result<Resolved, String>;

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
fn resolved<W: Workload + serde::Serialize + 'static>(w: W) -> Result<Resolved, String> {
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

/// Registered workloads: name, description, constructor.
pub const WORKLOADS: &[(&str, &str, Ctor)] = &[
    (
        "mprotect",
        "seed 000: one process per CPU looping over mprotect RO/RW on a small private mapping",
        |p| resolved(mprotect::Mprotect::from_params(p)?),
    ),
    (
        "asid-churn",
        "allocator stress: a threaded mm toggling a page with mprotect, processes exec'ing new mms, more mms than ASIDs",
        |p| resolved(asid_churn::AsidChurn::from_params(p)?),
    ),
    (
        "churn",
        "checker stress: threads come and go, migrations, lazy CPUs running kworkers, munmap freeing tables",
        |p| resolved(churn::Churn::from_params(p)?),
    ),
    (
        "madv-migrate",
        "seed 004: madvise(DONTNEED) a page, touch it, move to the other CPU with sched_setaffinity; reports iteration_us",
        |p| resolved(flushbench::MadvMigrate::from_params(p)?),
    ),
    (
        "pthread-mmap",
        "seed 004: threads of one process each mmap, write and munmap their share of the data, round after round",
        |p| resolved(flushbench::PthreadMmap::from_params(p)?),
    ),
    (
        "tlb-flush",
        "will-it-scale tlb_flush1/2/3: pinned tasks write, MADV_DONTNEED and re-read pages, threads or processes; reports loops_per_s",
        |p| resolved(flushbench::TlbFlush::from_params(p)?),
    ),
    (
        "hackbench",
        "seed 002: hackbench over pipes (groups of senders and receivers), repeated runs",
        |p| resolved(hackbench::Hackbench::from_params(p)?),
    ),
    (
        "sort-compute",
        "seed 000: 256 subshells each running 32 sequential short-lived sort processes",
        |p| resolved(lifecycle::sort_from_params(p)?),
    ),
    (
        "tcmalloc",
        "seed 000: one tcmalloc large-heap-fragmentation test per CPU (user work, madvise over untouched heap)",
        |p| resolved(lifecycle::tcmalloc_from_params(p)?),
    ),
    (
        "victim",
        "seed 000: a compute-bound victim on the last CPU, alone and beside mprotect loops; reports victim_slowdown_pct",
        |p| resolved(victim::Victim::from_params(p)?),
    ),
    (
        "threads",
        "checker stress: thread 0 mprotects or munmaps while pinned threads on other CPUs read",
        |p| resolved(threads::Threads::from_params(p)?),
    ),
];

/// Builds a workload by name, with its resolved parameters. Errors name the
/// offending field.
pub fn build(name: &str, params: &Params) -> Result<Resolved, String> {
    let Some((_, _, f)) = WORKLOADS.iter().find(|(n, _, _)| *n == name) else {
        let names: Vec<_> = WORKLOADS.iter().map(|(n, _, _)| *n).collect();
        return Err(format!(
            "unknown workload \"{name}\" (known: {})",
            names.join(", ")
        ));
    };
    f(params)
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
