//! Seed 000's process-heavy workloads, built from one process anatomy
//! measured on the development host (strace, perf; notes in docs/model.md,
//! "sort-compute and tcmalloc"): a bash shell forks, both sides take
//! copy-on-write faults, the child execs, the dynamic loader maps libraries,
//! takes faults (some copy-on-write on private data), applies RELRO with
//! mprotect and unmaps its cache; the program runs; it exits.
//!
//! - `sort-compute`: `shells` subshells, each running `runs` sequential
//!   `sort </usr/bin/sort >/dev/null` (one process per run).
//! - `tcmalloc`: `for-each-cpu.sh` starting one copy of gperftools'
//!   `large_heap_fragmentation_unittest` per CPU: `iterations` loop passes,
//!   each `user_ns_per_iteration` of user work plus, on average,
//!   `madvise_per_iteration` MADV_DONTNEED calls over a large never-touched
//!   range (which zap no PTE and so flush nothing).

use super::libtool_wrapper::{self, launch, Launcher, WrapperShape};
use super::WorkloadEntry;
use super::{parse_params, Files, Params, Workload};
use crate::engine::rng::Streams;
use crate::hw::mem::{Granule, Perms, PAGE_SIZE_4K};
use crate::hw::CpuId;
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_fork};
use crate::kernel::mm::brk::sys_brk;
use crate::kernel::mm::{sys_madvise_dontneed, sys_mmap, sys_mprotect, sys_munmap};
use crate::kernel::{Ctx, TaskId, World};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// The measured shape of one process start (host: bash 5.2, glibc 2.36).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Anatomy {
    /// Pages of the shell touched before the first fork (its working set).
    pub shell_pages: u64,
    /// Copy-on-write faults the parent shell takes after each fork.
    pub parent_cow_faults: u64,
    /// Copy-on-write faults the child shell takes before exec.
    pub child_cow_faults: u64,
    /// Pages the new program faults in (read) at start.
    pub start_faults: u64,
    /// Of those, pages then written (private file data: copy-on-write).
    pub start_cow_faults: u64,
    /// mmap calls of the loader and program.
    pub start_mmaps: u64,
    /// RELRO mprotect calls (each over touched pages: one flush each).
    pub start_mprotects: u64,
    /// Where the measured 4 KiB pages above lie when the kernel's pages
    /// are larger (`kernel.page_size_kib = 64`): `"spread"` (default),
    /// `"packed"` or `"projected"`. No difference with 4 KiB pages. Left out of the
    /// resolved parameters when `"spread"`.
    #[serde(skip_serializing_if = "MeasuredPages::is_spread")]
    pub measured_pages: MeasuredPages,
}

impl Default for Anatomy {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        Anatomy {
            shell_pages: 200,
            parent_cow_faults: 12,
            child_cow_faults: 12,
            start_faults: 60,
            start_cow_faults: 8,
            start_mmaps: 20,
            start_mprotects: 3,
            measured_pages: Default::default(),
        }
    }
}

/// How the anatomy's page counts, measured on a 4 KiB host, become the
/// kernel's pages ([`Anatomy::measured_pages`]; docs/model.md, "Workloads
/// at 64 KiB"). `"spread"` and `"packed"` bound what a 64 KiB kernel would
/// see; `"projected"` is the host's own fault trace projected onto 64 KiB
/// pages (docs/research/seed000-64k-projection.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeasuredPages {
    /// Each measured 4 KiB page is its own kernel page: counts stay counts
    /// (an upper bound on faults with 64 KiB pages).
    #[default]
    Spread,
    /// The measured pages of each region lie side by side: `n` of them
    /// take `ceil(n x 4 KiB / PAGE_SIZE)` kernel pages (a lower bound).
    Packed,
    /// As the host's fault traces, replayed with 64 KiB pages, show: a
    /// 64 KiB kernel takes [`PROJECTED_WRITE_PERCENT`] % of the write
    /// faults and [`PROJECTED_READ_PERCENT`] % of the read faults counted
    /// with 4 KiB pages (rounded up). Lengths are bytes, as `"packed"`.
    Projected,
}

