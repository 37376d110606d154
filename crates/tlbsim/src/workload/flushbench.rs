//! TLB-flush microbenchmarks of seed 004 and will-it-scale.
//!
//! - `madv-migrate` (seed 004): `madvise(MADV_DONTNEED)` one page, touch
//!   it, move to the other CPU with `sched_setaffinity`; reports the mean
//!   iteration time (`iteration_us`). An unpatched kernel IPIs the CPU the
//!   task just left (lazy on the mm) at every madvise.
//! - `tlb-flush` (will-it-scale `tlb_flush1/2/3`, antonblanchard/
//!   will-it-scale tests/tlb_flushN.c): `tasks` tasks, each pinned to its own
//!   CPU, each mapping its own region (`tlb_flush2`: 1 MiB anonymous;
//!   `tlb_flush1`: a `MAP_PRIVATE`, `tlb_flush3`: a `MAP_SHARED` mapping
//!   of the task's own 128 MiB sparse file, created before its loop, whose
//!   pages stay in the page cache from one pass to the next,
//!   kernel/mm/filemap.rs) and, per page, writing it,
//!   `madvise(MADV_DONTNEED)`-ing it and reading it back; after the
//!   region, `munmap`. On the file variants the read-back's fault-around
//!   maps the next cached pages read-only, so `tlb_flush1`'s next write
//!   copies a present page (`wp_page_copy()`, a second flush); with
//!   `[kernel] file_large_folios = "pmd"` `tlb_flush3`'s pages are mapped
//!   by a PMD that each write and each madvise split (docs/model.md,
//!   "Page cache of regular files"). `mode = "threads"`
//!   runs the tasks as threads of one process (every madvise must flush the
//!   other CPUs), `"processes"` as forked processes. Reports `loops_per_s`
//!   (the sum of the tasks' iteration rates, measured after `warmup_ns`).

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::cpumask::CpuMask;
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread, sys_fork};
use crate::kernel::mm::filemap::{filemap_read, sys_create_file, sys_mmap_file};
use crate::kernel::mm::{sys_madvise_dontneed, sys_mmap, sys_munmap};
use crate::kernel::sched::sys_sched_setaffinity;
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters of `madv-migrate`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MadvMigrate {
    /// Iterations.
    pub iterations: u64,
    /// The two CPUs the task alternates between.
    pub cpus: [u32; 2],
}

impl Default for MadvMigrate {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        MadvMigrate {
            iterations: 10_000,
            cpus: [0, 1],
        }
    }
}

impl MadvMigrate {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let m: Self = parse_params(p)?;
        if m.iterations == 0 {
            return Err("`iterations` must be >= 1".into());
        }
        if m.cpus[0] == m.cpus[1] {
            return Err("`cpus` must name two different CPUs".into());
        }
        Ok(m)
    }
}

fn only(w: &World, cpu: u32) -> CpuMask {
    super::only_cpu(w, CpuId::new(cpu))
}

/// Driver events per iteration (the madvise and its flush, the fault,
/// the migration): the golden seed004-madv-migrate (10,000 iterations,
/// x86-lazy-legacy) has 360,032 events, 36.0 each (x86-tlb-gen: 32.0).
const EVENTS_PER_MADV_MIGRATE_ITERATION: u64 = 36;

impl Workload for MadvMigrate {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        super::Estimate {
            events: Some(super::Figure::product(
                "iterations",
                &[
                    (self.iterations, "iterations"),
                    (EVENTS_PER_MADV_MIGRATE_ITERATION, "events"),
                ],
            )),
            ..super::Estimate::default()
        }
    }

    /// Both CPUs must exist on the machine (after `--cpus`).
    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        let n = profile.topology.cpus;
        match self.cpus.iter().find(|&&c| c >= n) {
            Some(c) => Err(format!(
                "`cpus`: {:?} names CPU {c}, but the machine has {n} CPU(s), 0..={}",
                self.cpus,
                n - 1
            )),
            None => Ok(()),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        let n = w.ncpus() as u32;
        assert!(me.cpus.iter().all(|&c| c < n), "checked by check()");
        spawn_user(
            w,
            "madv-migrate",
            CpuId::new(me.cpus[0]),
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let w = Rc::clone(&ctx.w);
                    sys_sched_setaffinity(&ctx, Some(only(&w, me.cpus[0]))).await;
                    let p = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                    ctx.user_access(p, true).await;
                    let t0 = ctx.now();
                    for i in 0..me.iterations {
                        sys_madvise_dontneed(&ctx, p, PAGE_SIZE).await;
                        ctx.user_access(p, true).await;
                        let next = me.cpus[((i + 1) % 2) as usize];
                        sys_sched_setaffinity(&ctx, Some(only(&w, next))).await;
                    }
                    let us = (ctx.now() - t0) as f64 / 1e3 / me.iterations as f64;
                    w.stats
                        .borrow_mut()
                        .metrics
                        .insert(w.metric("iteration_us"), us);
                })
            }),
        )
    }
}

