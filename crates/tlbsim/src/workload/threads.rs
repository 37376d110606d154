//! Multi-threaded stress of one address space, for the checker: thread 0
//! changes mappings while the other threads (each pinned to its own CPU)
//! keep reading and writing them (alternately; denied writes are ignored), so stale translations on other CPUs matter.
//!
//! - `op = "mprotect"`: thread 0 loops `mprotect(RO)`, read, `mprotect(RW)`,
//!   write on one page; the others read it.
//! - `op = "munmap"`: thread 0 loops `mmap`, write, publish, `munmap` (which
//!   frees the page-table page); the others read the published page.
//! - `op = "madvise"`: thread 0 loops write, `madvise(MADV_DONTNEED)` on
//!   one page (the frame is freed, the next touch faults in a new one).
//! - `op = "thp-zero"`: thread 0 loops write a page of its own (an
//!   allocation, which wakes kswapd under `[kernel] memory_limit_pages`),
//!   read a PMD-aligned 2 MiB of anonymous memory (with `[kernel] thp =
//!   "always"` and the huge zero page on, it maps the huge zero page),
//!   then `madvise(MADV_DONTNEED)` it; the others only read it.
//! - `op = "madvise-pmd"`: thread 0 loops write a page of a PMD-aligned
//!   2 MiB, `madvise(MADV_DONTNEED)` of that page (its PTE table is left
//!   empty), then of the whole 2 MiB (with `[kernel] pt_reclaim`, the
//!   empty table is freed); the others read the page while it is
//!   published (between the write and the first madvise).
//! - `op = "clear-refs"`: thread 0 loops write, clearing the soft-dirty
//!   state of the mm (`/proc/self/clear_refs`, which write-protects every
//!   PTE); the others read and write the page (a write after the clearing
//!   faults and makes it writable again).
//! - `op = "migrate-device"`: thread 0 loops write, then moves the page
//!   into device memory (the test_hmm driver's `HMM_DMIRROR_MIGRATE`
//!   ioctl: `migrate_vma_setup()` and the rest); the others read or write
//!   it and drop it with `madvise(MADV_DONTNEED)` after each access.
//! - `hogs = true`: before the readers start, a process is forked for
//!   each reader CPU and pinned there, sleeping a microsecond at a time
//!   until thread 0 is done, and each reader yields after each access: the
//!   readers' CPUs switch between the threaded mm and another one instead
//!   of idling (no lazy TLB mode, so every switch is a `switch_mm()` from
//!   one user mm to the other).
//! - `kthread_readers = true`: the readers are kernel threads that adopt
//!   the address space with `kthread_use_mm()` (as io_uring's SQPOLL
//!   thread does; thread 0 takes an `mm_users` reference for each before
//!   it starts, which the thread drops with `mmput()` after
//!   `kthread_unuse_mm()`), then access the page as the user readers do.
//! - `reader_dontneed = true`: each reader also drops a page of its own
//!   with `madvise(MADV_DONTNEED)` after each access (under the mmap_lock
//!   for reading, so its gathers can nest with thread 0's): the pages lie
//!   in a 4 MiB mapping made before the readers start, PMD-aligned when
//!   the address space is empty above it, so that thread 0's mappings do
//!   not share its page tables.

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::{Rng, Streams};
use crate::engine::track::TrackedCell;
use crate::hw::cpumask::CpuMask;
use crate::hw::mem::Perms;
use crate::hw::CpuId;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{mmput, spawn_user, sys_clone_thread, sys_fork};
use crate::kernel::hrtimer::schedule_hrtimeout;
use crate::kernel::kthread::{kthread_run_on_cpu, kthread_unuse_mm, kthread_use_mm};
use crate::kernel::mm::migrate_device::sys_dmirror_migrate;
use crate::kernel::mm::{sys_madvise_dontneed, sys_mmap, sys_mprotect, sys_munmap};
use crate::kernel::sched::{sys_sched_setaffinity, sys_sched_yield};
use crate::kernel::task_mmu::sys_clear_refs_soft_dirty;
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Threads {
    /// Threads including the one changing mappings (each pinned to CPU i).
    #[serde(default = "two")]
    pub threads: u32,
    /// Iterations of thread 0.
    #[serde(default = "hundred")]
    pub iterations: u64,
    /// `"mprotect"`, `"munmap"`, `"madvise"`, `"madvise-pmd"`,
    /// `"clear-refs"`, `"thp-zero"` or `"migrate-device"` (module doc).
    #[serde(default = "default_op")]
    pub op: String,
    /// Mean user work between a reader's accesses (ns); each gap is drawn
    /// uniformly from 0.5x..1.5x of it from the seeded stream
    /// `threads/readerN`.
    #[serde(default = "reader_ns")]
    pub reader_gap_ns: u64,
    /// Readers hop between two CPUs (their own and the next free one)
    /// after every access, so they keep leaving and re-entering the mm:
    /// the switch-in races with thread 0's flushes.
    #[serde(default)]
    pub reader_hop: bool,
    /// Readers also `MADV_DONTNEED` a page of their own after each access.
    /// Left out of the resolved parameters when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reader_dontneed: bool,
    /// A sleeping process on each reader's CPU, and readers that yield.
    /// Left out of the resolved parameters when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hogs: bool,
    /// Readers are kernel threads using the mm (`kthread_use_mm()`).
    /// Left out of the resolved parameters when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kthread_readers: bool,
}

