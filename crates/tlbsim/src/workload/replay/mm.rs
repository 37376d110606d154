//! The recorded address spaces and the memory events: each recorded
//! range's model address ([`Space`]), a recorded fault as an access, and
//! the memory system calls (`mmap`, `munmap`, `mprotect`, `madvise`,
//! `brk`, `mremap`) run on the model's ranges for the recorded ones.

use super::{IMAGE_WINDOW_BYTES, PAGE};
use crate::engine::track::Tracked;
use crate::hw::mem::Perms;
use crate::kernel::mm::brk::sys_brk;
use crate::kernel::mm::madvise::{sys_madvise_cold, sys_madvise_free, sys_madvise_pageout};
use crate::kernel::mm::mremap::sys_mremap;
use crate::kernel::mm::{sys_madvise_dontneed, sys_mmap, sys_mprotect, sys_munmap};
use crate::kernel::sys::sys_null;
use crate::kernel::Ctx;
use crate::trace::{EventKind, PROT_READ, PROT_WRITE};
use std::collections::BTreeMap;
use std::rc::Rc;

/// A recorded address range's model address, per process.
#[derive(Debug, Clone, Default)]
pub(super) struct Space {
    /// Recorded start → (recorded end, model start).
    pub(super) ranges: BTreeMap<u64, (u64, u64)>,
    /// The recorded heap start and the model's (first `brk`).
    heap: Option<(u64, u64)>,
    /// The recorded break.
    brk: u64,
}

impl Space {
    /// The model pieces `(model addr, len)` of recorded `[addr, addr+len)`.
    pub(super) fn pieces(&self, addr: u64, len: u64) -> Vec<(u64, u64, u64)> {
        let end = addr.saturating_add(len);
        let mut out = Vec::new();
        let first = self.ranges.range(..=addr).next_back().map(|(s, _)| *s);
        let from = first.unwrap_or(addr);
        for (&s, &(e, m)) in self.ranges.range(from..end) {
            let lo = s.max(addr);
            let hi = e.min(end);
            if lo < hi {
                out.push((lo, m + (lo - s), hi - lo));
            }
        }
        out
    }

    /// Forgets recorded `[addr, addr+len)`, splitting ranges at its ends.
    pub(super) fn remove(&mut self, addr: u64, len: u64) {
        for (lo, _, l) in self.pieces(addr, len) {
            let (&s, &(e, m)) = self
                .ranges
                .range(..=lo)
                .next_back()
                .expect("a piece's range");
            self.ranges.remove(&s);
            if s < lo {
                self.ranges.insert(s, (lo, m));
            }
            let hi = lo + l;
            if hi < e {
                self.ranges.insert(hi, (e, m + (hi - s)));
            }
        }
    }

    /// The model address of recorded `va`, if mapped.
    pub(super) fn translate(&self, va: u64) -> Option<u64> {
        if let Some((rs, ms)) = self.heap {
            if va >= rs && va < self.brk.max(rs) {
                return Some(ms + (va - rs));
            }
        }
        let (&s, &(e, m)) = self.ranges.range(..=va).next_back()?;
        (va < e).then_some(m + (va - s))
    }

    /// The gap around `va` where an image window may go.
    pub(super) fn window(&self, va: u64) -> (u64, u64) {
        let mut lo = va & !(IMAGE_WINDOW_BYTES - 1);
        let mut hi = lo + IMAGE_WINDOW_BYTES;
        if let Some((_, &(e, _))) = self.ranges.range(..=va).next_back() {
            lo = lo.max(e);
        }
        if let Some((&s, _)) = self.ranges.range(va + 1..).next() {
            hi = hi.min(s);
        }
        if let Some((rs, _)) = self.heap {
            let he = self.brk.max(rs);
            if he <= va {
                lo = lo.max(he.next_multiple_of(PAGE));
            } else if rs > va {
                hi = hi.min(rs);
            }
        }
        (lo & !(PAGE - 1), hi.next_multiple_of(PAGE).max(lo + PAGE))
    }
}

fn perms(prot: u32) -> Perms {
    if prot & PROT_WRITE != 0 {
        Perms::RW
    } else if prot & PROT_READ != 0 {
        Perms::R
    } else {
        Perms::NONE
    }
}

/// A recorded fault: an access to its translated address.
pub(super) async fn fault(ctx: &Ctx, space: &Rc<Tracked<Space>>, addr: u64, write: bool) {
    let mapped = space.borrow().translate(addr);
    let va = match mapped {
        Some(v) => v,
        None => {
            let (lo, hi) = space.borrow().window(addr);
            let m = sys_mmap(ctx, hi - lo, Perms::RW).await;
            space.borrow_mut().ranges.insert(lo, (hi, m));
            m + (addr - lo)
        }
    };
    // An access the model's mapping denies (e.g. a write to a read-only
    // page the host made writable by a path not traced) is ignored.
    ctx.user_access(va, write).await;
}