/// Of the write (and copy-on-write) faults a 4 KiB host counts, the share
/// left with 64 KiB pages: 5,535 of 16,344 (33.9 %), five runs of the
/// host's traces of sort-compute's loop and of the libtool wrapper's
/// launch less the direct one (`tools/microbench/fault_projection.sh`;
/// docs/research/seed000-64k-projection.md). Measured.
pub const PROJECTED_WRITE_PERCENT: u64 = 34;
/// Of the read faults, the share left with 64 KiB pages: 10,686 of 13,234
/// (80.7 %; file faults already map 64 KiB around the fault,
/// `fault_around_bytes`). Measured with [`PROJECTED_WRITE_PERCENT`].
pub const PROJECTED_READ_PERCENT: u64 = 81;

impl MeasuredPages {
    /// Is this the default (`"spread"`)?
    pub fn is_spread(&self) -> bool {
        *self == MeasuredPages::Spread
    }

    /// The kernel pages of granule `g` that `n` measured 4 KiB pages of a
    /// mapping's length take.
    pub fn kernel_pages(self, g: Granule, n: u64) -> u64 {
        match self {
            MeasuredPages::Spread => n,
            MeasuredPages::Packed | MeasuredPages::Projected => {
                (n * PAGE_SIZE_4K).div_ceil(g.page_size())
            }
        }
    }

    /// The write faults in granule `g` of `n` measured 4 KiB write faults.
    pub fn write_faults(self, g: Granule, n: u64) -> u64 {
        self.faults(g, n, PROJECTED_WRITE_PERCENT)
    }

    /// The read faults in granule `g` of `n` measured 4 KiB read faults.
    pub fn read_faults(self, g: Granule, n: u64) -> u64 {
        self.faults(g, n, PROJECTED_READ_PERCENT)
    }

    fn faults(self, g: Granule, n: u64, projected_percent: u64) -> u64 {
        match self {
            MeasuredPages::Projected if g.page_size() > PAGE_SIZE_4K => {
                (n * projected_percent).div_ceil(100)
            }
            MeasuredPages::Projected => n,
            _ => self.kernel_pages(g, n),
        }
    }
}

impl Anatomy {
    /// The write faults in `ctx`'s granule that `n` of this anatomy's
    /// measured 4 KiB write faults (or written pages) become
    /// ([`MeasuredPages::write_faults`]).
    pub(crate) fn writes(&self, ctx: &Ctx, n: u64) -> u64 {
        self.measured_pages.write_faults(ctx.w.granule, n)
    }

    /// The direct start of a program with this anatomy (the loader's
    /// mappings and faults; `start_mmaps` small mappings plus the
    /// program's own, one of them unmapped again).
    pub(crate) fn image(&self) -> Image {
        Image {
            mmaps: self.start_mmaps + 1,
            start_faults: self.start_faults,
            cow_faults: self.start_cow_faults,
            mprotects: self.start_mprotects,
            munmaps: 1,
            brks: 0,
        }
    }
}

/// What one program does between `execve` and its own work: the dynamic
/// loader's and libc's system calls and faults (counted per program with
/// strace and perf on the host; docs/model.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Image {
    /// mmap calls: the loader's (4 pages each) and, last, one over the
    /// pages the program faults in.
    pub mmaps: u64,
    /// Pages faulted in (read) at start.
    pub start_faults: u64,
    /// Of those, pages then written (private file data: copy-on-write).
    pub cow_faults: u64,
    /// mprotect calls (RELRO), each over one touched page: one flush each.
    pub mprotects: u64,
    /// munmap calls, each of a loader mapping with one touched page.
    pub munmaps: u64,
    /// brk calls: ld.so's `brk(0)` first, then malloc's growths.
    pub brks: u64,
}

/// How far glibc's malloc moves the break when it first grows the heap:
/// the request plus `M_TOP_PAD` (128 KiB), page aligned, 0x21000 bytes in
/// the host's strace of sed and ls.
const HEAP_GROWTH_BYTES: u64 = 0x21000;