fn two() -> u32 {
    2
}
fn hundred() -> u64 {
    100
}
fn default_op() -> String {
    "mprotect".into()
}
fn reader_ns() -> u64 {
    300
}

impl Threads {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let t: Threads = parse_params(p)?;
        if t.threads == 0 {
            return Err("`threads` must be >= 1".into());
        }
        if ![
            "mprotect",
            "munmap",
            "madvise",
            "madvise-pmd",
            "clear-refs",
            "thp-zero",
            "migrate-device",
        ]
        .contains(&t.op.as_str())
        {
            return Err(format!(
                "`op` must be mprotect, munmap, madvise, madvise-pmd, clear-refs, thp-zero or migrate-device, not \"{}\"",
                t.op
            ));
        }
        Ok(t)
    }
}

/// What thread 0 maps before its rounds, by op.
#[derive(Debug, Clone, Copy, Default)]
struct Mappings {
    /// `thp-zero`: a page of thread 0's own (its writes allocate).
    scratch: u64,
    /// `madvise-pmd`: the PMD-aligned 2 MiB.
    region: u64,
}

impl Mappings {
    /// Maps what `me.op` needs; publishes the shared page in `page` for
    /// the ops whose page lives across rounds.
    async fn new(ctx: &Ctx, me: &Threads, page: &TrackedCell<u64>) -> Self {
        let (page_size, pmd) = (ctx.w.granule.page_size(), ctx.w.granule.pmd_size());
        let mut m = Mappings::default();
        match me.op.as_str() {
            "munmap" => {}
            "madvise-pmd" => {
                m.region = sys_mmap(ctx, 2 * pmd, Perms::RW)
                    .await
                    .next_multiple_of(pmd);
            }
            "thp-zero" => {
                m.scratch = sys_mmap(ctx, page_size, Perms::RW).await;
                let region = sys_mmap(ctx, 2 * pmd, Perms::RW).await;
                page.set(region.next_multiple_of(pmd));
            }
            _ => {
                let p = sys_mmap(ctx, page_size, Perms::RW).await;
                ctx.user_access(p, true).await;
                page.set(p);
            }
        }
        m
    }
}

/// One round of thread 0 (its op; the module doc says what each does).
async fn thread0_round(ctx: &Ctx, me: &Threads, page: &TrackedCell<u64>, m: Mappings) {
    let (page_size, pmd) = (ctx.w.granule.page_size(), ctx.w.granule.pmd_size());
    match me.op.as_str() {
        "mprotect" => {
            let p = page.get();
            sys_mprotect(ctx, p, page_size, Perms::R).await;
            ctx.user_access(p, false).await;
            sys_mprotect(ctx, p, page_size, Perms::RW).await;
            ctx.user_access(p, true).await;
            ctx.user_work(me.reader_gap_ns).await;
        }
        "madvise-pmd" => {
            ctx.user_access(m.region, true).await;
            page.set(m.region);
            ctx.user_work(me.reader_gap_ns * 3).await;
            page.set(0);
            sys_madvise_dontneed(ctx, m.region, page_size).await;
            sys_madvise_dontneed(ctx, m.region, pmd).await;
        }
        "thp-zero" => {
            let p = page.get();
            ctx.user_access(m.scratch, true).await;
            ctx.user_access(p, false).await;
            ctx.user_work(me.reader_gap_ns * 3).await;
            sys_madvise_dontneed(ctx, p, pmd).await;
        }
        // Write the page, give the readers time, then the op's call.
        op @ ("clear-refs" | "madvise" | "migrate-device") => {
            let p = page.get();
            ctx.user_access(p, true).await;
            ctx.user_work(me.reader_gap_ns * 3).await;
            match op {
                "clear-refs" => sys_clear_refs_soft_dirty(ctx).await,
                "madvise" => sys_madvise_dontneed(ctx, p, page_size).await,
                _ => {
                    sys_dmirror_migrate(ctx, p, page_size).await;
                }
            }
        }
        _ => {
            let p = sys_mmap(ctx, page_size, Perms::RW).await;
            ctx.user_access(p, true).await;
            page.set(p);
            ctx.user_work(me.reader_gap_ns * 3).await;
            page.set(0);
            sys_munmap(ctx, p, page_size).await;
        }
    }
}

