//! Checker stress for reclaim: the main thread (CPU 0) pages a small
//! anonymous mapping (shared unless `shared = false`) out with `madvise(MADV_PAGEOUT)` again and
//! again while other tasks, each pinned to its own CPU, fault its pages
//! back in and use them, so the page-out's unmap and flush race with
//! translations cached on other CPUs.
//!
//! - `op = "touch"`: the users write and read each page in turn.
//! - `op = "read"`: they only read (a page they fault back in is mapped
//!   read-only: its PTE is clean).
//! - `op = "read-page"`: each only reads its page (user `i` page `(i - 1)
//!   % pages`), so it faults only when reclaim took that page.
//! - `op = "mprotect"`: they also `mprotect` the range read-only and back
//!   each round.
//! - `op = "read-mprotect"`: they only read each page and `mprotect` the
//!   range read-only and back each round (a page they fault back in has a
//!   clean PTE, so reclaim defers its flush to the end of its list instead
//!   of flushing before the page's write-out).
//! - `op = "mprotect-page"`: they `mprotect` one page each (user `i` page
//!   `(i - 1) % pages`) read-only and back, so that a reclaim that cleared
//!   that page leaves the call nothing to change (and nothing of its own
//!   to flush).
//! - `op = "none-page"`: each makes its page `PROT_NONE` once, then only
//!   waits (reclaim then unmaps a PTE no TLB may hold: `pte_accessible()`
//!   is false, and no flush is deferred for it).
//! - `op = "dontneed-page"`: each drops its page with
//!   `madvise(MADV_DONTNEED)` (under the mmap_lock for reading, so threads
//!   zap concurrently) instead of mprotecting it.
//! - `fork = false`: the users are threads of the process, whose page-out
//!   holds the `mmap_lock` they need for `mprotect` (so the page-out's
//!   deferred flush is done before their `mprotect` starts).
//! - `fork = true`: the users are forked child processes (other address
//!   spaces mapping the same object, each with its own `mmap_lock`): a
//!   page a child maps is skipped by the page-out, or unmapped from both
//!   if the child mapped it after the parent's scan, and the child's
//!   `mprotect` can run while the parent's flush is still deferred.
//! - `stride_pages = N`: only every N-th page of a mapping N times longer
//!   is used (512: each in its own PTE table, so their page-table locks
//!   differ).
//! - `advice = "cold"`: the main thread's madvise is `MADV_COLD` (with
//!   kswapd reclaiming, the pages it marks are taken first); `advice =
//!   "free"`: `MADV_FREE` on private memory (`shared = false`): kswapd
//!   drops the pages nobody wrote since, and keeps the others.
//! - `migrate = true`: the main thread also migrates its pages between
//!   NUMA nodes 0 and 1 each iteration (`migrate_pages(2)` on itself), so
//!   migration's unmaps race the users too.
//! - `mremap = true`: after each page-out (if any) the main thread moves
//!   the mapping elsewhere (`mremap(MREMAP_MAYMOVE)`); thread users follow
//!   it to its new address (an access that lands on the old one in between
//!   faults and is dropped), forked children keep their own mapping. With
//!   kswapd reclaiming (`madvise = false`, `[kernel] memory_limit_pages`),
//!   this is the race of CVE-2018-18281 (`kernel/mm/mremap.rs`).
//! - `mremap_fixed = "pmd"` (with `mremap`, a mapping of one `PMD_SIZE`
//!   at 4 KiB pages: `pages x stride_pages = 512`): the main thread moves
//!   it with `MREMAP_FIXED` to `PMD_SIZE`-aligned addresses, 1 GiB and 1
//!   GiB + 4 MiB in turn, so each move after the first moves its PTE
//!   table whole (`move_normal_pmd()`); with kswapd reclaiming, the race of
//!   CVE-2022-41222. `"pud"`: a mapping of one `PUD_SIZE` (`pages x
//!   stride_pages = 262144`) moved between 64 GiB and 66 GiB, its PMD
//!   table moving whole (`move_normal_pud()`). Both counts are of 4 KiB
//!   pages: with a larger granule the moves are not of whole tables.
//! - `shared = false`: the mapping is private anonymous memory: reclaim
//!   leaves swap entries in the PTEs, migration leaves migration entries,
//!   and forked children share its pages copy-on-write (and its swap
//!   entries) until they write them.

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::engine::track::TrackedCell;
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_clone_thread, sys_fork};
use crate::kernel::mm::madvise::{sys_madvise_cold, sys_madvise_free, sys_madvise_pageout};
use crate::kernel::mm::migrate::sys_migrate_pages;
use crate::kernel::mm::mremap::{sys_mremap, sys_mremap_fixed};
use crate::kernel::mm::shmem::sys_mmap_shared;
use crate::kernel::mm::swap::PageData;
use crate::kernel::mm::{sys_madvise_dontneed, sys_mmap_private, sys_mprotect, sys_munmap};
use crate::kernel::sched::sys_sched_setaffinity;
use crate::kernel::{Ctx, Program, TaskId, World};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PageoutRace {
    /// Pages of the shared mapping.
    #[serde(default = "two")]
    pub pages: u64,
    /// `MADV_PAGEOUT` calls of the main thread.
    #[serde(default = "three")]
    pub iterations: u64,
    /// Tasks using the pages besides the main thread, task `i` pinned to
    /// CPU `i` (modulo the CPUs).
    #[serde(default = "one")]
    pub users: u32,
    /// `"touch"`, `"read"`, `"read-page"`, `"mprotect"`, `"mprotect-page"`
    /// or `"dontneed-page"` (module doc).
    #[serde(default = "default_op")]
    pub op: String,
    /// The users are forked processes, not threads (module doc).
    #[serde(default)]
    pub fork: bool,
    /// The main thread calls `madvise` on the mapping (`advice`); with
    /// `false` it only waits, and reclaim is kswapd's (`[kernel]
    /// memory_limit_pages`).
    #[serde(default = "yes")]
    pub madvise: bool,
    /// What the main thread's `madvise` asks: `"pageout"` (`MADV_PAGEOUT`),
    /// `"cold"` (`MADV_COLD`: reclaim, by kswapd, takes those pages
    /// first) or `"free"` (`MADV_FREE`, with `shared = false`: reclaim
    /// drops the pages nobody wrote since). Left out of the JSON when
    /// `"pageout"`.
    #[serde(default = "pageout", skip_serializing_if = "is_pageout")]
    pub advice: String,
    /// Distance between the pages used, in pages: the mapping is `pages x
    /// stride_pages` long and only every `stride_pages`-th page is touched
    /// (512 puts each in its own PTE table). Left out of the JSON when 1.
    #[serde(default = "one_page", skip_serializing_if = "is_one_page")]
    pub stride_pages: u64,
    /// The main thread also migrates its pages to the other NUMA node each
    /// iteration (`migrate_pages(2)` on itself, nodes 0 and 1 in turn;
    /// needs a profile with `[numa]`). Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub migrate: bool,
    /// The main thread moves the mapping each iteration (module doc).
    /// Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mremap: bool,
    /// The moves are to fixed `PMD_SIZE`- (`"pmd"`) or `PUD_SIZE`-aligned
    /// (`"pud"`) addresses (module doc). Left out of the JSON when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mremap_fixed: Option<String>,
    /// Mean user work between two page-outs and between a user's rounds
    /// (ns); each gap is drawn from 0.5x..1.5x of it from the seeded
    /// stream `pageout-race/userN`.
    #[serde(default = "gap")]
    pub gap_ns: u64,
    /// The mapping is `MAP_SHARED | MAP_ANONYMOUS` (shmem); `false`:
    /// `MAP_PRIVATE | MAP_ANONYMOUS` (module doc). Left out of the JSON
    /// when true.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub shared: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

fn two() -> u64 {
    2
}
fn yes() -> bool {
    true
}
fn three() -> u64 {
    3
}
fn pageout() -> String {
    "pageout".into()
}
fn is_pageout(a: &String) -> bool {
    a == "pageout"
}
fn one_page() -> u64 {
    1
}
fn is_one_page(n: &u64) -> bool {
    *n == 1
}
fn one() -> u32 {
    1
}
fn default_op() -> String {
    "touch".into()
}
fn gap() -> u64 {
    2000
}

/// The PTEs of one PTE table at 4 KiB pages.
const PTRS_PER_PTE: u64 = 512;

/// The first of the two places `mremap_fixed = "pmd"` moves the mapping
/// to (the other is two `PMD_SIZE` above): 1 GiB, below every mapping the
/// kernel places (they grow down from `mmap_base`).
const FIXED_PMD_BASE: u64 = 1 << 30;

/// The same for `"pud"` (the other place is 2 GiB above): 64 GiB.
const FIXED_PUD_BASE: u64 = 64 << 30;

/// Larger mappings are refused: this is a stress for the checker, whose
/// explorer wants a handful of pages.
const MAX_PAGES: u64 = 4096;

/// The longest mapping, in pages (4 GiB of address space).
const MAX_SPAN_PAGES: u64 = 1 << 20;

impl PageoutRace {
    /// The mapping's length in bytes.
    fn len(&self) -> u64 {
        self.pages * self.stride_pages * PAGE_SIZE
    }

    /// Bytes between two pages used.
    fn step(&self) -> u64 {
        self.stride_pages * PAGE_SIZE
    }

    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let t: PageoutRace = parse_params(p)?;
        if t.pages == 0 || t.pages > MAX_PAGES {
            return Err(format!("`pages` must be 1..={MAX_PAGES}"));
        }
        let span = t.pages.checked_mul(t.stride_pages);
        if t.stride_pages == 0 || span.is_none_or(|n| n > MAX_SPAN_PAGES) {
            return Err(format!(
                "`stride_pages` must be >= 1, and `pages` x `stride_pages` at most {MAX_SPAN_PAGES}"
            ));
        }
        if t.users == 0 {
            return Err("`users` must be >= 1".into());
        }
        const OPS: [&str; 8] = [
            "touch",
            "read",
            "read-page",
            "mprotect",
            "read-mprotect",
            "mprotect-page",
            "dontneed-page",
            "none-page",
        ];
        if !OPS.contains(&t.op.as_str()) {
            return Err(format!(
                "`op` must be one of {}, not \"{}\"",
                OPS.join(", "),
                t.op
            ));
        }
        if !["pageout", "cold", "free"].contains(&t.advice.as_str()) {
            return Err(format!(
                "`advice` must be pageout, cold or free, not \"{}\"",
                t.advice
            ));
        }
        if let Some(f) = &t.mremap_fixed {
            let want = match f.as_str() {
                "pmd" => PTRS_PER_PTE,
                "pud" => PTRS_PER_PTE * PTRS_PER_PTE,
                _ => {
                    return Err(format!(
                        "`mremap_fixed` must be \"pmd\" or \"pud\", not \"{f}\""
                    ))
                }
            };
            if !(t.mremap && t.pages * t.stride_pages == want) {
                return Err(format!(
                    "`mremap_fixed = \"{f}\"` needs `mremap = true` and `pages` x `stride_pages` = {want} (one {} at 4 KiB pages)",
                    f.to_uppercase() + "_SIZE"
                ));
            }
        }
        if t.advice == "free" && t.shared {
            return Err(
                "`advice = \"free\"` needs `shared = false` (MADV_FREE applies to private anonymous memory)"
                    .into(),
            );
        }
        Ok(t)
    }
}

