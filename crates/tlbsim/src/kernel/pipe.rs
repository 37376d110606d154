//! Pipes (fs/pipe.c, reduced): a buffer counted in messages, one blocked
//! reader, blocked writers. Enough for hackbench's message passing: a write
//! wakes the reader, a read of an empty pipe sleeps.

use super::mm::{syscall_enter, syscall_exit};
use super::sched::{block_until_woken, wake_up};
use super::{Ctx, TaskId};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// A pipe.
#[derive(Debug)]
pub struct Pipe {
    /// Messages buffered.
    pub buffered: u32,
    /// Messages the buffer holds (64 KiB / message size).
    pub capacity: u32,
    reader: Option<TaskId>,
    writers: VecDeque<TaskId>,
}

/// A shared handle on a pipe.
pub type PipeRef = Rc<RefCell<Pipe>>;

/// A pipe holding `capacity` messages.
pub fn new_pipe(capacity: u32) -> PipeRef {
    Rc::new(RefCell::new(Pipe {
        buffered: 0,
        capacity: capacity.max(1),
        reader: None,
        writers: VecDeque::new(),
    }))
}

/// `write(fd, msg)`: sleeps while the pipe is full; wakes a sleeping reader.
pub async fn pipe_write(ctx: &Ctx, p: &PipeRef) {
    let _f = ctx.func(crate::label!("pipe_write"));
    syscall_enter(ctx, "write").await;
    ctx.work(ctx.w.profile.kernel.pipe_rw_ns).await;
    loop {
        let (done, reader) = {
            let mut pp = p.borrow_mut();
            if pp.buffered < pp.capacity {
                pp.buffered += 1;
                (true, pp.reader.take())
            } else {
                pp.writers.push_back(ctx.task);
                (false, None)
            }
        };
        if done {
            if let Some(r) = reader {
                wake_up(ctx, r).await;
            }
            break;
        }
        block_until_woken(ctx).await;
    }
    syscall_exit(ctx, "write").await;
}

/// `read(fd, msg)`: sleeps while the pipe is empty; wakes a sleeping writer.
pub async fn pipe_read(ctx: &Ctx, p: &PipeRef) {
    let _f = ctx.func(crate::label!("pipe_read"));
    syscall_enter(ctx, "read").await;
    ctx.work(ctx.w.profile.kernel.pipe_rw_ns).await;
    loop {
        let (done, writer) = {
            let mut pp = p.borrow_mut();
            if pp.buffered > 0 {
                pp.buffered -= 1;
                (true, pp.writers.pop_front())
            } else {
                pp.reader = Some(ctx.task);
                (false, None)
            }
        };
        if done {
            if let Some(w) = writer {
                wake_up(ctx, w).await;
            }
            break;
        }
        block_until_woken(ctx).await;
    }
    syscall_exit(ctx, "read").await;
}
