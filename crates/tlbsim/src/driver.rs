//! The timing driver: runs the world as a discrete-event simulation. Every
//! step a task posts takes simulated time from the profile; broadcast TLBIs
//! reach their targets after a latency; DVM Syncs are served one at a time by
//! the misc node. Events are ordered by `(time, sequence)`.

use crate::engine::exec::poll_once;
use crate::engine::queue::EventQueue;
use crate::engine::Ns;
use crate::hw::{AccessTrace, CpuId};
use crate::kernel::{sched, Ctx, LockId, Op, OpResult, TaskState, World};
use crate::observe::Event;
use std::collections::VecDeque;
use std::rc::Rc;

/// Does the invalidation scan the whole TLB (`ASIDE1`, `VMALLE1`)?
fn whole_tlb(scope: crate::hw::tlb::TlbiScope) -> bool {
    matches!(
        scope,
        crate::hw::tlb::TlbiScope::Asid(_) | crate::hw::tlb::TlbiScope::All
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// The CPU's current step finishes.
    StepDone(CpuId),
    /// A broadcast TLBI reaches its targets.
    DvmApply(usize),
    /// The misc node finished the DVM Sync of a CPU.
    SyncDone(CpuId),
    /// A reschedule IPI arrives.
    Kick(CpuId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Running kernel/user code (being polled) or between steps.
    Free,
    /// A timed step is under way.
    Step,
    /// DSB ISH waiting for this CPU's broadcasts to reach everyone.
    DsbInflight,
    /// DSB ISH waiting for / in DVM Sync service.
    DsbSync,
    /// Spinning on a lock.
    Lock(LockId),
    /// The idle task waits for work.
    Idle,
}

/// Why a run stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The checker found a violation (its report).
    Violation(String),
    /// Simulated time passed the limit.
    TimeLimit(Ns),
    /// Nothing can make progress.
    Deadlock(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Violation(r) => write!(f, "checker violation:\n{r}"),
            RunError::TimeLimit(t) => write!(f, "simulated time limit of {t} ns reached"),
            RunError::Deadlock(s) => write!(f, "deadlock: {s}"),
        }
    }
}

/// The discrete-event driver.
pub struct TimingDriver {
    w: Rc<World>,
    q: EventQueue<Ev>,
    wait: Vec<Wait>,
    result: Vec<Option<OpResult>>,
    mn_queue: VecDeque<(CpuId, Ns)>,
    mn_busy: bool,
    trace: Vec<AccessTrace>,
    limit_ns: Ns,
    /// Inject speculative walks (see [`TimingDriver::set_speculative_walks`]).
    speculative: bool,
    /// Per CPU: the mm and VA of its last user access.
    last_va: Vec<Option<(crate::hw::tlb::MmId, u64)>>,
}

impl std::fmt::Debug for TimingDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimingDriver")
            .field("queued", &self.q.len())
            .finish()
    }
}

impl TimingDriver {
    /// A driver for `w` that stops at `limit_ns` of simulated time.
    pub fn new(w: Rc<World>, limit_ns: Ns) -> Self {
        let n = w.ncpus();
        Self {
            speculative: false,
            last_va: vec![None; n],
            w,
            q: EventQueue::default(),
            wait: vec![Wait::Free; n],
            result: vec![None; n],
            mn_queue: VecDeque::new(),
            mn_busy: false,
            trace: Vec::new(),
            limit_ns,
        }
    }

    fn now(&self) -> Ns {
        self.w.now.get()
    }

