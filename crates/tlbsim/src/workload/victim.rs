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
use crate::hw::cpumask::CpuMask;
use crate::kernel::sched::{spawn_user, sys_exec, sys_fork, sys_sched_setaffinity, sys_wait};
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

fn pin(ncpus: usize, cpu: usize) -> Option<CpuMask> {
    let mut m = CpuMask::new(ncpus);
    m.set(cpu);
    Some(m)
}

/// Forks the victim; it records its compute time under `metric`.
async fn fork_victim(ctx: &Ctx, v: &Victim, metric: &'static str, stop: Rc<TrackedCell<bool>>) {
    let v = v.clone();
    sys_fork(
        ctx,
        "victim",
        Box::new(move |c: Ctx| {
            Box::pin(async move {
                let n = c.w.ncpus();
                sys_sched_setaffinity(&c, pin(n, n - 1)).await;
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

impl Workload for Victim {
    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "victim-shell",
            0,
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
                                    let n = c.w.ncpus();
                                    sys_sched_setaffinity(&c, pin(n, i)).await;
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
    new: |p| super::resolved(Victim::from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};
