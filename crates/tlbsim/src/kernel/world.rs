//! The whole modelled system: the machine ([`Machine`]: hardware,
//! statistics, the observer, the clock) and a kernel running on it
//! ([`World`]: kernel state, policies, task programs). A guest kernel is
//! another `World` on the same machine.

use super::policy::{AsidAllocator, TlbPolicy};
use super::{sched, Ctx, Lock, Mm, Rq, Task, TaskId, TaskState};
use crate::config::{KernelConfig, Profile};
use crate::engine::exec::KFuture;
use crate::engine::state::{PerCpu, PerLock, PerMm, PerTask, State, Var};
use crate::engine::track::{Tracked, TrackedCell};
use crate::engine::Ns;
use crate::hw::cell::HwCell;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, MmId};
use crate::hw::{CpuId, CpuVec, Hw};
use crate::observe::{Event, Observer};
use crate::stats::Stats;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

crate::recorded! {
/// All kernel state. Every field records its own accesses
/// ([`crate::engine::state`]).
#[derive(Debug, Default)]
pub struct KState {
    /// Tasks by id.
    pub tasks: PerTask<Task>,
    /// Tasks not yet reaped (every task but the `Dead` ones).
    pub live_tasks: Var<usize>,
    /// Address spaces by id.
    pub mms: PerMm<Mm>,
    /// Per-CPU scheduler state.
    pub cpus: PerCpu<Rq>,
    /// Spinlocks.
    pub locks: PerLock<Lock>,
    /// Shmem objects (shared anonymous memory) by id.
    pub shmem: Var<Vec<super::mm::shmem::ShmemInode>>,
    /// Resident folios (shmem and private anonymous pages) by frame, and
    /// their LRU list.
    pub folios: Var<super::mm::folio::Folios>,
    /// Folio locks by frame, created on first use and kept for the frame's
    /// next lives (frames are reused).
    pub folio_locks: Var<BTreeMap<crate::hw::mem::Pfn, super::LockId>>,
    /// Anon ids handed out (`anon_vma`s, see [`super::AnonMap`]).
    pub anon_ids: Var<u64>,
    /// The swap device (zram).
    pub swap: Var<super::mm::swap::SwapDevice>,
    /// The `kswapd` thread, if `[kernel] memory_limit_pages` is set.
    pub kswapd: Var<Option<super::TaskId>>,
    /// Page-table pages waiting for a grace period (`kernel/rcu.rs`).
    pub rcu_frees: Var<Vec<super::rcu::RcuFree>>,
    /// `jiffies`: timer ticks since boot, advanced by the tick of CPU 0
    /// (`tick_do_timer_cpu`; `kernel/tick.rs`). Stays 0 without a tick.
    pub jiffies: Var<u64>,
    /// Where the huge zero page was last unmapped (`[kernel]
    /// huge_zero_shrinker`): the mm and address its shrinker's free is
    /// reported under.
    pub huge_zero_last_unmap: Var<Option<(MmId, u64)>>,
    /// hugetlb PMD tables shared between address spaces, and the PMD
    /// tables' locks (`kernel/mm/hugetlb.rs`).
    pub pmd_shares: Var<super::mm::hugetlb::PmdShares>,
    /// The reverse map's locks (`anon_vma->root->rwsem` per fork tree, a
    /// file's `i_mmap_rwsem`), created on first use (`kernel/mm/rmap.rs`).
    pub rmap_locks: Var<BTreeMap<super::mm::rmap::RmapRoot, super::LockId>>,
}
}

/// A task's program.
pub type TaskFuture = KFuture<'static, ()>;
/// A deferred program: given its context, yields the task's future.
pub type Program = Box<dyn FnOnce(Ctx) -> TaskFuture>;
/// An IPI handler: runs on the interrupted CPU, in the context of the task
/// that was running there (`current`), with its own mailbox; the second
/// argument is the `arg` of the `Op::CallFunction` that sent it.
pub type IpiHandler = Rc<dyn Fn(Ctx, usize) -> TaskFuture>;

