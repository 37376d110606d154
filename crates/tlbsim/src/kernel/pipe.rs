//! Pipes as Linux 3.5 had them (fs/pipe.c), for fixed-size messages: a
//! ring of `buffers` page buffers; a write merges into the last buffer if
//! the message fits in its page (`PIPE_BUF_FLAG_CAN_MERGE`), else takes a
//! free buffer, else sleeps; a read takes the oldest message and releases
//! its buffer when the buffer is empty. Readers and writers sleep on one
//! wait queue (`pipe->wait`), which `wake_up_interruptible_sync_poll()`
//! empties: every write that stored a message wakes every sleeper (the
//! reader, and blocked writers, who find no free buffer and sleep again),
//! and every read that released a buffer wakes every sleeper
//! (docs/research/seed002-hackbench-transport.md, section 3).

use super::entry::{syscall_enter, syscall_exit};
use super::sched::wait_event;
use super::{Ctx, TaskId};
use crate::engine::track::Tracked;
use std::collections::VecDeque;
use std::rc::Rc;

/// A pipe.
#[derive(Debug)]
pub struct Pipe {
    /// Messages in each used buffer, oldest first.
    bufs: VecDeque<u32>,
    /// Buffers of the ring (`pipe->buffers`: 16 by default).
    buffers: usize,
    /// Messages one buffer's page holds (4096 / message size, rounded down).
    per_buffer: u32,
    /// Tasks asleep on `pipe->wait`.
    waiting: Vec<TaskId>,
}

/// A shared handle on a pipe, a location of its own ([`Tracked::fresh`]).
pub type PipeRef = Rc<Tracked<Pipe>>;

/// A pipe of `buffers` page buffers holding `per_buffer` messages each.
pub fn new_pipe_paged(buffers: u32, per_buffer: u32) -> PipeRef {
    Rc::new(Tracked::fresh(Pipe {
        bufs: VecDeque::new(),
        buffers: buffers.max(1) as usize,
        per_buffer: per_buffer.max(1),
        waiting: Vec::new(),
    }))
}

/// A pipe holding `capacity` messages of a page each (one writer and one
/// reader use it as a plain bounded queue).
pub fn new_pipe(capacity: u32) -> PipeRef {
    new_pipe_paged(capacity, 1)
}

impl Pipe {
    /// Messages the pipe holds when full.
    pub fn capacity(&self) -> u64 {
        self.buffers as u64 * u64::from(self.per_buffer)
    }

    /// Stores a message if there is room (merged into the last buffer, or
    /// in a free one).
    fn push(&mut self) -> bool {
        let (n, per) = (self.bufs.len(), self.per_buffer);
        match self.bufs.back_mut() {
            Some(last) if *last < per => *last += 1,
            _ if n < self.buffers => self.bufs.push_back(1),
            _ => return false,
        }
        true
    }

    /// Takes the oldest message, if any; the second value says whether its
    /// buffer was released.
    fn pop(&mut self) -> Option<bool> {
        let first = self.bufs.front_mut()?;
        *first -= 1;
        let released = *first == 0;
        if released {
            self.bufs.pop_front();
        }
        Some(released)
    }
}

/// `write(fd, msg)` (`pipe_write`): sleeps while no buffer has room;
/// having stored the message, wakes every sleeper.
pub async fn pipe_write(ctx: &Ctx, p: &PipeRef) {
    let _f = ctx.func(crate::label!("pipe_write"));
    syscall_enter(ctx, "write").await;
    ctx.work(ctx.w.profile.kernel.pipe_rw_ns).await;
    wait_event(ctx, || {
        let mut pp = p.borrow_mut();
        if pp.push() {
            Some(std::mem::take(&mut pp.waiting))
        } else {
            pp.waiting.push(ctx.task);
            None
        }
    })
    .await;
    syscall_exit(ctx, "write").await;
}

/// `read(fd, msg)` (`pipe_read`): sleeps while the pipe is empty; a read
/// that releases a buffer wakes every sleeper.
pub async fn pipe_read(ctx: &Ctx, p: &PipeRef) {
    let _f = ctx.func(crate::label!("pipe_read"));
    syscall_enter(ctx, "read").await;
    ctx.work(ctx.w.profile.kernel.pipe_rw_ns).await;
    wait_event(ctx, || {
        let mut pp = p.borrow_mut();
        match pp.pop() {
            Some(true) => Some(std::mem::take(&mut pp.waiting)),
            Some(false) => Some(Vec::new()),
            None => {
                pp.waiting.push(ctx.task);
                None
            }
        }
    })
    .await;
    syscall_exit(ctx, "read").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_3_5_holds_640_hackbench_messages_and_frees_a_page_per_40_reads() {
        let p = new_pipe_paged(16, 4096 / 100);
        let mut pp = p.borrow_mut();
        assert_eq!(pp.capacity(), 640);
        for _ in 0..640 {
            assert!(pp.push());
        }
        assert!(!pp.push(), "the 641st message waits");
        for i in 1..=40 {
            assert_eq!(pp.pop(), Some(i == 40), "read {i}");
        }
        assert!(pp.push(), "a released page takes the next message");
    }
}