/// The readers' own mapping with `reader_dontneed`, in bytes: what is
/// left of it from its first PMD boundary on.
const READER_PAGES_BYTES: u64 = 2 << 20;

/// Maps the readers' pages (`reader_dontneed`): `READER_PAGES_BYTES` from
/// a PMD boundary, the part of a larger mapping below the boundary
/// unmapped again, so that no PTE table of theirs also covers mappings
/// made later below them (thread 0's, which munmap then frees whole).
async fn readers_mapping(ctx: &Ctx) -> u64 {
    let pmd = ctx.w.granule.pmd_size();
    let len = READER_PAGES_BYTES.max(pmd) + pmd;
    let p = sys_mmap(ctx, len, Perms::RW).await;
    let aligned = p.next_multiple_of(pmd);
    if aligned > p {
        sys_munmap(ctx, p, aligned - p).await;
    }
    aligned
}

/// Driver events per thread per iteration of thread 0 when the readers
/// hop to another CPU after each access (`reader_hop`, and `threads` not
/// a multiple of the CPUs, so that a reader's two CPUs differ): each of
/// thread 0's iterations (two mprotects and their flushes, or an mmap and
/// a munmap) lasts a few reader loops, and a reader's migration makes its
/// loop slow. Fitted at 300 iterations: 37 a thread on seed000-switch-race
/// (arm64, 4 CPUs), 33 to 41 at 2 to 8 threads on 16 CPUs (arm64 and
/// x86), 15 on seed004-explore (x86, 3 CPUs, where the reader hops onto
/// thread 0's CPU); the op changes it by less than 1.5x.
const EVENTS_PER_THREAD_ITERATION_HOPPING: u64 = 30;
/// As [`EVENTS_PER_THREAD_ITERATION_HOPPING`] when the readers stay on
/// their CPU (no `reader_hop`, or every CPU taken so that a reader's hop
/// lands where it is): their loops are faster. Fitted at 300 iterations:
/// 77 a thread on seed004-explore-ipis (x86, 3 threads on 3 CPUs), 56 per
/// VM on seed003-vm-race and seed003-vm-move (2 threads on 2 vCPUs), 56
/// and 58 without hops, 66 and 93 with 16 threads on 16 CPUs (arm64,
/// x86). `reader_gap_ns` moves it too (from 0 to 3,000 ns, 2.2 times to
/// half the default's on x86).
const EVENTS_PER_THREAD_ITERATION_STAYING: u64 = 70;
/// Driver events before thread 0's first iteration, per thread squared:
/// it clones the readers one after another and each loops from its
/// start. Fitted on 3 iterations at 2 to 16 threads on 16 CPUs (117,
/// 272, 885 and 11,700 events before the first iteration) and the
/// explorer experiments (36 to 200).
const SETUP_EVENTS_PER_THREAD_SQUARED: u64 = 20;

impl Workload for Threads {
    fn estimate(&self, cpus: u32) -> super::Estimate {
        use super::Figure;
        let t = u64::from(self.threads);
        let hopping = self.reader_hop && !self.threads.is_multiple_of(cpus.max(1));
        let per = if hopping {
            EVENTS_PER_THREAD_ITERATION_HOPPING
        } else {
            EVENTS_PER_THREAD_ITERATION_STAYING
        };
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product(
                    "threads",
                    &[
                        (t.saturating_mul(t), "threads squared"),
                        (SETUP_EVENTS_PER_THREAD_SQUARED, "events"),
                    ],
                ),
                Figure::product(
                    "iterations",
                    &[
                        (t, "threads"),
                        (self.iterations, "iterations"),
                        (per, "events"),
                    ],
                ),
            ]),
            live_pages: None,
            tasks: Some(Figure::product("threads", &[(t, "threads")])),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let me = self.clone();
        let n = w.ncpus() as u32;
        let streams = *streams;
        spawn_user(
            w,
            "threads",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    // The page the threads share: one kernel page.
                    #[allow(non_snake_case)]
                    let PAGE_SIZE = ctx.w.granule.page_size();
                    let done = super::shared_cell(false);
                    let page = super::shared_cell(0u64);
                    let own = if me.reader_dontneed {
                        readers_mapping(&ctx).await
                    } else {
                        0
                    };
                    let maps = Mappings::new(&ctx, &me, &page).await;
                    if me.hogs {
                        start_hogs(&ctx, &me, &done).await;
                    }
                    for i in 1..me.threads {
                        let cells = (Rc::clone(&done), Rc::clone(&page));
                        let rng = streams.stream(&format!("threads/reader{i}"));
                        let home = CpuId::new(i % n);
                        let slot = u64::from(i) % (READER_PAGES_BYTES / PAGE_SIZE);
                        let mine = (own != 0).then(|| own + slot * PAGE_SIZE);
                        let reader = reader(&me, (i, mine), n, cells, rng);
                        if me.kthread_readers {
                            spawn_kthread_reader(&ctx, home, reader).await;
                        } else {
                            sys_clone_thread(&ctx, "reader", Some(home), reader).await;
                        }
                    }
                    for _ in 0..me.iterations {
                        thread0_round(&ctx, &me, &page, maps).await;
                    }
                    done.set(true);
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// `kthread_readers`: a kernel thread on `home` that runs `reader` between
/// `kthread_use_mm()` and `kthread_unuse_mm()` of the caller's mm; the
/// caller takes the `mm_users` reference it holds (`mmget()`), which it
/// drops at the end (`mmput()`).
async fn spawn_kthread_reader(ctx: &Ctx, home: CpuId, reader: Program) {
    let w = &ctx.w;
    let mm = ctx.mm().expect("a user task");
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm].users += 1).await; // mmget()
    let program: Program = Box::new(move |c: Ctx| {
        Box::pin(async move {
            kthread_use_mm(&c, mm).await;
            reader(c.clone()).await;
            kthread_unuse_mm(&c, mm).await;
            mmput(&c, mm).await;
        })
    });
    kthread_run_on_cpu(ctx, "io_uring-sq", home, program).await;
}