/// The handler every world registers first: an empty function, for
/// `smp_call_function()`s that only wait for every CPU to take the
/// interrupt (`tlb_remove_table_smp_sync()`).
pub const IPI_HANDLER_NOOP: usize = 0;

fn ipi_noop(_ctx: Ctx, _arg: usize) -> TaskFuture {
    Box::pin(async {})
}

/// What every kernel on the machine shares: hardware, statistics, the
/// observer and the clock.
pub struct Machine {
    /// Hardware.
    pub hw: HwCell,
    /// Statistics.
    // untracked: counters only; no model code decides on them.
    pub stats: RefCell<Stats>,
    /// The observer (checker), if any. [`Machine::emit`] records what each
    /// event lets it read and write (`Space::Check`).
    // untracked: recorded by event kind in `Machine::emit`.
    pub observer: RefCell<Option<Box<dyn Observer>>>,
    /// The observer reported a violation after an event ([`World::emit`]
    /// asks it): the run loops read this instead of asking after every
    /// step.
    // untracked: read by the drivers between actions, never by the model.
    observer_failed: Cell<bool>,
    /// Current simulated time (set by the driver; the explorer sets it to
    /// the acting CPU's own count of actions, so that what kernel code
    /// reads of it is that CPU's own history).
    // untracked: see above.
    pub now: Cell<Ns>,
    /// The translation granule (`kernel.page_size_kib`, one for the whole
    /// machine): `PAGE_SIZE`, `PTRS_PER_PTE`, `PMD_SIZE` for the kernel
    /// code, the same value as `hw.granule`.
    pub granule: crate::hw::mem::Granule,
}

/// What a guest kernel's world knows of its virtual machine: where each
/// vCPU runs and what waits for it.
#[derive(Debug)]
pub struct Guest {
    /// Per vCPU: the physical CPU it runs on, or last ran on.
    pub pcpu: CpuVec<TrackedCell<CpuId>>,
    /// Per vCPU: an interrupt is pending for it while it does not run
    /// (the vGIC's pending state): `kvm_vcpu_check_block()` reads it.
    pub pending: CpuVec<TrackedCell<bool>>,
}

pub use crate::hw::tlb::KERNEL_ID_SHIFT;

/// A kernel on the machine: its state, policies and task programs. It
/// dereferences to its [`Machine`], so kernel code reads the hardware as
/// `w.hw`, the clock as `w.now`, whichever kernel it is.
///
/// A guest kernel numbers its CPUs (vCPUs), tasks and mms from 0 like any
/// kernel; what leaves it for the machine — events for the observer, the
/// mm tagged in TTBR0, per-CPU statistics — is renumbered machine-wide
/// ([`World::pcpu`], [`World::gid_mm`], [`World::gid_task`]).
pub struct World {
    /// The machine it runs on.
    pub m: Rc<Machine>,
    /// Which kernel: 0 the host, guests from 1.
    pub id: u32,
    /// Its CPUs: the machine's for the host, the vCPUs for a guest.
    ncpus: usize,
    /// The guest's virtual machine (`None`: the host).
    pub guest: Option<Guest>,
    /// The machine profile (after overrides).
    pub profile: Profile,
    /// Kernel configuration.
    pub kcfg: KernelConfig,
    /// Kernel state (its fields record their own accesses).
    pub k: State<KState>,
    /// TLB-flush policy.
    pub policy: Box<dyn TlbPolicy>,
    /// ASID allocator.
    pub asid: Box<dyn AsidAllocator>,
    /// Task futures by task id (taken out while polled; recorded by
    /// task).
    pub futures: State<PerTask<Option<TaskFuture>>>,
    /// Programs of tasks not started yet (recorded by task).
    pub programs: State<PerTask<Option<Program>>>,
    /// Handlers that `Op::CallFunction` runs on other CPUs.
    // untracked: registered while the world is set up, read-only after.
    pub ipi_handlers: RefCell<Vec<IpiHandler>>,
    /// The kernel's own random choices (`get_random_long()`: exec's stack
    /// randomisation). Seeded from the run's stream `kernel.random` by
    /// [`World::seed_random`]; a world built directly starts from a fixed
    /// seed.
    pub random: Tracked<crate::engine::rng::Rng>,
}

