//! Seed 000's interference question, after QI Fuli's test in the v1 thread
//! (Himeno on one core while another core loops over mprotect): a
//! compute-bound victim process pinned to the last CPU runs `victim_work_ns`
//! of user work, first alone, then while `loaders` unrelated single-threaded
//! processes (pinned to CPUs 0, 1, ...) loop over mprotect as in the
//! `mprotect` workload. Each broadcast TLBI they issue stalls the victim's
//! CPU for `dvm_op_target_stall_ns`. Reports `victim_alone_ns`,
//! `victim_loaded_ns` and `victim_slowdown_pct`.
//!
//! The loaders stop when the loaded victim finishes (a simulation shortcut:
//! the victim's exit is signalled to them directly).

use super::mprotect::mprotect_loop;
use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::engine::track::TrackedCell;
use crate::hw::CpuId;
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_fork};
use crate::kernel::sched::sys_sched_setaffinity;
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Victim {
    /// User work of the victim (ns).
    #[serde(default = "default_work")]
    pub victim_work_ns: u64,
    /// The victim's work is done in chunks of this size (ns); DVM stalls
    /// are charged at chunk boundaries.
    #[serde(default = "default_chunk")]
    pub chunk_ns: u64,
    /// mprotect loader processes; 0 means one per other CPU.
    #[serde(default)]
    pub loaders: u32,
    /// Pages each loader's mapping has.
    #[serde(default = "one")]
    pub pages: u64,
}

fn default_work() -> u64 {
    20_000_000
}
fn default_chunk() -> u64 {
    10_000
}
fn one() -> u64 {
    1
}

impl Victim {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let v: Victim = parse_params(p)?;
        if v.chunk_ns == 0 || v.victim_work_ns == 0 {
            return Err("`victim_work_ns` and `chunk_ns` must be > 0".into());
        }
        if v.pages == 0 {
            return Err("`pages` must be >= 1".into());
        }
        Ok(v)
    }
}

/// Forks the victim; it records its compute time under `metric`.
async fn fork_victim(ctx: &Ctx, v: &Victim, metric: &'static str, stop: Rc<TrackedCell<bool>>) {
    let v = v.clone();
    sys_fork(
        ctx,
        "victim",
        Box::new(move |c: Ctx| {
            Box::pin(async move {
                let last = CpuId::from_index(c.w.ncpus() - 1);
                sys_sched_setaffinity(&c, Some(super::only_cpu(&c.w, last))).await;
                sys_exec(&c).await;
                let t0 = c.now();
                let mut left = v.victim_work_ns;
                while left > 0 {
                    let d = left.min(v.chunk_ns);
                    c.user_work(d).await;
                    left -= d;
                }
                let dt = c.now() - t0;
                c.w.stats
                    .borrow_mut()
                    .metrics
                    .insert(c.w.metric(metric), dt as f64);
                stop.set(true);
            })
        }),
    )
    .await;
}

/// Driver events per chunk of the victim's work (its user-work step),
/// in each of the two phases: `chunk_ns = 100000` has 3,600 fewer events
/// than seed000-victim's 10,000 for its 3,600 fewer chunks.
const EVENTS_PER_CHUNK: u64 = 1;
/// Driver events of a loader per ms of the victim's work, while few
/// loaders run: seed000-victim with 1 and 2 loaders (ampere-32) has 2,130
/// and 2,120 a loader per ms of its 20 ms; seed003-victim-tx2's one loader
/// 1,670 (a slower machine).
const LOADER_EVENTS_PER_MS: u64 = 2_000;
/// Loaders past which their events stop growing: their broadcast TLBIs
/// queue behind each other (one DVM Sync at a time), so seed000-victim
/// with 4, 8 and 16 loaders has the same 152,000 events (in 20 ms), and
/// with 8 on seed003-victim-tx2 104,000.
const SATURATING_LOADERS: u64 = 4;
/// A loader's mprotect loop runs in batches of this many iterations and
/// looks at the victim only between them: each does at least one, which
/// with many loaders is most of the run (seed003-victim-tx2's 63 loaders:
/// 270,230 events, about one batch each).
const BATCH_ITERATIONS: u64 = 100;

