//! Locks: the spinlock / reader-writer lock of the model ([`Lock`]), their
//! acquisition and release with their statistics ([`World::lock_acquire`],
//! [`World::lock_release`], [`World::lock_granted`]: the one place both
//! drivers and the sleeping rwsem use), and the kernel's lock calls on
//! [`Ctx`] (`spin_lock`, `mmap_read_lock`, `down`/`up`, the split PTE
//! locks).

use super::{sched, Ctx, LockId, Op, TaskId, TaskState, World};
use crate::engine::Ns;
use crate::hw::tlb::MmId;
use std::collections::VecDeque;

/// A waiter on a [`Lock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWaiter {
    /// Waiting task.
    pub task: TaskId,
    /// Wants a shared hold.
    pub shared: bool,
    /// When it started waiting.
    pub since_ns: Ns,
}

/// A modelled lock: a spinlock, or a reader-writer lock when taken shared
/// (mmap_lock). Waiters are served in arrival order (ticket/queued locks);
/// a shared request waits behind any queued writer (no writer starvation).
/// Waiting CPUs spin: the model does not sleep on locks (docs/model.md).
#[derive(Debug, Clone, Default)]
pub struct Lock {
    /// Name (for statistics).
    pub name: &'static str,
    /// Exclusive holder.
    pub holder: Option<TaskId>,
    /// Shared holders.
    pub readers: u32,
    /// Waiters in arrival order.
    pub waiters: VecDeque<LockWaiter>,
    /// When the exclusive holder got it (for hold times).
    pub held_since_ns: Ns,
}

impl Lock {
    /// Tries to take the lock for `task`; on failure the task is queued.
    pub fn acquire(&mut self, task: TaskId, shared: bool, now: Ns) -> bool {
        let free = self.holder.is_none() && self.waiters.is_empty();
        if shared && free {
            self.readers += 1;
            return true;
        }
        if !shared && free && self.readers == 0 {
            self.holder = Some(task);
            return true;
        }
        self.waiters.push_back(LockWaiter {
            task,
            shared,
            since_ns: now,
        });
        false
    }

    /// Releases one hold and hands the lock to the waiters now entitled to
    /// it, in order; returns them.
    pub fn release(&mut self, shared: bool) -> Vec<LockWaiter> {
        if shared {
            assert!(self.readers > 0, "shared unlock of {} not held", self.name);
            self.readers -= 1;
        } else {
            assert!(self.holder.is_some(), "unlock of {} not held", self.name);
            self.holder = None;
        }
        self.grant_waiters()
    }

    /// `downgrade_write()`: the exclusive holder keeps the lock shared; the
    /// readers queued at the front (up to the first writer) get it too, and
    /// are returned.
    pub fn downgrade(&mut self) -> Vec<LockWaiter> {
        assert!(self.holder.is_some(), "downgrade of {} not held", self.name);
        self.holder = None;
        self.readers += 1;
        self.grant_waiters()
    }

    /// Hands the lock to the waiters at the front now entitled to it.
    fn grant_waiters(&mut self) -> Vec<LockWaiter> {
        let mut granted = Vec::new();
        while let Some(&w) = self.waiters.front() {
            if self.holder.is_some() || (!w.shared && self.readers > 0) {
                break;
            }
            self.waiters.pop_front();
            if w.shared {
                self.readers += 1;
            } else {
                self.holder = Some(w.task);
            }
            granted.push(w);
        }
        granted
    }
}

impl World {
    /// Creates a spinlock.
    pub fn new_lock(&self, name: &'static str) -> LockId {
        // Appending touches no existing lock; the new id is the length.
        let mut k = self.k.borrow_mut();
        k.locks.push(Lock {
            name,
            ..Default::default()
        });
        k.locks.len() - 1
    }

    /// Tries to take lock `l` for `task` at `now` (exclusive unless
    /// `shared`), counting the acquisition; if it is taken, `task` queues
    /// and a later [`World::lock_release`] grants it.
    pub fn lock_acquire(&self, l: LockId, task: TaskId, shared: bool, now: Ns) -> bool {
        let (got, name) = {
            let mut k = self.k.borrow_mut();
            let lock = &mut k.locks[l];
            let got = lock.acquire(task, shared, now);
            if got && !shared {
                lock.held_since_ns = now;
            }
            (got, lock.name)
        };
        self.stats.borrow_mut().lock(name).acquisitions += 1;
        got
    }

    /// Releases one hold of lock `l` at `now`, recording an exclusive
    /// hold's duration; returns the waiters now entitled to it, in order
    /// (each then gets [`World::lock_granted`] when it has it).
    pub fn lock_release(&self, l: LockId, shared: bool, now: Ns) -> Vec<LockWaiter> {
        let mut k = self.k.borrow_mut();
        let lock = &mut k.locks[l];
        if !shared {
            let held = now.saturating_sub(lock.held_since_ns);
            self.stats.borrow_mut().lock(lock.name).hold_ns.record(held);
        }
        lock.release(shared)
    }