impl std::ops::Deref for World {
    type Target = Machine;

    fn deref(&self) -> &Machine {
        &self.m
    }
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("now", &self.now).finish()
    }
}

impl World {
    /// Seeds the kernel's random choices from `streams` (stream
    /// `kernel.random`).
    pub fn seed_random(&self, streams: &crate::engine::rng::Streams) {
        *self.random.borrow_mut() = streams.stream("kernel.random");
    }

    /// Builds a world with no tasks but one idle task per CPU.
    pub fn new(
        profile: Profile,
        kcfg: KernelConfig,
        policy: Box<dyn TlbPolicy>,
        asid: Box<dyn AsidAllocator>,
    ) -> Rc<World> {
        let granule = kcfg.granule;
        let hw = Hw::new(&profile.hw_params(granule));
        let n = hw.ncpus();
        let m = Rc::new(Machine {
            granule,
            hw: HwCell::new(hw),
            stats: RefCell::new(Stats::new(n)), // untracked: counters only
            observer: RefCell::new(None),       // untracked: recorded by event kind in `emit`
            observer_failed: Cell::new(false),  // untracked: read between actions
            now: Cell::new(0),                  // untracked: the explorer's clock is per CPU
        });
        Self::boot(m, 0, n, None, profile, (kcfg, policy, asid))
    }

    /// A guest kernel `id` (from 1) with `vcpus` vCPUs on `host`'s machine,
    /// its vCPU `i` first placed on physical CPU `pcpus[i]`.
    pub fn new_guest(
        host: &World,
        id: u32,
        pcpus: &[CpuId],
        kcfg: KernelConfig,
        policy: Box<dyn TlbPolicy>,
        asid: Box<dyn AsidAllocator>,
    ) -> Rc<World> {
        assert!(
            id > 0 && id < (1 << (32 - KERNEL_ID_SHIFT)),
            "kernel id {id}"
        );
        let guest = Guest {
            pcpu: pcpus.iter().map(|&c| TrackedCell::fresh(c)).collect(),
            pending: pcpus.iter().map(|_| TrackedCell::fresh(false)).collect(),
        };
        let (m, profile) = (Rc::clone(&host.m), host.profile.clone());
        Self::boot(
            m,
            id,
            pcpus.len(),
            Some(guest),
            profile,
            (kcfg, policy, asid),
        )
    }

    /// Kernel `id` with `n` CPUs on machine `m`: one idle task per CPU,
    /// then the allocator and the policy initialised.
    fn boot(
        m: Rc<Machine>,
        id: u32,
        n: usize,
        guest: Option<Guest>,
        profile: Profile,
        (kcfg, policy, asid): (KernelConfig, Box<dyn TlbPolicy>, Box<dyn AsidAllocator>),
    ) -> Rc<World> {
        let w = Rc::new(World {
            m,
            id,
            ncpus: n,
            guest,
            profile,
            kcfg,
            k: State::new(KState::default()),
            policy,
            asid,
            futures: State::new(PerTask::new()),
            programs: State::new(PerTask::new()),
            // untracked: read-only once set up
            ipi_handlers: RefCell::new(vec![Rc::new(ipi_noop) as IpiHandler]),
            random: Tracked::fresh(crate::engine::rng::Streams::new(0).stream("kernel.random")),
        });
        for cpu in CpuId::all(n) {
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
            k.cpus.push(Rq {
                current: t,
                idle: t,
                rq: VecDeque::new(),
                min_vruntime_ns: 0,
                need_resched: false,
                mm_to_drop: None,
                last: None,
                picked: None,
                irqs_off: 0,
                in_irq: 0,
                rcu_qs: 0,
            });
            k.tasks[t].on_cpu = true;
        }
        w.asid.init(&w);
        w.policy.init(&w);
        w
    }

