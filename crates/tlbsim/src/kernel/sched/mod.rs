//! Scheduling, laid out as Linux's kernel/sched/:
//!
//! | File | Linux | What |
//! |---|---|---|
//! | `core.rs` | kernel/sched/core.c | per-CPU FIFO run queues with time slices, `schedule()`, `context_switch()` with lazy TLB for tasks without an mm, wake-ups with reschedule IPIs, affinity, `sched_yield()` |
//! | `fair.rs` | kernel/sched/fair.c | a woken task's placement and preemption |
//! | `idle.rs` | kernel/sched/idle.c | the idle task |
//! | `wait.rs` | kernel/sched/wait.c, include/linux/wait.h | sleeping until woken |
//!
//! The process lifecycle is where Linux has it: `fork()`, `clone()` and
//! `vfork()` in `kernel/fork.rs`, `exit()` and `wait()` in
//! `kernel/exit.rs`, `execve()` in `kernel/exec.rs`.

pub mod core;
pub mod fair;
pub mod idle;
pub mod wait;

pub(crate) use self::core::enqueue;
pub use self::core::{
    advance, finish_task_switch, maybe_preempt, schedule, set_cpus_allowed_replayed, start_program,
    sys_sched_setaffinity, sys_sched_yield, wake_up,
};
pub use idle::idle_main;
pub use wait::{block_until_woken, wait_event};
