//! `raw_syscalls:sys_enter` and `sys_exit`: the memory system calls a
//! trace keeps (mmap, munmap, mprotect, madvise, brk, mremap), each an
//! event stamped at its entry with its duration.

use super::line::Line;
use super::Conv;
use crate::trace::{Event, EventKind};

impl Conv {
    /// A `raw_syscalls:` line `p` of task `me` (if kept), at `t`.
    pub(super) fn raw_syscalls(&mut self, p: &Line<'_>, me: Option<u32>, t: u64) {
        let Some(m) = me else { return };
        match p.event {
            "raw_syscalls:sys_enter" => {
                if let Some((n, args)) = syscall_enter(p.trace) {
                    self.tasks.get_mut(&m).expect("present").pending = Some((n, args, t));
                }
            }
            "raw_syscalls:sys_exit" => {
                let Some(pending) = self.tasks.get_mut(&m).expect("present").pending.take() else {
                    return;
                };
                let Some(ret) = syscall_ret(p.trace) else {
                    return;
                };
                if let Some(ev) = syscall_event(&self.nr, pending, ret, t) {
                    self.events.push(Event {
                        t_ns: pending.2,
                        tid: m,
                        kind: ev,
                    });
                }
            }
            _ => {}
        }
    }
}

/// System-call numbers of the calls a trace keeps, per architecture.
pub(super) struct Nr {
    mmap: u64,
    munmap: u64,
    mprotect: u64,
    madvise: u64,
    brk: u64,
    mremap: u64,
    pub(super) clone: u64,
}

/// The numbers of `arch` (`uname -m`): x86_64 or aarch64, else an error.
pub(super) fn numbers(arch: &str) -> Result<Nr, String> {
    match arch {
        // arch/x86/entry/syscalls/syscall_64.tbl
        "x86_64" => Ok(Nr {
            mmap: 9,
            mprotect: 10,
            munmap: 11,
            brk: 12,
            mremap: 25,
            madvise: 28,
            clone: 56,
        }),
        // include/uapi/asm-generic/unistd.h
        "aarch64" => Ok(Nr {
            mmap: 222,
            mprotect: 226,
            munmap: 215,
            brk: 214,
            mremap: 216,
            madvise: 233,
            clone: 220,
        }),
        a => Err(format!(
            "recording on {a} is not supported (x86_64 and aarch64 are)"
        )),
    }
}

/// `NR 9 (0, 2000, 3, 22, ffffffff, 0)`: the number and six arguments (hex).
fn syscall_enter(trace: &str) -> Option<(u64, [u64; 6])> {
    let rest = trace.strip_prefix("NR ")?;
    let (n, args) = rest.split_once(' ')?;
    let n = n.parse().ok()?;
    let mut a = [0u64; 6];
    for (i, w) in args
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .take(6)
        .enumerate()
    {
        a[i] = u64::from_str_radix(w.trim(), 16).ok()?;
    }
    Some((n, a))
}

/// `NR 9 = 140000107073536`: the return value.
fn syscall_ret(trace: &str) -> Option<i64> {
    trace.rsplit_once("= ")?.1.trim().parse().ok()
}

/// The trace event of a finished call `(number, arguments, entry time)`
/// that returned `ret` at `t_exit`, if it is one a trace keeps and it
/// succeeded on a user address.
fn syscall_event(
    nr: &Nr,
    (n, a, t_enter): (u64, [u64; 6], u64),
    ret: i64,
    t_exit: u64,
) -> Option<EventKind> {
    let dur_ns = t_exit.saturating_sub(t_enter);
    let ok = ret >= 0;
    let page_ok = |addr: u64| addr < crate::trace::MAX_USER_ADDR;
    if n == nr.mmap && ok && page_ok(ret as u64) {
        Some(EventKind::Mmap {
            addr: ret as u64,
            len: a[1],
            prot: (a[2] & 7) as u32,
            dur_ns,
        })
    } else if n == nr.munmap && ret == 0 && page_ok(a[0]) {
        Some(EventKind::Munmap {
            addr: a[0],
            len: a[1],
            dur_ns,
        })
    } else if n == nr.mprotect && ret == 0 && page_ok(a[0]) {
        Some(EventKind::Mprotect {
            addr: a[0],
            len: a[1],
            prot: (a[2] & 7) as u32,
            dur_ns,
        })
    } else if n == nr.madvise && ret == 0 && page_ok(a[0]) {
        Some(EventKind::Madvise {
            addr: a[0],
            len: a[1],
            advice: a[2] as u32,
            dur_ns,
        })
    } else if n == nr.brk && ok && page_ok(ret as u64) {
        Some(EventKind::Brk {
            addr: ret as u64,
            dur_ns,
        })
    } else if n == nr.mremap && ok && page_ok(a[0]) && page_ok(ret as u64) {
        Some(EventKind::Mremap {
            addr: a[0],
            len: a[1],
            new_addr: ret as u64,
            new_len: a[2],
            dur_ns,
        })
    } else {
        None
    }
}
