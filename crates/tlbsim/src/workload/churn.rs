//! Checker stress for TLB-flush policies (seed 000's safety question): what
//! makes TLB maintenance hard, mixed at random from the seeded stream
//! `churn/*`.
//!
//! - A kernel worker per CPU (`kworker`), woken at random by user tasks, so
//!   idle CPUs run kernel threads while lazily keeping a user mm.
//! - Process `P`: each round its main thread clones `threads` threads (they
//!   come and go) and, while they run, mprotects, madvises and munmaps +
//!   re-mmaps parts of its heap (munmap frees page-table pages). The threads
//!   read and write random heap pages, migrate with `sched_setaffinity`, and
//!   wake kworkers.
//! - Process `Q` (single-threaded): writes a page and a scratch region with
//!   its own page table, migrates to a random CPU, mprotects the page
//!   read-only and back, unmaps the scratch region (freeing its table),
//!   writes again, and wakes a kworker — the case single-user fast paths
//!   optimise, with the CPU it left still holding its tables lazily.

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::{Rng, Streams};
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::engine::track::{Tracked, TrackedCell};
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_kthread, spawn_user, sys_clone_thread, sys_fork};
use crate::kernel::mm::{sys_madvise_dontneed, sys_mmap, sys_mprotect, sys_munmap};
use crate::kernel::sched::{block_until_woken, sys_sched_setaffinity, wake_up};
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Churn {
    /// Rounds of P's main thread.
    pub rounds: u32,
    /// Threads P clones per round.
    pub threads: u32,
    /// Operations per thread.
    pub ops: u32,
    /// Heap pages of P (the first half stays mapped, the second half is
    /// unmapped and re-mapped; it spans its own page-table page).
    pub pages: u64,
    /// Iterations of Q.
    pub q_iterations: u32,
}

impl Default for Churn {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        Churn {
            rounds: 20,
            threads: 3,
            ops: 30,
            pages: 16,
            q_iterations: 200,
        }
    }
}

impl Churn {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let c: Churn = parse_params(p)?;
        if c.pages < 2 {
            return Err("`pages` must be >= 2".into());
        }
        Ok(c)
    }
}

type Kworkers = Rc<Tracked<Vec<TaskId>>>;

async fn wake_random(ctx: &Ctx, kw: &Kworkers, rng: &mut Rng) {
    let n = kw.borrow().len();
    if n > 0 {
        let t = kw.borrow()[rng.gen_range(0..n)];
        wake_up(ctx, t).await;
    }
}

/// 2 MiB: the unmapped half lives under its own PTE table.
const TABLE_SPAN: u64 = 512 * PAGE_SIZE;

/// Driver events per iteration of Q: fitted on the golden seed000-safety
/// (arm64-stock, 4 CPUs; 253,817 events), where 200 more iterations add
/// 221,866 events, 1,109 each. Most are the munmap of the scratch region,
/// whose freed PTE table widens the range flush to about 511 pages: one
/// broadcast TLBI each on arm64 (below `MAX_TLBI_OPS`), one flush of the
/// whole mm on x86 (past its 33-page ceiling), where an iteration is 91
/// events (seed004-safety, x86-tlb-gen). The workload cannot see the
/// kernel, so it keeps arm64's figure: on x86 the estimate is about 8.5
/// times the run, an over-estimate, which errs on the side of refusing.
const EVENTS_PER_Q_ITERATION: u64 = 1_100;
/// Driver events per round of P besides its threads and pages: the map
/// and munmap of the second half's table span (its per-page TLBIs on
/// arm64, as [`EVENTS_PER_Q_ITERATION`]), the madvise and the wake. With
/// the next three, fitted on seed000-safety with `q_iterations = 0`
/// (31,764 events for 20 rounds: 1,580 a round) and variations of each
/// parameter (40 rounds: 1,605 a round; 120 ops: 2.9 events an op; 6
/// threads: 143 a thread; 64 pages: 8.4 a page of the half): 1,084 left
/// for the round itself (58 on x86).
const EVENTS_PER_ROUND: u64 = 1_080;
/// Driver events per thread P clones in a round besides its ops: clone,
/// exit, reap and the two mprotects racing with it (57 on arm64, 82 on
/// x86).
const EVENTS_PER_THREAD: u64 = 70;
/// Driver events per op of a P thread (a touch, a migration or a wake,
/// and the user work after it): 2.9 on arm64, 2.7 on x86.
const EVENTS_PER_OP: u64 = 3;
/// Driver events per page of the half P maps again each round (its first
/// touch, and later the fault of its re-map): 8.4 on arm64, 8.0 on x86.
const EVENTS_PER_HALF_PAGE: u64 = 8;

impl Workload for Churn {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let (threads, ops) = (u64::from(self.threads), u64::from(self.ops));
        let per_thread = EVENTS_PER_THREAD.saturating_add(ops.saturating_mul(EVENTS_PER_OP));
        let per_round = EVENTS_PER_ROUND
            .saturating_add(threads.saturating_mul(per_thread))
            .saturating_add((self.pages / 2).saturating_mul(EVENTS_PER_HALF_PAGE));
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product(
                    "q_iterations",
                    &[
                        (u64::from(self.q_iterations), "Q iterations"),
                        (EVENTS_PER_Q_ITERATION, "events"),
                    ],
                ),
                Figure::product(
                    "rounds",
                    &[(u64::from(self.rounds), "rounds"), (per_round, "events")],
                ),
            ]),
            // P's heap (both halves), Q's page and its scratch page.
            live_pages: Some(Figure {
                value: self.pages.saturating_add(2),
                key: "pages",
                how: format!("{} heap pages + 2 of Q", self.pages),
            }),
            // P, Q, and one round's threads (reaped at its end).
            tasks: Some(Figure {
                value: threads.saturating_add(2),
                key: "threads",
                how: format!("P + Q + {threads} threads"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let kw = spawn_kworkers(w);
        let me = self.clone();
        let streams = *streams;
        spawn_user(
            w,
            "churn",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let q = q_program(Rc::clone(&kw), me.q_iterations, &streams);
                    sys_fork(&ctx, "Q", q).await;
                    p_main(&ctx, &me, &kw, &streams).await;
                })
            }),
        )
    }
}