    /// Runs until `done(world)` holds after an event; returns the time then.
    pub fn run_until(&mut self, done: impl Fn(&World) -> bool) -> Result<Ns, RunError> {
        for cpu in 0..self.w.ncpus() {
            self.run_cpu(cpu);
        }
        loop {
            if let Some(r) = self.w.failure() {
                return Err(RunError::Violation(r));
            }
            if done(&self.w) {
                return Ok(self.now());
            }
            let Some((t, ev)) = self.q.pop() else {
                return Err(RunError::Deadlock(self.describe()));
            };
            if t > self.limit_ns {
                return Err(RunError::TimeLimit(self.limit_ns));
            }
            self.w.now.set(t);
            self.w.stats.borrow_mut().events += 1;
            match ev {
                Ev::StepDone(cpu) => {
                    let r = self.result[cpu].take().unwrap_or(OpResult::Unit);
                    self.complete(cpu, r);
                }
                Ev::DvmApply(id) => self.dvm_apply(id),
                Ev::SyncDone(cpu) => {
                    self.w.hw.borrow_mut().cpus[cpu].dvm_since_dsb = false;
                    self.w.emit(Event::DsbDone { cpu });
                    self.mn_busy = false;
                    self.mn_start();
                    self.complete(cpu, OpResult::Unit);
                }
                Ev::Kick(cpu) => {
                    if self.wait[cpu] == Wait::Idle {
                        self.complete(cpu, OpResult::Unit);
                    }
                }
            }
        }
    }

    fn describe(&self) -> String {
        let k = self.w.k.borrow();
        let mut s = String::new();
        for (c, pc) in k.cpus.iter().enumerate() {
            s.push_str(&format!(
                "cpu{c}: {} ({:?}), rq {:?}; ",
                k.tasks[pc.current].name, self.wait[c], pc.rq
            ));
        }
        s
    }

    /// Completes the CPU's outstanding step and runs it on.
    fn complete(&mut self, cpu: CpuId, r: OpResult) {
        self.wait[cpu] = Wait::Free;
        let task = self.w.k.borrow().cpus[cpu].current;
        let mb = std::rc::Rc::clone(&self.w.k.borrow().tasks[task].mb);
        mb.complete(r);
        self.run_cpu(cpu);
    }

    /// Polls the CPU's current task until it posts a step that takes time.
    fn run_cpu(&mut self, cpu: CpuId) {
        loop {
            let task = self.w.k.borrow().cpus[cpu].current;
            let fut = self.w.futures.borrow_mut()[task].take();
            let mut fut = match fut {
                Some(f) => f,
                None => {
                    let program = self.w.programs.borrow_mut()[task]
                        .take()
                        .expect("a task without future has a program");
                    let ctx = Ctx::new(&self.w, task);
                    if self.w.k.borrow().tasks[task].idle {
                        program(ctx)
                    } else {
                        sched::start_program(ctx, program)
                    }
                }
            };
            let done = poll_once(fut.as_mut()).is_ready();
            self.w.futures.borrow_mut()[task] = Some(fut);
            assert!(!done, "task {task} returned without do_exit");
            let mb = Rc::clone(&self.w.k.borrow().tasks[task].mb);
            let op = mb.take_posted().expect("a pending task posted a step");
            if let Some(next_poll) = self.dispatch(cpu, task, op) {
                mb.complete(next_poll);
                continue;
            }
            return;
        }
    }

    /// With `on`, every kernel or user `Work` step of a CPU whose TTBR0
    /// holds an mm is preceded by a speculative walk of the last VA that CPU
    /// accessed in that mm (a lazy CPU running a kernel thread keeps walking
    /// the user tables it still has installed). Timing is unchanged.
    pub fn set_speculative_walks(&mut self, on: bool) {
        self.speculative = on;
    }

    fn speculate(&mut self, cpu: CpuId) {
        let Some(t) = self.w.hw.borrow().cpus[cpu].ttbr0 else {
            return;
        };
        if let Some((mm, va)) = self.last_va[cpu] {
            if mm == t.mm {
                crate::effects::speculate(&self.w, cpu, va, &mut self.trace);
            }
        }
    }

    fn after(&mut self, cpu: CpuId, ns: Ns, r: OpResult) {
        self.wait[cpu] = Wait::Step;
        self.result[cpu] = Some(r);
        let t = self.now() + ns;
        self.q.push(t, Ev::StepDone(cpu));
    }

    fn take_stolen(&self, cpu: CpuId) -> Ns {
        std::mem::take(&mut self.w.hw.borrow_mut().cpus[cpu].stolen_ns)
    }

