//! The modelled kernel: tasks, address spaces, scheduling, memory syscalls,
//! and the architecture policies chosen by name.
//!
//! Kernel routines are `async fn`s taking a [`Ctx`]; every hardware step and
//! every access to shared kernel state that other CPUs race with is an await
//! on [`Ctx::step`]. Code between awaits is atomic.

pub mod anon;
pub mod arm64;
pub mod brk;
pub mod exec;
pub mod file;
pub mod filemap;
pub mod folio;
pub mod hrtimer;
pub mod madvise;
pub mod migrate;
pub mod mm;
pub mod mremap;
pub mod percpu;
pub mod pgtable;
pub mod pipe;
pub mod policy;
pub mod rcu;
pub mod registry;
pub mod rmap;
pub mod sched;
pub mod shmem;
pub mod swap;
pub mod tick;
pub mod tlbbatch;
pub mod tlbflush;
pub mod unix_socket;
pub mod vmscan;
pub mod x86;

mod ctx;
mod lock;
mod mm_types;
mod op;
mod task;
mod world;

pub use ctx::Ctx;
pub use lock::{Lock, LockWaiter};
pub use mm_types::{AnonId, AnonMap, Mm, ShmemId, ShmemMap, Vma};
pub use op::{Dsb, GuestExit, Op, OpResult, TaskMailbox};
pub use task::{Rq, Task, TaskState};
pub use world::{Guest, IpiHandler, KState, Machine, Program, TaskFuture, World, KERNEL_ID_SHIFT};

/// Index of a task.
pub type TaskId = usize;
/// Index of a modelled spinlock.
pub type LockId = usize;
