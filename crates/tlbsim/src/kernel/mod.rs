//! The modelled kernel: tasks, address spaces, scheduling, memory syscalls,
//! and the architecture policies chosen by name.
//!
//! Kernel routines are `async fn`s taking a [`Ctx`]; every hardware step and
//! every access to shared kernel state that other CPUs race with is an await
//! on [`Ctx::step`]. Code between awaits is atomic.
//!
//! The files are laid out as Linux's source tree: `mm/` is Linux's mm/,
//! `sched/` its kernel/sched/, `fork.rs`, `exit.rs` kernel/fork.c and
//! kernel/exit.c, `exec.rs` fs/exec.c, `arm64/` and `x86/` the
//! architectures' TLB code. The frame the simulator adds (`ctx.rs`,
//! `op.rs`, `lock.rs`, `world.rs`, `registry.rs`, `policy.rs`,
//! `percpu.rs`, `task.rs`) stays at the top.

pub mod arm64;
pub mod entry;
pub mod exec;
pub mod exit;
pub mod file;
pub mod fork;
pub mod hrtimer;
pub mod kthread;
pub mod mm;
pub mod percpu;
pub mod pipe;
pub mod policy;
pub mod rcu;
pub mod registry;
pub mod sched;
pub mod sys;
pub mod task_mmu;
pub mod tick;
pub mod tlbflush;
pub mod unix_socket;
pub mod x86;

mod ctx;
mod lock;
mod op;
mod task;
mod world;

pub use ctx::Ctx;
pub use lock::{Lock, LockWaiter};
pub use mm::{AnonId, AnonMap, Mm, ShmemId, ShmemMap, Vma};
pub use op::{Dsb, GuestExit, Op, OpResult, TaskMailbox};
pub use task::{Rq, Task, TaskState};
pub use world::{Guest, IpiHandler, KState, Machine, Program, TaskFuture, World, KERNEL_ID_SHIFT};

pub use crate::observe::TaskId;
/// Index of a modelled spinlock.
pub type LockId = usize;
