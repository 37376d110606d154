//! The modelled kernel: tasks, address spaces, scheduling, memory syscalls,
//! and the architecture policies chosen by name.
//!
//! Kernel routines are `async fn`s taking a [`Ctx`]; every hardware step and
//! every access to shared kernel state that other CPUs race with is an await
//! on [`Ctx::step`]. Code between awaits is atomic.

pub mod arm64;
pub mod mm;
pub mod pgtable;
pub mod pipe;
pub mod policy;
pub mod registry;
pub mod sched;
pub mod tlbflush;
pub mod x86;

use crate::config::{KernelConfig, Profile};
use crate::engine::exec::{KFuture, Mailbox};
use crate::engine::Ns;
use crate::hw::cpumask::CpuMask;
use crate::hw::mem::{Perms, TableId};
use crate::hw::tlb::{Asid, MmId, TlbiScope};
use crate::hw::{CpuId, Fault, Hw, Ttbr0};
use crate::observe::{Event, Observer};
use crate::stats::Stats;
use policy::{AsidAllocator, TlbPolicy};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

/// Index of a task.
pub type TaskId = usize;
/// Index of a modelled spinlock.
pub type LockId = usize;

/// log2 of the span one PTE table maps (2 MiB with 4 KiB pages): the
/// granule of the split page-table locks.
pub const PTE_TABLE_SHIFT: u32 = 21;

/// One step a task asks the driver to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Busy work for `ns` (user code when `user`).
    Work {
        /// Duration.
        ns: u64,
        /// User-mode work (preemptible).
        user: bool,
    },
    /// A user load or store.
    Access {
        /// Virtual address.
        va: u64,
        /// Store.
        write: bool,
    },
    /// A TLBI instruction.
    Tlbi {
        /// What it invalidates.
        scope: TlbiScope,
        /// Inner-shareable form (`...IS`).
        broadcast: bool,
    },
    /// `DSB ISHST` / `DSB NSHST`: orders page-table stores before TLBIs.
    DsbSt,
    /// `DSB ISH`: waits for this CPU's broadcast TLBIs, via a DVM Sync.
    DsbIsh,
    /// `DSB NSH`: waits for this CPU's local TLBIs.
    DsbNsh,
    /// `ISB`.
    Isb,
    /// Writes TTBR0 (and the ASID) of this CPU.
    SetTtbr0(Option<Ttbr0>),
    /// x86 `MOV CR3`: installs `cr3` (`None`: init_mm, no user mappings)
    /// and, with `flush = Some(pcid)`, invalidates every entry tagged with
    /// that PCID in the same instruction (CR3 write without the NOFLUSH bit;
    /// without PCIDs every entry is tagged 0).
    LoadCr3 {
        /// The new translation base.
        cr3: Option<Ttbr0>,
        /// The PCID whose entries the write flushes.
        flush: Option<Asid>,
    },
    /// One atomic read-modify-write of a shared kernel variable.
    Atomic,
    /// One atomic on a lock's word outside `Lock`/`Unlock` (a sleeping
    /// rwsem's count): like `Atomic`, but the timing driver moves the
    /// lock's cache line to this CPU (`Lock::line_rmw`).
    LockWord(LockId),
    /// Acquires a lock exclusively (waits while it is held).
    Lock(LockId),
    /// Acquires a lock shared (reader side of a reader-writer lock).
    LockShared(LockId),
    /// Releases an exclusive hold.
    Unlock(LockId),
    /// Releases a shared hold.
    UnlockShared(LockId),
    /// Context switch from the posting task to `next` on this CPU.
    SwitchTo(TaskId),
    /// The idle task waits for a reschedule.
    Idle,
    /// Sends a reschedule IPI to a CPU.
    ReschedIpi(CpuId),
    /// `smp_call_function_many(targets, handler, wait = 1)`: interrupts
    /// every target CPU, runs the registered handler there, and completes
    /// when all of them have returned (`World::register_ipi_handler`).
    CallFunction {
        /// CPUs to interrupt (the caller is not among them).
        targets: CpuMask,
        /// Index of the handler.
        handler: usize,
        /// Argument passed to the handler (e.g. the sender's CPU, whose
        /// per-CPU `flush_tlb_info` the handler reads).
        arg: usize,
    },
}

