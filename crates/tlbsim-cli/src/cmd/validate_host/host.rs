//! will-it-scale's `tlb_flush1/2/3` loops (antonblanchard/will-it-scale
//! tests/tlb_flushN.c) run on this host, in Rust over libc: per page of
//! the task's mapping, write a byte, `madvise(MADV_DONTNEED)` the page and
//! read the byte back (checking the value the C test asserts), `munmap`
//! after the last page and map again. `tlb_flush2` maps 1 MiB of anonymous
//! memory; `tlb_flush1` (`MAP_PRIVATE`) and `tlb_flush3` (`MAP_SHARED`) map
//! a 128 MiB temporary file, one per task, created, sized and unlinked as
//! the C test does (here before the tasks start rather than inside them).
//!
//! Tasks are threads of this process or forked processes, each pinned to
//! its own CPU; each counts its loops in a shared counter. The runner
//! lets them warm up, then samples the counters and the `TLB` line of
//! `/proc/interrupts` before and after the measured interval.

use crate::cmd::calibrate::filefault::read_through;
use crate::cmd::calibrate::sample::{pin, Mapping};
use crate::cmd::calibrate::shootdown::interrupt_count;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Threads of one process or separate processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Threads of one process: they share one mm.
    Threads,
    /// Forked processes: one mm each.
    Processes,
}

impl Mode {
    /// The name will-it-scale gives it (`tlb_flush2_threads`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Threads => "threads",
            Mode::Processes => "processes",
        }
    }
}

/// What one host row measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostRow {
    /// Loops per second summed over the tasks, over the measured interval.
    pub loops_per_s: f64,
    /// Loops counted in the measured interval.
    pub loops: u64,
    /// `TLB:` shootdowns counted in `/proc/interrupts` over the interval
    /// (summed over CPUs), `None` where the line is absent.
    pub shootdowns: Option<u64>,
}

/// Bytes each task maps: `tlb_flush2`'s MEMORYSIZE or `tlb_flush1/3`'s
/// FILESIZE.
pub fn region_bytes(variant: u32) -> usize {
    if variant == 2 {
        1 << 20
    } else {
        128 << 20
    }
}

/// The control block shared with the tasks (in a `MAP_SHARED` anonymous
/// mapping, so forked processes see it too).
#[repr(C)]
struct Control {
    /// 0: wait; 1: run; 2: stop.
    phase: AtomicU64,
    /// Tasks that have pinned themselves or failed to.
    ready: AtomicU64,
    /// 0, or 1 + the CPU a task could not pin itself to.
    failed: AtomicU64,
    /// Per-task loop counters, each on its own cache line.
    counters: [[AtomicU64; 8]; MAX_TASKS],
}

/// Tasks a row may run at most.
pub const MAX_TASKS: usize = 256;

/// The control block's mapping (`MAP_SHARED`: forked tasks see it too).
struct Shared(Mapping);

impl Shared {
    fn new() -> Result<Shared, String> {
        // Zero-filled: every atomic starts at 0.
        Mapping::shared(std::mem::size_of::<Control>())
            .map(Shared)
            .map_err(|e| format!("the control block: {e}"))
    }
    fn get(&self) -> &Control {
        // SAFETY: the mapping holds one Control (page aligned, zeroed: a
        // valid value of atomics) until drop.
        unsafe { &*self.0.ptr.cast::<Control>() }
    }
}

