//! `unixbench`: byte-unixbench's index run (kdlucas/byte-unixbench 6.0.0,
//! `Run` and `pgms/index.base`; docs/research/seed003-kvm-dvmbm.md §5),
//! the workload seed 003 ran inside each of its VMs (`[vm]`: one instance
//! of `copies` processes in each guest; `experiments/seed003-vms.toml`).
//! On the host, `instances` independent copies of the benchmark run each
//! pinned to its own `copies` CPUs (instance `i` on CPUs `i * copies
//! ..`), host processes standing in for VMs
//! (`experiments/seed003-unixbench-host.toml`).
//!
//! Each test runs `copies` processes in parallel for `test_ns` of
//! simulated time (an iteration under way at the deadline is finished);
//! its score is the sum of their iterations per second of the time each
//! ran, its index `score / baseline * 10`; an instance's index is the geometric mean
//! over the tests run (unixbench's `indexResults`). Modelled, as the
//! programs do them:
//! - every process writes `process_pages` pages when it starts (stack,
//!   data, the C library's), and after a `fork()` the parent and the
//!   child each write `cow_pages` of them again (copy-on-write faults, each
//!   a flush on arm64).
//! - `spawn`: `fork()`; the child exits at once; the parent `wait()`s.
//! - `execl`: the process `exec`s itself again and again (a new mm each).
//! - `shell1`, `shell8`: `looper` forks and execs `multi.sh`, which starts
//!   1 or 8 `tst.sh` at once and waits; each `tst.sh` forks and execs its
//!   six commands (`sort`, `od`, `sort`, `grep`, `tee`, `wc`), each
//!   touching `command_pages` pages and doing `command_user_ns` of work.
//! - `syscall`: `close(dup(fd)); getpid(); getuid(); umask()`, five null
//!   system calls.
//! - `pipe`: one process writes then reads 512 bytes on one pipe.
//! - `context1`: a forked pair ping-pongs a counter over two pipes.
//! - `dhry2reg`, `whetstone-double`: user code only, `compute_loop_ns` per
//!   loop (an arbitrary unit: their absolute scores mean nothing, only a
//!   ratio between two runs on one profile does).
//! - `fstime`, `fsbuffer`, `fsdisk` (`fstime -c`, buffers of 1024, 256 and
//!   4096 bytes, files of 2000, 500 and 8000 KiB): `read()` a buffer from
//!   one file and `write()` it to another, both rewound with `lseek()`
//!   when the read comes back empty; the score is KiB copied per second.
//!   The files are in the page cache (`fstime` writes and reads them for
//!   2 s each, then syncs, before it measures: not simulated), and the
//!   costs are the profile's `[file]` section (`kernel/file.rs`).
//!
//! unixbench's passes and the dropping of the worst third are not
//! modelled: each test runs once. The absolute index is not unixbench's
//! (the compute loops' unit is arbitrary); the ratio of two runs' indices
//! on one profile is what seed 003 reports (normalised to one VM).
//!
//! Reports `index` (mean over instances), `index_min`, `index_max`, and
//! per test `score.TEST` (mean over instances, iterations per second, KiB
//! per second for the file tests).

use super::WorkloadEntry;
use super::{parse_params, Params, Workload};
use crate::engine::rng::Streams;
use crate::engine::Ns;
use crate::hw::CpuId;
// 4 KiB pages only (`page_sizes_kib` below): sizes in 4 KiB pages.
use crate::engine::track::Tracked;
use crate::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use crate::kernel::exec::sys_exec;
use crate::kernel::exit::sys_wait;
use crate::kernel::file::{sys_lseek, sys_read, sys_write, CachedFile};
use crate::kernel::fork::{spawn_user, sys_fork};
use crate::kernel::mm::{sys_mmap, sys_munmap};
use crate::kernel::pipe::{new_pipe, pipe_read, pipe_write};
use crate::kernel::sched::sys_sched_setaffinity;
use crate::kernel::sys::sys_null;
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// unixbench's twelve index tests, in its order, with their baselines
/// (`pgms/index.base`, the SPARCstation 20-61 "George"; per second, KiB
/// per second for the file tests, and per minute for the shell tests,
/// converted here).
const TESTS: &[(&str, f64)] = &[
    ("dhry2reg", 116_700.0),
    ("whetstone-double", 55.0),
    ("execl", 43.0),
    ("fstime", 3_960.0),
    ("fsbuffer", 1_655.0),
    ("fsdisk", 5_800.0),
    ("pipe", 12_440.0),
    ("context1", 4_000.0),
    ("spawn", 126.0),
    ("syscall", 15_000.0),
    ("shell1", 42.4 / 60.0),
    ("shell8", 6.0 / 60.0),
];