/// The result of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpResult {
    /// Nothing to report.
    Unit,
    /// Outcome of an access.
    Access(Result<(), Fault>),
}

/// A task's mailbox.
pub type TaskMailbox = Mailbox<Op, OpResult>;

/// A virtual memory area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Protection.
    pub perms: Perms,
}

/// An address space (`struct mm_struct`).
#[derive(Debug, Clone)]
pub struct Mm {
    /// Id (never reused).
    pub id: MmId,
    /// Top-level table page.
    pub pgd: TableId,
    /// VMAs by start address.
    pub vmas: BTreeMap<u64, Vma>,
    /// `mm_users`: tasks using the address space.
    pub users: u32,
    /// `mm_count`: references to the structure (users count as one, lazy
    /// borrowers one each).
    pub count: u32,
    /// `mm->context.id`: ASID generation and number (allocator-defined).
    pub context_id: u64,
    /// `mm_cpumask` (meaning is policy-defined).
    pub cpumask: CpuMask,
    /// Concurrent mmu_gathers on this mm (`mm->tlb_flush_pending`).
    pub tlb_flush_pending: u32,
    /// `mm->mmap_base`: mmap hands out the highest free range below it.
    pub mmap_base: u64,
    /// Not yet freed.
    pub live: bool,
    /// `mmap_lock` (reader-writer).
    pub mmap_lock: LockId,
    /// `mm->page_table_lock` (upper levels; unused by the modelled paths).
    pub ptl: LockId,
    /// Split PTE-table locks (`USE_SPLIT_PTE_PTLOCKS`): one per 2 MiB
    /// region that has a PTE table, by `va >> 21`, created on first use.
    pub pte_locks: BTreeMap<u64, LockId>,
}

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
}

/// Per-CPU scheduler state.
#[derive(Debug, Clone)]
pub struct PerCpu {
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
}

/// A waiter on a [`Lock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWaiter {
    /// Waiting task.
    pub task: TaskId,
    /// Wants a shared hold.
    pub shared: bool,
    /// When it started waiting.
    pub since_ns: Ns,
}

/// A modelled lock: a spinlock, or a reader-writer lock when taken shared
/// (mmap_lock). Waiters are served in arrival order (ticket/queued locks);
/// a shared request waits behind any queued writer (no writer starvation).
/// Waiting CPUs spin: the model does not sleep on locks (docs/model.md).
#[derive(Debug, Clone, Default)]
pub struct Lock {
    /// Name (for statistics).
    pub name: &'static str,
    /// Exclusive holder.
    pub holder: Option<TaskId>,
    /// Shared holders.
    pub readers: u32,
    /// Waiters in arrival order.
    pub waiters: VecDeque<LockWaiter>,
    /// When the exclusive holder got it (for hold times).
    pub held_since_ns: Ns,
    /// The CPU whose cache last held the lock word's line (timing driver).
    pub line_cpu: Option<CpuId>,
    /// When the line is free for the next atomic on it (timing driver).
    pub line_free_ns: Ns,
}

impl Lock {
    /// One atomic read-modify-write of the lock word by `cpu` at `now`:
    /// `atomic_ns` if the line is already in `cpu`'s cache, else
    /// `transfer_ns(last_cpu)` to move it from the CPU that held it; atomics
    /// on one line are served one at a time. Returns how long `cpu` waits
    /// for its atomic to complete.
    pub fn line_rmw(
        &mut self,
        cpu: CpuId,
        now: Ns,
        atomic_ns: Ns,
        transfer_ns: impl Fn(CpuId) -> Ns,
    ) -> Ns {
        let cost = match self.line_cpu {
            Some(c) if c != cpu => transfer_ns(c),
            _ => atomic_ns,
        };
        let start = now.max(self.line_free_ns);
        self.line_free_ns = start + cost;
        self.line_cpu = Some(cpu);
        self.line_free_ns - now
    }
}

