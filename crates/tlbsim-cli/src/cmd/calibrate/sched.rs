//! Scheduler loops: a pipe ping-pong between two processes pinned to one
//! CPU (two context switches per round trip, lmbench's lat_ctx shape) and
//! `sched_setaffinity` hops between two CPUs (x86_flush.c's "hop").

use super::sample::{pin, time_reps, Spread};
use super::Budget;
use std::io;

/// One round trip of a 1-byte token between this process and a forked
/// child, both pinned to `cpu`: write, block in read, the other runs.
pub fn pipe_ping_pong(b: &Budget, cpu: usize) -> Result<Spread, String> {
    pin(cpu)?;
    let (mut to_child, mut to_parent) = ([0; 2], [0; 2]);
    // SAFETY: each array has room for two descriptors.
    unsafe {
        if libc::pipe(to_child.as_mut_ptr()) != 0 || libc::pipe(to_parent.as_mut_ptr()) != 0 {
            return Err(format!("pipe: {}", io::Error::last_os_error()));
        }
    }
    // SAFETY: the child only calls read, write and _exit (async-signal-safe).
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if child == 0 {
        // The child inherits the pinning: echo each byte until EOF.
        let mut c = [0u8; 1];
        // SAFETY: the descriptors are open; c is one byte.
        unsafe {
            libc::close(to_child[1]);
            while libc::read(to_child[0], c.as_mut_ptr().cast(), 1) == 1 {
                libc::write(to_parent[1], c.as_ptr().cast(), 1);
            }
            libc::_exit(0);
        }
    }
    let mut c = [0u8; 1];
    let s = time_reps(b.reps, b.n(50_000), |n| {
        for _ in 0..n {
            // SAFETY: the descriptors are open; c is one byte.
            unsafe {
                libc::write(to_child[1], c.as_ptr().cast(), 1);
                libc::read(to_parent[0], c.as_mut_ptr().cast(), 1);
            }
        }
    });
    // SAFETY: closing our ends ends the child's loop; then reap it.
    unsafe {
        for fd in [to_child[0], to_child[1], to_parent[0], to_parent[1]] {
            libc::close(fd);
        }
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    Ok(s)
}

/// One `sched_setaffinity()` that moves the caller from CPU `a` to `b`
/// or back, per move.
pub fn affinity_hop(bud: &Budget, a: usize, b: usize) -> Result<Spread, String> {
    pin(a)?;
    let mut err = None;
    let mut at_a = true;
    let s = time_reps(bud.reps, bud.n(20_000), |n| {
        for _ in 0..n {
            at_a = !at_a;
            if let Err(e) = pin(if at_a { a } else { b }) {
                err = Some(e);
                return;
            }
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(s),
    }
}