/// The file-copy tests: buffer size (bytes) and file size (KiB), `Run`'s
/// `-b` and `-m` arguments to `fstime`.
const FILE_TESTS: &[(&str, u64, u64)] = &[
    ("fstime", 1024, 2000),
    ("fsbuffer", 256, 500),
    ("fsdisk", 4096, 8000),
];

/// Driver events of one copy of each test: per ms of `test_ns`, and
/// besides (its fork, its resident pages, the iteration under way at the
/// deadline, which is finished). Fitted on seed003-unixbench-host's
/// profile (hisi-96-dvmbm, KPTI) with one copy of one test for 2 and
/// 20 ms (e.g. `syscall`: 17,758 and 177,758 events; `shell8`, whose one
/// iteration takes 34 ms: 15,536 both times). The compute tests have no
/// rate here: they take one event per loop ([`EVENTS_PER_COMPUTE_LOOP`]).
/// The golden seed003-unixbench-host (24 instances of 4 copies, every
/// test, 2 ms) has 8.05 M events, 84,000 a copy; this table gives 89,440.
const TEST_EVENTS: &[(&str, u64, u64)] = &[
    ("dhry2reg", 0, 160),
    ("whetstone-double", 0, 160),
    ("execl", 350, 240),
    ("fstime", 5_130, 60),
    ("fsbuffer", 6_210, 45),
    ("fsdisk", 3_030, 110),
    ("pipe", 3_820, 95),
    ("context1", 4_020, 100),
    ("spawn", 850, 180),
    ("syscall", 8_890, 0),
    ("shell1", 460, 2_260),
    ("shell8", 485, 15_540),
];

/// Driver events per loop of `dhry2reg` and `whetstone-double` (its user
/// work): 2,156 and 20,156 events for 2 and 20 ms of 1 us loops.
const EVENTS_PER_COMPUTE_LOOP: u64 = 1;

/// The processes and shell commands a copy of `test` has alive at once:
/// itself, and `context1`'s partner, `spawn`'s child, or the shell
/// tests' `multi.sh`, their `tst.sh` and one command each.
fn alive(test: &str) -> (u64, u64) {
    match test {
        "context1" | "spawn" => (2, 0),
        "shell1" => (4, 1),
        "shell8" => (18, 8),
        _ => (1, 0),
    }
}

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Unixbench {
    /// Parallel copies of each test per instance (unixbench's second
    /// run uses one per CPU: 4 in a 4-vCPU guest).
    pub copies: u32,
    /// Independent instances, each on its own `copies` CPUs.
    pub instances: u32,
    /// Simulated time each test runs (ns).
    pub test_ns: u64,
    /// The tests to run (default: every modelled one, in unixbench's order).
    pub tests: Vec<String>,
    /// User work of one `dhry2reg` or `whetstone-double` loop (ns).
    pub compute_loop_ns: u64,
    /// User work of one command of a shell test (ns): sorting or grepping
    /// a small file (estimated: a few hundred microseconds of a process
    /// whose creation costs more).
    pub command_user_ns: u64,
    /// Pages each shell command touches (its heap and stack).
    pub command_pages: u64,
    /// Pages every benchmark process (and every program it execs) writes
    /// when it starts: its stack, data, and the C library's data
    /// (estimated: a small C program).
    pub process_pages: u64,
    /// Of those, the pages the parent and the child each write again
    /// right after a `fork()` (the stack frame, the C library's `errno`
    /// and stdio state; estimated), each a copy-on-write fault.
    pub cow_pages: u64,
}