    /// [`Lock::downgrade`] of lock `l` at `now`, recording the exclusive
    /// hold that ends; returns the readers it lets in.
    pub fn lock_downgrade(&self, l: LockId, now: Ns) -> Vec<LockWaiter> {
        let mut k = self.k.borrow_mut();
        let lock = &mut k.locks[l];
        let held = now.saturating_sub(lock.held_since_ns);
        self.stats.borrow_mut().lock(lock.name).hold_ns.record(held);
        lock.downgrade()
    }

    /// Waiter `g` of lock `l`, granted by a release, has the lock at `at`
    /// (the timing driver adds the cache-line hand-over): its wait is
    /// recorded and an exclusive hold starts.
    pub fn lock_granted(&self, l: LockId, g: &LockWaiter, at: Ns) {
        let mut k = self.k.borrow_mut();
        let lock = &mut k.locks[l];
        if !g.shared {
            lock.held_since_ns = at;
        }
        self.stats
            .borrow_mut()
            .lock(lock.name)
            .contended_wait_ns
            // Saturating: the explorer's clocks are per CPU.
            .record(at.saturating_sub(g.since_ns));
    }
}

impl Ctx {
    /// Spinlock acquire.
    pub async fn spin_lock(&self, l: LockId) {
        let _f = self.func(crate::label!("_raw_spin_lock"));
        self.step(Op::Lock(l)).await;
    }

    /// Spinlock release.
    pub async fn spin_unlock(&self, l: LockId) {
        let _f = self.func(crate::label!("_raw_spin_unlock"));
        self.step(Op::Unlock(l)).await;
    }