/// `execve()` of a program and its start-up ([`Image`], its page counts
/// laid out as `layout` says).
pub(crate) async fn program_start(ctx: &Ctx, img: &Image, layout: MeasuredPages) {
    #[allow(non_snake_case)]
    let PAGE_SIZE = ctx.w.granule.page_size();
    let g = ctx.w.granule;
    // The loader's small mappings, the pages faulted in and written.
    let (loader_len, start, cow) = (
        layout.kernel_pages(g, 4) * PAGE_SIZE,
        layout.read_faults(g, img.start_faults),
        layout.write_faults(g, img.cow_faults),
    );
    sys_exec(ctx).await;
    let mut brk = match img.brks {
        0 => None,
        _ => Some(sys_brk(ctx, 0).await),
    };
    // The loader: mappings, faults, copy-on-write of private data, RELRO.
    let mut maps = Vec::new();
    for _ in 1..img.mmaps {
        maps.push(sys_mmap(ctx, loader_len, Perms::RW).await);
    }
    let main = sys_mmap(ctx, start.max(1) * PAGE_SIZE, Perms::RW).await;
    for i in 0..start {
        ctx.user_access(main + i * PAGE_SIZE, false).await;
    }
    for i in 0..cow.min(start) {
        ctx.user_access(main + i * PAGE_SIZE, true).await;
    }
    // Each RELRO mprotect over a page of its own (segments are page
    // aligned), as many as the image has pages.
    for i in 0..img.mprotects.min(start) {
        sys_mprotect(ctx, main + i * PAGE_SIZE, PAGE_SIZE, Perms::R).await;
    }
    // ld.so unmaps its cache (one touched page), and so on.
    for &m in maps.iter().take(img.munmaps as usize) {
        ctx.user_access(m, false).await;
        sys_munmap(ctx, m, loader_len).await;
    }
    // malloc's heap growths.
    for _ in 1..img.brks {
        let cur = brk.unwrap_or(0);
        brk = Some(sys_brk(ctx, cur + HEAP_GROWTH_BYTES).await);
    }
}

/// Runs in the child after fork: COW faults, exec, loader start-up.
async fn child_start(ctx: &Ctx, a: &Anatomy, shell_base: u64) {
    #[allow(non_snake_case)]
    let PAGE_SIZE = ctx.w.granule.page_size();
    for i in 0..a.writes(ctx, a.child_cow_faults) {
        ctx.user_access(shell_base + i * PAGE_SIZE, true).await;
    }
    program_start(ctx, &a.image(), a.measured_pages).await;
}

/// The shell's side of one fork: COW faults on its working set.
async fn parent_after_fork(ctx: &Ctx, a: &Anatomy, shell_base: u64) {
    #[allow(non_snake_case)]
    let PAGE_SIZE = ctx.w.granule.page_size();
    let ws = a.writes(ctx, a.shell_pages).max(1);
    for i in 0..a.writes(ctx, a.parent_cow_faults) {
        ctx.user_access(shell_base + (i % ws) * PAGE_SIZE, true)
            .await;
    }
}

/// The shell's working set.
pub(crate) async fn shell_setup(ctx: &Ctx, a: &Anatomy) -> u64 {
    #[allow(non_snake_case)]
    let PAGE_SIZE = ctx.w.granule.page_size();
    let n = a.writes(ctx, a.shell_pages);
    let base = sys_mmap(ctx, n.max(1) * PAGE_SIZE, Perms::RW).await;
    for i in 0..n {
        ctx.user_access(base + i * PAGE_SIZE, true).await;
    }
    base
}

/// `sort-compute` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SortCompute {
    /// Background subshells.
    pub shells: u32,
    /// Sequential sorts per subshell.
    pub runs: u32,
    /// User work of one sort process (ns). Default: the host's bash-loop
    /// cost per sort iteration in en_US.UTF-8, RHEL 8's default locale:
    /// 1.23 ms of task-clock in the C locale plus the 1.30 ms that
    /// en_US.UTF-8 collation adds (`tools/microbench/sort_locale.sh`) =
    /// 2.53 ms, x 2.5 (eMAG/host, docs/model.md) = 6.33 ms, minus the
    /// 0.86 ms the model already charges per iteration for fork, exec,
    /// faults, mappings and exit (docs/model.md).
    pub sort_user_ns: u64,
    /// Size of sort's input buffer, written whole (the 118 KB input), in
    /// 4 KiB pages whatever the kernel's page size (a byte size).
    pub sort_buffer_pages: u64,
    /// Process anatomy.
    #[serde(flatten)]
    pub anatomy: Anatomy,
}