impl Default for Unixbench {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        Unixbench {
            copies: 4,
            instances: 1,
            test_ns: 20_000_000,
            tests: TESTS.iter().map(|(t, _)| t.to_string()).collect(),
            compute_loop_ns: 1_000,
            command_user_ns: 200_000,
            command_pages: 16,
            process_pages: 4,
            cow_pages: 2,
        }
    }
}

impl Unixbench {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let u: Self = parse_params(p)?;
        if u.copies == 0 || u.instances == 0 {
            return Err("`copies` and `instances` must be >= 1".into());
        }
        if u.test_ns == 0 || u.compute_loop_ns == 0 {
            return Err("`test_ns` and `compute_loop_ns` must be >= 1".into());
        }
        if u.cow_pages > u.process_pages {
            return Err("`cow_pages` must be at most `process_pages`".into());
        }
        if u.tests.is_empty() {
            return Err("`tests` must name at least one test".into());
        }
        if let Some(t) = u.tests.iter().find(|t| baseline(t).is_none()) {
            let known: Vec<_> = TESTS.iter().map(|(t, _)| *t).collect();
            return Err(format!(
                "`tests`: unknown test {t:?} (modelled: {})",
                known.join(", ")
            ));
        }
        Ok(u)
    }
}

/// The baseline score of `test` (per second).
fn baseline(test: &str) -> Option<f64> {
    TESTS.iter().find(|(t, _)| *t == test).map(|&(_, b)| b)
}

/// Pins the calling task to `cpu`.
async fn pin(ctx: &Ctx, cpu: CpuId) {
    sys_sched_setaffinity(ctx, Some(super::only_cpu(&ctx.w, cpu))).await;
}

/// Maps and writes the pages a starting process writes
/// (`process_pages`); returns their address.
async fn resident(ctx: &Ctx, u: &Unixbench) -> u64 {
    let p = sys_mmap(ctx, u.process_pages.max(1) * PAGE_SIZE, Perms::RW).await;
    dirty(ctx, p, u.process_pages).await;
    p
}

/// Writes the first `n` pages at `p`.
async fn dirty(ctx: &Ctx, p: u64, n: u64) {
    for i in 0..n {
        ctx.user_access(p + i * PAGE_SIZE, true).await;
    }
}

/// `fork()` of a process whose resident pages are at `mem`: the parent
/// writes `cow_pages` of them again as it returns (copy-on-write).
async fn fork(ctx: &Ctx, u: &Unixbench, mem: u64, name: &str, child: crate::kernel::Program) {
    sys_fork(ctx, name, child).await;
    dirty(ctx, mem, u.cow_pages).await;
}

/// A forked child that writes `cow_pages` of its inherited pages at `mem`
/// (copy-on-write) and exits (`spawn`'s `exit(0)`).
fn exit_at_once(u: &Unixbench, mem: u64) -> crate::kernel::Program {
    let n = u.cow_pages;
    Box::new(move |c: Ctx| Box::pin(async move { dirty(&c, mem, n).await }))
}

/// One shell command: exec, touch its pages, compute, exit.
fn command(u: &Unixbench) -> crate::kernel::Program {
    let (pages, user_ns) = (u.command_pages, u.command_user_ns);
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            sys_exec(&c).await;
            let len = pages * PAGE_SIZE;
            let p = sys_mmap(&c, len, Perms::RW).await;
            dirty(&c, p, pages).await;
            c.user_work(user_ns).await;
            sys_munmap(&c, p, len).await;
        })
    })
}

/// `tst.sh`: the shell execs, then runs its six commands one after
/// another (a pipeline's commands overlap in the real script; here they
/// follow each other).
fn tst_sh(u: &Unixbench) -> crate::kernel::Program {
    let u = u.clone();
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            sys_exec(&c).await;
            let mem = resident(&c, &u).await;
            for name in ["sort", "od", "sort", "grep", "tee", "wc"] {
                fork(&c, &u, mem, name, command(&u)).await;
                sys_wait(&c).await;
            }
        })
    })
}

