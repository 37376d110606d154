//! An `AF_UNIX` `SOCK_STREAM` socket pair as Linux 3.5 had it
//! (net/unix/af_unix.c, net/core/sock.c), reduced to what hackbench does
//! with it: many senders share one sending end and write fixed-size
//! messages; one receiver reads them (docs/research/seed002-hackbench-transport.md).
//!
//! - `unix_stream_sendmsg()` charges each message's `skb->truesize` to the
//!   *sending* socket (`skb_set_owner_w`): `sock_alloc_send_pskb()`
//!   proceeds while `sk_wmem_alloc < sk_sndbuf` (`sk_wmem_alloc` starts
//!   at 1) and otherwise sleeps in `sock_wait_for_wmem()`. The receiver's
//!   buffer is never checked.
//! - Every message wakes the receiver (`sk_data_ready`).
//! - A read frees the message (`sock_wfree`), and `unix_write_space()`
//!   wakes *every* sleeping sender once `unix_writable()` holds:
//!   `sk_wmem_alloc << 2 <= sk_sndbuf`.

use super::entry::{syscall_enter, syscall_exit};
use super::sched::wait_event;
use super::{Ctx, TaskId};
use crate::engine::track::Tracked;
use std::collections::VecDeque;
use std::rc::Rc;

/// One direction of a socket pair: the sending socket's accounting and
/// the receiving socket's queue.
#[derive(Debug)]
pub struct UnixStream {
    /// `sk_wmem_alloc` of the sending socket (bytes; 1 when idle).
    wmem_alloc: u64,
    /// `sk_sndbuf` of the sending socket (bytes).
    sndbuf: u64,
    /// `skb->truesize` of each message (bytes).
    truesize: u64,
    /// Messages queued at the receiver.
    queued: u64,
    reader: Option<TaskId>,
    writers: VecDeque<TaskId>,
}

/// A shared handle on a socket pair's direction, a location of its own
/// ([`Tracked::fresh`]).
pub type UnixStreamRef = Rc<Tracked<UnixStream>>;

/// A socket pair whose sending socket has `sndbuf` bytes of send buffer
/// and whose messages each charge `truesize` bytes to it.
pub fn new_unix_stream(sndbuf: u64, truesize: u64) -> UnixStreamRef {
    Rc::new(Tracked::fresh(UnixStream {
        wmem_alloc: 1,
        sndbuf,
        truesize: truesize.max(1),
        queued: 0,
        reader: None,
        writers: VecDeque::new(),
    }))
}

impl UnixStream {
    /// Messages that may be unread before a sender blocks: the `n` with
    /// `1 + truesize * (n - 1) < sndbuf` (the last one that is admitted).
    pub fn capacity(&self) -> u64 {
        (self.sndbuf.saturating_sub(2) / self.truesize) + 1
    }

    /// `unix_writable()`: `sk_wmem_alloc << 2 <= sk_sndbuf`.
    fn writable(&self) -> bool {
        self.wmem_alloc.saturating_mul(4) <= self.sndbuf
    }
}

/// `write(fd, msg)` on the sending end (`unix_stream_sendmsg`): sleeps
/// while the send buffer is full; wakes the receiver.
pub async fn unix_stream_sendmsg(ctx: &Ctx, s: &UnixStreamRef) {
    let _f = ctx.func(crate::label!("unix_stream_sendmsg"));
    syscall_enter(ctx, "write").await;
    ctx.work(ctx.w.profile.kernel.pipe_rw_ns).await;
    wait_event(ctx, || {
        let mut ss = s.borrow_mut();
        if ss.wmem_alloc < ss.sndbuf {
            ss.wmem_alloc += ss.truesize;
            ss.queued += 1;
            Some(ss.reader.take().into_iter().collect())
        } else {
            ss.writers.push_back(ctx.task);
            None
        }
    })
    .await;
    syscall_exit(ctx, "write").await;
}

/// `read(fd, msg)` on the receiving end (`unix_stream_recvmsg`): sleeps
/// while nothing is queued; freeing the message may wake every sender.
pub async fn unix_stream_recvmsg(ctx: &Ctx, s: &UnixStreamRef) {
    let _f = ctx.func(crate::label!("unix_stream_recvmsg"));
    syscall_enter(ctx, "read").await;
    ctx.work(ctx.w.profile.kernel.pipe_rw_ns).await;
    wait_event(ctx, || {
        let mut ss = s.borrow_mut();
        if ss.queued == 0 {
            ss.reader = Some(ctx.task);
            return None;
        }
        ss.queued -= 1;
        ss.wmem_alloc -= ss.truesize;
        Some(if ss.writable() {
            ss.writers.drain(..).collect()
        } else {
            Vec::new()
        })
    })
    .await;
    syscall_exit(ctx, "read").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_3_5_arm_admits_233_hackbench_messages_and_wakes_at_58() {
        // docs/research/seed002-hackbench-transport.md: sndbuf 163,840 B,
        // a 100-byte message's truesize 704 B on 32-bit ARM.
        let s = new_unix_stream(163_840, 704);
        let mut ss = s.borrow_mut();
        assert_eq!(ss.capacity(), 233);
        ss.wmem_alloc = 1 + 704 * 232;
        assert!(ss.wmem_alloc < ss.sndbuf, "the 233rd is admitted");
        ss.wmem_alloc += 704;
        assert!(ss.wmem_alloc >= ss.sndbuf, "the 234th blocks");
        // Senders are woken once at most 58 messages remain unread.
        ss.wmem_alloc = 1 + 704 * 58;
        assert!(ss.writable());
        ss.wmem_alloc = 1 + 704 * 59;
        assert!(!ss.writable());
    }
}
