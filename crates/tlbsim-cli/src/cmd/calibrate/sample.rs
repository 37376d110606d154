//! Timing, pinning and memory helpers shared by the calibrate benchmarks:
//! a [`Spread`] of repetitions, `sched_setaffinity`, anonymous mappings.

use std::io;
use std::time::Instant;

/// The per-iteration cost of one benchmark over its repetitions, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Fastest repetition.
    pub min: f64,
    /// Median repetition (the value a profile takes).
    pub median: f64,
    /// Slowest repetition.
    pub max: f64,
    /// Repetitions.
    pub reps: usize,
}

impl Spread {
    /// The spread of `samples` (ns each); `None` if there are none.
    pub fn of(samples: &[f64]) -> Option<Spread> {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Some(Spread {
            min: s[0],
            median,
            max: s[n - 1],
            reps: n,
        })
    }

    /// "min A, median B, max C ns over N runs", for comments.
    pub fn describe(&self) -> String {
        format!(
            "min {:.0} / median {:.0} / max {:.0} ns over {} runs",
            self.min, self.median, self.max, self.reps
        )
    }
}

/// Short runs per repetition in [`time_reps`].
pub const RUNS_PER_REP: usize = 10;

/// Runs `body(k)` (which performs `k` iterations) once as a warm-up and
/// then `reps` x [`RUNS_PER_REP`] times with `k = n / RUNS_PER_REP`, and
/// returns the spread of ns per iteration over those short runs: on a
/// busy host a run in which another task preempted the loop is one of
/// many, which the median ignores.
pub fn time_reps(reps: usize, n: u64, mut body: impl FnMut(u64)) -> Spread {
    let k = (n / RUNS_PER_REP as u64).max(1);
    body(k);
    let samples: Vec<f64> = (0..reps * RUNS_PER_REP)
        .map(|_| {
            let t = Instant::now();
            body(k);
            t.elapsed().as_nanos() as f64 / k as f64
        })
        .collect();
    Spread::of(&samples).expect("reps >= 1")
}

/// Pins the calling thread to `cpu`; the error names the CPU and the call.
pub fn pin(cpu: usize) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks `cpu`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(format!(
                "cannot pin to CPU {cpu}: sched_setaffinity: {}",
                io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// The CPUs this process may run on (`sched_getaffinity`), ascending.
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: cpu_set_t is plain data, filled by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Err(format!(
                "cannot read this process's CPUs: sched_getaffinity: {}",
                io::Error::last_os_error()
            ));
        }
        let max = 8 * std::mem::size_of_val(&set);
        Ok((0..max).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// An anonymous mapping (private unless made by [`Mapping::shared`]),
/// unmapped on drop.
pub struct Mapping {
    /// First byte.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: the mapping is plain memory; threads that share it synchronise
// through atomics or only write bytes nobody reads.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes read-write, optionally advising (huge or no huge
    /// pages); the error names the call.
    pub fn new(len: usize, advice: Option<libc::c_int>) -> Result<Mapping, String> {
        let m = Self::map(len, libc::MAP_PRIVATE)?;
        if let Some(a) = advice {
            m.madvise(0, len, a)?;
        }
        Ok(m)
    }

    /// Maps `len` zero-filled bytes read-write, shared with forked children
    /// (`MAP_SHARED`); the error names the call.
    pub fn shared(len: usize) -> Result<Mapping, String> {
        Self::map(len, libc::MAP_SHARED)
    }

    /// An anonymous read-write mapping with `sharing` (`MAP_PRIVATE` or
    /// `MAP_SHARED`).
    fn map(len: usize, sharing: libc::c_int) -> Result<Mapping, String> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                sharing | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "mmap of {len} bytes: {}",
                io::Error::last_os_error()
            ));
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// `madvise(ptr + off, len, advice)`; the error names the advice.
    pub fn madvise(&self, off: usize, len: usize, advice: libc::c_int) -> Result<(), String> {
        // SAFETY: the range lies inside this mapping.
        let r = unsafe { libc::madvise(self.ptr.add(off).cast(), len, advice) };
        if r != 0 {
            return Err(format!(
                "madvise(advice {advice}): {}",
                io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Writes one byte at `off` (a write fault if the page is not mapped).
    pub fn write(&self, off: usize, v: u8) {
        assert!(off < self.len);
        // SAFETY: in bounds of a read-write mapping.
        unsafe { std::ptr::write_volatile(self.ptr.add(off), v) }
    }

    /// Reads the byte at `off` (a read fault if the page is not mapped).
    pub fn read(&self, off: usize) -> u8 {
        assert!(off < self.len);
        // SAFETY: in bounds of a readable mapping.
        unsafe { std::ptr::read_volatile(self.ptr.add(off)) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by mmap with this length.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The base page size (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_min_median_max() {
        let s = Spread::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.reps), (1.0, 3.0, 5.0, 3));
        let s = Spread::of(&[4.0, 2.0]).unwrap();
        assert_eq!(s.median, 3.0);
        assert!(Spread::of(&[]).is_none());
    }
}