impl Lock {
    /// Tries to take the lock for `task`; on failure the task is queued.
    pub fn acquire(&mut self, task: TaskId, shared: bool, now: Ns) -> bool {
        let free = self.holder.is_none() && self.waiters.is_empty();
        if shared && free {
            self.readers += 1;
            return true;
        }
        if !shared && free && self.readers == 0 {
            self.holder = Some(task);
            return true;
        }
        self.waiters.push_back(LockWaiter {
            task,
            shared,
            since_ns: now,
        });
        false
    }

    /// Releases one hold and hands the lock to the waiters now entitled to
    /// it, in order; returns them.
    pub fn release(&mut self, shared: bool) -> Vec<LockWaiter> {
        if shared {
            assert!(self.readers > 0, "shared unlock of {} not held", self.name);
            self.readers -= 1;
        } else {
            assert!(self.holder.is_some(), "unlock of {} not held", self.name);
            self.holder = None;
        }
        let mut granted = Vec::new();
        while let Some(&w) = self.waiters.front() {
            if self.holder.is_some() || (!w.shared && self.readers > 0) {
                break;
            }
            self.waiters.pop_front();
            if w.shared {
                self.readers += 1;
            } else {
                self.holder = Some(w.task);
            }
            granted.push(w);
        }
        granted
    }
}

/// All kernel state.
#[derive(Debug, Default)]
pub struct KState {
    /// Tasks by id.
    pub tasks: Vec<Task>,
    /// Address spaces by id.
    pub mms: Vec<Mm>,
    /// Per-CPU scheduler state.
    pub cpus: Vec<PerCpu>,
    /// Spinlocks.
    pub locks: Vec<Lock>,
}

/// A task's program.
pub type TaskFuture = KFuture<'static, ()>;
/// A deferred program: given its context, yields the task's future.
pub type Program = Box<dyn FnOnce(Ctx) -> TaskFuture>;
/// An IPI handler: runs on the interrupted CPU, in the context of the task
/// that was running there (`current`), with its own mailbox; the second
/// argument is the `arg` of the `Op::CallFunction` that sent it.
pub type IpiHandler = Rc<dyn Fn(Ctx, usize) -> TaskFuture>;

/// The whole modelled system: hardware, kernel, policies, observers.
pub struct World {
    /// The machine profile (after overrides).
    pub profile: Profile,
    /// Kernel configuration.
    pub kcfg: KernelConfig,
    /// Hardware.
    pub hw: RefCell<Hw>,
    /// Kernel.
    pub k: RefCell<KState>,
    /// Statistics.
    pub stats: RefCell<Stats>,
    /// The observer (checker), if any.
    pub observer: RefCell<Option<Box<dyn Observer>>>,
    /// TLB-flush policy.
    pub policy: Box<dyn TlbPolicy>,
    /// ASID allocator.
    pub asid: Box<dyn AsidAllocator>,
    /// Current simulated time (set by the driver).
    pub now: Cell<Ns>,
    /// Task futures by task id (taken out while polled).
    pub futures: RefCell<Vec<Option<TaskFuture>>>,
    /// Programs of tasks not started yet.
    pub programs: RefCell<Vec<Option<Program>>>,
    /// Handlers that `Op::CallFunction` runs on other CPUs.
    pub ipi_handlers: RefCell<Vec<IpiHandler>>,
    pte_version: Cell<u64>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("now", &self.now).finish()
    }
}

impl World {
    /// Builds a world with no tasks but one idle task per CPU.
    pub fn new(
        profile: Profile,
        kcfg: KernelConfig,
        policy: Box<dyn TlbPolicy>,
        asid: Box<dyn AsidAllocator>,
    ) -> Rc<World> {
        let hw = Hw::new(&profile);
        let n = hw.ncpus();
        let w = Rc::new(World {
            profile,
            kcfg,
            hw: RefCell::new(hw),
            k: RefCell::new(KState::default()),
            stats: RefCell::new(Stats::new(n)),
            observer: RefCell::new(None),
            policy,
            asid,
            now: Cell::new(0),
            futures: RefCell::new(Vec::new()),
            programs: RefCell::new(Vec::new()),
            ipi_handlers: RefCell::new(Vec::new()),
            pte_version: Cell::new(0),
        });
        for cpu in 0..n {
            let t = w.new_task(
                format!("swapper/{cpu}"),
                None,
                cpu,
                None,
                Box::new(sched::idle_main),
            );
            let mut k = w.k.borrow_mut();
            k.tasks[t].idle = true;
            k.tasks[t].state = TaskState::Running;
            k.cpus.push(PerCpu {
                current: t,
                idle: t,
                rq: VecDeque::new(),
                min_vruntime_ns: 0,
                need_resched: false,
                mm_to_drop: None,
                last: None,
                picked: None,
                irqs_off: 0,
            });
            k.tasks[t].on_cpu = true;
        }
        w.asid.init(&w);
        w.policy.init(&w);
        w
    }

