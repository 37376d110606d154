//! Checker stress for `MADV_COLLAPSE` (khugepaged's collapse of a file
//! THP, `kernel/mm/khugepaged.rs`): the main thread (CPU 0) maps a file
//! whose page cache holds PMD-sized folios (`[kernel] file_large_folios =
//! "pmd"`), one PMD of it, and loops: `mprotect(PROT_NONE)` of its first
//! page (the VMA is split, so the PMD mapping goes and the VMAs can no
//! longer hold one), a read of the last page (mapped by a PTE, in a new
//! PTE table), `mprotect(PROT_READ)` of the first page again (the VMAs
//! merge), a read of it (another PTE), then `MADV_COLLAPSE` (the table is
//! retracted and freed, the PMD mapping restored). Threads on the other CPUs read the range and
//! sleep (`schedule_hrtimeout()`), so their CPUs go idle with the mm still
//! loaded (lazily, on x86) and their walk caches pointing at the table.
//! With `reader_gup_fast = true` a reader also looks its page up with
//! GUP-fast (`get_user_pages_fast()`, a lockless walk with interrupts off)
//! before it sleeps.

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::{Rng, Streams};
use crate::engine::track::TrackedCell;
use crate::hw::mem::Perms;
use crate::hw::CpuId;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread};
use crate::kernel::hrtimer::schedule_hrtimeout;
use crate::kernel::mm::filemap::{filemap_read, sys_create_file, sys_mmap_file};
use crate::kernel::mm::gup::get_user_pages_fast;
use crate::kernel::mm::khugepaged::sys_madvise_collapse;
use crate::kernel::mm::sys_mprotect;
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Collapse {
    /// Threads including the main one (each pinned to CPU i).
    #[serde(default = "two")]
    pub threads: u32,
    /// Rounds of the main thread.
    #[serde(default = "three")]
    pub iterations: u64,
    /// Mean sleep of a reader between its reads (ns), drawn uniformly from
    /// 0.5x..1.5x of it from the seeded stream `collapse/readerN`.
    #[serde(default = "sleep_ns")]
    pub sleep_ns: u64,
    /// Readers also walk to their page with GUP-fast.
    #[serde(default)]
    pub reader_gup_fast: bool,
}

fn two() -> u32 {
    2
}
fn three() -> u64 {
    3
}
fn sleep_ns() -> u64 {
    2000
}

/// Driver events per round of the main thread and per thread (its
/// mprotects, faults, collapse and flushes; a reader's read and sleep):
/// 43 on `experiments/bugs/collapse-lazy.toml` (330 events at 3
/// iterations, 2,902 at 33, 2 threads).
const EVENTS_PER_THREAD_ROUND: u64 = 40;

impl Collapse {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let c: Collapse = parse_params(p)?;
        if c.threads == 0 {
            return Err("`threads` must be >= 1".into());
        }
        Ok(c)
    }
}

impl Workload for Collapse {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let t = u64::from(self.threads);
        super::Estimate {
            events: Some(Figure::product(
                "iterations",
                &[
                    (t, "threads"),
                    (self.iterations, "iterations"),
                    (EVENTS_PER_THREAD_ROUND, "events"),
                ],
            )),
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
            "collapse",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let g = ctx.w.granule;
                    let pmd = g.pmd_size();
                    let file = sys_create_file(&ctx, pmd).await;
                    filemap_read(&ctx, file).await;
                    let p = sys_mmap_file(&ctx, file, pmd, Perms::R, true).await;
                    ctx.user_access(p, false).await;
                    let done = super::shared_cell(false);
                    for i in 1..me.threads {
                        let rng = streams.stream(&format!("collapse/reader{i}"));
                        let home = CpuId::new(i % n);
                        let r = reader(&me, p, Rc::clone(&done), rng);
                        sys_clone_thread(&ctx, "reader", Some(home), r).await;
                    }
                    let (page, last) = (g.page_size(), p + pmd - g.page_size());
                    for _ in 0..me.iterations {
                        sys_mprotect(&ctx, p, page, Perms::NONE).await;
                        ctx.user_access(last, false).await;
                        sys_mprotect(&ctx, p, page, Perms::R).await;
                        ctx.user_access(p, false).await;
                        sys_madvise_collapse(&ctx, p, pmd).await;
                        ctx.user_access(p, false).await;
                    }
                    done.set(true);
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// A reader: until `done`, reads the mapping's last page and sleeps.
fn reader(me: &Collapse, p: u64, done: Rc<TrackedCell<bool>>, mut rng: Rng) -> Program {
    let (sleep, gup) = (me.sleep_ns, me.reader_gup_fast);
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            let last = p + c.w.granule.pmd_size() - c.w.granule.page_size();
            while !done.get() {
                c.user_access(last, false).await;
                if gup {
                    get_user_pages_fast(&c, last).await;
                }
                schedule_hrtimeout(&c, sleep / 2 + rng.gen_range(0..=sleep)).await;
            }
        })
    })
}

/// The registry entry of `collapse`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "collapse",
    description: "checker stress: MADV_COLLAPSE of a file THP split by MADV_DONTNEED, readers sleeping between reads",
    new: |p, _| super::resolved(Collapse::from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};
