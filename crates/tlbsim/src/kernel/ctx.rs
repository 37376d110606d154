//! [`Ctx`]: a task's handle on the world, what kernel code runs with, and
//! its steps (`work`, `tlbi`, `dsb_*`, user accesses, interrupts).

use super::{mm, sched, Dsb, Op, OpResult, TaskId, TaskMailbox, World};
use crate::engine::exec::Step;
use crate::engine::label::Label;
use crate::engine::Ns;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{MmId, TlbiScope};
use crate::hw::CpuId;
use crate::observe::Event;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Future of [`Ctx::work`]: the `Work` step, if any.
pub struct Work<'a>(Option<Step<'a, Op, OpResult>>);

impl Future for Work<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            Some(s) => Pin::new(s).poll(cx).map(|_| ()),
            None => Poll::Ready(()),
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

/// A kernel function entered by [`Ctx::func`]; leaves it when dropped.
#[derive(Debug)]
pub struct FuncGuard<'a> {
    ctx: &'a Ctx,
    /// The function it was entered from.
    outer: Option<&'static Label>,
}

impl Drop for FuncGuard<'_> {
    fn drop(&mut self) {
        self.ctx.mb.leave_label(self.outer);
    }
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

    /// Enters the kernel function `name` until the guard is dropped: the
    /// CPU time of the steps taken meanwhile (and not inside a function
    /// entered later) is charged to it, as `perf report` charges samples
    /// to the innermost function ("self" time). `name` is the Linux
    /// function the code models.
    pub fn func(&self, name: &'static Label) -> FuncGuard<'_> {
        let outer = self.mb.enter_label(name);
        FuncGuard { ctx: self, outer }
    }

    /// Enters a function that Linux declares `static inline` (arm64's
    /// `flush_tlb_page()`, `__flush_tlb_range()`, ...): as in a `perf`
    /// profile, its time is its caller's, so the function already entered
    /// keeps it; only outside every named function is it named itself.
    pub fn inline_func(&self, name: &'static Label) -> FuncGuard<'_> {
        match self.mb.label() {
            Some(outer) => FuncGuard {
                ctx: self,
                outer: Some(outer),
            },
            None => self.func(name),
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

    /// Posts `op` and waits for the driver to complete it. (A plain
    /// future, not an `async fn`: every step of every task goes through
    /// here, and one state machine less per step is measurable.)
    pub fn step(&self, op: Op) -> Step<'_, Op, OpResult> {
        self.mb.step(op)
    }

    /// Kernel work for `ns` (no step at all for 0).
    pub fn work(&self, ns: u64) -> Work<'_> {
        Work((ns > 0).then(|| self.step(Op::Work { ns, user: false })))
    }

    /// An atomic RMW on shared kernel state (the caller applies the effect
    /// right after the await: that is the linearisation point).
    pub async fn atomic(&self) {
        self.step(Op::Atomic).await;
    }

    /// `smp_mb()`: a full barrier; other CPUs' steps may come between the
    /// code before it and the code after it, never inside either.
    pub async fn smp_mb(&self) {
        self.step(Op::Atomic).await;
    }

    /// `smp_rmb()`: a read barrier (one step, as [`Ctx::smp_mb`]).
    pub async fn smp_rmb(&self) {
        self.step(Op::Atomic).await;
    }

    /// `atomic_read(v)`: one step, then `read` reads the variable (the read
    /// is the linearisation point, after the await).
    pub async fn atomic_read<T>(&self, read: impl FnOnce() -> T) -> T {
        self.step(Op::Atomic).await;
        read()
    }

    /// `atomic_set(v, i)` (and `atomic64_set()`): one step, then `write`
    /// stores the variable.
    pub async fn atomic_set(&self, write: impl FnOnce()) {
        self.step(Op::Atomic).await;
        write();
    }

    /// `cmpxchg(v, old, new)` and the other read-modify-writes of one
    /// word: one step, then `rmw` compares and updates the variable at once
    /// (no other CPU runs between), returning what the caller needs (for a
    /// cmpxchg, whether it succeeded).
    pub async fn cmpxchg<T>(&self, rmw: impl FnOnce() -> T) -> T {
        self.step(Op::Atomic).await;
        rmw()
    }

    /// `atomic_inc(v)`: one step, then `inc` increments the variable.
    pub async fn atomic_inc(&self, inc: impl FnOnce()) {
        self.step(Op::Atomic).await;
        inc();
    }

    /// `atomic_dec(v)`: one step, then `dec` decrements the variable.
    pub async fn atomic_dec(&self, dec: impl FnOnce()) {
        self.step(Op::Atomic).await;
        dec();
    }

    /// `atomic_dec_and_test(v)`: one step, then `dec` decrements the
    /// variable and says whether it reached zero.
    pub async fn atomic_dec_and_test(&self, dec: impl FnOnce() -> bool) -> bool {
        self.step(Op::Atomic).await;
        dec()
    }

    /// `atomic64_inc_return(v)` (a full barrier): one step, then `inc`
    /// increments the variable and returns its new value.
    pub async fn atomic_inc_return<T>(&self, inc: impl FnOnce() -> T) -> T {
        self.step(Op::Atomic).await;
        inc()
    }

    /// A snapshot of `mm_cpumask(mm)`.
    pub fn mm_cpumask(&self, mm: MmId) -> CpuMask {
        self.w.k.borrow().mms[mm].cpumask.clone()
    }

    /// `cpumask_set_cpu(cpu, mm_cpumask(mm))`: an atomic `set_bit()`, one
    /// step.
    pub async fn cpumask_set_cpu(&self, cpu: CpuId, mm: MmId) {
        self.step(Op::Atomic).await;
        self.__cpumask_set_cpu(cpu, mm);
    }

    /// `cpumask_clear_cpu(cpu, mm_cpumask(mm))`: an atomic `clear_bit()`,
    /// one step.
    pub async fn cpumask_clear_cpu(&self, cpu: CpuId, mm: MmId) {
        self.step(Op::Atomic).await;
        self.__cpumask_clear_cpu(cpu, mm);
    }

    /// `__cpumask_set_cpu(cpu, mm_cpumask(mm))`: no step of its own (the
    /// non-atomic form, or a set the model folds into the step before it).
    pub fn __cpumask_set_cpu(&self, cpu: CpuId, mm: MmId) {
        self.w.k.borrow_mut().mms[mm].cpumask.set(cpu);
    }

    /// `__cpumask_clear_cpu(cpu, mm_cpumask(mm))`: no step of its own (the
    /// non-atomic form, or a clear the model folds into the step before it).
    pub fn __cpumask_clear_cpu(&self, cpu: CpuId, mm: MmId) {
        self.w.k.borrow_mut().mms[mm].cpumask.clear(cpu);
    }

    /// `cpumask_test_cpu(cpu, mm_cpumask(mm))`.
    pub fn cpumask_test_cpu(&self, cpu: CpuId, mm: MmId) -> bool {
        self.w.k.borrow().mms[mm].cpumask.test(cpu)
    }

    /// `cpumask_setall(mm_cpumask(mm))`.
    pub fn cpumask_setall(&self, mm: MmId) {
        self.w.k.borrow_mut().mms[mm].cpumask.set_all();
    }

    /// `cpumask_clear(mm_cpumask(mm))`.
    pub fn cpumask_clear(&self, mm: MmId) {
        self.w.cpumask_clear(mm);
    }

    /// Issues a TLBI.
    pub async fn tlbi(&self, scope: TlbiScope, broadcast: bool) {
        self.step(Op::Tlbi { scope, broadcast }).await;
    }

    /// `dsb(opt)`.
    pub async fn dsb(&self, opt: Dsb) {
        self.step(Op::Dsb(opt)).await;
    }

    /// `dsb(ishst)`.
    pub async fn dsb_ishst(&self) {
        self.dsb(Dsb::IshSt).await;
    }

    /// `dsb(ish)`.
    pub async fn dsb_ish(&self) {
        self.dsb(Dsb::Ish).await;
    }

    /// `dsb(nsh)`.
    pub async fn dsb_nsh(&self) {
        self.dsb(Dsb::Nsh).await;
    }

    /// `dsb(nshst)`.
    pub async fn dsb_nshst(&self) {
        self.dsb(Dsb::NshSt).await;
    }

    /// `ISB`.
    pub async fn isb(&self) {
        self.step(Op::Isb).await;
    }

    /// `write_sysreg(val, LSUDVMBM_EL2)`: this CPU's later broadcast TLBIs
    /// reach `want` (`None`: every CPU), as the register can encode it.
    /// An `isb()` must follow before a TLBI relies on it.
    pub async fn write_dvm_affinity(&self, want: Option<CpuMask>) {
        self.step(Op::SetDvmAffinity(want)).await;
    }

    /// `write_sysreg(vttbr, VTTBR_EL2)` with `HCR_EL2.FB` as `fb`: the
    /// guest this CPU enters next runs under `vmid`.
    pub async fn write_vttbr(&self, vmid: crate::hw::tlb::Vmid, fb: bool) {
        self.step(Op::SetVttbr { vmid, fb }).await;
    }

    /// `write_sysreg(hcr, HCR_EL2)` changing only `TGE` to `tge`.
    pub async fn write_hcr_tge(&self, tge: bool) {
        self.step(Op::SetHcrTge(tge)).await;
    }

    /// Enters guest context `cx` (a vCPU) and runs it until it exits;
    /// returns why it did.
    pub async fn enter_guest(&self, cx: usize) -> crate::kernel::op::GuestExit {
        match self.step(Op::EnterGuest(cx)).await {
            OpResult::GuestExit(e) => e,
            r => unreachable!("EnterGuest completes with GuestExit, not {r:?}"),
        }
    }
    /// A user access; page faults are handled (and retried) here. Returns
    /// false if the access is not allowed at all (would be SIGSEGV).
    pub async fn user_access(&self, va: u64, write: bool) -> bool {
        self.w.rcu_quiescent(self.cpu()); // user mode: quiescent
        for _ in 0..4 {
            match self.step(Op::Access { va, write }).await {
                OpResult::Access(Ok(())) => return true,
                OpResult::Access(Err(f)) => {
                    if !mm::handle_page_fault(self, va, write, f).await {
                        return false;
                    }
                }
                r => unreachable!("an access returns an access result, not {r:?}"),
            }
        }
        false
    }

    /// User-mode computation for `ns`. Without a timer tick it is
    /// preemptible at time-slice boundaries (the model's stand-in for the
    /// tick). With one, it is a single step that an interrupt returning
    /// to user space with `need_resched` set cuts short (the tick sets it
    /// at a slice's end: `kernel/tick.rs`); the task then reschedules and
    /// does the rest when it runs again.
    pub async fn user_work(&self, ns: u64) {
        self.w.rcu_quiescent(self.cpu()); // user mode: quiescent
        let slice = match self.w.tick_period_ns() {
            Some(_) => u64::MAX,
            None => self.w.profile.kernel.time_slice_ns,
        };
        let mut left = ns;
        while left > 0 {
            let d = left.min(slice);
            left -= d;
            if let OpResult::WorkLeft(rest) = self.step(Op::Work { ns: d, user: true }).await {
                left += rest;
            }
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