    /// Number of CPUs.
    pub fn ncpus(&self) -> usize {
        self.profile.topology.cpus as usize
    }

    /// Registers a new task (not yet runnable) with `program`.
    pub fn new_task(
        &self,
        name: String,
        mm: Option<MmId>,
        cpu: CpuId,
        parent: Option<TaskId>,
        program: Program,
    ) -> TaskId {
        let mut k = self.k.borrow_mut();
        let id = k.tasks.len();
        k.tasks.push(Task {
            id,
            name,
            mm,
            active_mm: mm,
            state: TaskState::Blocked,
            cpu,
            idle: false,
            parent,
            children: 0,
            zombies: VecDeque::new(),
            affinity: None,
            slice_start_ns: 0,
            sleep_start_ns: 0,
            vruntime_ns: 0,
            on_cpu: false,
            queued: false,
            mb: Rc::default(),
        });
        self.futures.borrow_mut().push(None);
        self.programs.borrow_mut().push(Some(program));
        id
    }

    /// Creates an empty address space with a fresh top-level table.
    pub fn new_mm(&self) -> MmId {
        let pgd = self.hw.borrow_mut().mem.alloc_table(0);
        let mmap_lock = self.new_lock("mmap_lock");
        let ptl = self.new_lock("page_table_lock");
        let mut k = self.k.borrow_mut();
        let id = k.mms.len() as MmId;
        k.mms.push(Mm {
            id,
            pgd,
            vmas: BTreeMap::new(),
            users: 1,
            count: 1,
            context_id: 0,
            cpumask: CpuMask::new(self.ncpus()),
            tlb_flush_pending: 0,
            mmap_base: 0x7f00_0000_0000,
            live: true,
            mmap_lock,
            ptl,
            pte_locks: BTreeMap::new(),
        });
        id
    }

    /// Creates a spinlock.
    pub fn new_lock(&self, name: &'static str) -> LockId {
        let mut k = self.k.borrow_mut();
        k.locks.push(Lock {
            name,
            ..Default::default()
        });
        k.locks.len() - 1
    }

    /// Next PTE version (unique, increasing).
    pub fn next_pte_version(&self) -> u64 {
        let v = self.pte_version.get() + 1;
        self.pte_version.set(v);
        v
    }

    /// Drops the reference that `mm` held at `va` on a data frame, reporting
    /// the free to observers.
    pub fn put_frame(&self, cpu: CpuId, pfn: crate::hw::mem::Pfn, mm: MmId, va: u64) {
        let freed = self.hw.borrow_mut().mem.put_frame(pfn);
        if freed {
            self.emit(Event::FrameFree { cpu, pfn, mm, va });
        }
    }

    /// Drops the references a huge mapping of `mm` at `va` held on the 512
    /// frames from `base`, reporting each frame freed.
    pub fn put_huge(&self, cpu: CpuId, base: crate::hw::mem::Pfn, mm: MmId, va: u64) {
        use crate::hw::mem::{HPAGE_PAGES, PAGE_SIZE};
        let last: Vec<bool> = {
            let mut hw = self.hw.borrow_mut();
            let last = (0..HPAGE_PAGES)
                .map(|i| hw.mem.frame_refs(base + i) == 1)
                .collect();
            hw.mem.put_huge(base);
            last
        };
        for (i, freed) in (0..HPAGE_PAGES).zip(last) {
            if freed {
                self.emit(Event::FrameFree {
                    cpu,
                    pfn: base + i,
                    mm,
                    va: va + i * PAGE_SIZE,
                });
            }
        }
    }