/// `multi.sh N`: starts `n` `tst.sh` at once and waits for them.
fn multi_sh(u: &Unixbench, n: u32) -> crate::kernel::Program {
    let u = u.clone();
    Box::new(move |c: Ctx| {
        Box::pin(async move {
            sys_exec(&c).await;
            let mem = resident(&c, &u).await;
            for _ in 0..n {
                fork(&c, &u, mem, "tst.sh", tst_sh(&u)).await;
            }
            while sys_wait(&c).await.is_some() {}
        })
    })
}

/// One iteration of `test` by the calling process, whose resident pages
/// are at `*mem` (an exec maps new ones).
async fn iteration(ctx: &Ctx, u: &Unixbench, test: &str, mem: &mut u64) {
    match test {
        "dhry2reg" | "whetstone-double" => ctx.user_work(u.compute_loop_ns).await,
        "execl" => {
            sys_exec(ctx).await;
            *mem = resident(ctx, u).await;
        }
        "spawn" => {
            fork(ctx, u, *mem, "spawn-child", exit_at_once(u, *mem)).await;
            sys_wait(ctx).await;
        }
        "syscall" => {
            for name in ["dup", "close", "getpid", "getuid", "umask"] {
                sys_null(ctx, name).await;
            }
        }
        "shell1" | "shell8" => {
            let n = if test == "shell1" { 1 } else { 8 };
            fork(ctx, u, *mem, "multi.sh", multi_sh(u, n)).await;
            sys_wait(ctx).await;
        }
        _ => unreachable!("pipe, context1 and the file tests run in their own loops"),
    }
}

/// `fstime -c`'s copy loop (`c_test`) with buffers of `bufsize` bytes
/// between two cached files of `kib` KiB, until `deadline`; returns the
/// KiB copied. A read at the end of the file returns nothing, and both
/// files are rewound.
async fn file_copy(ctx: &Ctx, bufsize: u64, kib: u64, deadline: Ns) -> f64 {
    let (mut from, mut to) = (CachedFile::new(kib * 1024), CachedFile::new(kib * 1024));
    let mut bytes = 0u64;
    while ctx.now() < deadline {
        if sys_read(ctx, &mut from, bufsize).await != bufsize {
            sys_lseek(ctx, &mut from, 0).await;
            sys_lseek(ctx, &mut to, 0).await;
            continue;
        }
        sys_write(ctx, &mut to, bufsize).await;
        bytes += bufsize;
    }
    bytes as f64 / 1024.0
}

/// Runs `test` in the calling process until `deadline` (after writing
/// its resident pages); returns what it counts (iterations, or KiB for
/// the file tests) and the time that took (ns).
async fn run_test(ctx: &Ctx, u: &Unixbench, test: &str, deadline: Ns) -> (f64, Ns) {
    let mut n = 0;
    let mut mem = resident(ctx, u).await;
    let start = ctx.now();
    if let Some(&(_, bufsize, kib)) = FILE_TESTS.iter().find(|(t, ..)| *t == test) {
        let copied = file_copy(ctx, bufsize, kib, deadline).await;
        return (copied, ctx.now() - start);
    }
    match test {
        "pipe" => {
            let p = new_pipe(8);
            while ctx.now() < deadline {
                pipe_write(ctx, &p).await;
                pipe_read(ctx, &p).await;
                n += 1;
            }
        }
        "context1" => {
            // The partner echoes what it reads until told to stop.
            let (there, back) = (new_pipe(1), new_pipe(1));
            let stop = super::shared_cell(false);
            let (t2, b2, s2) = (Rc::clone(&there), Rc::clone(&back), Rc::clone(&stop));
            let cow = u.cow_pages;
            fork(
                ctx,
                u,
                mem,
                "context1-child",
                Box::new(move |c: Ctx| {
                    Box::pin(async move {
                        dirty(&c, mem, cow).await;
                        loop {
                            pipe_read(&c, &t2).await;
                            // The flag as the parent set it before this
                            // message: it cannot change before the reply
                            // (read later, the parent may already have
                            // set it for its next message, and the child
                            // would leave it unanswered).
                            let last = s2.get();
                            pipe_write(&c, &b2).await;
                            if last {
                                break;
                            }
                        }
                    })
                }),
            )
            .await;
            loop {
                let last = ctx.now() >= deadline;
                stop.set(last);
                pipe_write(ctx, &there).await;
                pipe_read(ctx, &back).await;
                if last {
                    break;
                }
                n += 1;
            }
            sys_wait(ctx).await;
        }
        _ => {
            while ctx.now() < deadline {
                iteration(ctx, u, test, &mut mem).await;
                n += 1;
            }
        }
    }
    (n as f64, ctx.now() - start)
}

