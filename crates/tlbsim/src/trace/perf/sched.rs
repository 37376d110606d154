//! The scheduler's tracepoints (`sched:*`) and `task:task_newtask`: tasks
//! created, exec'd and exited, their sleeps and who woke them, their
//! preemptions and migrations.

use super::line::{field, num, Line};
use super::{Conv, Task};
use crate::trace::{EventKind, TaskKind, TaskRec};

/// `CLONE_VM`: the child shares the parent's address space.
const CLONE_VM: u64 = 0x100;
/// `CLONE_THREAD`: the child joins the parent's thread group.
const CLONE_THREAD: u64 = 0x10000;

/// What a child with clone flags `flags` is: a thread (`CLONE_THREAD`), a
/// process in its parent's mm (`CLONE_VM` alone: `vfork()`,
/// `posix_spawn()`), or a process with a copy.
fn kind_of_clone(flags: u64) -> TaskKind {
    if flags & CLONE_THREAD != 0 {
        TaskKind::Thread
    } else if flags & CLONE_VM != 0 {
        TaskKind::Vfork
    } else {
        TaskKind::Process
    }
}

/// A task first seen now, running, a process until its lines say more.
pub(super) fn new_task(tid: u32, pid: u32, parent: u32, comm: &str) -> Task {
    Task {
        rec: TaskRec {
            tid,
            pid,
            parent,
            kind: TaskKind::Process,
            comm: comm.split_whitespace().collect::<Vec<_>>().join("_"),
        },
        pid_seen: false,
        running: true,
        open_block: None,
        pending: None,
    }
}

impl Conv {
    /// A `sched:` or `task:` line `p` of task `me` (if kept), at `t`.
    pub(super) fn sched(&mut self, p: &Line<'_>, me: Option<u32>, t: u64) {
        match p.event {
            "task:task_newtask" => self.newtask(p, me),
            "sched:sched_process_fork" => {
                if let Some(parent) = me {
                    self.fork(p, parent, t);
                }
            }
            "sched:sched_process_exec" => {
                if let Some(m) = me {
                    self.tasks.get_mut(&m).expect("present").rec.comm = p.comm.to_string();
                    self.push(t, m, EventKind::Exec);
                }
            }
            "sched:sched_process_exit" => {
                if let Some(m) = me {
                    self.wake_waiting_parent(m, t);
                    self.push(t, m, EventKind::Exit);
                }
            }
            "sched:sched_switch" => self.switch(p, t),
            "sched:sched_wakeup" => {
                if let Some(waker) = me {
                    self.wakeup(p, waker, t);
                }
            }
            "sched:sched_migrate_task" => {
                let target = field(p.trace, "pid").and_then(num).map(|x| x as u32);
                let dest = field(p.trace, "dest_cpu").and_then(num);
                if let (Some(target), Some(dest)) = (target, dest) {
                    if self.tasks.contains_key(&target) {
                        self.push(t, target, EventKind::Migrate { cpu: dest as u32 });
                    }
                }
            }
            _ => {}
        }
    }

    /// `task:task_newtask`, in the parent before its
    /// `sched_process_fork`: the child's clone flags.
    fn newtask(&mut self, p: &Line<'_>, me: Option<u32>) {
        let flags = field(p.trace, "clone_flags").and_then(|f| u64::from_str_radix(f, 16).ok());
        if let (Some(_), Some(child), Some(flags)) =
            (me, field(p.trace, "pid").and_then(num), flags)
        {
            self.clone_flags.insert(child as u32, flags);
        }
    }

    /// `sched:sched_process_fork` in `parent`: a kept child, a thread, a
    /// process in its parent's mm or a process with a copy, by the flags
    /// `task_newtask` gave, else `clone`'s own (`clone3` and `vfork` pass
    /// none readable here: a process).
    fn fork(&mut self, p: &Line<'_>, parent: u32, t: u64) {
        let Some(child) = field(p.trace, "child_pid").and_then(num) else {
            return;
        };
        let child = child as u32;
        let comm = field(p.trace, "child_comm").unwrap_or(p.comm);
        let ptask = &self.tasks[&parent];
        let kind = match (self.clone_flags.remove(&child), ptask.pending) {
            (Some(f), _) => kind_of_clone(f),
            (None, Some((n, a, _))) if n == self.nr.clone => kind_of_clone(a[0]),
            _ => TaskKind::Process,
        };
        let pid = if kind == TaskKind::Thread {
            ptask.rec.pid
        } else {
            child
        };
        let mut c = new_task(child, pid, parent, comm);
        c.rec.kind = kind;
        c.running = false;
        self.tasks.insert(child, c);
        self.order.push(child);
        self.push(t, parent, EventKind::Clone { child });
    }

    /// `sched:sched_switch`: the task going out is preempted (still
    /// runnable) or blocks (its waker found later); the one coming in runs.
    fn switch(&mut self, p: &Line<'_>, t: u64) {
        let prev = field(p.trace, "prev_pid").and_then(num).map(|x| x as u32);
        let next = field(p.trace, "next_pid").and_then(num).map(|x| x as u32);
        let state = field(p.trace, "prev_state").unwrap_or("R");
        if let Some(prev) = prev.filter(|x| self.tasks.contains_key(x)) {
            if state.starts_with('R') {
                self.push(t, prev, EventKind::Preempt);
            } else if !state.starts_with('X') && !state.starts_with('Z') {
                let i = self.push(t, prev, EventKind::Block { waker: None, ns: 0 });
                self.tasks.get_mut(&prev).expect("present").open_block = Some((i, t));
            }
            self.tasks.get_mut(&prev).expect("present").running = false;
        }
        if let Some(next) = next.filter(|x| self.tasks.contains_key(x)) {
            self.resume(next, t, p.cpu);
        }
    }

    /// `sched:sched_wakeup` by `waker`: the first waker of a sleep that
    /// has none yet.
    fn wakeup(&mut self, p: &Line<'_>, waker: u32, t: u64) {
        let Some(target) = field(p.trace, "pid").and_then(num).map(|x| x as u32) else {
            return;
        };
        let Some((i, _)) = self.tasks.get(&target).and_then(|tk| tk.open_block) else {
            return;
        };
        if waker == target {
            return;
        }
        if let EventKind::Block {
            waker: w @ None, ..
        } = &mut self.events[i].kind
        {
            *w = Some(waker);
            self.push(t, waker, EventKind::Wake { target });
        }
    }

    /// A process's exit wakes its parent if it sleeps (in `wait4()`, or
    /// on a pipe the child held) from `exit_notify()`, which runs after
    /// `perf_event_exit_task()`: perf never sees that wake-up, so it is
    /// written here, as the exiting child's last act (`wake` before
    /// `exit`). A thread's exit is left alone: its `pthread_join` waker
    /// (`CLONE_CHILD_CLEARTID`'s futex wake in `exit_mm()`) comes before
    /// and is recorded.
    fn wake_waiting_parent(&mut self, tid: u32, t: u64) {
        let (parent, kind) = match self.tasks.get(&tid) {
            Some(c) => (c.rec.parent, c.rec.kind),
            None => return,
        };
        if kind != TaskKind::Process {
            return;
        }
        let Some((i, _)) = self.tasks.get(&parent).and_then(|pt| pt.open_block) else {
            return;
        };
        if let EventKind::Block {
            waker: w @ None, ..
        } = &mut self.events[i].kind
        {
            *w = Some(tid);
            self.push(t, tid, EventKind::Wake { target: parent });
        }
    }
}