/// A temporary file of `len` bytes, created in `/tmp`, sized and
/// unlinked (tlb_flush1/3's `mkstemp`, `ftruncate`, `unlink`); the fd.
fn temp_file(len: usize) -> Result<libc::c_int, String> {
    let mut name = *b"/tmp/willitscale.XXXXXX\0";
    // SAFETY: `name` is a writable NUL-terminated template.
    let fd = unsafe { libc::mkstemp(name.as_mut_ptr().cast()) };
    if fd < 0 {
        return Err(format!(
            "mkstemp(/tmp/willitscale.XXXXXX): {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is ours; name is the path mkstemp filled in.
    unsafe {
        let r = libc::ftruncate(fd, len as libc::off_t);
        let e = io::Error::last_os_error();
        libc::unlink(name.as_ptr().cast());
        if r != 0 {
            libc::close(fd);
            return Err(format!("ftruncate of a {len}-byte /tmp file: {e}"));
        }
    }
    Ok(fd)
}

/// One task's `testcase()`: loops until the phase is "stop", counting
/// pages in `counter`. Allocates nothing (it also runs in a forked
/// child). Returns an error text on a failed call or a wrong read-back.
fn testcase(
    variant: u32,
    fd: libc::c_int,
    c: &Control,
    counter: &AtomicU64,
) -> Option<&'static str> {
    let len = region_bytes(variant);
    let page = super::super::calibrate::sample::page_size();
    let (flags, fd, expect) = match variant {
        1 => (libc::MAP_PRIVATE, fd, 0u8),
        3 => (libc::MAP_SHARED, fd, 1u8),
        _ => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0u8),
    };
    while c.phase.load(Ordering::Relaxed) < 2 {
        // SAFETY: a fresh mapping of `len` bytes, unmapped below; every
        // access is inside it.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            );
            if addr == libc::MAP_FAILED {
                return Some("mmap failed");
            }
            let addr: *mut u8 = addr.cast();
            let mut i = 0;
            while i < len && c.phase.load(Ordering::Relaxed) < 2 {
                std::ptr::write_volatile(addr.add(i), 1);
                if libc::madvise(addr.add(i).cast(), page, libc::MADV_DONTNEED) != 0 {
                    libc::munmap(addr.cast(), len);
                    return Some("madvise(MADV_DONTNEED) failed");
                }
                if std::ptr::read_volatile(addr.add(i)) != expect {
                    libc::munmap(addr.cast(), len);
                    return Some(
                        "the byte read back after MADV_DONTNEED is not what will-it-scale asserts",
                    );
                }
                counter.fetch_add(1, Ordering::Relaxed);
                i += page;
            }
            libc::munmap(addr.cast(), len);
        }
    }
    None
}

/// Pins to `cpu` (reporting failure through `ready`), waits for the run
/// phase and runs the test case.
fn task(variant: u32, fd: libc::c_int, cpu: usize, c: &Control, k: usize) -> Option<&'static str> {
    if pin(cpu).is_err() {
        c.failed.store(cpu as u64 + 1, Ordering::Release);
        c.ready.fetch_add(1, Ordering::AcqRel);
        return Some("pinning failed");
    }
    c.ready.fetch_add(1, Ordering::AcqRel);
    while c.phase.load(Ordering::Acquire) == 0 {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
    testcase(variant, fd, c, &c.counters[k][0])
}