/// User `i`: rounds of writing and reading each page (and, with an
/// mprotect `op`, making the range or its page read-only and back) until
/// `done`.
async fn user_loop(
    c: &Ctx,
    me: &PageoutRace,
    (base, i): (&TrackedCell<u64>, u32),
    done: &TrackedCell<bool>,
    mut rng: impl Rng,
) {
    let (len, step) = (me.len(), me.step());
    if me.op == "none-page" {
        let mine = base.get() + (u64::from(i) - 1) % me.pages * step;
        sys_mprotect(c, mine, PAGE_SIZE, Perms::NONE).await;
        while !done.get() {
            c.user_work(me.gap_ns).await;
        }
        return;
    }
    while !done.get() {
        let p = base.get();
        let mine = p + (u64::from(i) - 1) % me.pages * step;
        let pages = if me.op == "read-page" {
            (u64::from(i) - 1) % me.pages..(u64::from(i) - 1) % me.pages + 1
        } else {
            0..me.pages
        };
        for k in pages {
            let p = base.get();
            // Denied writes (the range read-only) are ignored.
            if !me.op.starts_with("read") {
                c.user_access(p + k * step, true).await;
            }
            c.user_access(p + k * step, false).await;
        }
        if me.op == "mprotect" || me.op == "read-mprotect" {
            sys_mprotect(c, p, len, Perms::R).await;
            c.user_access(p, false).await;
            sys_mprotect(c, p, len, Perms::RW).await;
        } else if me.op == "dontneed-page" {
            sys_madvise_dontneed(c, mine, PAGE_SIZE).await;
        } else if me.op == "mprotect-page" {
            sys_mprotect(c, mine, PAGE_SIZE, Perms::R).await;
            c.user_access(mine, false).await;
            sys_mprotect(c, mine, PAGE_SIZE, Perms::RW).await;
        }
        c.user_work(me.gap_ns / 2 + rng.gen_range(0..=me.gap_ns))
            .await;
    }
}

