//! System-call and memory-management loops on one CPU: null syscall,
//! pipe write+read, madvise(DONTNEED), mprotect, mmap/munmap, 4 KiB read
//! and write faults, 2 MiB THP faults. The loops are those of
//! tools/microbench/kernel_ops.c, mprotect_loop.c, pipe_rw.c, thp_fault.c.

use super::sample::{page_size, time_reps, Mapping, Spread, RUNS_PER_REP};
use super::Budget;
use std::io;
use std::time::Instant;

/// `getppid()` (a null syscall), per call.
pub fn null_syscall(b: &Budget) -> Spread {
    time_reps(b.reps, b.n(200_000), |n| {
        for _ in 0..n {
            // SAFETY: getppid has no preconditions.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
    })
}

/// A 100-byte `write()` then `read()` on one pipe, per pair.
pub fn pipe_write_read(b: &Budget) -> Result<Spread, String> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", io::Error::last_os_error()));
    }
    let mut buf = [0u8; 100];
    let s = time_reps(b.reps, b.n(100_000), |n| {
        for _ in 0..n {
            // SAFETY: buf is 100 bytes; the pipe holds them (64 KiB buffer).
            unsafe {
                libc::write(fds[1], buf.as_ptr().cast(), buf.len());
                libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
            }
        }
    });
    // SAFETY: closing the descriptors opened above.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    Ok(s)
}

/// `madvise(MADV_DONTNEED)` of one page: `touch` = false on a page that
/// is not mapped (the call's fixed path), true with a write after it
/// (zap, flush, fault, allocate and clear: x86_flush.c's "local").
pub fn madvise_page(b: &Budget, touch: bool) -> Result<Spread, String> {
    let m = Mapping::new(page_size(), None)?;
    m.write(0, 1);
    m.madvise(0, m.len, libc::MADV_DONTNEED)?;
    Ok(time_reps(b.reps, b.n(100_000), |n| {
        for i in 0..n {
            // SAFETY: the page belongs to the mapping.
            unsafe { libc::madvise(m.ptr.cast(), m.len, libc::MADV_DONTNEED) };
            if touch {
                m.write(0, i as u8);
            }
        }
    }))
}

/// One `mprotect()` of a mapped, dirty page, per call: the loop of
/// mprotect_loop.c (read-only, read, read-write, write), halved.
pub fn mprotect_page(b: &Budget) -> Result<Spread, String> {
    let m = Mapping::new(page_size(), None)?;
    m.write(0, 1);
    let s = time_reps(b.reps, b.n(100_000), |n| {
        for i in 0..n {
            // SAFETY: the page belongs to the mapping.
            unsafe { libc::mprotect(m.ptr.cast(), m.len, libc::PROT_READ) };
            m.read(0);
            // SAFETY: as above.
            unsafe { libc::mprotect(m.ptr.cast(), m.len, libc::PROT_READ | libc::PROT_WRITE) };
            m.write(0, i as u8);
        }
    });
    Ok(Spread {
        min: s.min / 2.0,
        median: s.median / 2.0,
        max: s.max / 2.0,
        ..s
    })
}

/// `mmap()` of one new page and `munmap()` of one untouched page, per
/// call: a batch of mappings with alternating protections (so that none
/// merge into its neighbour's VMA), then their unmapping.
pub fn mmap_munmap(b: &Budget) -> Result<(Spread, Spread), String> {
    let n = b.n(2_000) as usize;
    let ps = page_size();
    let (mut maps, mut unmaps) = (Vec::new(), Vec::new());
    let mut ptrs = Vec::with_capacity(n);
    for _ in 0..=b.reps {
        let t = Instant::now();
        for i in 0..n {
            let prot = if i % 2 == 0 {
                libc::PROT_READ
            } else {
                libc::PROT_READ | libc::PROT_WRITE
            };
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            // SAFETY: a fresh anonymous mapping.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), ps, prot, flags, -1, 0) };
            if p == libc::MAP_FAILED {
                let e = io::Error::last_os_error();
                ptrs.drain(..).for_each(|p| unsafe {
                    libc::munmap(p, ps);
                });
                return Err(format!("mmap of one page: {e}"));
            }
            ptrs.push(p);
        }
        maps.push(t.elapsed().as_nanos() as f64 / n as f64);
        let t = Instant::now();
        for p in ptrs.drain(..) {
            // SAFETY: p was mapped above with this length.
            unsafe { libc::munmap(p, ps) };
        }
        unmaps.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    // The first batch is a warm-up.
    Ok((
        Spread::of(&maps[1..]).expect("reps"),
        Spread::of(&unmaps[1..]).expect("reps"),
    ))
}

/// First touch of fresh anonymous 4 KiB pages (no THP), per page: a read
/// maps the shared zero page (fault without allocation), a write
/// allocates and clears a page. Each repetition's pages are timed in
/// [`RUNS_PER_REP`] short runs.
pub fn fault_4k(b: &Budget, write: bool) -> Result<Spread, String> {
    let ps = page_size();
    let pages = b.n(8_192) as usize;
    let chunk = (pages / RUNS_PER_REP).max(1);
    let mut samples = Vec::new();
    for rep in 0..=b.reps {
        let m = Mapping::new(pages * ps, Some(libc::MADV_NOHUGEPAGE))?;
        for run in 0..pages / chunk {
            let t = Instant::now();
            for i in run * chunk..(run + 1) * chunk {
                if write {
                    m.write(i * ps, 1);
                } else {
                    m.read(i * ps);
                }
            }
            if rep > 0 {
                samples.push(t.elapsed().as_nanos() as f64 / chunk as f64);
            }
        }
    }
    Ok(Spread::of(&samples).expect("reps"))
}

/// Where THP cannot be measured: the reason.
pub type NoThp = String;

/// First write to fresh 2 MiB-aligned extents under `MADV_HUGEPAGE`, per
/// extent, checked against `AnonHugePages` in /proc/self/smaps_rollup.
pub fn fault_thp(b: &Budget) -> Result<Result<Spread, NoThp>, String> {
    const HUGE: usize = 2 << 20;
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !mode.contains("[always]") && !mode.contains("[madvise]") {
        let m = mode.trim();
        return Ok(Err(format!(
            "transparent huge pages are off (enabled: {m:?})"
        )));
    }
    let extents = if b.quick { 4 } else { 32 };
    let mut samples = Vec::new();
    for rep in 0..=b.reps {
        let m = Mapping::new((extents + 1) * HUGE, None)?;
        let start = (HUGE - (m.ptr as usize) % HUGE) % HUGE;
        m.madvise(start, extents * HUGE, libc::MADV_HUGEPAGE)?;
        let t = Instant::now();
        for i in 0..extents {
            m.write(start + i * HUGE, 1);
        }
        let ns = t.elapsed().as_nanos() as f64 / extents as f64;
        let huge_kib = anon_huge_kib();
        if huge_kib < (extents * HUGE / 1024 / 2) as u64 {
            let why = format!("the kernel gave no huge pages to MADV_HUGEPAGE memory (AnonHugePages {huge_kib} kB after {extents} 2 MiB faults; fragmented memory or defrag off)");
            return Ok(Err(why));
        }
        if rep > 0 {
            samples.push(ns);
        }
    }
    Ok(Ok(Spread::of(&samples).expect("reps")))
}

/// `AnonHugePages` of this process in kB (0 if unreadable).
fn anon_huge_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
