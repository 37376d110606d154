//! hackbench (rt-tests/LTP), process mode over pipes (`transport =
//! "pipe"`, hackbench's `-pipe`) or `AF_UNIX` socket pairs (`"socket"`,
//! hackbench's default; `kernel/unix_socket.rs`): each of `groups`
//! groups has `fds` receivers and `fds` senders; every sender writes
//! `loops` messages to every receiver of its group, every receiver reads
//! `fds * loops` messages. The main process forks all of them first; they
//! wait at a start gate (hackbench's ready/wake file descriptors) until the
//! last is forked, then all run at once. The whole thing repeats `runs`
//! times (new processes, so new address spaces and ASIDs, each run). The
//! result is the elapsed time.

use super::WorkloadEntry;
use super::{parse_params, shared, Params, Workload};
use crate::engine::rng::Streams;
use crate::engine::track::Tracked;
use crate::hw::CpuId;
use crate::kernel::exit::sys_wait;
use crate::kernel::fork::{spawn_user, sys_fork};
use crate::kernel::pipe::{new_pipe_paged, pipe_read, pipe_write, PipeRef};
use crate::kernel::sched::{block_until_woken, wake_up};
use crate::kernel::unix_socket::{
    new_unix_stream, unix_stream_recvmsg, unix_stream_sendmsg, UnixStreamRef,
};
use crate::kernel::{Ctx, TaskId, World};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// hackbench's start handshake: children wait until the main process has
/// forked them all.
#[derive(Debug, Default)]
struct Gate {
    open: bool,
    waiting: Vec<TaskId>,
}

type GateRef = Rc<Tracked<Gate>>;

async fn wait_gate(ctx: &Ctx, g: &GateRef) {
    let open = {
        let mut gg = g.borrow_mut();
        if !gg.open {
            gg.waiting.push(ctx.task);
        }
        gg.open
    };
    if !open {
        block_until_woken(ctx).await;
    }
}

async fn open_gate(ctx: &Ctx, g: &GateRef) {
    let waiting = {
        let mut gg = g.borrow_mut();
        gg.open = true;
        std::mem::take(&mut gg.waiting)
    };
    for t in waiting {
        wake_up(ctx, t).await;
    }
}

/// Parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hackbench {
    /// Groups of senders and receivers.
    pub groups: u32,
    /// Senders (and receivers) per group.
    pub fds: u32,
    /// Messages each sender sends to each receiver.
    pub loops: u32,
    /// Sequential hackbench runs.
    pub runs: u32,
    /// Page buffers of a pipe (`PIPE_DEF_BUFFERS`, 16 in Linux 3.5).
    pub pipe_buffers: u32,
    /// Messages one pipe buffer's 4 KiB page holds: 4096 / 100 rounded
    /// down (Linux 3.5 merges a write into the last page only whole).
    pub pipe_messages_per_buffer: u32,
    /// `"pipe"` (default) or `"socket"`: a socket pair per receiver,
    /// whose sending end the group's senders share.
    pub transport: Transport,
    /// The sending socket's `sk_sndbuf` (bytes): Linux 3.5's default,
    /// `SK_WMEM_MAX` = 256 x `SKB_TRUESIZE(256)` = 163,840 on 32-bit ARM
    /// (docs/research/seed002-hackbench-transport.md).
    pub socket_sndbuf_bytes: u64,
    /// What one 100-byte message charges to it (`skb->truesize`): 704 on
    /// Linux 3.5, 32-bit ARM (same source).
    pub message_truesize_bytes: u64,
}

impl Default for Hackbench {
    /// The parameters a config that gives none runs with.
    fn default() -> Self {
        Hackbench {
            groups: 10,
            fds: 20,
            loops: 100,
            runs: 1,
            pipe_buffers: 16,
            pipe_messages_per_buffer: 40,
            transport: Default::default(),
            socket_sndbuf_bytes: 163_840,
            message_truesize_bytes: 704,
        }
    }
}

/// How hackbench's messages travel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// One pipe per receiver (`hackbench -pipe`).
    #[default]
    Pipe,
    /// One `AF_UNIX` `SOCK_STREAM` socket pair per receiver (hackbench's
    /// default).
    Socket,
}

/// One receiver's channel.
#[derive(Debug, Clone)]
enum Channel {
    Pipe(PipeRef),
    Socket(UnixStreamRef),
}

impl Channel {
    async fn send(&self, ctx: &Ctx) {
        match self {
            Channel::Pipe(p) => pipe_write(ctx, p).await,
            Channel::Socket(s) => unix_stream_sendmsg(ctx, s).await,
        }
    }