/// Parameters of `tlb-flush`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlbFlush {
    /// Which will-it-scale test: 1, 2 or 3.
    pub variant: u32,
    /// Tasks (0: one per CPU).
    pub tasks: u32,
    /// `"threads"` or `"processes"`.
    pub mode: String,
    /// Iterations (pages) per task, measured after the warm-up.
    pub iterations: u64,
    /// Warm-up per task before measuring, in simulated ns (will-it-scale
    /// warms up for 5 s; policies that adapt, like INVLPGB's global ASIDs
    /// checked once every 32 ticks, need about 32 ticks).
    pub warmup_ns: u64,
    /// Run tlb_flush1/3 on 128 MiB of private anonymous memory instead
    /// of a file (the model before it had a page cache; with `[kernel]
    /// thp = "always"` the region is backed by 2 MiB pages). Left out of
    /// the resolved parameters when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
}

impl Default for TlbFlush {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        TlbFlush {
            variant: 2,
            tasks: Default::default(),
            mode: "threads".into(),
            iterations: 2_000,
            warmup_ns: Default::default(),
            anonymous: Default::default(),
        }
    }
}

impl TlbFlush {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let m: Self = parse_params(p)?;
        if !(1..=3).contains(&m.variant) {
            return Err(format!("`variant` = {} (must be 1, 2 or 3)", m.variant));
        }
        if m.mode != "threads" && m.mode != "processes" {
            return Err(format!(
                "`mode` = \"{}\" (must be \"threads\" or \"processes\")",
                m.mode
            ));
        }
        if m.iterations == 0 {
            return Err("`iterations` must be >= 1".into());
        }
        Ok(m)
    }

    /// Bytes of the region each task maps.
    fn region(&self) -> u64 {
        if self.variant == 2 {
            1 << 20
        } else {
            128 << 20
        }
    }
}

/// What a task maps: anonymous memory (`tlb_flush2`) or its own file,
/// `MAP_SHARED` (`tlb_flush3`) or not (`tlb_flush1`).
#[derive(Debug, Clone, Copy)]
enum Backing {
    Anon,
    File { shared: bool },
}

impl TlbFlush {
    fn backing(&self) -> Backing {
        match self.variant {
            2 => Backing::Anon,
            _ if self.anonymous => Backing::Anon,
            v => Backing::File { shared: v == 3 },
        }
    }
}

/// The body of `testcase()`: pinned to `cpu`, creates its file if it maps
/// one (`mkstemp`, `ftruncate` to the region's size) and reads it through
/// (its page cache filled, as in a long run), warms up for
/// `warmup_ns`, then runs `iterations` pages; returns this task's rate
/// (loops/s).
async fn tlb_flush_task(
    ctx: &Ctx,
    cpu: u32,
    iterations: u64,
    (region, backing): (u64, Backing),
    warmup_ns: u64,
) -> f64 {
    let w = Rc::clone(&ctx.w);
    sys_sched_setaffinity(ctx, Some(only(&w, cpu))).await;
    let file = match backing {
        Backing::Anon => None,
        Backing::File { shared } => {
            let f = sys_create_file(ctx, region).await;
            // The cache a long run has: will-it-scale measures seconds
            // of passes over the file, of which the first (each page read
            // in, its hole zeroed) is a small part; a short window would
            // be all first pass (validate-host reads the host's file
            // through too).
            filemap_read(ctx, f).await;
            Some((f, shared))
        }
    };
    let start = ctx.now();
    let mut measured_from = None;
    let mut left = iterations;
    while left > 0 {
        let p = match file {
            None => sys_mmap(ctx, region, Perms::RW).await,
            Some((f, shared)) => sys_mmap_file(ctx, f, region, Perms::RW, shared).await,
        };
        let mut off = 0;
        while off < region && left > 0 {
            ctx.user_access(p + off, true).await;
            sys_madvise_dontneed(ctx, p + off, PAGE_SIZE).await;
            ctx.user_access(p + off, false).await;
            off += PAGE_SIZE;
            if measured_from.is_none() && ctx.now() - start >= warmup_ns {
                measured_from = Some(ctx.now());
            }
            if measured_from.is_some() {
                left -= 1;
            }
        }
        sys_munmap(ctx, p, region).await;
    }
    let t = ctx.now() - measured_from.unwrap_or(start);
    iterations as f64 / (t.max(1) as f64 / 1e9)
}

