//! Page migration under load (seed 001's second use of the batched flush):
//! a process whose threads, pinned to CPUs `1..=threads`, keep touching
//! random pages of a shared anonymous mapping (pmbench-like: reads, one
//! access in 8 a write, drawn from the seeded stream `migrate-bench/T`),
//! while
//! `migratepages` (another process, pinned to CPU 0) moves its pages from
//! node 0 to node 1 and back, `iterations` times (`migrate_pages(2)`).
//! Every move unmaps each page from the CPUs that use it: per page, or,
//! with `[kernel] migrate_batch_flush` (Linux 6.3+) and a policy that
//! defers, once per batch of up to 512 pages.
//!
//! The seed names no benchmark for this; the shape is pmbench's (a
//! memory-touching process) with `migratepages` run against it, as its
//! cover letter describes the migration test. The mapping is shared
//! (`MAP_SHARED | MAP_ANONYMOUS`) by default; `shared = false` makes it
//! private, as pmbench's own memory is.

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::cpumask::CpuMask;
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::engine::track::TrackedCell;
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread, sys_fork};
use crate::kernel::mm::migrate::sys_migrate_pages;
use crate::kernel::mm::shmem::sys_mmap_shared;
use crate::kernel::mm::swap::PageData;
use crate::kernel::mm::sys_mmap_private;
use crate::kernel::sched::sys_sched_setaffinity;
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MigrateBench {
    /// Pages of the mapping.
    #[serde(default = "default_pages")]
    pub pages: u64,
    /// Threads using it, thread `i` pinned to CPU `i` (1-based).
    #[serde(default = "two")]
    pub threads: u32,
    /// Round trips (node 0 to 1 and back) of `migratepages`.
    #[serde(default = "default_iterations")]
    pub iterations: u64,
    /// Page accesses of a thread per round.
    #[serde(default = "default_touches")]
    pub touches_per_round: u64,
    /// User work of a thread between two rounds (ns).
    #[serde(default = "gap")]
    pub gap_ns: u64,
    /// The mapping is `MAP_SHARED | MAP_ANONYMOUS` (shmem); `false`:
    /// `MAP_PRIVATE | MAP_ANONYMOUS`, as pmbench's own memory (migration
    /// entries in the PTEs while a page moves). Left out of the JSON when
    /// true.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub shared: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn default_touches() -> u64 {
    64
}

fn default_pages() -> u64 {
    8192
}
fn two() -> u32 {
    2
}
fn default_iterations() -> u64 {
    3
}
fn gap() -> u64 {
    1000
}

/// Larger mappings are refused: the model keeps every page.
const MAX_PAGES: u64 = 1 << 22;

impl MigrateBench {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let b: MigrateBench = parse_params(p)?;
        if b.pages == 0 || b.pages > MAX_PAGES {
            return Err(format!("`pages` must be 1..={MAX_PAGES}"));
        }
        if b.threads == 0 {
            return Err("`threads` must be >= 1".into());
        }
        Ok(b)
    }
}

fn pin(c: &Ctx, cpu: CpuId) -> CpuMask {
    super::only_cpu(&c.w, cpu)
}

/// The `migratepages` tool in a shell loop: once `ready`, moves
/// `target`'s pages from node 0 to node 1 and back, `iterations` times,
/// then sets `done`.
pub(super) async fn migratepages_loop(
    c: &Ctx,
    target: TaskId,
    iterations: u64,
    ready: &TrackedCell<bool>,
    done: &TrackedCell<bool>,
) {
    while !ready.get() {
        c.user_work(10_000).await;
    }
    for _ in 0..iterations {
        sys_migrate_pages(c, target, 0, 1).await;
        sys_migrate_pages(c, target, 1, 0).await;
    }
    done.set(true);
}

/// A thread of the process: rounds of random accesses until `done`.
async fn user_loop(
    c: &Ctx,
    me: &MigrateBench,
    p: u64,
    done: &TrackedCell<bool>,
    mut rng: impl Rng,
) {
    while !done.get() {
        for _ in 0..me.touches_per_round {
            let k = rng.gen_range(0..me.pages);
            c.user_access(p + k * PAGE_SIZE, rng.gen_range(0..8) == 0)
                .await;
        }
        c.user_work(me.gap_ns).await;
    }
}

