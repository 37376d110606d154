//! Tasks (`struct task_struct`) and the per-CPU scheduler state.

use super::{TaskId, TaskMailbox};
use crate::engine::Ns;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::MmId;
use crate::hw::CpuId;
use std::collections::VecDeque;
use std::rc::Rc;

/// Scheduling state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// On a CPU.
    Running,
    /// On a run queue.
    Runnable,
    /// Sleeping until woken.
    Blocked,
    /// Exited, waiting for its parent.
    Zombie,
    /// Reaped.
    Dead,
}

/// A task (`struct task_struct`).
#[derive(Debug)]
pub struct Task {
    /// Id.
    pub id: TaskId,
    /// Name (comm).
    pub name: String,
    /// Own address space; `None` for kernel threads.
    pub mm: Option<MmId>,
    /// Address space whose tables the CPU uses while this task runs.
    pub active_mm: Option<MmId>,
    /// State.
    pub state: TaskState,
    /// CPU it runs on or last ran on.
    pub cpu: CpuId,
    /// The per-CPU idle task.
    pub idle: bool,
    /// Parent.
    pub parent: Option<TaskId>,
    /// Children not yet reaped.
    pub children: u32,
    /// Exited children waiting for `wait`.
    pub zombies: VecDeque<TaskId>,
    /// CPUs it may run on (`None`: all).
    pub affinity: Option<CpuMask>,
    /// When its current slice started.
    pub slice_start_ns: Ns,
    /// When it last went to sleep.
    pub sleep_start_ns: Ns,
    /// CFS virtual runtime (all tasks have the same weight).
    pub vruntime_ns: Ns,
    /// Still executing on a CPU (until its switch-out completes).
    pub on_cpu: bool,
    /// On a run queue.
    pub queued: bool,
    /// Its mailbox.
    pub mb: Rc<TaskMailbox>,
    /// Its deferred TLB flush from reclaim (`current->tlb_ubc`).
    pub tlb_ubc: super::mm::tlbbatch::TlbUbc,
    /// The number of its current timed sleep ([`super::hrtimer`]), odd
    /// while the timer is armed: a timer interrupt for another number is
    /// one `hrtimer_cancel()` took back.
    pub hrtimer_seq: u64,
    /// The parent waiting for this `vfork()` child to exec or exit
    /// (`vfork_done`), if any.
    pub vfork_parent: Option<TaskId>,
}

/// Per-CPU scheduler state.
#[derive(Debug, Clone)]
pub struct Rq {
    /// Running task.
    pub current: TaskId,
    /// Idle task.
    pub idle: TaskId,
    /// Run queue (FIFO, round robin).
    pub rq: VecDeque<TaskId>,
    /// CFS `min_vruntime` of this CPU's run queue (monotonic).
    pub min_vruntime_ns: Ns,
    /// Reschedule requested.
    pub need_resched: bool,
    /// mm to drop in `finish_task_switch` (lazy reference of the prev task).
    pub mm_to_drop: Option<MmId>,
    /// The task that switched out last (`prev` of `finish_task_switch`).
    pub last: Option<TaskId>,
    /// A task picked by `schedule()` whose switch is under way (the CPU is
    /// no longer idle for wake-up placement, as `rq->curr` in Linux).
    pub picked: Option<TaskId>,
    /// `local_irq_save()` nesting: IPIs wait while it is non-zero.
    pub irqs_off: u32,
    /// IPI handlers running (nesting depth, 0 or 1 in the model).
    pub in_irq: u32,
    /// Quiescent states passed (`kernel/rcu.rs`).
    pub rcu_qs: u64,
}