/// Driver events per task per iteration (write, madvise, read back) in
/// `processes` mode, or in `threads` mode besides the other CPUs each
/// madvise flushes: 29.1 per task-iteration in processes mode on
/// wis-tlb-flush2's profile at 16 and 64 CPUs (no warm-up), 25 in
/// threads mode besides the CPUs
/// ([`EVENTS_PER_TLB_FLUSH_ITERATION_CPU`]).
const EVENTS_PER_TLB_FLUSH_ITERATION: u64 = 27;
/// Driver events per task per iteration per CPU the threads run on, in
/// `threads` mode: each madvise's flush reaches every other thread's
/// CPU. Fitted with [`EVENTS_PER_TLB_FLUSH_ITERATION`] on wis-tlb-flush2
/// without warm-up: 42, 95 and 290 per task-iteration at 4, 16 and 64
/// CPUs, about 25 + 4.1 a CPU. `tlb_flush1` (a private file mapping)
/// flushes twice (its write copies a present page): 157 at 16 CPUs,
/// twice the per-CPU part.
const EVENTS_PER_TLB_FLUSH_ITERATION_CPU: u64 = 4;
/// Driver events per task per microsecond of warm-up: the golden
/// wis-tlb-flush2's 33 ms add 4.7, 4.9 and 5.1 per task per us at 4, 16
/// and 64 CPUs in threads mode (the iterations are slower as they are
/// costlier), 6.8 in processes mode.
const TLB_FLUSH_WARMUP_EVENTS_PER_US: u64 = 5;

impl Workload for TlbFlush {
    fn estimate(&self, cpus: u32) -> super::Estimate {
        use super::Figure;
        let tasks = u64::from(if self.tasks == 0 { cpus } else { self.tasks });
        let per = if self.mode == "threads" {
            let flushes = if self.variant == 1 && !self.anonymous {
                2
            } else {
                1
            };
            let targets = tasks.min(u64::from(cpus));
            EVENTS_PER_TLB_FLUSH_ITERATION.saturating_add(
                targets.saturating_mul(flushes * EVENTS_PER_TLB_FLUSH_ITERATION_CPU),
            )
        } else {
            EVENTS_PER_TLB_FLUSH_ITERATION
        };
        let region_pages = match self.backing() {
            Backing::Anon => 1,
            Backing::File { .. } => self.region() / PAGE_SIZE,
        };
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product(
                    "iterations",
                    &[
                        (tasks, "tasks"),
                        (self.iterations, "iterations"),
                        (per, "events"),
                    ],
                ),
                Figure::product(
                    "warmup_ns",
                    &[
                        (tasks, "tasks"),
                        (self.warmup_ns / 1_000, "us of warm-up"),
                        (TLB_FLUSH_WARMUP_EVENTS_PER_US, "events"),
                    ],
                ),
            ]),
            // Each task's page at a time, or its file's page cache.
            live_pages: Some(Figure::product(
                "tasks",
                &[(tasks, "tasks"), (region_pages, "pages")],
            )),
            tasks: Some(Figure {
                value: tasks.saturating_add(1),
                key: "tasks",
                how: format!("will-it-scale + {tasks} tasks"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        let n = if me.tasks == 0 {
            w.ncpus() as u32
        } else {
            me.tasks
        };
        let ncpus = w.ncpus() as u32;
        spawn_user(
            w,
            "will-it-scale",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let region = (me.region(), me.backing());
                    let rate = super::shared_cell(0.0f64);
                    for i in 0..n {
                        let cpu = i % ncpus;
                        let iters = me.iterations;
                        let warm = me.warmup_ns;
                        let rate_t = Rc::clone(&rate);
                        let rate_p = Rc::clone(&rate);
                        let body = Box::new(move |c: Ctx| -> crate::kernel::TaskFuture {
                            Box::pin(async move {
                                let r = tlb_flush_task(&c, cpu, iters, region, warm).await;
                                rate_t.set(rate_t.get() + r);
                            })
                        });
                        if me.mode == "threads" {
                            sys_clone_thread(&ctx, "tlb_flush_thread", None, body).await;
                        } else {
                            sys_fork(
                                &ctx,
                                "tlb_flush_process",
                                Box::new(move |c: Ctx| {
                                    Box::pin(async move {
                                        sys_exec(&c).await;
                                        let r = tlb_flush_task(&c, cpu, iters, region, warm).await;
                                        rate_p.set(rate_p.get() + r);
                                    })
                                }),
                            )
                            .await;
                        }
                    }
                    while sys_wait(&ctx).await.is_some() {}
                    // will-it-scale sums every task's iteration counter per
                    // second: the sum of the tasks' rates.
                    ctx.w
                        .stats
                        .borrow_mut()
                        .metrics
                        .insert(ctx.w.metric("loops_per_s"), rate.get());
                })
            }),
        )
    }
}