/// The memory-touching process: maps and writes the pages, starts the
/// other threads, and runs the loop itself on CPU 1.
async fn process_main(
    c: &Ctx,
    me: &MigrateBench,
    ready: &TrackedCell<bool>,
    done: &Rc<TrackedCell<bool>>,
    streams: Streams,
) {
    sys_sched_setaffinity(c, Some(pin(c, CpuId::from_index(1)))).await;
    let len = me.pages * PAGE_SIZE;
    let p = if me.shared {
        sys_mmap_shared(c, len, Perms::RW, PageData::Compressible).await
    } else {
        sys_mmap_private(c, len, Perms::RW, PageData::Compressible).await
    };
    for k in 0..me.pages {
        c.user_access(p + k * PAGE_SIZE, true).await;
    }
    for i in 2..=me.threads {
        let (m, d) = (me.clone(), Rc::clone(done));
        let rng = streams.stream(&format!("migrate-bench/{i}"));
        let program: Program =
            Box::new(move |t: Ctx| Box::pin(async move { user_loop(&t, &m, p, &d, rng).await }));
        sys_clone_thread(c, "pmbench", Some(CpuId::new(i)), program).await;
    }
    ready.set(true);
    user_loop(c, me, p, done, streams.stream("migrate-bench/1")).await;
    while sys_wait(c).await.is_some() {}
}

/// Driver events per page to map and write the mapping before
/// migratepages starts: seed001-migrate with `iterations = 0` has 308,304
/// events for its 32,768 pages (9.4 a page; 8,192 pages: 9.4).
const SETUP_EVENTS_PER_PAGE: u64 = 10;
/// Driver events per page per round trip besides the threads using the
/// mapping (two moves, each an unmap, a flush, a copy and a remap): with
/// [`EVENTS_PER_THREAD_PAGE`], fitted on seed001-migrate (32,768 pages,
/// 8 touches a round, 3 round trips) before 6.3, where the folios move
/// one at a time: 107, 260 and 491 events a page a round trip with 1, 3
/// and 6 threads, 30 besides the threads (2026-11-29).
const EVENTS_PER_PAGE: u64 = 30;
/// Driver events per page per round trip per thread using the mapping
/// (its accesses while the pages move, and the faults on pages in
/// flight): 77 before 6.3, where the threads keep running while pages
/// move one at a time; 6 with 6.3's batches (`migrate_batch_flush`),
/// where they sleep on pages in flight. The workload cannot see the
/// kernel: 60 keeps the default kernel's run within 1.3x and
/// over-estimates a batched run about 4x.
const EVENTS_PER_THREAD_PAGE: u64 = 60;

impl Workload for MigrateBench {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let threads = u64::from(self.threads);
        let per = EVENTS_PER_PAGE.saturating_add(threads.saturating_mul(EVENTS_PER_THREAD_PAGE));
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product(
                    "pages",
                    &[(self.pages, "pages"), (SETUP_EVENTS_PER_PAGE, "events")],
                ),
                Figure::product(
                    "iterations",
                    &[
                        (self.iterations, "round trips"),
                        (self.pages, "pages"),
                        (per, "events"),
                    ],
                ),
            ]),
            live_pages: Some(Figure::product("pages", &[(self.pages, "pages")])),
            // sh, migratepages and the process's threads.
            tasks: Some(Figure {
                value: threads.saturating_add(2),
                key: "threads",
                how: format!("sh + migratepages + {threads} threads"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let me = self.clone();
        let streams = *streams;
        spawn_user(
            w,
            "sh",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let ready = super::shared_cell(false);
                    let done = super::shared_cell(false);
                    let (m, r, d) = (me.clone(), Rc::clone(&ready), Rc::clone(&done));
                    let target = sys_fork(
                        &ctx,
                        "pmbench",
                        Box::new(move |c: Ctx| {
                            Box::pin(async move { process_main(&c, &m, &r, &d, streams).await })
                        }),
                    )
                    .await;
                    let (r, d, n) = (Rc::clone(&ready), Rc::clone(&done), me.iterations);
                    sys_fork(
                        &ctx,
                        "migratepages",
                        Box::new(move |c: Ctx| {
                            Box::pin(async move {
                                sys_sched_setaffinity(&c, Some(pin(&c, CpuId::BOOT))).await;
                                migratepages_loop(&c, target, n, &r, &d).await;
                            })
                        }),
                    )
                    .await;
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }

    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        if self.threads >= profile.topology.cpus {
            return Err(format!(
                "`threads`: {} threads on CPUs 1..={} and migratepages on CPU 0 need {} CPUs; profile \"{}\" has {}",
                self.threads,
                self.threads,
                self.threads + 1,
                profile.name,
                profile.topology.cpus
            ));
        }
        super::needs_two_nodes(profile, "migrate-bench")
    }
}

/// The registry entry of `migrate-bench`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "migrate-bench",
    description:
        "seed 001: migratepages moving a busy process's pages between two NUMA nodes and back",
    new: |p, _| super::resolved(MigrateBench::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
