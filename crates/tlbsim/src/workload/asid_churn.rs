//! ASID stress for the allocator and the explorer, in few tasks:
//!
//! - process `A` with `threads` threads (the first is the root): thread 0
//!   toggles a shared page read-only and back with mprotect, the others
//!   write it; all yield between steps. A threaded mm is what makes ASID
//!   reservation at rollover matter: its threads must agree on one ASID.
//! - `execers` single-threaded processes, each exec'ing `execs` times (a
//!   new mm, so a new ASID, every time), writing a page and yielding.
//!
//! With more mms than usable ASIDs, rollovers follow. The run ends when
//! every task has finished.

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread};
use crate::kernel::mm::{sys_mmap, sys_mprotect};
use crate::kernel::sched::sys_sched_yield;
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AsidChurn {
    /// Threads of process A (>= 1).
    pub threads: u32,
    /// mprotect round trips of A's thread 0 (and writes of the others).
    pub rounds: u32,
    /// Single-threaded processes that keep exec'ing.
    pub execers: u32,
    /// Execs per such process.
    pub execs: u32,
}

impl Default for AsidChurn {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        AsidChurn {
            threads: 2,
            rounds: 3,
            execers: 2,
            execs: 3,
        }
    }
}

impl AsidChurn {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let a: AsidChurn = parse_params(p)?;
        if a.threads == 0 {
            return Err("`threads` must be >= 1".into());
        }
        Ok(a)
    }
}

/// Driver events per exec of an execer (the exec, its page, its yield,
/// and the yields of the tasks waiting on it): 93 on seed002-explore
/// (arm64) and 70 on seed004-explore-switch (x86) with 300 execs each.
/// Tasks that spin on yields while others run make small runs vary more:
/// one execer alone on a CPU of its own takes 5,454 and 8,346 events.
const EVENTS_PER_EXEC: u64 = 100;
/// Driver events per round of A per thread per CPU its threads run on
/// (A's two mprotects flush the CPUs its writers run on, and each writer
/// spins on its writes and yields meanwhile): fitted at 300 rounds on 2
/// CPUs (2 threads: 32 on arm64, 13 on x86; 4 threads: 13 and 16) and 8
/// CPUs (4 threads, x86: 30).
const EVENTS_PER_ROUND_THREAD_CPU: u64 = 20;
/// Driver events with no rounds and no execs (start and exit): 105 and
/// 90.
const SETUP_EVENTS: u64 = 100;

impl Workload for AsidChurn {
    fn estimate(&self, cpus: u32) -> super::Estimate {
        use super::Figure;
        let threads = u64::from(self.threads);
        let execers = u64::from(self.execers);
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product("threads", &[(SETUP_EVENTS, "events")]),
                Figure::product(
                    "rounds",
                    &[
                        (u64::from(self.rounds), "rounds"),
                        (threads, "threads"),
                        (threads.min(u64::from(cpus)), "CPUs"),
                        (EVENTS_PER_ROUND_THREAD_CPU, "events"),
                    ],
                ),
                Figure::product(
                    "execs",
                    &[
                        (execers, "execers"),
                        (u64::from(self.execs), "execs"),
                        (EVENTS_PER_EXEC, "events"),
                    ],
                ),
            ]),
            live_pages: None,
            // A's threads and the execers.
            tasks: Some(Figure {
                value: threads.saturating_add(execers),
                key: if execers > threads {
                    "execers"
                } else {
                    "threads"
                },
                how: format!("{threads} threads + {execers} execers"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let n = w.ncpus();
        let left = super::shared_cell(self.execers);
        for i in 0..self.execers {
            let (left, execs) = (Rc::clone(&left), self.execs);
            spawn_user(
                w,
                "execer",
                CpuId::from_index((i as usize + 1) % n),
                Box::new(move |ctx: Ctx| {
                    Box::pin(async move {
                        for _ in 0..execs {
                            sys_exec(&ctx).await;
                            let p = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                            ctx.user_access(p, true).await;
                            sys_sched_yield(&ctx).await;
                        }
                        left.set(left.get() - 1);
                    })
                }),
            );
        }
        let me = self.clone();
        spawn_user(
            w,
            "A",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let p = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                    ctx.user_access(p, true).await;
                    let stop = super::shared_cell(false);
                    for _ in 1..me.threads {
                        let stop = Rc::clone(&stop);
                        sys_clone_thread(
                            &ctx,
                            "A-writer",
                            None,
                            Box::new(move |c: Ctx| {
                                Box::pin(async move {
                                    while !stop.get() {
                                        c.user_access(p, true).await;
                                        sys_sched_yield(&c).await;
                                    }
                                })
                            }),
                        )
                        .await;
                    }
                    for _ in 0..me.rounds {
                        sys_mprotect(&ctx, p, PAGE_SIZE, Perms::R).await;
                        sys_sched_yield(&ctx).await;
                        sys_mprotect(&ctx, p, PAGE_SIZE, Perms::RW).await;
                        sys_sched_yield(&ctx).await;
                    }
                    stop.set(true);
                    while sys_wait(&ctx).await.is_some() {}
                    while left.get() > 0 {
                        sys_sched_yield(&ctx).await;
                    }
                })
            }),
        )
    }
}

/// The registry entry of `asid-churn`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "asid-churn",
    description: "allocator stress: a threaded mm toggling a page with mprotect, processes exec'ing new mms, more mms than ASIDs",
    new: |p, _| super::resolved(AsidChurn::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