/// Parameters of `pthread-mmap`: Vitaly Kuznetsov's pthread_mmap
/// microbenchmark as run for seed 004 ("8 threads (on four cores), nrounds
/// = 100, 256M data"). Its source is not public; the model assumes each
/// thread, per round, maps its share of the data (`data_mib / threads`),
/// writes every page and unmaps it (docs/model.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PthreadMmap {
    /// Threads.
    pub threads: u32,
    /// Rounds per thread.
    pub rounds: u32,
    /// Data size in MiB, split between the threads.
    pub data_mib: u64,
    /// Map, write and unmap each thread's share in pieces of this many
    /// KiB (0: the whole share at once, the documented assumption). For
    /// exploring round structures the unpublished source might have had.
    pub chunk_kib: u64,
    /// Read each page before writing it (a load, then a store). The seed
    /// does not say whether the benchmark reads first; off is the
    /// documented assumption. With `[kernel] thp_huge_zero_page` on, the
    /// read of a 2 MiB region maps the huge zero page and the write that
    /// follows copies it with a 2 MiB flush (docs/model.md). Left out of
    /// the resolved parameters when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read_before_write: bool,
}

impl Default for PthreadMmap {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        PthreadMmap {
            threads: 8,
            rounds: 100,
            data_mib: 256,
            chunk_kib: Default::default(),
            read_before_write: Default::default(),
        }
    }
}

impl PthreadMmap {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let m: Self = parse_params(p)?;
        if m.threads == 0 || m.rounds == 0 {
            return Err("`threads` and `rounds` must be >= 1".into());
        }
        if (m.data_mib << 20) / u64::from(m.threads) < PAGE_SIZE {
            return Err("`data_mib` must give each thread at least one page".into());
        }
        if m.chunk_kib != 0 && !(m.chunk_kib << 10).is_multiple_of(PAGE_SIZE) {
            return Err(format!(
                "`chunk_kib` = {} (must be 0 or a multiple of the {} KiB page)",
                m.chunk_kib,
                PAGE_SIZE >> 10
            ));
        }
        Ok(m)
    }
}

/// One thread: `rounds` times, its `bytes` in pieces of `chunk` bytes:
/// mmap a piece, write every page (reading it first with `read_first`),
/// munmap it.
async fn pthread_mmap_thread(ctx: &Ctx, rounds: u32, bytes: u64, chunk: u64, read_first: bool) {
    for _ in 0..rounds {
        let mut done = 0;
        while done < bytes {
            let len = chunk.min(bytes - done);
            let p = sys_mmap(ctx, len, Perms::RW).await;
            let mut off = 0;
            while off < len {
                if read_first {
                    ctx.user_access(p + off, false).await;
                }
                ctx.user_access(p + off, true).await;
                off += PAGE_SIZE;
            }
            sys_munmap(ctx, p, len).await;
            done += len;
        }
    }
}