    /// Starts `op`; returns `Some(result)` if it completes at once (zero
    /// time) and the task should be polled again immediately.
    fn dispatch(&mut self, cpu: CpuId, task: usize, op: Op) -> Option<OpResult> {
        let w = Rc::clone(&self.w);
        let p = &w.profile;
        match op {
            Op::Work { ns, user: _ } => {
                if self.speculative {
                    self.speculate(cpu);
                }
                let s = self.take_stolen(cpu);
                w.stats.borrow_mut().cpu[cpu].busy_ns += ns;
                self.after(cpu, ns + s, OpResult::Unit);
            }
            Op::Access { va, write } => {
                if self.speculative {
                    self.last_va[cpu] = w.hw.borrow().cpus[cpu].ttbr0.map(|t| (t.mm, va));
                }
                let (r, info) = crate::effects::access(&w, cpu, va, write, &mut self.trace);
                let cost = if info.tlb_hit {
                    p.tlb.tlb_hit_ns
                } else {
                    p.tlb.tlb_hit_ns + p.tlb.walk_level_ns * u64::from(info.levels_walked)
                };
                let s = self.take_stolen(cpu);
                self.after(cpu, cost + s, OpResult::Access(r));
            }
            Op::Tlbi { scope, broadcast } => {
                match crate::effects::tlbi(&w, cpu, scope, broadcast) {
                    Some(id) => {
                        let cross = if p.topology.sockets > 1 {
                            p.arm64.dvm_cross_socket_ns
                        } else {
                            0
                        };
                        let at = self.now() + p.arm64.dvm_op_latency_ns + cross;
                        self.q.push(at, Ev::DvmApply(id));
                        self.after(cpu, p.arm64.tlbi_broadcast_issue_ns, OpResult::Unit);
                    }
                    None => {
                        let cost = if whole_tlb(scope) {
                            p.arm64.tlbi_local_all_ns
                        } else {
                            p.arm64.tlbi_local_ns
                        };
                        self.after(cpu, cost, OpResult::Unit);
                    }
                }
            }
            Op::DsbSt | Op::DsbNsh => self.after(cpu, p.arm64.dsb_local_ns, OpResult::Unit),
            Op::Isb => self.after(cpu, p.arm64.isb_ns, OpResult::Unit),
            Op::DsbIsh => {
                w.stats.borrow_mut().cpu[cpu].dsb_ish += 1;
                if w.hw.borrow().cpus[cpu].inflight > 0 {
                    self.wait[cpu] = Wait::DsbInflight;
                } else {
                    self.dsb_sync(cpu);
                }
            }
            Op::SetTtbr0(t) => {
                crate::effects::set_ttbr0(&w, cpu, t);
                self.after(cpu, p.arm64.ttbr_write_ns, OpResult::Unit);
            }
            Op::Atomic => self.after(cpu, p.kernel.atomic_ns, OpResult::Unit),
            Op::Lock(l) | Op::LockShared(l) => {
                let shared = matches!(op, Op::LockShared(_));
                let (got, name) = {
                    let mut k = w.k.borrow_mut();
                    let lock = &mut k.locks[l];
                    (lock.acquire(task, shared, self.now()), lock.name)
                };
                w.stats.borrow_mut().lock(name).acquisitions += 1;
                if got {
                    self.after(cpu, p.kernel.atomic_ns, OpResult::Unit);
                } else {
                    self.wait[cpu] = Wait::Lock(l);
                }
            }
            Op::Unlock(l) | Op::UnlockShared(l) => {
                let shared = matches!(op, Op::UnlockShared(_));
                let (granted, name) = {
                    let mut k = w.k.borrow_mut();
                    let lock = &mut k.locks[l];
                    (lock.release(shared), lock.name)
                };
                for g in granted {
                    let wcpu = w.k.borrow().tasks[g.task].cpu;
                    let handoff = p.kernel.cacheline_transfer_ns;
                    let waited = self.now() + handoff - g.since_ns;
                    w.stats
                        .borrow_mut()
                        .lock(name)
                        .contended_wait_ns
                        .record(waited);
                    self.after(wcpu, handoff, OpResult::Unit);
                }
                self.after(cpu, p.kernel.atomic_ns, OpResult::Unit);
            }
            Op::SwitchTo(_next) => {
                // The posting task parks with its step completed; it resumes
                // when it is switched to again. A task that exited is dropped.
                let state = w.k.borrow().tasks[task].state;
                if matches!(state, TaskState::Zombie | TaskState::Dead) {
                    w.futures.borrow_mut()[task] = None;
                } else {
                    let mb = Rc::clone(&w.k.borrow().tasks[task].mb);
                    mb.complete(OpResult::Unit);
                }
                self.wait[cpu] = Wait::Free;
                self.run_cpu(cpu);
            }
            Op::Idle => {
                let work = {
                    let k = w.k.borrow();
                    k.cpus[cpu].need_resched || !k.cpus[cpu].rq.is_empty()
                };
                if work {
                    return Some(OpResult::Unit);
                }
                w.hw.borrow_mut().cpus[cpu].stolen_ns = 0;
                self.wait[cpu] = Wait::Idle;
            }
            Op::ReschedIpi(target) => {
                w.stats.borrow_mut().cpu[cpu].ipis_sent += 1;
                let at = self.now() + p.kernel.resched_ipi_ns;
                self.q.push(at, Ev::Kick(target));
                self.after(cpu, p.kernel.atomic_ns, OpResult::Unit);
            }
        }
        None
    }

