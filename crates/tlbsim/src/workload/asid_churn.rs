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
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::mm::{sys_mmap, sys_mprotect};
use crate::kernel::sched::{spawn_user, sys_clone_thread, sys_exec, sys_sched_yield, sys_wait};
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AsidChurn {
    /// Threads of process A (>= 1).
    #[serde(default = "d_threads")]
    pub threads: u32,
    /// mprotect round trips of A's thread 0 (and writes of the others).
    #[serde(default = "d_rounds")]
    pub rounds: u32,
    /// Single-threaded processes that keep exec'ing.
    #[serde(default = "d_execers")]
    pub execers: u32,
    /// Execs per such process.
    #[serde(default = "d_execs")]
    pub execs: u32,
}

fn d_threads() -> u32 {
    2
}
fn d_rounds() -> u32 {
    3
}
fn d_execers() -> u32 {
    2
}
fn d_execs() -> u32 {
    3
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

impl Workload for AsidChurn {
    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let n = w.ncpus();
        let left = super::shared_cell(self.execers);
        for i in 0..self.execers {
            let (left, execs) = (Rc::clone(&left), self.execs);
            spawn_user(
                w,
                "execer",
                (i as usize + 1) % n,
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
            0,
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
    new: |p| super::resolved(AsidChurn::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