/// One kworker per CPU, each asleep until woken, then 2 µs of work.
fn spawn_kworkers(w: &Rc<World>) -> Kworkers {
    let kw: Kworkers = super::shared(Vec::new());
    for c in CpuId::all(w.ncpus()) {
        let t = spawn_kthread(
            w,
            "kworker",
            c,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    loop {
                        block_until_woken(&ctx).await;
                        ctx.work(2_000).await;
                    }
                })
            }),
        );
        kw.borrow_mut().push(t);
    }
    kw
}

/// Q: the single-threaded migrating process (`qi` iterations).
fn q_program(kq: Kworkers, qi: u32, streams: &Streams) -> Program {
    let mut rq = streams.stream("churn/q");
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            let n = c.w.ncpus();
            let p = sys_mmap(&c, PAGE_SIZE, Perms::RW).await;
            for _ in 0..qi {
                c.user_access(p, true).await;
                let scratch = sys_mmap(&c, TABLE_SPAN, Perms::RW).await;
                c.user_access(scratch, true).await;
                let to = CpuId::from_index(rq.gen_range(0..n));
                sys_sched_setaffinity(&c, Some(super::only_cpu(&c.w, to))).await;
                sys_mprotect(&c, p, PAGE_SIZE, Perms::R).await;
                c.user_access(p, false).await;
                sys_mprotect(&c, p, PAGE_SIZE, Perms::RW).await;
                sys_munmap(&c, scratch, TABLE_SPAN).await;
                c.user_access(p, true).await;
                wake_random(&c, &kq, &mut rq).await;
                c.user_work(rq.gen_range(200..3_000)).await;
            }
        })
    })
}

/// P's main thread: half the pages mapped and touched, then each round a
/// second half in its own table, `threads` threads cloned while it
/// changes mappings under them, and the round's threads reaped.
async fn p_main(ctx: &Ctx, me: &Churn, kw: &Kworkers, streams: &Streams) {
    let mut rng = streams.stream("churn/main");
    let half = me.pages / 2;
    let heap = sys_mmap(ctx, half * PAGE_SIZE, Perms::RW).await;
    for i in 0..half {
        ctx.user_access(heap + i * PAGE_SIZE, true).await;
    }
    let second = super::shared_cell(0u64);
    for round in 0..me.rounds {
        // Second half in its own table: map and touch.
        let b = sys_mmap(ctx, TABLE_SPAN, Perms::RW).await;
        for i in 0..half {
            ctx.user_access(b + i * PAGE_SIZE, true).await;
        }
        second.set(b);
        for t in 0..me.threads {
            let r = streams.stream(&format!("churn/r{round}/t{t}"));
            let thread = p_thread(Rc::clone(kw), Rc::clone(&second), (heap, half), me.ops, r);
            sys_clone_thread(ctx, "P-thread", None, thread).await;
            // Racing with the new thread: change mappings.
            let i = rng.gen_range(0..half);
            sys_mprotect(ctx, heap + i * PAGE_SIZE, PAGE_SIZE, Perms::R).await;
            ctx.user_work(rng.gen_range(100..1_000)).await;
            sys_mprotect(ctx, heap + i * PAGE_SIZE, PAGE_SIZE, Perms::RW).await;
        }
        let i = rng.gen_range(0..half);
        sys_madvise_dontneed(ctx, heap + i * PAGE_SIZE, PAGE_SIZE).await;
        ctx.user_work(rng.gen_range(1_000..10_000)).await;
        second.set(0);
        sys_munmap(ctx, b, TABLE_SPAN).await;
        wake_random(ctx, kw, &mut rng).await;
        // Reap this round's threads (Q is reaped at the end).
        for _ in 0..me.threads {
            sys_wait(ctx).await;
        }
    }
    while sys_wait(ctx).await.is_some() {}
}

/// A thread of P: `ops` random operations (a migration, a kworker woken,
/// or an access to the heap's `half` pages or the round's second half).
fn p_thread(
    kw: Kworkers,
    second: Rc<TrackedCell<u64>>,
    (heap, half): (u64, u64),
    ops: u32,
    mut r: Rng,
) -> Program {
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            let n = c.w.ncpus();
            for _ in 0..ops {
                match r.gen_range(0..10) {
                    0 => {
                        let to = CpuId::from_index(r.gen_range(0..n));
                        sys_sched_setaffinity(&c, Some(super::only_cpu(&c.w, to))).await;
                    }
                    1 => wake_random(&c, &kw, &mut r).await,
                    k => {
                        let base = if k < 6 || second.get() == 0 {
                            heap
                        } else {
                            second.get()
                        };
                        let va = base + r.gen_range(0..half) * PAGE_SIZE;
                        c.user_access(va, r.gen_bool(0.5)).await;
                    }
                }
                c.user_work(r.gen_range(100..2_000)).await;
            }
        })
    })
}

/// The registry entry of `churn`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "churn",
    description: "checker stress: threads come and go, migrations, lazy CPUs running kworkers, munmap freeing tables",
    new: |p, _| super::resolved(Churn::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
