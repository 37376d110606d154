//! Seed 000's `for-each-cpu.sh ./mprotect-threaded 10000`: a shell forks one
//! copy of the program per CPU and waits for all of them. The program's
//! source was never published; we assume (docs/model.md) this loop body:
//!
//! ```text
//! p = mmap(pages * PAGE_SIZE, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS)
//! write every page                       # populate
//! repeat N times:
//!     mprotect(p, len, PROT_READ);       read every page
//!     mprotect(p, len, PROT_READ|PROT_WRITE); write every page
//! ```
//!
//! On a 5.x arm64 kernel each iteration flushes three times per page: both
//! mprotect calls (`change_protection` flushes whenever it rewrote a PTE)
//! and the write fault that makes the page writable again (private
//! mappings keep PTEs read-only after mprotect before Linux 6.0).

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::mem::Perms;
use crate::hw::CpuId;
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread, sys_fork};
use crate::kernel::mm::{sys_mmap, sys_mprotect, sys_munmap};
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters of the mprotect workload.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Mprotect {
    /// Loop iterations per process.
    #[serde(default = "default_iterations")]
    pub iterations: u64,
    /// Processes; 0 means one per CPU (`nproc`).
    #[serde(default)]
    pub processes: u32,
    /// Pages in the mapping (the kernel's pages, `kernel.page_size_kib`).
    #[serde(default = "one")]
    pub pages: u64,
    /// User-mode work per iteration besides the accesses (ns).
    #[serde(default)]
    pub user_ns_per_iteration: u64,
    /// Threads per process, each running the loop on its own mapping at the
    /// same time (1 = the seed's single-threaded program).
    #[serde(default = "one_u32")]
    pub threads: u32,
}

fn one_u32() -> u32 {
    1
}

fn default_iterations() -> u64 {
    10_000
}
fn one() -> u64 {
    1
}

impl Mprotect {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let m: Mprotect = parse_params(p)?;
        if m.pages == 0 {
            return Err("`pages` must be >= 1".into());
        }
        if m.threads == 0 {
            return Err("`threads` must be >= 1".into());
        }
        Ok(m)
    }
}

/// The per-process loop. `pages` are the kernel's pages (`PAGE_SIZE`,
/// `kernel.page_size_kib`): the program mprotects whole pages, as it
/// must (mprotect needs a page-aligned start).
pub async fn mprotect_loop(ctx: &Ctx, iterations: u64, pages: u64, user_ns: u64) {
    #[allow(non_snake_case)]
    let PAGE_SIZE = ctx.w.granule.page_size();
    let len = pages * PAGE_SIZE;
    let p = sys_mmap(ctx, len, Perms::RW).await;
    for i in 0..pages {
        ctx.user_access(p + i * PAGE_SIZE, true).await;
    }
    for _ in 0..iterations {
        sys_mprotect(ctx, p, len, Perms::R).await;
        for i in 0..pages {
            ctx.user_access(p + i * PAGE_SIZE, false).await;
        }
        sys_mprotect(ctx, p, len, Perms::RW).await;
        for i in 0..pages {
            ctx.user_access(p + i * PAGE_SIZE, true).await;
        }
        if user_ns > 0 {
            ctx.user_work(user_ns).await;
        }
    }
    sys_munmap(ctx, p, len).await;
}

/// Driver events per loop iteration of one thread, besides its pages:
/// with [`EVENTS_PER_PAGE`], fitted to seed000-scaling at 32 CPUs and 500
/// iterations (one page: 47 an iteration, as the golden seed000-mprotect's
/// 15.0 M events for 320,000; 16 pages: 392; 64 pages: 1,497; 4 threads:
/// 47.5 a thread).
pub(super) const EVENTS_PER_ITERATION: u64 = 24;
/// Driver events per page an iteration touches (two accesses, the write
/// fault, the flushes of both mprotects).
pub(super) const EVENTS_PER_PAGE: u64 = 23;

impl Workload for Mprotect {
    fn estimate(&self, cpus: u32) -> super::Estimate {
        use super::Figure;
        let processes = if self.processes == 0 {
            cpus
        } else {
            self.processes
        };
        let (p, t) = (u64::from(processes), u64::from(self.threads));
        let per = EVENTS_PER_ITERATION.saturating_add(EVENTS_PER_PAGE.saturating_mul(self.pages));
        super::Estimate {
            events: Some(Figure::product(
                "iterations",
                &[
                    (p, "processes"),
                    (t, "threads"),
                    (self.iterations, "iterations"),
                    (per, "events"),
                ],
            )),
            live_pages: Some(Figure::product(
                "pages",
                &[(p, "processes"), (t, "threads"), (self.pages, "pages")],
            )),
            // The shell, and each process's threads.
            tasks: Some(Figure::product(
                if t > p || self.processes == 0 {
                    "threads"
                } else {
                    "processes"
                },
                &[(p, "processes"), (t, "threads")],
            ))
            .map(|f| super::Figure {
                value: f.value.saturating_add(1),
                how: format!("1 shell + {}", f.how),
                ..f
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let n = if self.processes == 0 {
            w.ncpus() as u32
        } else {
            self.processes
        };
        let me = self.clone();
        spawn_user(
            w,
            "for-each-cpu.sh",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    for _ in 0..n {
                        let m = me.clone();
                        sys_fork(
                            &ctx,
                            "mprotect-threaded",
                            Box::new(move |c: Ctx| {
                                Box::pin(async move {
                                    sys_exec(&c).await;
                                    for _ in 1..m.threads {
                                        let m = m.clone();
                                        sys_clone_thread(
                                            &c,
                                            "mprotect-thread",
                                            None,
                                            Box::new(move |t: Ctx| {
                                                Box::pin(async move {
                                                    mprotect_loop(
                                                        &t,
                                                        m.iterations,
                                                        m.pages,
                                                        m.user_ns_per_iteration,
                                                    )
                                                    .await;
                                                })
                                            }),
                                        )
                                        .await;
                                    }
                                    mprotect_loop(
                                        &c,
                                        m.iterations,
                                        m.pages,
                                        m.user_ns_per_iteration,
                                    )
                                    .await;
                                    while sys_wait(&c).await.is_some() {}
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

/// The registry entry of `mprotect`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "mprotect",
    description:
        "seed 000: one process per CPU looping over mprotect RO/RW on a small private mapping",
    new: |p, _| super::resolved(Mprotect::from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};