    /// The period of this kernel's timer tick (`TICK_NSEC`, 10^9 / HZ),
    /// or `None` when it has none: no `hz` in the profile or experiment,
    /// or a guest kernel (guests have no timer in the model).
    pub fn tick_period_ns(&self) -> Option<Ns> {
        match (&self.guest, self.profile.kernel.hz) {
            (None, Some(hz)) => Some(1_000_000_000 / u64::from(hz.max(1))),
            _ => None,
        }
    }

    /// Number of CPUs (a guest's: its vCPUs).
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }

    /// The architecture this kernel is built for (`CONFIG_ARM64`,
    /// `CONFIG_X86`): the profile's, which its policy's registry entry
    /// must match (`check_combination`); generic code's
    /// architecture-specific parts key on it.
    pub fn arch(&self) -> crate::config::Arch {
        self.profile.arch
    }

    /// The physical CPU this kernel's CPU `cpu` is (a vCPU: the one it
    /// runs on, or last ran on).
    pub fn pcpu(&self, cpu: CpuId) -> CpuId {
        match &self.guest {
            None => cpu,
            Some(g) => g.pcpu[cpu].get(),
        }
    }

    /// The name under which this kernel reports metric `name`: as is on
    /// the host, `vm<id>.<name>` in a guest (the run adds the mean over
    /// the VMs under `name`).
    pub fn metric(&self, name: &str) -> String {
        match self.guest {
            None => name.to_string(),
            Some(_) => format!("vm{}.{name}", self.id),
        }
    }

    /// The machine-wide id of this kernel's mm `mm`.
    pub fn gid_mm(&self, mm: MmId) -> MmId {
        mm.in_kernel(self.id)
    }

    /// The machine-wide id of this kernel's task `t`.
    pub fn gid_task(&self, t: TaskId) -> TaskId {
        t.in_kernel(self.id)
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
        let id = TaskId::from_index(k.tasks.len());
        *k.live_tasks += 1;
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
            tlb_ubc: Default::default(),
            hrtimer_seq: 0,
            vfork_parent: None,
        });
        self.futures.borrow_mut().push(None);
        self.programs.borrow_mut().push(Some(program));
        id
    }

    /// Creates an empty address space with a fresh top-level table.
    pub fn new_mm(&self) -> MmId {
        let pgd = {
            let mut hw = self.hw.borrow_mut();
            let top = hw.granule.start_level();
            hw.mem.alloc_table(top)
        };
        let mmap_lock = self.new_lock("mmap_lock");
        let ptl = self.new_lock("page_table_lock");
        let mut k = self.k.borrow_mut();
        let id = MmId::from_index(k.mms.len());
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
            start_brk: super::mm::brk::START_BRK,
            brk: super::mm::brk::START_BRK,
            live: true,
            mmap_lock,
            ptl,
            pte_locks: BTreeMap::new(),
            tlb_flush_batched: 0,
            family: id,
        });
        id
    }
    /// Next PTE version (unique, increasing).
    pub fn next_pte_version(&self) -> u64 {
        self.hw.next_pte_version()
    }

    /// Drops the reference that `mm` held at `va` on a data frame, reporting
    /// the free to observers.
    pub fn put_frame(&self, cpu: CpuId, pfn: crate::hw::mem::Pfn, mm: MmId, va: u64) {
        let freed = self.hw.borrow_mut().mem.put_frame(pfn);
        if freed {
            // An anonymous folio goes with its last reference (a shmem
            // folio left its page cache before).
            self.k.borrow_mut().folios.remove(&pfn);
            self.emit(Event::FrameFree { cpu, pfn, mm, va });
        }
    }

    /// Drops the references a huge mapping of `mm` at `va` held on the
    /// `HPAGE_PMD_NR` frames from `base`, reporting the frames freed: all at once
    /// (`HugeFrameFree`) when they all were, else each one freed.
    pub fn put_huge(&self, cpu: CpuId, base: crate::hw::mem::Pfn, mm: MmId, va: u64) {
        let g = self.granule;
        let last: Vec<bool> = {
            let mut hw = self.hw.borrow_mut();
            let last = (0..g.hpage_pmd_nr())
                .map(|i| hw.mem.frame_refs(base + i) == 1)
                .collect();
            hw.mem.put_huge(base);
            last
        };
        if last.iter().all(|&freed| freed) {
            self.emit(Event::HugeFrameFree {
                cpu,
                pfn: base,
                mm,
                va,
            });
            return;
        }
        for (i, freed) in (0..g.hpage_pmd_nr()).zip(last) {
            if freed {
                self.emit(Event::FrameFree {
                    cpu,
                    pfn: base + i,
                    mm,
                    va: va + i * g.page_size(),
                });
            }
        }
    }

    /// Sends `ev`, in this kernel's numbers, to the observer, renumbered
    /// machine-wide.
    #[inline]
    pub fn emit(&self, ev: Event) {
        if self.guest.is_none() {
            self.m.emit(ev);
        } else if self.observer.borrow().is_some() {
            self.m.emit(ev.renumbered(self.id, |c| self.pcpu(c)));
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
        let futures = self.futures.borrow_mut().drain();
        let programs = self.programs.borrow_mut().drain();
        let handlers = std::mem::take(&mut *self.ipi_handlers.borrow_mut());
        drop(futures);
        drop(programs);
        drop(handlers);
    }

    /// The first violation the observer found, if any.
    pub fn failure(&self) -> Option<crate::observe::Violation> {
        if !self.observer_failed.get() {
            return None;
        }
        let o = self.observer.borrow();
        o.as_ref().filter(|o| o.failed()).and_then(|o| o.failure())
    }

    /// The profile's reclaim and swap costs. Experiments whose workload
    /// swaps are refused at setup when the profile has none
    /// (`sim::check_kernel`), so this holds while they run.
    pub fn swap_costs(&self) -> &crate::config::SwapCosts {
        self.profile
            .swap
            .as_ref()
            .expect("a swapping workload runs only on a profile with [swap] (checked at setup)")
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

    /// `cpumask_clear(mm_cpumask(mm))`, for hooks that run without a
    /// [`Ctx`](super::Ctx) (`on_new_context`).
    pub fn cpumask_clear(&self, mm: MmId) {
        self.k.borrow_mut().mms[mm].cpumask.clear_all();
    }
}

impl World {
    /// What this kernel, or the machine's memory, has grown past of
    /// tlbsim's runtime limits ([`crate::config::limits`]): live tasks
    /// over `MAX_TASKS`, or data frames and table pages over
    /// `MAX_LIVE_PAGES`. The drivers ask now and then and stop the run.
    pub fn over_limit(&self) -> Option<String> {
        use crate::config::limits::{MAX_LIVE_PAGES, MAX_TASKS};
        let tasks = *self.k.borrow().live_tasks.untracked(); // between actions
        if tasks as u64 > MAX_TASKS {
            return Some(format!(
                "{tasks} tasks alive at once exceed tlbsim's limit of {MAX_TASKS}"
            ));
        }
        let hw = self.hw.borrow();
        let pages = hw.mem.live_frames + hw.mem.live_tables;
        (pages > MAX_LIVE_PAGES).then(|| {
            format!(
                "{pages} pages of simulated memory in use exceed tlbsim's limit of {MAX_LIVE_PAGES}"
            )
        })
    }
}

impl Machine {
    /// Sends `ev`, in machine-wide numbers, to the observer.
    #[inline]
    pub fn emit(&self, ev: Event) {
        if let Some(o) = self.observer.borrow_mut().as_mut() {
            if crate::engine::track::recording() {
                o.record_footprint(&ev);
            }
            o.event(self.now.get(), &ev, &self.hw.untracked().borrow());
            if o.failed() {
                self.observer_failed.set(true);
            }
        }
    }

    /// Has the observer reported a violation?
    pub fn observer_failed(&self) -> bool {
        self.observer_failed.get()
    }
}