impl Default for SortCompute {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        SortCompute {
            shells: 256,
            runs: 32,
            sort_user_ns: 5_470_000,
            sort_buffer_pages: 30,
            anatomy: Default::default(),
        }
    }
}

/// Driver events per sort process (fork, exec, its faults and mappings,
/// exit): the golden seed000-sort-compute (256 shells x 32 runs) has
/// 7.34 M events, 896 a sort.
const EVENTS_PER_SORT: u64 = 900;

/// Driver events per tcmalloc loop iteration: the golden seed000-tcmalloc
/// (32 processes x 62,916 iterations) has 13.8 M events, 6.9 an iteration
/// (with 1,000 iterations: 6.7 each besides the launches).
const EVENTS_PER_TCMALLOC_ITERATION: u64 = 7;

/// Driver events to start a test process directly (fork, exec, the
/// loader's faults and mappings; exit): 27,340 for 32 with `iterations =
/// 0` and `launcher = "direct"`.
const EVENTS_PER_DIRECT_START: u64 = 850;

impl Workload for SortCompute {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let shells = u64::from(self.shells);
        super::Estimate {
            events: Some(Figure::product(
                "runs",
                &[
                    (shells, "shells"),
                    (u64::from(self.runs), "runs"),
                    (EVENTS_PER_SORT, "events"),
                ],
            )),
            live_pages: None,
            // The shell, and each subshell with its one sort at a time.
            tasks: Some(Figure {
                value: shells.saturating_mul(2).saturating_add(1),
                key: "shells",
                how: format!("1 shell + {shells} subshells x 2"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "sort-compute",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let base = shell_setup(&ctx, &me.anatomy).await;
                    for _ in 0..me.shells {
                        let m = me.clone();
                        sys_fork(
                            &ctx,
                            "subshell",
                            Box::new(move |c: Ctx| {
                                Box::pin(async move {
                                    for _ in 0..m.runs {
                                        let m2 = m.clone();
                                        sys_fork(
                                            &c,
                                            "sort",
                                            Box::new(move |s: Ctx| {
                                                Box::pin(async move {
                                                    child_start(&s, &m2.anatomy, base).await;
                                                    sort_run(&s, &m2).await;
                                                })
                                            }),
                                        )
                                        .await;
                                        parent_after_fork(&c, &m.anatomy, base).await;
                                        while sys_wait(&c).await.is_some() {}
                                    }
                                })
                            }),
                        )
                        .await;
                        parent_after_fork(&ctx, &me.anatomy, base).await;
                    }
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// sort's input buffer: `sort_buffer_pages` 4 KiB pages of bytes (the
/// 118 KB input: a byte size, which 64 KiB pages hold in 2), mapped, and
/// written a kernel page at a time; sorts, then unmaps it.
async fn sort_run(s: &Ctx, m: &SortCompute) {
    let page = s.w.granule.page_size();
    let bytes = m.sort_buffer_pages * PAGE_SIZE_4K;
    let len = bytes.max(PAGE_SIZE_4K);
    let buf = sys_mmap(s, len, Perms::RW).await;
    for off in (0..bytes).step_by(page as usize) {
        s.user_access(buf + off, true).await;
    }
    s.user_work(m.sort_user_ns).await;
    sys_munmap(s, buf, len).await;
}

/// `tcmalloc` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tcmalloc {
    /// Processes; 0 means one per CPU.
    pub processes: u32,
    /// Loop iterations per process (3 passes x 20,972 in the test).
    pub iterations: u64,
    /// User work per iteration (ns). Default: the host's whole iteration
    /// (6.9 us of task-clock, user and madvise) x 2.5 (eMAG/host, from
    /// SPECint2026, docs/model.md) = 17.25 us, minus the 0.7 us the model
    /// charges for the madvise calls.
    pub user_ns_per_iteration: u64,
    /// Mean MADV_DONTNEED calls per iteration over the untouched heap.
    pub madvise_per_iteration: f64,
    /// Heap size in 4 KiB pages whatever the kernel's page size (a byte
    /// size; never touched by the loop).
    pub heap_pages: u64,
    /// How for-each-cpu.sh's child starts the test: `"direct"` (fork,
    /// exec of the binary; the default) or `"libtool-wrapper"` (a
    /// gperftools build tree's wrapper script first,
    /// [`super::libtool_wrapper`]).
    pub launcher: Launcher,
    /// The wrapper's shape; given only with `launcher =
    /// "libtool-wrapper"`, and recorded in the resolved parameters only
    /// then (so that direct runs record what they always did).
    #[serde(flatten)]
    pub wrapper: WrapperShape,
    /// Process anatomy.
    #[serde(flatten)]
    pub anatomy: Anatomy,
}

impl Default for Tcmalloc {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        Tcmalloc {
            processes: Default::default(),
            iterations: 62_916,
            user_ns_per_iteration: 16_550,
            madvise_per_iteration: 0.57,
            heap_pages: 141_056, // 551 MiB
            launcher: Default::default(),
            wrapper: Default::default(),
            anatomy: Default::default(),
        }
    }
}

impl Workload for Tcmalloc {
    fn estimate(&self, cpus: u32) -> super::Estimate {
        use super::Figure;
        let p = u64::from(if self.processes == 0 {
            cpus
        } else {
            self.processes
        });
        let (start, launch, alive) = match self.launcher {
            Launcher::Direct => (EVENTS_PER_DIRECT_START, "direct starts", 1),
            Launcher::LibtoolWrapper => (
                libtool_wrapper::EVENTS_PER_LAUNCH,
                "wrapper launches",
                libtool_wrapper::most_alive(self.wrapper.libtool_fast_install),
            ),
        };
        super::Estimate {
            events: Figure::sum(vec![
                Figure::product(
                    "iterations",
                    &[
                        (p, "processes"),
                        (self.iterations, "iterations"),
                        (EVENTS_PER_TCMALLOC_ITERATION, "events"),
                    ],
                ),
                Figure::product("processes", &[(p, launch), (start, "events")]),
            ]),
            live_pages: None,
            tasks: Some(Figure {
                value: p.saturating_mul(alive).saturating_add(1),
                key: "processes",
                how: format!("1 shell + {p} processes x {alive}"),
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, streams: &Streams) -> TaskId {
        let me = self.clone();
        let n = if me.processes == 0 {
            w.ncpus() as u32
        } else {
            me.processes
        };
        let streams = *streams;
        spawn_user(
            w,
            "for-each-cpu.sh",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let base = shell_setup(&ctx, &me.anatomy).await;
                    for i in 0..n {
                        let m = me.clone();
                        let mut rng = streams.stream(&format!("tcmalloc/{i}"));
                        sys_fork(
                            &ctx,
                            "tcmalloc_large_heap_fragmentation_unittest",
                            Box::new(move |c: Ctx| {
                                Box::pin(async move {
                                    match m.launcher {
                                        Launcher::Direct => child_start(&c, &m.anatomy, base).await,
                                        Launcher::LibtoolWrapper => {
                                            let (s, a) = (
                                                Rc::new(m.wrapper.clone()),
                                                Rc::new(m.anatomy.clone()),
                                            );
                                            launch(&c, &s, &a, base).await;
                                        }
                                    }
                                    // A byte size (551 MiB), whatever the page size.
                                    let len = m.heap_pages.max(1) * PAGE_SIZE_4K;
                                    let heap = sys_mmap(&c, len, Perms::RW).await;
                                    for _ in 0..m.iterations {
                                        c.user_work(m.user_ns_per_iteration).await;
                                        if rng.gen_bool(m.madvise_per_iteration.clamp(0.0, 1.0)) {
                                            sys_madvise_dontneed(&c, heap, len).await;
                                        }
                                    }
                                })
                            }),
                        )
                        .await;
                        parent_after_fork(&ctx, &me.anatomy, base).await;
                    }
                    while sys_wait(&ctx).await.is_some() {}
                })
            }),
        )
    }
}

/// Validates `sort-compute` parameters.
pub fn sort_from_params(p: &Params) -> Result<SortCompute, String> {
    let s: SortCompute = parse_params(p)?;
    if s.shells == 0 || s.runs == 0 {
        return Err("`shells` and `runs` must be >= 1".into());
    }
    Ok(s)
}

/// Validates `tcmalloc` parameters.
pub fn tcmalloc_from_params(p: &Params) -> Result<Tcmalloc, String> {
    let t: Tcmalloc = parse_params(p)?;
    if !(0.0..=1.0).contains(&t.madvise_per_iteration) {
        return Err("`madvise_per_iteration` must be within 0..=1".into());
    }
    match t.launcher {
        Launcher::Direct => {
            if let Some(k) = wrapper_keys().into_iter().find(|k| p.contains_key(k)) {
                return Err(format!(
                    "`{k}`: a libtool wrapper parameter, used only with launcher = \"libtool-wrapper\""
                ));
            }
        }
        Launcher::LibtoolWrapper => t.wrapper.validate(&t.anatomy)?,
    }
    Ok(t)
}

/// The names of [`WrapperShape`]'s parameters.
fn wrapper_keys() -> Vec<String> {
    match toml::Value::try_from(WrapperShape::default()) {
        Ok(toml::Value::Table(t)) => t.keys().cloned().collect(),
        _ => unreachable!("a struct serialises as a table"),
    }
}

/// `tcmalloc`'s resolved parameters: a direct launch records neither
/// `launcher` nor the wrapper's shape, as before the wrapper existed.
fn tcmalloc_resolved(p: &Params, _: &Files) -> Result<super::Resolved, String> {
    let t = tcmalloc_from_params(p)?;
    let direct = t.launcher == Launcher::Direct;
    let mut r = super::resolved(t)?;
    if direct {
        r.params.remove("launcher");
        for k in wrapper_keys() {
            r.params.remove(&k);
        }
    }
    Ok(r)
}

/// The registry entry of `sort-compute`.
pub const SORT_COMPUTE_ENTRY: WorkloadEntry = WorkloadEntry {
    name: "sort-compute",
    description: "seed 000: 256 subshells each running 32 sequential short-lived sort processes",
    new: |p, _| super::resolved(sort_from_params(p)?),
    page_sizes_kib: super::ANY_PAGE_SIZE,
};

/// The registry entry of `tcmalloc`.
pub const TCMALLOC_ENTRY: WorkloadEntry = WorkloadEntry {
    name: "tcmalloc",
    description: "seed 000: one tcmalloc large-heap-fragmentation test per CPU (user work, madvise over untouched heap), started directly or through libtool's wrapper",
    new: tcmalloc_resolved,
    page_sizes_kib: super::ANY_PAGE_SIZE,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projected_faults_follow_the_measured_shares_at_64k_and_stay_counts_at_4k() {
        let p = MeasuredPages::Projected;
        assert_eq!(p.write_faults(Granule::K4, 100), 100);
        assert_eq!(p.read_faults(Granule::K4, 100), 100);
        assert_eq!(p.kernel_pages(Granule::K4, 4), 4);
        assert_eq!(p.write_faults(Granule::K64, 100), 34);
        assert_eq!(p.read_faults(Granule::K64, 100), 81);
        assert_eq!(p.write_faults(Granule::K64, 1), 1, "rounded up");
        assert_eq!(p.kernel_pages(Granule::K64, 4), 1, "lengths are bytes");
        // The bounds keep their meaning for faults too.
        assert_eq!(MeasuredPages::Spread.write_faults(Granule::K64, 100), 100);
        assert_eq!(MeasuredPages::Packed.write_faults(Granule::K64, 100), 7);
    }
}