/// How long a hog sleeps between its turns (ns): long enough that a
/// reader's loop runs between them in the timing driver.
const HOG_SLEEP_NS: u64 = 1000;

/// Forks `hogs`' processes: one on each reader's home CPU, sleeping
/// [`HOG_SLEEP_NS`] at a time until `done` (so a reader's `sched_yield()`
/// switches to it when it is awake, and its CPU never idles while the
/// reader is runnable).
async fn start_hogs(ctx: &Ctx, me: &Threads, done: &Rc<TrackedCell<bool>>) {
    let n = ctx.w.ncpus() as u32;
    let mut homes: Vec<u32> = (1..me.threads).map(|i| i % n).collect();
    homes.sort_unstable();
    homes.dedup();
    for home in homes {
        let d = Rc::clone(done);
        let cpu = CpuId::new(home);
        let program: Program = Box::new(move |c: Ctx| {
            Box::pin(async move {
                let only = super::only_cpu(&c.w, cpu);
                sys_sched_setaffinity(&c, Some(only)).await;
                while !d.get() {
                    schedule_hrtimeout(&c, HOG_SLEEP_NS).await;
                }
            })
        });
        sys_fork(ctx, "hog", program).await;
    }
}

/// Reader `i` of `n` CPUs' worth: until `done`, it reads and writes the
/// shared `page` by turns (denied writes ignored), hopping between its
/// home CPU and another with `reader_hop`, a jittered gap apart.
fn reader(
    me: &Threads,
    (i, mine): (u32, Option<u64>),
    n: u32,
    (done, page): (Rc<TrackedCell<bool>>, Rc<TrackedCell<u64>>),
    mut rng: Rng,
) -> Program {
    let (gap, hop, hogs) = (me.reader_gap_ns, me.reader_hop, me.hogs);
    // thp-zero's readers only read: a write would replace the huge zero
    // page by a copy of their own.
    let writes = me.op != "thp-zero";
    // migrate-device's readers drop the page after each access.
    let drops = me.op == "migrate-device";
    let home = CpuId::new(i % n);
    let away = CpuId::new((i + me.threads) % n);
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            let mut write = false;
            let ncpu = c.w.ncpus();
            let mut at_home = true;
            while !done.get() {
                let p = page.get();
                if p != 0 {
                    // Denied writes (page read-only) are ignored.
                    c.user_access(p, write).await;
                    if drops {
                        sys_madvise_dontneed(&c, p, c.w.granule.page_size()).await;
                    }
                }
                write = !write && writes;
                if hogs {
                    sys_sched_yield(&c).await;
                }
                if let Some(m) = mine {
                    c.user_access(m, true).await;
                    sys_madvise_dontneed(&c, m, c.w.granule.page_size()).await;
                }
                if hop {
                    at_home = !at_home;
                    let mut m = CpuMask::new(ncpu);
                    m.set(if at_home { home } else { away });
                    sys_sched_setaffinity(&c, Some(m)).await;
                }
                // Jittered gap (0.5x..1.5x): the seed picks the interleaving.
                c.user_work(gap / 2 + rng.gen_range(0..=gap)).await;
            }
        })
    })
}

/// The registry entry of `threads`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "threads",
    description:
        "checker stress: thread 0 mprotects or munmaps while pinned threads on other CPUs read",
    new: |p, _| super::resolved(Threads::from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};