/// Starts the users (threads, or forked children with their own copy of
/// where the mapping is), each pinned to its CPU.
async fn start_users(
    ctx: &Ctx,
    me: &PageoutRace,
    (p, base): (u64, &Rc<TrackedCell<u64>>),
    done: &Rc<TrackedCell<bool>>,
    streams: &Streams,
) {
    let n = ctx.w.ncpus() as u32;
    for i in 1..=me.users {
        let (m, d) = (me.clone(), Rc::clone(done));
        let b = if me.fork {
            super::shared_cell(p)
        } else {
            Rc::clone(base)
        };
        let rng = streams.stream(&format!("pageout-race/user{i}"));
        let cpu = CpuId::new(i % n);
        let program: Program = Box::new(move |c: Ctx| {
            Box::pin(async move {
                let only = super::only_cpu(&c.w, cpu);
                sys_sched_setaffinity(&c, Some(only)).await;
                user_loop(&c, &m, (&b, i), &d, rng).await;
            })
        });
        if me.fork {
            sys_fork(ctx, "pageout-user", program).await;
        } else {
            sys_clone_thread(ctx, "pageout-user", Some(cpu), program).await;
        }
    }
}

/// Iteration `it` of the main thread: its madvise, migration and mremap
/// (each if asked), on the mapping now at `base`.
async fn main_round(ctx: &Ctx, me: &PageoutRace, base: &TrackedCell<u64>, it: u64) {
    let len = me.len();
    if me.madvise && me.advice == "cold" {
        sys_madvise_cold(ctx, base.get(), len).await;
    } else if me.madvise && me.advice == "free" {
        sys_madvise_free(ctx, base.get(), len).await;
    } else if me.madvise {
        sys_madvise_pageout(ctx, base.get(), len).await;
    }
    if me.migrate {
        let from = (it % 2) as u32;
        sys_migrate_pages(ctx, ctx.task, from, 1 - from).await;
    }
    if me.mremap {
        // Refused (the range split by a user's mprotect): it stays where
        // it is.
        let moved = if let Some(f) = &me.mremap_fixed {
            let (at, step) = if f == "pmd" {
                (FIXED_PMD_BASE, 2 * ctx.w.granule.pmd_size())
            } else {
                (FIXED_PUD_BASE, 2 * len)
            };
            sys_mremap_fixed(ctx, base.get(), len, at + (it % 2) * step).await
        } else {
            sys_mremap(ctx, base.get(), len).await
        };
        if let Some(to) = moved {
            base.set(to);
        }
        // It reads what it moved (faulting in what reclaim took).
        for k in 0..me.pages {
            ctx.user_access(base.get() + k * me.step(), false).await;
        }
    }
}