    async fn recv(&self, ctx: &Ctx) {
        match self {
            Channel::Pipe(p) => pipe_read(ctx, p).await,
            Channel::Socket(s) => unix_stream_recvmsg(ctx, s).await,
        }
    }
}

impl Hackbench {
    /// From config parameters.
    pub fn from_params(p: &Params) -> Result<Self, String> {
        let h: Hackbench = parse_params(p)?;
        if h.groups == 0 || h.fds == 0 || h.runs == 0 {
            return Err("`groups`, `fds` and `runs` must be >= 1".into());
        }
        if h.socket_sndbuf_bytes < 2 || h.message_truesize_bytes == 0 {
            return Err(
                "`socket_sndbuf_bytes` must be >= 2 and `message_truesize_bytes` >= 1".into(),
            );
        }
        Ok(h)
    }
}

/// Driver events per message (a write and a read, their wake-ups and
/// switches): the golden seed002-hackbench (114 runs of 10 groups of 20
/// senders x 20 receivers x 100 loops, 45.6 M messages) has 286.8 M
/// events, 6.3 a message.
const EVENTS_PER_MESSAGE: u64 = 7;

impl Workload for Hackbench {
    fn estimate(&self, _cpus: u32) -> super::Estimate {
        use super::Figure;
        let (runs, groups, fds) = (
            u64::from(self.runs),
            u64::from(self.groups),
            u64::from(self.fds),
        );
        super::Estimate {
            events: Some(Figure::product(
                "runs",
                &[
                    (runs, "runs"),
                    (groups, "groups"),
                    (fds, "senders"),
                    (fds, "receivers"),
                    (u64::from(self.loops), "loops"),
                    (EVENTS_PER_MESSAGE, "events"),
                ],
            )),
            live_pages: None,
            // The main process and, per group, fds senders and receivers.
            tasks: Some(Figure::product(
                "groups",
                &[(groups, "groups"), (2 * fds, "senders and receivers")],
            ))
            .map(|f| Figure {
                value: f.value.saturating_add(1),
                how: format!("1 main + {}", f.how),
                ..f
            }),
        }
    }

    fn setup(&self, w: &Rc<World>, _streams: &Streams) -> TaskId {
        let me = self.clone();
        spawn_user(
            w,
            "hackbench",
            CpuId::BOOT,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    for _ in 0..me.runs {
                        let gate: GateRef = shared(Gate::default());
                        for _ in 0..me.groups {
                            let pipes: Rc<Vec<Channel>> = Rc::new(
                                (0..me.fds)
                                    .map(|_| match me.transport {
                                        Transport::Pipe => Channel::Pipe(new_pipe_paged(
                                            me.pipe_buffers,
                                            me.pipe_messages_per_buffer,
                                        )),
                                        Transport::Socket => Channel::Socket(new_unix_stream(
                                            me.socket_sndbuf_bytes,
                                            me.message_truesize_bytes,
                                        )),
                                    })
                                    .collect(),
                            );
                            for r in 0..me.fds as usize {
                                let (pipes, n) = (Rc::clone(&pipes), me.fds * me.loops);
                                let gate = Rc::clone(&gate);
                                sys_fork(
                                    &ctx,
                                    "receiver",
                                    Box::new(move |c: Ctx| {
                                        Box::pin(async move {
                                            wait_gate(&c, &gate).await;
                                            for _ in 0..n {
                                                pipes[r].recv(&c).await;
                                            }
                                        })
                                    }),
                                )
                                .await;
                            }
                            for _ in 0..me.fds {
                                let (pipes, loops) = (Rc::clone(&pipes), me.loops);
                                let gate = Rc::clone(&gate);
                                sys_fork(
                                    &ctx,
                                    "sender",
                                    Box::new(move |c: Ctx| {
                                        Box::pin(async move {
                                            wait_gate(&c, &gate).await;
                                            for _ in 0..loops {
                                                for p in pipes.iter() {
                                                    p.send(&c).await;
                                                }
                                            }
                                        })
                                    }),
                                )
                                .await;
                            }
                        }
                        open_gate(&ctx, &gate).await;
                        while sys_wait(&ctx).await.is_some() {}
                    }
                })
            }),
        )
    }
}

/// The registry entry of `hackbench`.
pub const ENTRY: WorkloadEntry = WorkloadEntry {
    name: "hackbench",
    description: "seed 002: hackbench over pipes or AF_UNIX sockets (groups of senders and receivers), repeated runs",
    new: |p, _| super::resolved(Hackbench::from_params(p)?),
    page_sizes_kib: super::PAGE_SIZE_4K_ONLY,
};