impl Workload for Victim {
    /// The victim's chunks, alone and loaded, and the loaders' mprotect
    /// loops: at least one batch each, or while the victim works, at the
    /// rate of at most four loaders (`SATURATING_LOADERS`), whichever is
    /// more.
    fn estimate(&self, cpus: u32) -> super::Estimate {
        use super::mprotect::{EVENTS_PER_ITERATION, EVENTS_PER_PAGE};
        use super::Figure;
        let others = u64::from(cpus.saturating_sub(1));
        let loaders = if self.loaders == 0 {
            others
        } else {
            u64::from(self.loaders).min(others)
        };
        let chunks = Figure::product(
            "chunk_ns",
            &[
                (2, "phases"),
                (self.victim_work_ns.div_ceil(self.chunk_ns), "chunks"),
                (EVENTS_PER_CHUNK, "events"),
            ],
        );
        let per_iteration =
            EVENTS_PER_ITERATION.saturating_add(EVENTS_PER_PAGE.saturating_mul(self.pages));
        let batches = Figure::product(
            "loaders",
            &[
                (loaders, "loaders"),
                (BATCH_ITERATIONS, "iterations"),
                (per_iteration, "events"),
            ],
        );
        let busy = Figure::product(
            "victim_work_ns",
            &[
                (loaders.min(SATURATING_LOADERS), "loaders at full rate"),
                (self.victim_work_ns.div_ceil(1_000_000), "ms"),
                (LOADER_EVENTS_PER_MS, "events"),
            ],
        );
        let loading = if batches.value >= busy.value {
            batches
        } else {
            busy
        };
        super::Estimate {
            events: Figure::sum(vec![chunks, loading]),
            live_pages: Some(Figure::product(
                "pages",
                &[(loaders, "loaders"), (self.pages, "pages")],
            )),
            // The shell, the victim and the loaders.
            tasks: Some(Figure {
                value: loaders.saturating_add(2),
                key: "loaders",
                how: format!("shell + victim + {loaders} loaders"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "victim-shell",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let n = ctx.w.ncpus();
                    let loaders = if me.loaders == 0 {
                        n.saturating_sub(1)
                    } else {
                        (me.loaders as usize).min(n.saturating_sub(1))
                    };
                    // Phase 1: alone.
                    fork_victim(&ctx, &me, "victim_alone_ns", super::shared_cell(false)).await;
                    while sys_wait(&ctx).await.is_some() {}
                    // Phase 2: with the loaders.
                    let stop = super::shared_cell(false);
                    for i in 0..loaders {
                        let stop = Rc::clone(&stop);
                        let pages = me.pages;
                        sys_fork(
                            &ctx,
                            "mprotect-loader",
                            Box::new(move |c: Ctx| {
                                Box::pin(async move {
                                    let only = super::only_cpu(&c.w, CpuId::from_index(i));
                                    sys_sched_setaffinity(&c, Some(only)).await;
                                    sys_exec(&c).await;
                                    while !stop.get() {
                                        mprotect_loop(&c, 100, pages, 0).await;
                                    }
                                })
                            }),
                        )
                        .await;
                    }
                    fork_victim(&ctx, &me, "victim_loaded_ns", Rc::clone(&stop)).await;
                    while sys_wait(&ctx).await.is_some() {}
                    let mut st = ctx.w.stats.borrow_mut();
                    let w = &ctx.w;
                    let a = st.metrics.get(&w.metric("victim_alone_ns")).copied();
                    let l = st.metrics.get(&w.metric("victim_loaded_ns")).copied();
                    if let (Some(a), Some(l)) = (a.filter(|&a| a > 0.0), l) {
                        st.metrics
                            .insert(w.metric("victim_slowdown_pct"), (l / a - 1.0) * 100.0);
                    }
                })
            }),
        )
    }
}

/// The registry entry of `victim`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "victim",
    description: "seed 000: a compute-bound victim on the last CPU, alone and beside mprotect loops; reports victim_slowdown_pct",
    new: |p, _| super::resolved(Victim::from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};