/// Driver events to start a forked user (fork, pinning, its first
/// faults, exit and reap): seed001-explore and seed001-kswapd (2 forked
/// users) have 327 and 385 events with `iterations = 0`.
const EVENTS_PER_FORKED_USER: u64 = 150;
/// As [`EVENTS_PER_FORKED_USER`] for a thread: seed001-mremap (1 thread)
/// has 117 with `iterations = 0`.
const EVENTS_PER_THREAD_USER: u64 = 60;
/// Driver events of the main thread per iteration with `madvise` (the
/// call, its unmaps and flushes, the gap); without, it only waits.
/// Fitted with the next two on seed001-explore at 300 iterations (26.4
/// events an iteration; 1 user: 16.5; 8 pages: 36.5; 32 pages: 51).
const EVENTS_PER_MADVISE: u64 = 8;
/// Driver events per user per iteration: a round of its accesses, its
/// op, its gap (about 10 on seed001-explore and seed001-kswapd).
const EVENTS_PER_USER_ROUND: u64 = 10;
/// Driver events per page per iteration (its accesses, page-out and fault
/// back in): 0.8 to 1.7 on seed001-explore, 1 on seed001-kswapd.
const EVENTS_PER_PAGE_ROUND: u64 = 1;
/// Driver events of an mremap of the main thread besides its pages: 35
/// on seed001-explore with `mremap = true` (72 an iteration at 2 pages,
/// 156 at 16).
const EVENTS_PER_MREMAP: u64 = 35;
/// Driver events per page the main thread moves and reads back, when
/// reclaim is kswapd's (`madvise = false`): each page it reads faults in
/// and is reclaimed again (seed001-mremap, a 1-page memory limit: 70 an
/// iteration at 2 pages, 624 at 16). With `madvise`, 5.
const EVENTS_PER_MOVED_PAGE_KSWAPD: u64 = 35;
/// [`EVENTS_PER_MOVED_PAGE_KSWAPD`] with `madvise`.
const EVENTS_PER_MOVED_PAGE: u64 = 5;