/// One instance on CPUs `base .. base + copies`: each test in turn, its
/// copies forked one per CPU (the instance moves to each CPU to fork the
/// copy pinned there), then started together (each waits on its own pipe
/// until every copy is forked); records `score.TEST` and the instance's
/// index.
async fn instance(ctx: Ctx, u: Unixbench, base: usize, results: Rc<Results>) {
    pin(&ctx, CpuId::from_index(base)).await;
    let mut log_sum = 0.0;
    for test in &u.tests {
        // The copies' rates, summed.
        let count = super::shared_cell(0.0f64);
        // A pipe per copy: the model's pipe has one waiting reader.
        let go: Vec<_> = (0..u.copies).map(|_| new_pipe(1)).collect();
        let deadline = super::shared_cell(0);
        for (k, go_k) in go.iter().enumerate() {
            let (u2, t2, c2) = (u.clone(), test.clone(), Rc::clone(&count));
            let (go2, d2) = (Rc::clone(go_k), Rc::clone(&deadline));
            // The child starts where its parent runs, with its affinity.
            pin(&ctx, CpuId::from_index(base + k)).await;
            sys_fork(
                &ctx,
                "unixbench-copy",
                Box::new(move |c: Ctx| {
                    Box::pin(async move {
                        pipe_read(&c, &go2).await;
                        let (n, ran_ns) = run_test(&c, &u2, &t2, d2.get()).await;
                        // Iterations per second of the time it ran: the
                        // last iteration may end after the deadline.
                        let secs = ran_ns.max(1) as f64 / 1e9;
                        c2.set(c2.get() + n / secs);
                    })
                }),
            )
            .await;
        }
        deadline.set(ctx.now() + u.test_ns);
        for p in &go {
            pipe_write(&ctx, p).await;
        }
        while sys_wait(&ctx).await.is_some() {}
        let score = count.get();
        let index = score / baseline(test).expect("checked") * 10.0;
        log_sum += index.max(f64::MIN_POSITIVE).ln();
        results.add_score(test, score);
    }
    results.add_index((log_sum / u.tests.len() as f64).exp());
}

/// What the instances report, gathered in instance order.
#[derive(Debug)]
struct Results {
    scores: Tracked<Vec<(String, f64)>>,
    indices: Tracked<Vec<f64>>,
}

impl Results {
    fn new() -> Self {
        Results {
            scores: Tracked::fresh(Vec::new()),
            indices: Tracked::fresh(Vec::new()),
        }
    }
    fn add_score(&self, test: &str, score: f64) {
        self.scores.borrow_mut().push((test.to_string(), score));
    }
    fn add_index(&self, index: f64) {
        self.indices.borrow_mut().push(index);
    }
}