    /// Sends `ev` to the observer.
    pub fn emit(&self, ev: Event) {
        if let Some(o) = self.observer.borrow_mut().as_mut() {
            o.event(self.now.get(), &ev, &self.hw.borrow());
        }
    }

    /// Registers an IPI handler; returns its index for `Op::CallFunction`.
    pub fn register_ipi_handler(&self, h: IpiHandler) -> usize {
        let mut v = self.ipi_handlers.borrow_mut();
        v.push(h);
        v.len() - 1
    }

    /// Drops every task's future and program. Futures hold `Ctx`s, which
    /// hold the world: without this a world is never freed (the explorer
    /// builds one per schedule).
    pub fn teardown(&self) {
        let futures = std::mem::take(&mut *self.futures.borrow_mut());
        let programs = std::mem::take(&mut *self.programs.borrow_mut());
        let handlers = std::mem::take(&mut *self.ipi_handlers.borrow_mut());
        drop(futures);
        drop(programs);
        drop(handlers);
    }

    /// The first violation the observer found, if any.
    pub fn failure(&self) -> Option<String> {
        self.observer.borrow().as_ref().and_then(|o| o.failure())
    }

    /// The ASID programmed for user accesses of `mm` (KPTI: the odd twin).
    pub fn user_asid(&self, mm: MmId) -> Asid {
        let a = self.asid.asid_of(self, mm);
        if self.kcfg.kpti {
            a | 1
        } else {
            a
        }
    }
}

/// A task's handle on the world: what kernel code runs with.
#[derive(Clone)]
pub struct Ctx {
    /// The world.
    pub w: Rc<World>,
    /// The task this code runs as.
    pub task: TaskId,
    mb: Rc<TaskMailbox>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ctx(task {})", self.task)
    }
}

impl Ctx {
    /// The context of `task`.
    pub fn new(w: &Rc<World>, task: TaskId) -> Self {
        let mb = Rc::clone(&w.k.borrow().tasks[task].mb);
        Self {
            w: Rc::clone(w),
            task,
            mb,
        }
    }

    /// The context of interrupt code running on `task`'s CPU: `current` is
    /// `task`, but steps go through `mb`, not the task's mailbox.
    pub fn interrupt(w: &Rc<World>, task: TaskId, mb: Rc<TaskMailbox>) -> Self {
        Self {
            w: Rc::clone(w),
            task,
            mb,
        }
    }

    /// The CPU this task is on (`smp_processor_id()`).
    pub fn cpu(&self) -> CpuId {
        self.w.k.borrow().tasks[self.task].cpu
    }

    /// Current simulated time.
    pub fn now(&self) -> Ns {
        self.w.now.get()
    }

    /// Posts `op` and waits for the driver to complete it.
    pub async fn step(&self, op: Op) -> OpResult {
        self.mb.step(op).await
    }

    /// Kernel work for `ns`.
    pub async fn work(&self, ns: u64) {
        if ns > 0 {
            self.step(Op::Work { ns, user: false }).await;
        }
    }

    /// An atomic RMW on shared kernel state (the caller applies the effect
    /// right after the await: that is the linearisation point).
    pub async fn atomic(&self) {
        self.step(Op::Atomic).await;
    }

    /// Issues a TLBI.
    pub async fn tlbi(&self, scope: TlbiScope, broadcast: bool) {
        self.step(Op::Tlbi { scope, broadcast }).await;
    }

    /// `DSB ISHST`.
    pub async fn dsb_ishst(&self) {
        self.step(Op::DsbSt).await;
    }

    /// `DSB ISH`.
    pub async fn dsb_ish(&self) {
        self.step(Op::DsbIsh).await;
    }

    /// `DSB NSH`.
    pub async fn dsb_nsh(&self) {
        self.step(Op::DsbNsh).await;
    }

    /// `ISB`.
    pub async fn isb(&self) {
        self.step(Op::Isb).await;
    }

    /// Spinlock acquire.
    pub async fn spin_lock(&self, l: LockId) {
        self.step(Op::Lock(l)).await;
    }

    /// Spinlock release.
    pub async fn spin_unlock(&self, l: LockId) {
        self.step(Op::Unlock(l)).await;
    }