/// Runs a recorded memory system call.
pub(super) async fn memory_op(ctx: &Ctx, space: &Rc<Tracked<Space>>, k: EventKind) {
    match k {
        EventKind::Mmap {
            addr, len, prot, ..
        } => mmap(ctx, space, addr, len, prot).await,
        EventKind::Munmap { addr, len, .. } => munmap(ctx, space, addr, len).await,
        EventKind::Mprotect {
            addr, len, prot, ..
        } => {
            let ps = pieces(space, addr, len);
            if ps.is_empty() {
                sys_null(ctx, "mprotect").await;
            }
            for (_, m, l) in ps {
                sys_mprotect(ctx, m, l, perms(prot)).await;
            }
        }
        EventKind::Madvise {
            addr, len, advice, ..
        } => madvise(ctx, space, addr, len, advice).await,
        EventKind::Brk { addr, .. } => brk(ctx, space, addr).await,
        EventKind::Mremap {
            addr,
            len,
            new_addr,
            new_len,
            ..
        } => mremap(ctx, space, (addr, len), (new_addr, new_len)).await,
        _ => {}
    }
}

/// The model pieces of recorded `[addr, addr + len)`, whole pages.
fn pieces(space: &Tracked<Space>, addr: u64, len: u64) -> Vec<(u64, u64, u64)> {
    space.borrow().pieces(addr, len.next_multiple_of(PAGE))
}

/// `mmap`: a new model mapping for the recorded range (`MAP_FIXED` over
/// existing mappings unmaps them first).
async fn mmap(ctx: &Ctx, space: &Tracked<Space>, addr: u64, len: u64, prot: u32) {
    let len = len.next_multiple_of(PAGE).max(PAGE);
    for (_, m, l) in pieces(space, addr, len) {
        sys_munmap(ctx, m, l).await;
    }
    space.borrow_mut().remove(addr, len);
    let m = sys_mmap(ctx, len, perms(prot)).await;
    space.borrow_mut().ranges.insert(addr, (addr + len, m));
}

/// `munmap` of the model pieces of the recorded range.
async fn munmap(ctx: &Ctx, space: &Tracked<Space>, addr: u64, len: u64) {
    let ps = pieces(space, addr, len);
    if ps.is_empty() {
        sys_null(ctx, "munmap").await;
    }
    for (_, m, l) in ps {
        sys_munmap(ctx, m, l).await;
    }
    space.borrow_mut().remove(addr, len.next_multiple_of(PAGE));
}

/// `madvise` of the model pieces: the advice that changes mappings
/// (`DONTNEED` 4, `FREE` 8, `COLD` 20, `PAGEOUT` 21) runs, the rest
/// (`WILLNEED`, `HUGEPAGE`, ...) is a null system call.
async fn madvise(ctx: &Ctx, space: &Tracked<Space>, addr: u64, len: u64, advice: u32) {
    let ps = pieces(space, addr, len);
    if ps.is_empty() {
        sys_null(ctx, "madvise").await;
    }
    for (_, m, l) in ps {
        match advice {
            4 => sys_madvise_dontneed(ctx, m, l).await,
            8 => sys_madvise_free(ctx, m, l).await,
            20 => sys_madvise_cold(ctx, m, l).await,
            21 => sys_madvise_pageout(ctx, m, l).await,
            _ => sys_null(ctx, "madvise").await,
        }
    }
}

/// `brk`: the first sets the recorded and the model heap starts; later
/// ones move the model break as far as the recorded one moved.
async fn brk(ctx: &Ctx, space: &Tracked<Space>, addr: u64) {
    let heap = space.borrow().heap;
    match heap {
        None => {
            let m = sys_brk(ctx, 0).await;
            let mut s = space.borrow_mut();
            s.heap = Some((addr, m));
            s.brk = addr;
        }
        Some((rs, ms)) => {
            sys_brk(ctx, ms + addr.saturating_sub(rs)).await;
            space.borrow_mut().brk = addr.max(rs);
        }
    }
}

/// `mremap` of `[addr, addr + len)` to `[new_addr, new_addr + new_len)`: a
/// move of one whole piece of the same size, else a new mapping and an
/// unmap of the old (a resize).
async fn mremap(
    ctx: &Ctx,
    space: &Tracked<Space>,
    (addr, len): (u64, u64),
    (new_addr, new_len): (u64, u64),
) {
    let len = len.next_multiple_of(PAGE);
    let new_len = new_len.next_multiple_of(PAGE).max(PAGE);
    let ps = pieces(space, addr, len);
    let moved = match ps.as_slice() {
        [(_, m, l)] if *l == len && len == new_len => sys_mremap(ctx, *m, len).await,
        _ => None,
    };
    space.borrow_mut().remove(addr, len);
    let m = match moved {
        Some(m) => m,
        None => {
            let m = sys_mmap(ctx, new_len, Perms::RW).await;
            for (_, om, l) in ps {
                sys_munmap(ctx, om, l).await;
            }
            m
        }
    };
    space.borrow_mut().remove(new_addr, new_len);
    space
        .borrow_mut()
        .ranges
        .insert(new_addr, (new_addr + new_len, m));
}
