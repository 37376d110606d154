//! Seed 001's micro-benchmark (Barry Song's, posted with v2/v3 of the
//! arm64 batched-flush series, run as `taskset -c 4 ./a.out` with zram
//! swap):
//!
//! ```text
//! p = mmap(NULL, 1 MiB, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS)
//! memset(p, 0x88, 1 MiB)
//! repeat 10,000 times:
//!     read one byte of every 4 KiB page     # swap-in from zram
//!     madvise(p, 1 MiB, MADV_PAGEOUT)       # swap-out
//! ```
//!
//! Every page-out unmaps a page that only this process maps, on the CPU
//! it runs on: the cost is the flush alone, not any IPI or remote CPU.
//! `shared = false` maps the region `MAP_PRIVATE` instead (anonymous
//! pages, swap entries in the PTEs).

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::fork::spawn_user;
use crate::kernel::mm::madvise::sys_madvise_pageout;
use crate::kernel::mm::shmem::sys_mmap_shared;
use crate::kernel::mm::swap::PageData;
use crate::kernel::mm::sys_mmap_private;
use crate::kernel::sched::sys_sched_setaffinity;
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters of the swap benchmark.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwapBench {
    /// Bytes mapped (rounded up to whole pages).
    #[serde(default = "default_size")]
    pub size_bytes: u64,
    /// Rounds of swap-in and page-out.
    #[serde(default = "default_iterations")]
    pub iterations: u64,
    /// The CPU the program is pinned to (`taskset -c`).
    #[serde(default)]
    pub cpu: u32,
    /// What the pages hold (`memset(p, 0x88, ...)` makes them
    /// `same-filled`, which zram stores without compressing).
    #[serde(default)]
    pub data: PageData,
    /// Map `MAP_SHARED | MAP_ANONYMOUS` (shmem, the seed's program: pages
    /// swap through the object's page cache) or, if false, `MAP_PRIVATE |
    /// MAP_ANONYMOUS` (pages swap through swap entries in the PTEs).
    /// Left out of the JSON when true.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub shared: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn default_size() -> u64 {
    1 << 20
}

fn default_iterations() -> u64 {
    10_000
}

/// Mappings larger than this are refused: the model keeps every page.
const MAX_SIZE_BYTES: u64 = 1 << 34;

impl SwapBench {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let b: SwapBench = parse_params(p)?;
        if b.size_bytes == 0 || b.size_bytes > MAX_SIZE_BYTES {
            return Err(format!(
                "`size_bytes` must be 1..={MAX_SIZE_BYTES} (got {})",
                b.size_bytes
            ));
        }
        Ok(b)
    }

    /// Pages mapped.
    fn pages(&self) -> u64 {
        self.size_bytes.div_ceil(PAGE_SIZE)
    }
}

/// The benchmark's `main()`.
async fn swap_bench_main(ctx: &Ctx, b: &SwapBench) {
    let only = super::only_cpu(&ctx.w, CpuId::new(b.cpu));
    sys_sched_setaffinity(ctx, Some(only)).await;
    let len = b.pages() * PAGE_SIZE;
    let p = if b.shared {
        sys_mmap_shared(ctx, len, Perms::RW, b.data).await
    } else {
        sys_mmap_private(ctx, len, Perms::RW, b.data).await
    };
    for i in 0..b.pages() {
        ctx.user_access(p + i * PAGE_SIZE, true).await;
    }
    for _ in 0..b.iterations {
        for i in 0..b.pages() {
            ctx.user_access(p + i * PAGE_SIZE, false).await;
        }
        sys_madvise_pageout(ctx, p, len).await;
    }
}

/// Driver events per page per round (its swap-in fault from zram, and
/// its share of the page-out's unmap and flush): the golden
/// seed001-pageout and seed001-pageout-kunpeng (2,000 rounds of 256
/// pages) have 12.8 M events, 25.0 a page a round (private memory:
/// 23.0).
const EVENTS_PER_PAGE_ROUND: u64 = 25;
/// Driver events per page before the rounds (mapping and writing it):
/// 2,338 for 256 pages with `iterations = 0`.
const SETUP_EVENTS_PER_PAGE: u64 = 9;

impl Workload for SwapBench {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let pages = self.pages();
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product(
                    "iterations",
                    &[
                        (self.iterations, "rounds"),
                        (pages, "pages"),
                        (EVENTS_PER_PAGE_ROUND, "events"),
                    ],
                ),
                Figure::product(
                    "size_bytes",
                    &[(pages, "pages"), (SETUP_EVENTS_PER_PAGE, "events")],
                ),
            ]),
            live_pages: Some(Figure::product("size_bytes", &[(pages, "pages")])),
            tasks: None,
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "a.out",
            CpuId::new(me.cpu),
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    swap_bench_main(&ctx, &me).await;
                })
            }),
        )
    }

    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        if self.cpu >= profile.topology.cpus {
            return Err(format!(
                "`cpu`: CPU {} does not exist on profile \"{}\" ({} CPUs)",
                self.cpu, profile.name, profile.topology.cpus
            ));
        }
        if profile.swap.is_none() {
            return Err(format!(
                "profile \"{}\" has no [swap] section (reclaim and zram costs), which swap-bench needs",
                profile.name
            ));
        }
        Ok(())
    }
}

/// The registry entry of `swap-bench`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "swap-bench",
    description: "seed 001: one pinned process swapping 1 MiB of shared anonymous memory in and out of zram with MADV_PAGEOUT",
    new: |p, _| super::resolved(SwapBench::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