    /// `mmap_read_lock(mm)`.
    pub async fn mmap_read_lock(&self, mm: MmId) {
        let l = self.w.k.borrow().mms[mm as usize].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.down(l, true).await;
        } else {
            self.step(Op::LockShared(l)).await;
        }
    }

    /// `mmap_read_unlock(mm)`.
    pub async fn mmap_read_unlock(&self, mm: MmId) {
        let l = self.w.k.borrow().mms[mm as usize].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.up(l, true).await;
        } else {
            self.step(Op::UnlockShared(l)).await;
        }
    }

    /// `mmap_write_lock(mm)`.
    pub async fn mmap_write_lock(&self, mm: MmId) {
        let l = self.w.k.borrow().mms[mm as usize].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.down(l, false).await;
        } else {
            self.step(Op::Lock(l)).await;
        }
    }

    /// `mmap_write_unlock(mm)`.
    pub async fn mmap_write_unlock(&self, mm: MmId) {
        let l = self.w.k.borrow().mms[mm as usize].mmap_lock;
        if self.w.kcfg.mmap_lock_readers_sleep {
            self.up(l, false).await;
        } else {
            self.step(Op::Unlock(l)).await;
        }
    }

    /// `down_read()`/`down_write()` of mmap_lock as a semaphore whose
    /// readers sleep (`[kernel] mmap_lock_readers_sleep`: Linux before 5.3
    /// and since 5.12). The fast path is one atomic; a task that cannot
    /// have it queues (FIFO, readers behind a queued writer) and waits until
    /// `up()` hands it over. A reader sleeps, so its CPU may go idle (lazy
    /// TLB); a writer spins (rwsem optimistic spinning, Linux 3.16+),
    /// polling every `cacheline_transfer_ns`, until another task wants its
    /// CPU. Without the option every
    /// waiter spins in the driver (`Op::Lock`), as reader optimistic
    /// spinning did in Linux 5.3-5.11.
    pub async fn down(&self, l: LockId, shared: bool) {
        self.step(Op::LockWord(l)).await; // the cmpxchg on sem->count
        let now = self.now();
        let (got, name) = {
            let mut k = self.w.k.borrow_mut();
            let lock = &mut k.locks[l];
            let got = lock.acquire(self.task, shared, now);
            if got && !shared {
                lock.held_since_ns = now;
            }
            (got, lock.name)
        };
        self.w.stats.borrow_mut().lock(name).acquisitions += 1;
        if got {
            return;
        }
        loop {
            // A writer stops spinning and sleeps when another task waits
            // for its CPU (rwsem_spin_on_owner() gives up on need_resched),
            // e.g. the reader it waits for, granted the lock meanwhile.
            let sleep = shared || !self.w.k.borrow().cpus[self.cpu()].rq.is_empty();
            if sleep {
                self.w.k.borrow_mut().tasks[self.task].state = TaskState::Blocked;
                sched::schedule(self).await;
            } else {
                self.work(self.w.profile.kernel.cacheline_transfer_ns.max(1))
                    .await;
            }
            let waiting = self.w.k.borrow().locks[l]
                .waiters
                .iter()
                .any(|x| x.task == self.task);
            if !waiting {
                return;
            }
        }
    }

    /// `up_read()`/`up_write()`: releases, hands the semaphore to the
    /// waiters now entitled to it and wakes them.
    pub async fn up(&self, l: LockId, shared: bool) {
        self.step(Op::LockWord(l)).await;
        let now = self.now();
        let (granted, name) = {
            let mut k = self.w.k.borrow_mut();
            let lock = &mut k.locks[l];
            if !shared {
                let held = now.saturating_sub(lock.held_since_ns);
                self.w
                    .stats
                    .borrow_mut()
                    .lock(lock.name)
                    .hold_ns
                    .record(held);
            }
            let granted = lock.release(shared);
            if granted.iter().any(|g| !g.shared) {
                lock.held_since_ns = now;
            }
            (granted, lock.name)
        };
        for g in granted {
            self.w
                .stats
                .borrow_mut()
                .lock(name)
                .contended_wait_ns
                .record(now - g.since_ns);
            sched::wake_up(self, g.task).await;
        }
    }

    /// The split lock of the PTE table mapping `va` in `mm`.
    fn pte_lock_id(&self, mm: MmId, va: u64) -> LockId {
        let key = va >> crate::kernel::PTE_TABLE_SHIFT;
        if let Some(&l) = self.w.k.borrow().mms[mm as usize].pte_locks.get(&key) {
            return l;
        }
        let l = self.w.new_lock("ptlock");
        self.w.k.borrow_mut().mms[mm as usize]
            .pte_locks
            .insert(key, l);
        l
    }

    /// Takes the lock of the PTE table mapping `va` (`pte_offset_map_lock`).
    pub async fn ptl_lock(&self, mm: MmId, va: u64) {
        let l = self.pte_lock_id(mm, va);
        self.step(Op::Lock(l)).await;
    }

    /// Releases the lock of the PTE table mapping `va`.
    pub async fn ptl_unlock(&self, mm: MmId, va: u64) {
        let l = self.pte_lock_id(mm, va);
        self.step(Op::Unlock(l)).await;
    }

    /// A user access; page faults are handled (and retried) here. Returns
    /// false if the access is not allowed at all (would be SIGSEGV).
    pub async fn user_access(&self, va: u64, write: bool) -> bool {
        for _ in 0..4 {
            match self.step(Op::Access { va, write }).await {
                OpResult::Access(Ok(())) => return true,
                OpResult::Access(Err(f)) => {
                    if !mm::handle_page_fault(self, va, write, f).await {
                        return false;
                    }
                }
                OpResult::Unit => unreachable!("access returns an access result"),
            }
        }
        false
    }

    /// User-mode computation for `ns`, preemptible at time-slice boundaries.
    pub async fn user_work(&self, ns: u64) {
        let slice = self.w.profile.kernel.time_slice_ns;
        let mut left = ns;
        while left > 0 {
            let d = left.min(slice);
            self.step(Op::Work { ns: d, user: true }).await;
            left -= d;
            sched::maybe_preempt(self).await;
        }
    }

    /// Emits an observer event.
    pub fn emit(&self, ev: Event) {
        self.w.emit(ev);
    }

    /// `local_irq_save()`: IPIs to this CPU wait until the matching
    /// [`Ctx::irq_restore`]. Not a step: it only marks the CPU.
    pub fn irq_save(&self) {
        let cpu = self.cpu();
        self.w.k.borrow_mut().cpus[cpu].irqs_off += 1;
    }

    /// `irqs_disabled()`.
    pub fn irqs_disabled(&self) -> bool {
        self.w.k.borrow().cpus[self.cpu()].irqs_off > 0
    }

    /// `local_irq_restore()`.
    pub fn irq_restore(&self) {
        let cpu = self.cpu();
        let mut k = self.w.k.borrow_mut();
        let c = &mut k.cpus[cpu];
        c.irqs_off = c
            .irqs_off
            .checked_sub(1)
            .expect("irq_restore without irq_save");
    }

    /// The address space this task runs on (`current->mm`).
    pub fn mm(&self) -> Option<MmId> {
        self.w.k.borrow().tasks[self.task].mm
    }
}

#[cfg(test)]
mod tests {
    use super::Lock;

    #[test]
    fn lock_words_move_between_caches_one_atomic_at_a_time() {
        let mut l = Lock::default();
        // First touch and repeated use by one CPU: an L1 atomic.
        // CPUs 0-1 on one socket, 2-3 on another: 110 ns within, 200 across.
        let t = |to: usize| move |from: usize| if from / 2 == to / 2 { 110 } else { 200 };
        assert_eq!(l.line_rmw(0, 1_000, 10, t(0)), 10);
        assert_eq!(l.line_rmw(0, 2_000, 10, t(0)), 10);
        // Another CPU pays a transfer.
        assert_eq!(l.line_rmw(1, 3_000, 10, t(1)), 110);
        // Two CPUs at the same instant: the second waits for the first.
        assert_eq!(l.line_rmw(2, 5_000, 10, t(2)), 200);
        assert_eq!(l.line_rmw(3, 5_000, 10, t(3)), 310);
        assert_eq!(l.line_free_ns, 5_310);
    }
}
