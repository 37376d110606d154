//! Checker stress for hugetlb PMD sharing (`kernel/mm/hugetlb.rs`): the
//! main process creates a 1 GiB (`PUD_SIZE`) file on hugetlbfs and forks
//! `sharers` children; each process then loops `iterations` times: map
//! the whole file `MAP_SHARED` at its own `PUD_SIZE`-aligned address,
//! read `pages` huge pages of it (the first process to fault allocates
//! the PMD table, the others share it: `huge_pmd_share()`), and unmap it
//! (`huge_pmd_unshare()` while another process still shares the table;
//! the last one clears the PMDs and frees the table). With `threads` > 1
//! the main process has reader threads on further CPUs that read its
//! mapping's first huge page and sleep, mapped or not, until it is done.
//!
//! CPUs: the main thread on CPU 0, its readers on the next ones, then the
//! children, each pinned (wrapping around the machine).

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::{Rng, Streams};
use crate::engine::track::TrackedCell;
use crate::hw::mem::Perms;
use crate::hw::CpuId;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread, sys_fork_pinned};
use crate::kernel::hrtimer::schedule_hrtimeout;
use crate::kernel::mm::hugetlb::{sys_create_hugetlbfs_file, sys_mmap_hugetlb, PUD_SIZE};
use crate::kernel::mm::sys_munmap;
use crate::kernel::mm::ShmemId;
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HugetlbShare {
    /// Child processes mapping the file besides the main one.
    #[serde(default = "one")]
    pub sharers: u32,
    /// Threads of the main process, the main one included (the others
    /// read and sleep).
    #[serde(default = "one")]
    pub threads: u32,
    /// Map-read-unmap rounds of each process.
    #[serde(default = "two")]
    pub iterations: u64,
    /// Huge pages each process reads per round, from the file's start.
    #[serde(default = "two")]
    pub pages: u64,
    /// Mean sleep of a reader between its reads (ns), drawn uniformly from
    /// 0.5x..1.5x of it from the seeded stream `hugetlb-share/readerN`.
    #[serde(default = "sleep_ns")]
    pub sleep_ns: u64,
}

fn one() -> u32 {
    1
}
fn two() -> u64 {
    2
}
fn sleep_ns() -> u64 {
    2000
}

/// Where process `i` (0: the main one) maps the file: 64 GiB up, 2 GiB
/// apart (each `PUD_SIZE` aligned, below every modelled `mmap_base`).
fn map_addr(i: u32) -> u64 {
    (64 << 30) + u64::from(i) * 2 * PUD_SIZE
}

/// Driver events per process round: 2,069 on
/// `experiments/bugs/hugetlb-unshare-no-flush.toml` with `threads = 1`
/// (12,442 events at 3 iterations, 136,582 at 33, 2 processes). Most are
/// the last sharer's unmap taking and dropping the table's lock at each of
/// the 512 PMDs of the `PUD_SIZE`, as Linux's `__unmap_hugepage_range()`
/// does.
const EVENTS_PER_PROCESS_ROUND: u64 = 2_070;

impl HugetlbShare {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let c: HugetlbShare = parse_params(p)?;
        if c.threads == 0 {
            return Err("`threads` must be >= 1".into());
        }
        if c.sharers > 64 {
            return Err(format!("`sharers` must be at most 64, not {}", c.sharers));
        }
        if c.pages == 0 || c.pages > 512 {
            return Err(format!(
                "`pages` must be 1 to 512 (the 2 MiB pages of the 1 GiB file), not {}",
                c.pages
            ));
        }
        Ok(c)
    }
}

impl Workload for HugetlbShare {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let procs = u64::from(self.sharers) + 1;
        super::Estimate {
            events: Some(Figure::product(
                "iterations",
                &[
                    (procs, "processes"),
                    (self.iterations, "iterations"),
                    (EVENTS_PER_PROCESS_ROUND, "events"),
                ],
            )),
            live_pages: None,
            tasks: Some(Figure::product(
                "threads",
                &[(procs + u64::from(self.threads), "tasks")],
            )),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let me = self.clone();
        let n = w.ncpus() as u32;
        let streams = *streams;
        spawn_user(
            w,
            "hugetlb-share",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let file = sys_create_hugetlbfs_file(&ctx, PUD_SIZE).await;
                    for i in 1..=me.sharers {
                        let cpu = CpuId::new((me.threads - 1 + i) % n);
                        let child = rounds(me.clone(), file, i);
                        sys_fork_pinned(&ctx, "sharer", Some(cpu), child).await;
                    }
                    let done = super::shared_cell(false);
                    for t in 1..me.threads {
                        let rng = streams.stream(&format!("hugetlb-share/reader{t}"));
                        let r = reader(&me, Rc::clone(&done), rng);
                        sys_clone_thread(&ctx, "reader", Some(CpuId::new(t % n)), r).await;
                    }
                    run_rounds(&ctx, &me, file, 0).await;
                    done.set(true);
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// The program of process `i`: its rounds.
fn rounds(me: HugetlbShare, file: ShmemId, i: u32) -> Program {
    Box::new(move |c: Ctx| Box::pin(async move { run_rounds(&c, &me, file, i).await }))
}

/// Process `i`'s rounds: map the file, read `pages` huge pages, unmap.
async fn run_rounds(ctx: &Ctx, me: &HugetlbShare, file: ShmemId, i: u32) {
    let addr = map_addr(i);
    let hpage = ctx.w.granule.pmd_size();
    for _ in 0..me.iterations {
        let mapped = sys_mmap_hugetlb(ctx, file, addr, PUD_SIZE, Perms::RW).await;
        assert_eq!(mapped, Some(addr), "the range is free and aligned");
        for p in 0..me.pages {
            ctx.user_access(addr + p * hpage, false).await;
        }
        sys_munmap(ctx, addr, PUD_SIZE).await;
    }
}

/// A reader of the main process: until `done`, reads the first huge page
/// of the main mapping (mapped or not) and sleeps.
fn reader(me: &HugetlbShare, done: Rc<TrackedCell<bool>>, mut rng: Rng) -> Program {
    let sleep = me.sleep_ns;
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            while !done.get() {
                c.user_access(map_addr(0), false).await;
                schedule_hrtimeout(&c, sleep / 2 + rng.gen_range(0..=sleep)).await;
            }
        })
    })
}

/// The registry entry of `hugetlb-share`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "hugetlb-share",
    description: "checker stress: processes sharing the PMD table of a 1 GiB hugetlbfs file, each mapping, reading and unmapping it",
    new: |p, _| super::resolved(HugetlbShare::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