    fn dsb_sync(&mut self, cpu: CpuId) {
        let p = &self.w.profile;
        if self.w.hw.borrow().cpus[cpu].dvm_since_dsb {
            self.w.stats.borrow_mut().cpu[cpu].dvm_syncs += 1;
            self.wait[cpu] = Wait::DsbSync;
            self.mn_queue.push_back((cpu, self.now()));
            self.mn_start();
        } else {
            let d = p.arm64.dsb_local_ns;
            self.after(cpu, d, OpResult::Unit);
        }
    }

    /// The misc node starts serving the next DVM Sync, if idle.
    fn mn_start(&mut self) {
        if self.mn_busy {
            return;
        }
        let Some((cpu, since)) = self.mn_queue.pop_front() else {
            return;
        };
        self.mn_busy = true;
        let p = &self.w.profile.arm64;
        let waited = self.now() - since;
        self.w
            .stats
            .borrow_mut()
            .dvm_sync_queue_wait_ns
            .record(waited);
        // With several sockets the Sync also makes a round trip to the other
        // socket's misc node (docs/model.md).
        let cross = if self.w.profile.topology.sockets > 1 {
            2 * p.dvm_cross_socket_ns
        } else {
            0
        };
        let service = p.dvm_sync_base_ns + p.dvm_sync_per_target_ns * self.w.ncpus() as u64 + cross;
        let at = self.now() + service;
        self.q.push(at, Ev::SyncDone(cpu));
    }

    fn dvm_apply(&mut self, id: usize) {
        let issuer = {
            let mut hw = self.w.hw.borrow_mut();
            let mut st = self.w.stats.borrow_mut();
            let f = hw.inflight[id].as_ref().expect("live");
            let issuer = f.issuer;
            let a = &self.w.profile.arm64;
            let stall = if whole_tlb(f.scope) {
                a.dvm_op_target_stall_all_ns
            } else {
                a.dvm_op_target_stall_ns
            };
            let wait = &self.wait;
            hw.dvm_apply_all(id, |c, t| {
                if t != issuer {
                    st.cpu[t].dvm_ops_received += 1;
                    // An idle CPU absorbs the work (docs/model.md).
                    if wait[t] != Wait::Idle {
                        c.stolen_ns += stall;
                    }
                }
            })
        };
        if self.w.hw.borrow().cpus[issuer].inflight == 0 && self.wait[issuer] == Wait::DsbInflight {
            self.dsb_sync(issuer);
        }
    }
}
