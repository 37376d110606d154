//! Memory-system loops: an uncontended atomic, a cache line ping-ponged
//! between two pinned threads, and a pointer chase with one line per page
//! (a TLB miss each) against the same lines packed into few pages.

use super::sample::{page_size, pin, time_reps, Mapping, Spread};
use super::Budget;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// One uncontended `fetch_add` (a locked RMW on x86, LDADD/LL-SC on arm64).
pub fn atomic_rmw(b: &Budget) -> Spread {
    let x = AtomicU64::new(0);
    time_reps(b.reps, b.n(2_000_000), |n| {
        for _ in 0..n {
            x.fetch_add(1, Ordering::SeqCst);
        }
    })
}

/// A line on its own (128 bytes: no neighbour shares it or its prefetch pair).
#[repr(align(128))]
struct Line(AtomicU64);

/// Half the round trip of a counter passed between a thread on `a` and
/// one on `b` (each waits for the other's value and stores the next):
/// one cache-line transfer, as core-to-core latency tools report it.
/// Timed in many short runs (a few hundred microseconds each), so that
/// the runs in which another task preempted one of the threads stay a
/// minority that the median ignores.
pub fn line_transfer(bud: &Budget, a: usize, b: usize) -> Result<Spread, String> {
    let chunk = (bud.n(200_000) / 100).max(100);
    let runs = bud.reps as u64 * 20;
    let line = Arc::new(Line(AtomicU64::new(0)));
    let start = Arc::new(Barrier::new(2));
    let (l2, s2) = (line.clone(), start.clone());
    let rounds = chunk * (runs + 1);
    let peer = std::thread::spawn(move || -> Result<(), String> {
        let pinned = pin(b);
        s2.wait();
        pinned?;
        for k in 0..rounds {
            while l2.0.load(Ordering::Acquire) != 2 * k + 1 {
                std::hint::spin_loop();
            }
            l2.0.store(2 * k + 2, Ordering::Release);
        }
        Ok(())
    });
    let pinned = pin(a);
    start.wait();
    if let Err(e) = pinned {
        // The peer waits for a value that never comes: give it all.
        line.0.store(u64::MAX, Ordering::Release);
        return Err(e);
    }
    let mut samples = Vec::new();
    for run in 0..=runs {
        let t = Instant::now();
        for k in run * chunk..(run + 1) * chunk {
            line.0.store(2 * k + 1, Ordering::Release);
            while line.0.load(Ordering::Acquire) != 2 * k + 2 {
                std::hint::spin_loop();
            }
        }
        if run > 0 {
            samples.push(t.elapsed().as_nanos() as f64 / chunk as f64 / 2.0);
        }
    }
    peer.join().map_err(|_| "the peer thread panicked")??;
    Ok(Spread::of(&samples).expect("reps"))
}

/// A random cyclic order of `n` slots (xorshift, fixed seed: the same
/// chase every run).
fn cycle(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    order
}

/// Chases `lines` pointers laid out at `offset(i)` in `m`, in a random
/// cycle; ns per load.
fn chase(b: &Budget, m: &Mapping, lines: usize, offset: impl Fn(usize) -> usize) -> Spread {
    let order = cycle(lines);
    for w in 0..lines {
        let (from, to) = (order[w], order[(w + 1) % lines]);
        let target = m.ptr as usize + offset(to);
        // SAFETY: offsets are in bounds and 8-byte aligned.
        unsafe { (m.ptr.add(offset(from)) as *mut usize).write(target) };
    }
    let mut p = m.ptr as usize + offset(order[0]);
    time_reps(b.reps, b.n(4_000_000), |n| {
        for _ in 0..n {
            // SAFETY: every slot holds the address of another slot.
            p = unsafe { std::ptr::read_volatile(p as *const usize) };
        }
    })
}

/// Loads of a pointer chase over `pages` pages, one 64-byte line in each
/// (each load misses the TLB), and over as many lines packed
/// contiguously (the same cache footprint, 64 lines per page): (spread,
/// packed), ns per load. No huge pages.
pub fn tlb_chase(b: &Budget, pages: usize) -> Result<(Spread, Spread), String> {
    let ps = page_size();
    let spread_map = Mapping::new(pages * ps, Some(libc::MADV_NOHUGEPAGE))?;
    let packed_map = Mapping::new(pages * 64, Some(libc::MADV_NOHUGEPAGE))?;
    // Vary the line within its page so the lines spread over cache sets.
    let spread = chase(b, &spread_map, pages, |i| i * ps + (i % (ps / 64)) * 64);
    let packed = chase(b, &packed_map, pages, |i| i * 64);
    Ok((spread, packed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_order_is_one_cycle_of_every_slot() {
        let o = cycle(1000);
        let mut seen = o.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        assert_ne!(o, (0..1000).collect::<Vec<_>>());
    }
}