impl Workload for PageoutRace {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let users = u64::from(self.users);
        let (start, kind) = if self.fork {
            (EVENTS_PER_FORKED_USER, "forked users")
        } else {
            (EVENTS_PER_THREAD_USER, "threads")
        };
        let mut per = users
            .saturating_mul(EVENTS_PER_USER_ROUND)
            .saturating_add(self.pages.saturating_mul(EVENTS_PER_PAGE_ROUND));
        if self.madvise {
            per = per.saturating_add(EVENTS_PER_MADVISE);
        }
        if self.mremap {
            let moved = if self.madvise {
                EVENTS_PER_MOVED_PAGE
            } else {
                EVENTS_PER_MOVED_PAGE_KSWAPD
            };
            per = per
                .saturating_add(EVENTS_PER_MREMAP)
                .saturating_add(self.pages.saturating_mul(moved));
        }
        // Private pages the forked users write are copied for each.
        let copies = if !self.shared && self.fork && !self.op.starts_with("read") {
            users.saturating_add(1)
        } else {
            1
        };
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product("users", &[(users, kind), (start, "events")]),
                Figure::product(
                    "iterations",
                    &[(self.iterations, "iterations"), (per, "events")],
                ),
            ]),
            live_pages: Some(Figure::product(
                if copies > 1 { "users" } else { "pages" },
                &[(copies, "copies"), (self.pages, "pages")],
            )),
            tasks: Some(Figure {
                value: users.saturating_add(1),
                key: "users",
                how: format!("main + {users} users"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let me = self.clone();
        let streams = *streams;
        spawn_user(
            w,
            "pageout-race",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let p = if me.shared {
                        sys_mmap_shared(&ctx, me.len(), Perms::RW, PageData::SameFilled).await
                    } else {
                        sys_mmap_private(&ctx, me.len(), Perms::RW, PageData::SameFilled).await
                    };
                    for k in 0..me.pages {
                        ctx.user_access(p + k * me.step(), true).await;
                    }
                    let done = super::shared_cell(false);
                    // Where the main thread's mapping is now (threads
                    // follow it; forked children keep their own at `p`).
                    let base = super::shared_cell(p);
                    start_users(&ctx, &me, (p, &base), &done, &streams).await;
                    let mut rng = streams.stream("pageout-race/main");
                    for it in 0..me.iterations {
                        main_round(&ctx, &me, &base, it).await;
                        ctx.user_work(me.gap_ns / 2 + rng.gen_range(0..=me.gap_ns))
                            .await;
                    }
                    done.set(true);
                    while sys_wait(&ctx).await.is_some() {}
                    sys_munmap(&ctx, base.get(), me.len()).await;
                })
            }),
        )
    }

    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        if self.migrate && profile.numa.as_ref().is_none_or(|n| n.nodes < 2) {
            return Err(format!(
                "`migrate` needs a profile with two NUMA nodes ([numa]); \"{}\" has none",
                profile.name
            ));
        }
        if profile.swap.is_none() {
            return Err(format!(
                "profile \"{}\" has no [swap] section (reclaim and zram costs), which pageout-race needs",
                profile.name
            ));
        }
        Ok(())
    }
}

/// The registry entry of `pageout-race`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "pageout-race",
    description: "checker stress: MADV_PAGEOUT of a shared mapping while threads or forked children on other CPUs use it",
    new: |p, _| super::resolved(PageoutRace::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
