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

type Ctor = fn(&Params) -> Result<Box<dyn Workload>, String>;

/// Registered workloads: name, description, constructor.
pub const WORKLOADS: &[(&str, &str, Ctor)] = &[
    (
        "mprotect",
        "seed 000: one process per CPU looping over mprotect RO/RW on a small private mapping",
        |p| Ok(Box::new(mprotect::Mprotect::from_params(p)?)),
    ),
    (
        "asid-churn",
        "allocator stress: a threaded mm toggling a page with mprotect, processes exec'ing new mms, more mms than ASIDs",
        |p| Ok(Box::new(asid_churn::AsidChurn::from_params(p)?)),
    ),
    (
        "churn",
        "checker stress: threads come and go, migrations, lazy CPUs running kworkers, munmap freeing tables",
        |p| Ok(Box::new(churn::Churn::from_params(p)?)),
    ),
    (
        "madv-migrate",
        "seed 004: madvise(DONTNEED) a page, touch it, move to the other CPU with sched_setaffinity; reports iteration_us",
        |p| Ok(Box::new(flushbench::MadvMigrate::from_params(p)?)),
    ),
    (
        "pthread-mmap",
        "seed 004: threads of one process each mmap, write and munmap their share of the data, round after round",
        |p| Ok(Box::new(flushbench::PthreadMmap::from_params(p)?)),
    ),
    (
        "tlb-flush",
        "will-it-scale tlb_flush1/2/3: pinned tasks write, MADV_DONTNEED and re-read pages, threads or processes; reports loops_per_s",
        |p| Ok(Box::new(flushbench::TlbFlush::from_params(p)?)),
    ),
    (
        "hackbench",
        "seed 002: hackbench over pipes (groups of senders and receivers), repeated runs",
        |p| Ok(Box::new(hackbench::Hackbench::from_params(p)?)),
    ),
    (
        "sort-compute",
        "seed 000: 256 subshells each running 32 sequential short-lived sort processes",
        |p| Ok(Box::new(lifecycle::sort_from_params(p)?)),
    ),
    (
        "tcmalloc",
        "seed 000: one tcmalloc large-heap-fragmentation test per CPU (user work, madvise over untouched heap)",
        |p| Ok(Box::new(lifecycle::tcmalloc_from_params(p)?)),
    ),
    (
        "victim",
        "seed 000: a compute-bound victim on the last CPU, alone and beside mprotect loops; reports victim_slowdown_pct",
        |p| Ok(Box::new(victim::Victim::from_params(p)?)),
    ),
    (
        "threads",
        "checker stress: thread 0 mprotects or munmaps while pinned threads on other CPUs read",
        |p| Ok(Box::new(threads::Threads::from_params(p)?)),
    ),
];

/// Builds a workload by name. Errors name the offending field.
pub fn build(name: &str, params: &Params) -> Result<Box<dyn Workload>, String> {
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
