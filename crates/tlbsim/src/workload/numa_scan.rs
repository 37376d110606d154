//! Checker stress for NUMA-hinting scans against page migration
//! (`kernel/mm/numa_balancing.rs`, `kernel/mm/migrate.rs`): a process
//! maps `pages` shared pages and writes them; `scanners` of its threads
//! (the main one first) loop the NUMA scan (`task_numa_work()`: the pages
//! made `PROT_NONE`, then one flush) and sleep; `writers` more threads
//! loop writing the pages (a hinting fault makes a page accessible again)
//! and sleep; another process (`migratepages`) moves the process's pages
//! from node 0 to node 1 and back, `iterations` times, and then ends the
//! run. A migration that unmaps a page while a scan still owes its flush
//! must flush (`pte_accessible()` with `mm->tlb_flush_pending`).
//!
//! CPUs: `migratepages` on CPU 0, the scanners from CPU 1, then the
//! writers, each pinned (wrapping around the machine).

use super::migrate_bench::migratepages_loop;
use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::{Rng, Streams};
use crate::engine::track::TrackedCell;
use crate::hw::mem::Perms;
use crate::hw::CpuId;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread, sys_fork_pinned};
use crate::kernel::hrtimer::schedule_hrtimeout;
use crate::kernel::mm::numa_balancing::task_numa_work;
use crate::kernel::mm::shmem::sys_mmap_shared;
use crate::kernel::mm::swap::PageData;
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NumaScan {
    /// Threads that scan (the main one included).
    #[serde(default = "two")]
    pub scanners: u32,
    /// Threads that write the pages.
    #[serde(default = "one")]
    pub writers: u32,
    /// Shared pages mapped and written.
    #[serde(default = "one_page")]
    pub pages: u64,
    /// Round trips (node 0 to 1 and back) of `migratepages`.
    #[serde(default = "two_rounds")]
    pub iterations: u64,
    /// Mean sleep of a scanner or writer between its rounds (ns), drawn
    /// uniformly from 0.5x..1.5x of it from the seeded stream
    /// `numa-scan/threadN`.
    #[serde(default = "sleep_ns")]
    pub sleep_ns: u64,
}

fn one() -> u32 {
    1
}
fn two() -> u32 {
    2
}
fn one_page() -> u64 {
    1
}
fn two_rounds() -> u64 {
    2
}
fn sleep_ns() -> u64 {
    2000
}

/// Driver events per migration round trip and per thread (the process's
/// and migratepages): 54 per round trip with 4 threads on
/// `experiments/bugs/numa-scan-bool.toml` (400 events at 2 iterations,
/// 1,484 at 22).
const EVENTS_PER_THREAD_ROUND: u64 = 14;

impl NumaScan {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let c: NumaScan = parse_params(p)?;
        if c.scanners == 0 {
            return Err("`scanners` must be >= 1 (the main thread scans)".into());
        }
        if c.pages == 0 || c.pages > 512 {
            return Err(format!("`pages` must be 1 to 512, not {}", c.pages));
        }
        if c.scanners + c.writers > 64 {
            return Err(format!(
                "`scanners` + `writers` must be at most 64, not {}",
                c.scanners + c.writers
            ));
        }
        Ok(c)
    }
}

impl Workload for NumaScan {
    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        super::needs_two_nodes(profile, "numa-scan")
    }

    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let t = u64::from(self.scanners + self.writers) + 1;
        super::Estimate {
            events: Some(Figure::product(
                "iterations",
                &[
                    (t, "threads"),
                    (self.iterations, "iterations"),
                    (EVENTS_PER_THREAD_ROUND, "events"),
                ],
            )),
            live_pages: Some(Figure::product("pages", &[(self.pages, "pages")])),
            tasks: Some(Figure::product("threads", &[(t + 1, "tasks")])),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let me = self.clone();
        let n = w.ncpus() as u32;
        let streams = *streams;
        spawn_user(
            w,
            "sh",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let done = super::shared_cell(false);
                    let ready = super::shared_cell(false);
                    let (m, d, r) = (me.clone(), Rc::clone(&done), Rc::clone(&ready));
                    let main = Box::new(move |c: Ctx| {
                        Box::pin(async move { process_main(&c, &m, n, &d, &r, streams).await })
                            as crate::kernel::TaskFuture
                    });
                    let pin = Some(CpuId::new(1 % n));
                    let target = sys_fork_pinned(&ctx, "numa", pin, main).await;
                    let (d, iterations) = (Rc::clone(&done), me.iterations);
                    let migrator = Box::new(move |c: Ctx| {
                        Box::pin(async move {
                            migratepages_loop(&c, target, iterations, &ready, &d).await;
                        }) as crate::kernel::TaskFuture
                    });
                    sys_fork_pinned(&ctx, "migratepages", Some(CpuId::BOOT), migrator).await;
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// The process's main thread: maps and writes the pages, starts the other
/// scanners and the writers, then scans until `done`.
async fn process_main(
    ctx: &Ctx,
    me: &NumaScan,
    n: u32,
    done: &Rc<TrackedCell<bool>>,
    ready: &Rc<TrackedCell<bool>>,
    streams: Streams,
) {
    let page = ctx.w.granule.page_size();
    let p = sys_mmap_shared(ctx, me.pages * page, Perms::RW, PageData::Compressible).await;
    for i in 0..me.pages {
        ctx.user_access(p + i * page, true).await;
    }
    let threads = me.scanners + me.writers;
    for t in 1..threads {
        let rng = streams.stream(&format!("numa-scan/thread{t}"));
        let writer = t >= me.scanners;
        let prog = looper(me, p, writer, Rc::clone(done), rng);
        let cpu = CpuId::new((1 + t) % n);
        sys_clone_thread(
            ctx,
            if writer { "writer" } else { "scanner" },
            Some(cpu),
            prog,
        )
        .await;
    }
    ready.set(true);
    let mut rng = streams.stream("numa-scan/thread0");
    while !done.get() {
        task_numa_work(ctx).await;
        schedule_hrtimeout(ctx, me.sleep_ns / 2 + rng.gen_range(0..=me.sleep_ns)).await;
    }
    while sys_wait(ctx).await.is_some() {}
}

/// A scanner (the NUMA scan) or a writer (a store to each page), looping
/// with sleeps until `done`.
fn looper(
    me: &NumaScan,
    p: u64,
    writer: bool,
    done: Rc<TrackedCell<bool>>,
    mut rng: Rng,
) -> Program {
    let (sleep, pages) = (me.sleep_ns, me.pages);
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            let page = c.w.granule.page_size();
            while !done.get() {
                if writer {
                    for i in 0..pages {
                        c.user_access(p + i * page, true).await;
                    }
                } else {
                    task_numa_work(&c).await;
                }
                schedule_hrtimeout(&c, sleep / 2 + rng.gen_range(0..=sleep)).await;
            }
        })
    })
}

/// The registry entry of `numa-scan`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "numa-scan",
    description: "checker stress: NUMA-hinting scans of a process's shared pages against writers and migratepages moving them between nodes",
    new: |p, _| super::resolved(NumaScan::from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};