    /// `mmap_read_lock(mm)`.
    pub async fn mmap_read_lock(&self, mm: MmId) {
        let _f = self.func(crate::label!("down_read"));
        let l = self.w.k.borrow().mms[mm].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.down(l, true).await;
        } else {
            self.step(Op::LockShared(l)).await;
        }
    }

    /// `mmap_read_unlock(mm)`.
    pub async fn mmap_read_unlock(&self, mm: MmId) {
        let _f = self.func(crate::label!("up_read"));
        let l = self.w.k.borrow().mms[mm].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.up(l, true).await;
        } else {
            self.step(Op::UnlockShared(l)).await;
        }
    }

    /// `mmap_write_lock(mm)`.
    pub async fn mmap_write_lock(&self, mm: MmId) {
        let _f = self.func(crate::label!("down_write"));
        let l = self.w.k.borrow().mms[mm].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.down(l, false).await;
        } else {
            self.step(Op::Lock(l)).await;
        }
    }

    /// `mmap_write_unlock(mm)`.
    pub async fn mmap_write_unlock(&self, mm: MmId) {
        let _f = self.func(crate::label!("up_write"));
        let l = self.w.k.borrow().mms[mm].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.up(l, false).await;
        } else {
            self.step(Op::Unlock(l)).await;
        }
    }

    /// `mmap_write_downgrade(mm)` (`downgrade_write()`): the write hold
    /// becomes a read hold, and readers waiting behind it come in; release
    /// it with [`Ctx::mmap_read_unlock`].
    pub async fn mmap_write_downgrade(&self, mm: MmId) {
        let _f = self.func(crate::label!("downgrade_write"));
        let l = self.w.k.borrow().mms[mm].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.step(Op::LockWord(l)).await;
            let now = self.now();
            for g in self.w.lock_downgrade(l, now) {
                self.w.lock_granted(l, &g, now);
                sched::wake_up(self, g.task).await;
            }
        } else {
            self.step(Op::Downgrade(l)).await;
        }
    }

    /// `down_read()`/`down_write()` of mmap_lock as a semaphore whose
    /// readers sleep (`[kernel] mmap_lock_readers_sleep`: Linux before 5.3
    /// and since 5.12). The fast path is one atomic; a task that cannot
    /// have it queues (FIFO, readers behind a queued writer) and waits until
    /// `up()` hands it over. A reader sleeps, so its CPU may go idle (lazy
    /// TLB); a writer spins (rwsem optimistic spinning, Linux 3.16+),
    /// polling every `cacheline_transfer_ns`, until another task wants its
    /// CPU. Without the option every
    /// waiter spins in the driver (`Op::Lock`), as reader optimistic
    /// spinning did in Linux 5.3-5.11.
    pub async fn down(&self, l: LockId, shared: bool) {
        self.step(Op::LockWord(l)).await; // the cmpxchg on sem->count
        let got = self.w.lock_acquire(l, self.task, shared, self.now());
        if got {
            return;
        }
        loop {
            // A writer stops spinning and sleeps when another task waits
            // for its CPU (rwsem_spin_on_owner() gives up on need_resched),
            // e.g. the reader it waits for, granted the lock meanwhile.
            let sleep = shared || !self.w.k.borrow().cpus[self.cpu()].rq.is_empty();
            if sleep {
                self.w.k.borrow_mut().tasks[self.task].state = TaskState::Blocked;
                sched::schedule(self).await;
            } else {
                self.work(self.w.profile.kernel.cacheline_transfer_ns.max(1))
                    .await;
            }
            let waiting = self.w.k.borrow().locks[l]
                .waiters
                .iter()
                .any(|x| x.task == self.task);
            if !waiting {
                return;
            }
        }
    }

    /// `up_read()`/`up_write()`: releases, hands the semaphore to the
    /// waiters now entitled to it and wakes them.
    pub async fn up(&self, l: LockId, shared: bool) {
        self.step(Op::LockWord(l)).await;
        let now = self.now();
        for g in self.w.lock_release(l, shared, now) {
            self.w.lock_granted(l, &g, now);
            sched::wake_up(self, g.task).await;
        }
    }

    /// A lock whose waiters always sleep (`folio_lock()`:
    /// `folio_wait_bit_common()`): one atomic; if it is held, the task
    /// queues and sleeps until [`Ctx::up`] hands it over.
    pub async fn lock_sleeping(&self, l: LockId) {
        self.step(Op::LockWord(l)).await; // test_and_set_bit_lock()
        if self.w.lock_acquire(l, self.task, false, self.now()) {
            return;
        }
        loop {
            self.w.k.borrow_mut().tasks[self.task].state = TaskState::Blocked;
            sched::schedule(self).await;
            let waiting = self.w.k.borrow().locks[l]
                .waiters
                .iter()
                .any(|x| x.task == self.task);
            if !waiting {
                return;
            }
        }
    }

    /// Takes a [`Ctx::lock_sleeping`] lock if it is free (`folio_trylock()`);
    /// never waits.
    pub async fn trylock_sleeping(&self, l: LockId) -> bool {
        self.step(Op::LockWord(l)).await;
        let free = {
            let k = self.w.k.borrow();
            let lock = &k.locks[l];
            lock.holder.is_none() && lock.readers == 0 && lock.waiters.is_empty()
        };
        free && self.w.lock_acquire(l, self.task, false, self.now())
    }

    /// The split lock of the PTE table mapping `va` in `mm`
    /// (`pte_lockptr()`). It lives in the table's page, so when `mremap`
    /// moves the table it moves too (`kernel/mm/mremap.rs`).
    pub fn pte_lockptr(&self, mm: MmId, va: u64) -> LockId {
        // The span one PTE table maps (`PMD_SHIFT`): the granule of the
        // split page-table locks.
        let key = va >> self.w.granule.pmd_shift();
        if let Some(&l) = self.w.k.borrow().mms[mm].pte_locks.get(&key) {
            return l;
        }
        let l = self.w.new_lock("ptlock");
        self.w.k.borrow_mut().mms[mm].pte_locks.insert(key, l);
        l
    }

    /// Takes the lock of the PTE table mapping `va` (`pte_offset_map_lock`).
    pub async fn ptl_lock(&self, mm: MmId, va: u64) {
        let _f = self.func(crate::label!("_raw_spin_lock"));
        let l = self.pte_lockptr(mm, va);
        self.step(Op::Lock(l)).await;
    }

    /// Releases the lock of the PTE table mapping `va`.
    pub async fn ptl_unlock(&self, mm: MmId, va: u64) {
        let _f = self.func(crate::label!("_raw_spin_unlock"));
        let l = self.pte_lockptr(mm, va);
        self.step(Op::Unlock(l)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downgrade_lets_the_readers_queued_first_in_and_keeps_writers_out() {
        let mut l = Lock {
            name: "mmap_lock",
            ..Default::default()
        };
        let t = TaskId::from_index;
        assert!(l.acquire(t(0), false, 0), "the writer");
        assert!(!l.acquire(t(1), true, 1), "a reader waits");
        assert!(!l.acquire(t(2), false, 2), "a writer waits");
        assert!(!l.acquire(t(3), true, 3), "a reader behind the writer");
        let granted: Vec<_> = l.downgrade().iter().map(|w| w.task).collect();
        assert_eq!(granted, [t(1)], "only the reader before the writer");
        assert_eq!((l.holder, l.readers), (None, 2));
        assert!(
            l.release(true).is_empty(),
            "the other reader still holds it"
        );
        let granted: Vec<_> = l.release(true).iter().map(|w| w.task).collect();
        assert_eq!(granted, [t(2)], "then the writer");
    }
}