/// Driver events per 4 KiB page of data a thread writes in a round,
/// when its share is mapped whole (`chunk_kib = 0`) and so may be backed
/// by huge pages: with `[kernel] thp = "always"` (the golden
/// seed004-pthread-mmap: 100 rounds of 256 MiB, 10.9 M events) 1.7 a
/// page, with 4 KiB pages ([`EVENTS_PER_SMALL_PAGE`]) 8.1. The workload
/// cannot see the kernel's `thp`, so the constant lies between: 1.8
/// times the golden run, 0.37 times one without huge pages.
const EVENTS_PER_PAGE: u64 = 3;
/// Driver events per 4 KiB page of data written in pieces shorter than
/// two huge pages (`chunk_kib` below 4 MiB), which the model's `mmap`
/// does not align, so that 4 KiB pages back them whatever `thp`: 8.1 a
/// page in 2 rounds of seed004-pthread-mmap with `chunk_kib = 2048`,
/// with and without huge pages, and in whole shares without.
const EVENTS_PER_SMALL_PAGE: u64 = 8;
/// Driver events per piece a thread maps and unmaps, besides its pages
/// (the mmap, the munmap's flush of the other threads' CPUs, the
/// `mmap_lock` they contend for): 360, 180 and 70 a piece in 2 rounds of
/// seed004-pthread-mmap with `chunk_kib` 4, 64 and 2048.
const EVENTS_PER_PIECE: u64 = 300;

impl Workload for PthreadMmap {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let threads = u64::from(self.threads);
        let share = ((self.data_mib << 20) / threads) & !(PAGE_SIZE - 1);
        let (pieces, per_page) = match self.chunk_kib {
            0 => (1, EVENTS_PER_PAGE),
            k => (
                share.div_ceil((k << 10).max(PAGE_SIZE)),
                if k < 4096 {
                    EVENTS_PER_SMALL_PAGE
                } else {
                    EVENTS_PER_PAGE
                },
            ),
        };
        let mapped = match self.chunk_kib {
            0 => share,
            k => share.min(k << 10),
        };
        let per_thread_round = (share / PAGE_SIZE)
            .saturating_mul(per_page)
            .saturating_add(pieces.saturating_mul(EVENTS_PER_PIECE));
        super::Estimate {
            events: Some(Figure::product(
                "rounds",
                &[
                    (u64::from(self.rounds), "rounds"),
                    (threads, "threads"),
                    (per_thread_round, "events"),
                ],
            )),
            // Every thread's share (or piece), mapped at once.
            live_pages: Some(Figure::product(
                "data_mib",
                &[(threads, "threads"), (mapped / PAGE_SIZE, "pages")],
            )),
            tasks: Some(Figure {
                value: threads.saturating_add(1),
                key: "threads",
                how: format!("main + {threads} threads"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "pthread_mmap",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let bytes = ((me.data_mib << 20) / u64::from(me.threads)) & !(PAGE_SIZE - 1);
                    let chunk = match me.chunk_kib {
                        0 => bytes,
                        k => k << 10,
                    };
                    for _ in 0..me.threads {
                        let rounds = me.rounds;
                        let read_first = me.read_before_write;
                        sys_clone_thread(
                            &ctx,
                            "pthread_mmap_thread",
                            None,
                            Box::new(move |c: Ctx| {
                                Box::pin(async move {
                                    pthread_mmap_thread(&c, rounds, bytes, chunk, read_first).await;
                                })
                            }),
                        )
                        .await;
                    }
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// The registry entry of `madv-migrate`.
pub const MADV_MIGRATE_ENTRY: WorkloadEntry = WorkloadEntry {
    name: "madv-migrate",
    description: "seed 004: madvise(DONTNEED) a page, touch it, move to the other CPU with sched_setaffinity; reports iteration_us",
    new: |p, _| super::resolved(MadvMigrate::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};

/// The registry entry of `pthread-mmap`.
pub const PTHREAD_MMAP_ENTRY: WorkloadEntry = WorkloadEntry {
    name: "pthread-mmap",
    description: "seed 004: threads of one process each mmap, write and munmap their share of the data, round after round",
    new: |p, _| super::resolved(PthreadMmap::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};

/// The registry entry of `tlb-flush`.
pub const TLB_FLUSH_ENTRY: WorkloadEntry = WorkloadEntry {
    name: "tlb-flush",
    description: "will-it-scale tlb_flush1/2/3: pinned tasks write, MADV_DONTNEED and re-read pages, threads or processes; reports loops_per_s",
    new: |p, _| super::resolved(TlbFlush::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