/// The started tasks: threads to join or processes to reap.
enum Tasks {
    Threads(Vec<std::thread::JoinHandle<Option<&'static str>>>),
    Processes(Vec<libc::pid_t>),
}

fn start(
    mode: Mode,
    variant: u32,
    fds: &[libc::c_int],
    cpus: &[usize],
    shared: &std::sync::Arc<Shared>,
) -> Result<Tasks, String> {
    match mode {
        Mode::Threads => {
            let mut hs = Vec::new();
            for (k, (&fd, &cpu)) in fds.iter().zip(cpus).enumerate() {
                let s = std::sync::Arc::clone(shared);
                hs.push(std::thread::spawn(move || {
                    task(variant, fd, cpu, s.get(), k)
                }));
            }
            Ok(Tasks::Threads(hs))
        }
        Mode::Processes => {
            let mut pids = Vec::new();
            for (k, (&fd, &cpu)) in fds.iter().zip(cpus).enumerate() {
                // SAFETY: the child runs only `task` (libc calls and
                // atomics, no allocation) and then _exit.
                let pid = unsafe { libc::fork() };
                if pid < 0 {
                    let e = io::Error::last_os_error();
                    shared.get().phase.store(2, Ordering::Release);
                    reap(&pids);
                    return Err(format!("fork: {e}"));
                }
                if pid == 0 {
                    let r = task(variant, fd, cpu, shared.get(), k);
                    // SAFETY: ends the child without running the parent's
                    // destructors or atexit handlers.
                    unsafe { libc::_exit(i32::from(r.is_some())) }
                }
                pids.push(pid);
            }
            Ok(Tasks::Processes(pids))
        }
    }
}

/// Waits for the processes; true if all exited with status 0.
fn reap(pids: &[libc::pid_t]) -> bool {
    let mut ok = true;
    for &p in pids {
        let mut st = 0;
        // SAFETY: p is our child.
        let r = unsafe { libc::waitpid(p, &mut st, 0) };
        ok &= r == p && libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0;
    }
    ok
}

fn finish(t: Tasks) -> Result<(), String> {
    match t {
        Tasks::Threads(hs) => {
            for h in hs {
                match h.join() {
                    Ok(None) => {}
                    Ok(Some(e)) => return Err(format!("a task: {e}")),
                    Err(_) => return Err("a task thread panicked".into()),
                }
            }
            Ok(())
        }
        Tasks::Processes(pids) => {
            if reap(&pids) {
                Ok(())
            } else {
                Err("a task process failed (pinning, mmap, madvise or the read-back check)".into())
            }
        }
    }
}

/// The shootdown count from `/proc/interrupts` (`None` if unreadable or
/// no such line).
fn shootdowns(label: Option<&str>) -> Option<u64> {
    let t = std::fs::read_to_string("/proc/interrupts").ok()?;
    interrupt_count(&t, label?)
}

fn total(c: &Control, n: usize) -> u64 {
    (0..n)
        .map(|k| c.counters[k][0].load(Ordering::Relaxed))
        .sum()
}

/// Runs `tlb_flush{variant}` in `mode` with one task per CPU of `cpus`:
/// `warmup` first, then `measure` timed. `label` is the `/proc/interrupts`
/// line of shootdowns (`None`: not counted). Errors name what failed
/// (pinning names the CPU).
pub fn run_row(
    variant: u32,
    mode: Mode,
    cpus: &[usize],
    warmup: Duration,
    measure: Duration,
    label: Option<&str>,
) -> Result<HostRow, String> {
    let n = cpus.len();
    if n == 0 || n > MAX_TASKS {
        return Err(format!("{n} tasks (1..={MAX_TASKS})"));
    }
    let fds: Vec<libc::c_int> = if variant == 2 {
        vec![-1; n]
    } else {
        let mut v = Vec::new();
        for _ in 0..n {
            // Read through: its page cache filled, as after the first of
            // the many passes a will-it-scale run of seconds makes (the
            // simulation does the same).
            let file = temp_file(region_bytes(variant)).and_then(|fd| match read_through(fd) {
                Ok(()) => Ok(fd),
                Err(e) => {
                    close_all(&[fd]);
                    Err(e)
                }
            });
            match file {
                Ok(fd) => v.push(fd),
                Err(e) => {
                    close_all(&v);
                    return Err(e);
                }
            }
        }
        v
    };
    let r = run_tasks(variant, mode, &fds, cpus, warmup, measure, label);
    close_all(&fds);
    r
}

fn close_all(fds: &[libc::c_int]) {
    for &fd in fds.iter().filter(|&&f| f >= 0) {
        // SAFETY: our own fd.
        unsafe { libc::close(fd) };
    }
}

fn run_tasks(
    variant: u32,
    mode: Mode,
    fds: &[libc::c_int],
    cpus: &[usize],
    warmup: Duration,
    measure: Duration,
    label: Option<&str>,
) -> Result<HostRow, String> {
    let n = cpus.len();
    let shared = std::sync::Arc::new(Shared::new()?);
    let tasks = start(mode, variant, fds, cpus, &shared)?;
    let c = shared.get();
    let wait_start = Instant::now();
    while (c.ready.load(Ordering::Acquire) as usize) < n
        && wait_start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let ready = c.ready.load(Ordering::Acquire) as usize;
    let failed = c.failed.load(Ordering::Acquire);
    if failed != 0 || ready < n {
        c.phase.store(2, Ordering::Release);
        let _ = finish(tasks);
        return Err(if failed != 0 {
            format!(
                "cannot pin a task to CPU {} (sched_setaffinity refused: no permission, or the CPU is not allowed)",
                failed - 1
            )
        } else {
            "the tasks did not start within 10 s".into()
        });
    }
    c.phase.store(1, Ordering::Release);
    std::thread::sleep(warmup);
    let (l0, s0, t0) = (total(c, n), shootdowns(label), Instant::now());
    std::thread::sleep(measure);
    let (l1, s1, dt) = (total(c, n), shootdowns(label), t0.elapsed());
    c.phase.store(2, Ordering::Release);
    finish(tasks)?;
    let loops = l1 - l0;
    Ok(HostRow {
        loops_per_s: loops as f64 / dt.as_secs_f64(),
        loops,
        shootdowns: s0.zip(s1).map(|(a, b)| b.saturating_sub(a)),
    })
}

/// Seed 004's madvise-and-migrate loop on this host: one thread of this
/// process, on CPU `cpus[0]`, repeats `madvise(MADV_DONTNEED)` of one
/// touched page, a write to it and `sched_setaffinity` to the other of
/// `cpus`, until stopped; measured like [`run_row`] (each iteration is a
/// loop). The clock starts after the thread's first hop, as [`run_row`]'s
/// after every task pinned itself: a CPU it cannot be pinned to is an
/// error however loaded the host.
pub fn run_madv_migrate(
    cpus: [usize; 2],
    warmup: Duration,
    measure: Duration,
    label: Option<&str>,
) -> Result<HostRow, String> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (c2, s2) = (Arc::clone(&count), Arc::clone(&stop));
    let (hopped, first_hop) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || -> Result<(), String> {
        let page = crate::cmd::calibrate::sample::page_size();
        let m = crate::cmd::calibrate::sample::Mapping::new(page, None)?;
        pin(cpus[0])?;
        m.write(0, 1);
        let mut i = 0usize;
        while !s2.load(Ordering::Relaxed) {
            m.madvise(0, page, libc::MADV_DONTNEED)?;
            m.write(0, 1);
            i += 1;
            pin(cpus[i % 2])?;
            c2.fetch_add(1, Ordering::Relaxed);
            if i == 1 {
                let _ = hopped.send(());
            }
        }
        Ok(())
    });
    // The thread ends before its first hop only on an error (it is not
    // stopped yet): that error.
    if first_hop.recv().is_err() {
        return match h.join() {
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => Err("the madv-migrate thread ended before its first hop".into()),
            Err(_) => Err("the madv-migrate thread panicked".into()),
        };
    }
    std::thread::sleep(warmup);
    let (l0, s0, t0) = (
        count.load(Ordering::Relaxed),
        shootdowns(label),
        Instant::now(),
    );
    std::thread::sleep(measure);
    let (l1, s1, dt) = (
        count.load(Ordering::Relaxed),
        shootdowns(label),
        t0.elapsed(),
    );
    stop.store(true, Ordering::Relaxed);
    h.join().map_err(|_| "the madv-migrate thread panicked")??;
    let loops = l1 - l0;
    Ok(HostRow {
        loops_per_s: loops as f64 / dt.as_secs_f64(),
        loops,
        shootdowns: s0.zip(s1).map(|(a, b)| b.saturating_sub(a)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::calibrate::sample::allowed_cpus;

    /// Every variant in both modes counts loops (no timing asserted).
    #[test]
    #[ignore = "measures this host in a 30 ms window, which a loaded host can leave empty; .ci/run runs it"]
    fn host_loops_count_in_both_modes() {
        let cpus = allowed_cpus().unwrap();
        let one = &cpus[..1];
        for v in [1, 2, 3] {
            for m in [Mode::Threads, Mode::Processes] {
                let r = run_row(
                    v,
                    m,
                    one,
                    Duration::ZERO,
                    Duration::from_millis(30),
                    Some("TLB"),
                )
                .unwrap_or_else(|e| panic!("tlb_flush{v} {}: {e}", m.name()));
                assert!(r.loops > 0, "tlb_flush{v} {}: no loops", m.name());
                assert!(r.loops_per_s > 0.0);
            }
        }
    }

    #[test]
    #[ignore = "measures this host in a 30 ms window, which a loaded host can leave empty; .ci/run runs it"]
    fn madv_migrate_counts_loops() {
        let cpus = allowed_cpus().unwrap();
        if cpus.len() >= 2 {
            let r = run_madv_migrate(
                [cpus[0], cpus[1]],
                Duration::ZERO,
                Duration::from_millis(30),
                Some("TLB"),
            )
            .unwrap();
            assert!(r.loops > 0 && r.loops_per_s > 0.0);
        }
    }

    /// Found at the first hop, before the clock starts: no window to
    /// outlast on a loaded host.
    #[test]
    fn madv_migrate_names_a_bad_cpu() {
        let cpus = allowed_cpus().unwrap();
        for bad in [[cpus[0], 1000], [1000, cpus[0]]] {
            let e = run_madv_migrate(bad, Duration::ZERO, Duration::ZERO, None).unwrap_err();
            assert!(e.contains("CPU 1000"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn pinning_to_a_missing_cpu_is_an_error_naming_it() {
        for mode in [Mode::Threads, Mode::Processes] {
            let e = run_row(
                2,
                mode,
                &[1000],
                Duration::ZERO,
                Duration::from_millis(1),
                None,
            )
            .unwrap_err();
            assert!(e.contains("CPU 1000"), "{}: {e}", mode.name());
        }
    }
}