impl Workload for Unixbench {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let copies = u64::from(self.instances).saturating_mul(u64::from(self.copies));
        let per_copy = self.tests.iter().fold(0u64, |acc, t| {
            let (per_ms, fixed) = TEST_EVENTS
                .iter()
                .find(|(name, ..)| name == t)
                .map_or((0, 0), |&(_, r, f)| (r, f));
            let timed = if per_ms == 0 {
                (self.test_ns / self.compute_loop_ns).saturating_mul(EVENTS_PER_COMPUTE_LOOP)
            } else {
                per_ms.saturating_mul(self.test_ns) / 1_000_000
            };
            acc.saturating_add(timed).saturating_add(fixed)
        });
        let (processes, commands) = self.tests.iter().map(|t| alive(t)).max().unwrap_or((1, 0));
        let process_pages = processes.saturating_mul(self.process_pages);
        let command_pages = commands.saturating_mul(self.command_pages);
        let n = self.tests.len();
        super::Estimate {
            events: Some(Figure::product(
                "test_ns",
                &[
                    (u64::from(self.instances), "instances"),
                    (u64::from(self.copies), "copies"),
                    (
                        per_copy,
                        &format!("events ({n} tests of {} ns)", self.test_ns),
                    ),
                ],
            )),
            live_pages: Some(Figure::product(
                if command_pages > process_pages {
                    "command_pages"
                } else {
                    "process_pages"
                },
                &[
                    (copies, "copies"),
                    (
                        process_pages.saturating_add(command_pages),
                        &format!("pages ({processes} processes, {commands} commands)"),
                    ),
                ],
            )),
            // unixbench-run, each instance, and its copies' processes.
            tasks: Some(Figure {
                value: copies
                    .saturating_mul(processes)
                    .saturating_add(u64::from(self.instances))
                    .saturating_add(1),
                key: "copies",
                how: format!(
                    "1 + {} instances + {copies} copies x {processes} processes",
                    self.instances
                ),
            }),
        }
    }

    /// The instances' CPUs must exist, and the file tests need the
    /// profile's page-cache costs.
    fn check(&self, profile: &crate::config::Profile) -> Result<(), String> {
        let need = u64::from(self.copies) * u64::from(self.instances);
        let n = profile.topology.cpus;
        if need > u64::from(n) {
            return Err(format!(
                "`instances` x `copies` = {need} CPUs, but the machine has {n}"
            ));
        }
        let file_test = self
            .tests
            .iter()
            .find(|t| FILE_TESTS.iter().any(|(f, ..)| f == t));
        if let (Some(t), None) = (file_test, &profile.file) {
            return Err(format!(
                "profile \"{}\" has no [file] section (page-cache read and write costs), which unixbench's {t:?} needs; add one or leave the file tests out of `tests`",
                profile.name
            ));
        }
        Ok(())
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "unixbench-run",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let results = Rc::new(Results::new());
                    for i in 0..me.instances as usize {
                        let (u, r) = (me.clone(), Rc::clone(&results));
                        let base = i * me.copies as usize;
                        sys_fork(
                            &ctx,
                            "unixbench",
                            Box::new(move |c: Ctx| Box::pin(instance(c, u, base, r))),
                        )
                        .await;
                    }
                    while sys_wait(&ctx).await.is_some() {}
                    report(&ctx.w, &me, &results);
                })
            }),
        )
    }
}

/// Writes the metrics: the mean, lowest and highest instance index, and
/// each test's mean score over the instances.
fn report(w: &World, u: &Unixbench, r: &Results) {
    let indices = r.indices.borrow();
    let n = indices.len().max(1) as f64;
    let mut st = w.stats.borrow_mut();
    let m = &mut st.metrics;
    m.insert(w.metric("index"), indices.iter().sum::<f64>() / n);
    let lo = indices.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = indices.iter().copied().fold(0.0, f64::max);
    m.insert(w.metric("index_min"), lo);
    m.insert(w.metric("index_max"), hi);
    for test in &u.tests {
        let scores = r.scores.borrow();
        let s: f64 = scores
            .iter()
            .filter(|(t, _)| t == test)
            .map(|(_, s)| s)
            .sum();
        m.insert(w.metric(&format!("score.{test}")), s / n);
    }
}

/// The registry entry of `unixbench`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "unixbench",
    description:
        "seed 003: byte-unixbench's 12 index tests, instances of `copies` CPUs each; reports index",
    new: |p, _| super::resolved(Unixbench::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
