//! What each step does ([`Cpus::apply`]), and what arrives at other CPUs
//! later (a broadcast TLBI, the end of a DVM Sync): its effect on the
//! machine and the kernel, the counters it bumps and the events the
//! observer sees. Time and order are the drivers'.

use super::{Cpus, Cx, PendingIpi, Wait};
use crate::engine::track::{part, Loc, Space};
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, TlbiScope};
use crate::hw::{AccessInfo, AccessTrace, CpuId, Fault, Inflight, Ttbr0, UserRegs};
use crate::kernel::{Dsb, GuestExit, LockId, LockWaiter, Op, OpResult, TaskId, TaskState, World};
use crate::observe::Event;
use std::rc::Rc;

/// What applying a step did, for the driver to time or to wait on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Done; the driver completes the step with this result.
    Done(OpResult),
    /// A user access, done: its result and what translating it took.
    Access(Result<(), Fault>, AccessInfo),
    /// A TLBI: a local one took effect; a broadcast one is in flight under
    /// this id and the driver delivers it ([`Cpus::dvm_deliver`]).
    Tlbi(Option<usize>),
    /// `DSB ISH`: the CPU waits for its broadcast TLBIs to complete, then
    /// for a DVM Sync if it issued any since its last one
    /// ([`Cpus::dsb_needs_sync`], [`Cpus::dsb_ish_done`]).
    DsbIsh,
    /// The lock was free and is now held.
    Locked(LockId),
    /// The lock is taken: the CPU spins (`Wait::Lock`) until a release
    /// grants it.
    LockWait,
    /// Released; these waiters now hold it, in order. The driver hands it
    /// over to each and calls [`World::lock_granted`].
    Unlocked(LockId, Vec<LockWaiter>),
    /// The task parked (or was dropped, having exited); the CPU runs its
    /// next task now.
    Switched,
    /// The idle loop found nothing to do: it waits (`Wait::Idle`) for a
    /// reschedule IPI.
    IdleWait,
    /// A guest's idle loop found nothing to do: its `WFI` trapped and the
    /// CPU is back in the host, whose `EnterGuest` is ready to complete
    /// (`Wait::Ready`); the guest context waits (`Wait::Idle`) for an
    /// interrupt.
    GuestIdleExit,
    /// The host entered a guest context: the driver runs it
    /// ([`Cpus::wait`] says where it stopped).
    EnteredGuest,
    /// IPIs to send to these contexts; the CPU waits (`Wait::IpiAck`)
    /// for every handler to return. The driver delivers each with
    /// [`Cpus::ipi_arrive`].
    CallFunction(Vec<Cx>, PendingIpi),
    /// A reschedule IPI to send to this context; the driver delivers it
    /// with [`Cpus::resched_arrive`].
    ReschedIpi(Cx),
    /// A timer armed to interrupt this context `ns` from now; the driver
    /// delivers the interrupt with [`Cpus::ipi_arrive`] (the explorer at
    /// once, the timing driver `ns` later) and completes the step.
    Hrtimer(Cx, PendingIpi, u64),
}

impl Cpus {
    /// Applies `op`, posted by `task` (of the kernel whose context `cpu`
    /// runs) on physical CPU `cpu`, at the driver's `now`: its whole
    /// effect on machine, kernel, statistics and event stream. Steps whose
    /// effect is only time (`Work`, `Atomic`, `LockWord`, `DSB ST/NSH`,
    /// `ISB`) do nothing here.
    pub fn apply(
        &mut self,
        cpu: CpuId,
        task: TaskId,
        op: &Op,
        trace: &mut Vec<AccessTrace>,
    ) -> Applied {
        let w = Rc::clone(self.kernel(cpu).0);
        let now = w.now.get();
        match *op {
            Op::Dsb(Dsb::Nsh) if w.hw.read_at(part::regs(cpu)).upgrades_barriers(cpu) => {
                // HCR_EL2.BSU = IS: a guest's DSB NSH is a DSB ISH.
                w.stats.borrow_mut().cpu[cpu].dsb_ish += 1;
                Applied::DsbIsh
            }
            Op::Work { .. }
            | Op::Atomic
            | Op::LockWord(_)
            | Op::Dsb(Dsb::IshSt | Dsb::Nsh | Dsb::NshSt)
            | Op::Isb => Applied::Done(OpResult::Unit),
            Op::Access { va, write } => {
                let (r, info) = access(&w, cpu, va, write, trace);
                Applied::Access(r, info)
            }
            Op::Tlbi { scope, broadcast } => Applied::Tlbi(tlbi(&w, cpu, scope, broadcast)),
            Op::Dsb(Dsb::Ish) => {
                w.stats.borrow_mut().cpu[cpu].dsb_ish += 1;
                Applied::DsbIsh
            }
            Op::SetTtbr0(t) => set_user_ttbr0(&w, cpu, t),
            Op::SetReservedTtbr0 => set_reserved_ttbr0(&w, cpu),
            Op::SetDvmAffinity(ref want) => {
                set_hw_reg(&w, |hw| hw.set_dvm_affinity(cpu, want.as_ref()))
            }
            Op::SetVttbr { vmid, fb } => set_hw_reg(&w, |hw| hw.set_vttbr(cpu, vmid, fb)),
            Op::SetHcrTge(tge) => set_hw_reg(&w, |hw| hw.set_hcr_tge(cpu, tge)),
            Op::EnterGuest(cx) => {
                assert!(!self.in_guest(cpu), "only the host enters a guest");
                self.set_wait(cpu, Wait::InGuest);
                self.enter_guest(cpu, cx);
                Applied::EnteredGuest
            }
            Op::LoadCr3 { cr3, flush } => {
                {
                    let mut st = w.stats.borrow_mut();
                    let c = &mut st.cpu[cpu];
                    c.ttbr_writes += 1;
                    c.cr3_flushes += u64::from(flush.is_some());
                }
                load_cr3(&w, cpu, cr3.map(|t| machine_ttbr(&w, t)), flush);
                Applied::Done(OpResult::Unit)
            }
            Op::Lock(l) | Op::LockShared(l) => {
                if w.lock_acquire(l, task, matches!(op, Op::LockShared(_)), now) {
                    Applied::Locked(l)
                } else {
                    self.set_wait(cpu, Wait::Lock(l));
                    Applied::LockWait
                }
            }
            Op::Unlock(l) | Op::UnlockShared(l) => {
                Applied::Unlocked(l, w.lock_release(l, matches!(op, Op::UnlockShared(_)), now))
            }
            Op::Downgrade(l) => Applied::Unlocked(l, w.lock_downgrade(l, now)),
            Op::SwitchTo(_) => {
                switched(&w, task);
                Applied::Switched
            }
            Op::Idle => self.idle(cpu),
            Op::HrtimerStart { ns, seq } => self.hrtimer_start(cpu, task, ns, seq),
            Op::ReschedIpi(target) => {
                w.stats.borrow_mut().cpu[cpu].ipis_sent += 1;
                Applied::ReschedIpi(self.cx_of(cpu, target))
            }
            Op::CallFunction {
                ref targets,
                handler,
                arg,
            } => self.call_function(cpu, targets, handler, arg),
        }
    }

    /// `hrtimer_start()` by `task` on `cpu`: its expiry, `ns` later, is
    /// an interrupt of the running context.
    fn hrtimer_start(&self, cpu: CpuId, task: TaskId, ns: u64, seq: u64) -> Applied {
        let ipi = PendingIpi {
            kind: super::IrqKind::Hrtimer,
            handler: usize::try_from(seq).expect("a sleep number fits a usize"),
            arg: task.index(),
            sender: None,
        };
        Applied::Hrtimer(self.running(cpu), ipi, ns)
    }

    /// The idle loop: nothing to do unless a reschedule is due or a task
    /// is queued; else it waits for a reschedule IPI.
    fn idle(&mut self, cpu: CpuId) -> Applied {
        let (w, local) = self.kernel(cpu);
        let work = {
            let k = w.k.borrow();
            k.cpus[local].need_resched || !k.cpus[local].rq.is_empty()
        };
        if work {
            return Applied::Done(OpResult::Unit);
        }
        self.set_wait(cpu, Wait::Idle);
        if self.in_guest(cpu) {
            // A guest's WFI traps to KVM.
            self.exit_guest(cpu, OpResult::GuestExit(GuestExit::Wfi));
            return Applied::GuestIdleExit;
        }
        Applied::IdleWait
    }

    /// `smp_call_function_many(targets, handler, wait = 1)` by `cpu`: it
    /// waits for one acknowledgement per target (none: done at once).
    fn call_function(
        &mut self,
        cpu: CpuId,
        targets: &CpuMask,
        handler: usize,
        arg: usize,
    ) -> Applied {
        let n = targets.count();
        if n == 0 {
            return Applied::Done(OpResult::Unit);
        }
        let cx = self.running(cpu);
        self.acks[cx] = n;
        self.set_wait(cpu, Wait::IpiAck);
        let ipi = PendingIpi {
            kind: super::IrqKind::Call,
            handler,
            arg,
            sender: Some(cx),
        };
        let targets = targets.iter().map(|t| self.cx_of(cpu, t)).collect();
        Applied::CallFunction(targets, ipi)
    }

    /// Broadcast TLBI `id` takes effect at `target`, if still pending there;
    /// returns whether it has now reached every target.
    pub fn dvm_deliver(&self, id: usize, target: CpuId) -> bool {
        // The issuer's in-flight count and the operation's slot follow
        // from the pending bits: not locations of their own.
        hw_record(&[], &[part::tlb(target), part::dvm_pending(target)]);
        let (done, issuer) = {
            let mut hw = self.w.hw.untracked().borrow_mut();
            let issuer = hw.inflight[id].as_ref().expect("live").issuer;
            (hw.dvm_apply(id, target), issuer)
        };
        if target != issuer {
            self.w.stats.borrow_mut().cpu[target].dvm_ops_received += 1;
        }
        done
    }

    /// Broadcast TLBI `id` takes effect at every target still pending, each
    /// but the issuer counting it received. Returns it (its issuer, and in
    /// `pending` the targets it reached: the driver charges their cost) and
    /// whether it reached every CPU, which then costs O(1) in statistics.
    pub fn dvm_deliver_all(&self, id: usize) -> (Inflight, bool) {
        let f = self.w.hw.borrow_mut().dvm_apply_all(id);
        let to_all = f.pending.is_full();
        let mut st = self.w.stats.borrow_mut();
        if to_all {
            st.dvm_received_by_all(f.issuer);
        } else {
            for t in f.pending.iter().filter(|&t| t != f.issuer) {
                st.cpu[t].dvm_ops_received += 1;
            }
        }
        (f, to_all)
    }

    /// Does `cpu`'s `DSB ISH` need a DVM Sync (a broadcast TLBI since its
    /// last)? Counts the Sync if so.
    pub fn dsb_needs_sync(&self, cpu: CpuId) -> bool {
        hw_record(&[part::regs(cpu)], &[]);
        let had = self.w.hw.untracked().borrow().cpus[cpu].dvm_since_dsb;
        if had {
            self.w.stats.borrow_mut().cpu[cpu].dvm_syncs += 1;
        }
        had
    }

    /// `cpu`'s DVM Sync completed: every TLBI it issued before its
    /// `DSB ISH` has completed everywhere.
    pub fn dsb_ish_done(&self, cpu: CpuId) {
        hw_record(&[], &[part::regs(cpu)]);
        self.w.hw.untracked().borrow_mut().cpus[cpu].dvm_since_dsb = false;
        self.w.emit(Event::DsbDone { cpu });
    }
}

/// The posting task switched out (`Op::SwitchTo`): it parks with its step
/// completed and resumes when switched to again; a task that exited is
/// dropped.
fn switched(w: &World, task: TaskId) {
    let state = w.k.borrow().tasks[task].state;
    if matches!(state, TaskState::Zombie | TaskState::Dead) {
        w.futures.borrow_mut()[task] = None;
    } else {
        let mb = Rc::clone(&w.k.borrow().tasks[task].mb);
        // The task's mailbox: its part of the futures.
        crate::engine::track::record(|| w.futures.borrow().loc_of(task), true);
        mb.complete(OpResult::Unit);
    }
}

/// A user access by `cpu`: translates (filling TLB and walk cache), counts
/// hits, misses and walks, and reports every cached entry it used.
pub fn access(
    w: &World,
    cpu: CpuId,
    va: u64,
    write: bool,
    trace: &mut Vec<AccessTrace>,
) -> (Result<(), Fault>, AccessInfo) {
    trace.clear();
    // It reads the CPU's registers and (on a miss) the page tables, and
    // updates the CPU's TLB and walk cache (LRU order, fills, a dropped
    // faulting entry).
    hw_record(&[part::regs(cpu), part::PAGE_TABLES], &[part::tlb(cpu)]);
    let (r, info) = w.hw.untracked().borrow_mut().access(cpu, va, write, trace);
    {
        let mut st = w.stats.borrow_mut();
        let c = &mut st.cpu[cpu];
        if info.tlb_hit {
            c.tlb_hits += 1;
        } else {
            c.tlb_misses += 1;
            c.page_walks += 1;
            c.walk_levels += u64::from(info.levels_walked) + u64::from(info.s2_levels);
            c.walk_cache_hits += u64::from(info.walk_cache_hit);
        }
    }
    let running = w.hw.untracked().borrow().cpus[cpu].ttbr0().map(|t| t.mm);
    if let Some(running) = running {
        let store = write && r.is_ok();
        for tr in trace.drain(..) {
            w.m.emit(match tr {
                AccessTrace::UsedLeaf(entry) => Event::LeafUse {
                    cpu,
                    running,
                    entry,
                    store,
                },
                AccessTrace::UsedWalk(entry) => Event::WalkUse {
                    cpu,
                    running,
                    entry,
                },
            });
        }
    }
    (r, info)
}

/// A speculative table walk of `va` by `cpu` in its current context
/// (see [`crate::hw::Hw::speculate`]); walk-cache entries it used are
/// reported like a demand walk's, as walks of the mm whose ASID is current.
pub fn speculate(w: &World, cpu: CpuId, va: u64, trace: &mut Vec<AccessTrace>) {
    hw_record(&[part::regs(cpu), part::PAGE_TABLES], &[part::tlb(cpu)]);
    let Some(t) = w.hw.untracked().borrow().walk_context(cpu) else {
        return;
    };
    trace.clear();
    w.hw.untracked().borrow_mut().speculate(cpu, va, trace);
    for tr in trace.drain(..) {
        if let AccessTrace::UsedWalk(entry) = tr {
            w.m.emit(Event::WalkUse {
                cpu,
                running: t.mm,
                entry,
            });
        }
    }
}

/// A TLBI by `cpu`. A local one takes effect at once, unless `HCR_EL2.FB`
/// makes it a broadcast ([`crate::hw::Hw::forces_broadcast`]); a
/// broadcast one is put in flight to every CPU (its affinity register
/// permitting) and its id returned (the driver delivers it).
fn tlbi(w: &World, cpu: CpuId, scope: TlbiScope, broadcast: bool) -> Option<usize> {
    let (broadcast, id) = {
        let mut hw = w.hw.untracked().borrow_mut();
        if hw.rejects_tlbi(cpu, scope, broadcast) {
            // The instruction faults (#GP) and invalidates nothing.
            drop(hw);
            hw_record(&[part::regs(cpu)], &[]);
            w.m.emit(Event::TlbiFault {
                cpu,
                scope,
                broadcast,
            });
            return None;
        }
        if broadcast || hw.forces_broadcast(cpu) {
            // The issuer's registers (in-flight count, DVM reach) and the
            // pending bit at every target.
            let id = hw.tlbi_broadcast_scoped(cpu, scope);
            hw_record(&[], &[part::regs(cpu)]);
            // Tested once here, not per target: at 4096 CPUs the loop
            // would otherwise cost the timing driver a flag test per CPU.
            if crate::engine::track::recording() {
                for t in hw.inflight[id].iter().flat_map(|f| f.pending.iter()) {
                    hw_record(&[], &[part::dvm_pending(t)]);
                }
            }
            (true, Some(id))
        } else {
            hw_record(&[part::regs(cpu)], &[part::tlb(cpu)]);
            hw.tlbi_local(cpu, scope);
            (false, None)
        }
    };
    {
        let mut st = w.stats.borrow_mut();
        if broadcast {
            st.cpu[cpu].tlbi_broadcast += 1;
        } else {
            st.cpu[cpu].tlbi_local += 1;
        }
    }
    w.m.emit(Event::Tlbi {
        cpu,
        scope,
        broadcast,
    });
    id
}

/// On a switch between host and guest, the user registers of the
/// regime now running become the ones used (`r`, machine-wide): the
/// hardware has one set per regime, so nothing is written, but the
/// observer learns what the CPU now translates with (an `AsidLoad` if
/// TTBR0 holds user tables, checked as one).
pub(super) fn switch_regime_ttbr0(w: &World, cpu: CpuId, r: UserRegs) {
    w.hw.borrow_mut().restore_user_regs(cpu, r);
    if let Some(t) = r.ttbr0() {
        w.m.emit(Event::AsidLoad {
            cpu,
            mm: t.mm,
            asid: t.asid,
        });
    }
}

/// `t` with its mm numbered machine-wide (a guest kernel's own numbers
/// stay in the guest; the hardware and the observer see these).
fn machine_ttbr(w: &World, t: Ttbr0) -> Ttbr0 {
    Ttbr0 {
        mm: w.gid_mm(t.mm),
        ..t
    }
}

/// A TTBR0 write (`None`: the reserved, empty tables), its mm numbered
/// machine-wide.
fn set_ttbr0(w: &World, cpu: CpuId, t: Option<Ttbr0>) {
    // A TTBR0 write may drop cached walks (`walk_cache_after_ttbr_write`).
    hw_record(&[], &[part::regs(cpu), part::tlb(cpu)]);
    w.hw.untracked().borrow_mut().set_ttbr0(cpu, t);
    if let Some(t) = t {
        w.m.emit(Event::AsidLoad {
            cpu,
            mm: t.mm,
            asid: t.asid,
        });
    }
}

/// An x86 CR3 write on `cpu`: flushes the entries of PCID `flush` (if any),
/// then installs `cr3`; one instruction, so no access sees the state
/// between.
fn load_cr3(w: &World, cpu: CpuId, cr3: Option<Ttbr0>, flush: Option<Asid>) {
    if let Some(pcid) = flush {
        w.stats.borrow_mut().cpu[cpu].tlbi_local += 1;
        hw_record(&[part::regs(cpu)], &[part::tlb(cpu)]);
        w.hw.untracked()
            .borrow_mut()
            .tlbi_local(cpu, TlbiScope::Asid(pcid));
        w.m.emit(Event::Tlbi {
            cpu,
            scope: TlbiScope::Asid(pcid),
            broadcast: false,
        });
    }
    set_ttbr0(w, cpu, cr3);
}

/// A register write `write` makes to the hardware (`SetDvmAffinity`,
/// `SetVttbr`); the step completes with no result.
fn set_hw_reg(w: &World, write: impl FnOnce(&mut crate::hw::Hw)) -> Applied {
    write(&mut w.hw.borrow_mut());
    Applied::Done(OpResult::Unit)
}

/// `cpu` writes TTBR0 with `t`, in this kernel's numbering (`None`: no
/// user tables, ASID 0), as `cpu_do_switch_mm` does.
fn set_user_ttbr0(w: &World, cpu: CpuId, t: Option<Ttbr0>) -> Applied {
    w.stats.borrow_mut().cpu[cpu].ttbr_writes += 1;
    set_ttbr0(w, cpu, t.map(|t| machine_ttbr(w, t)));
    Applied::Done(OpResult::Unit)
}

/// `cpu` points TTBR0 at the reserved zero page
/// (`cpu_set_reserved_ttbr0`).
fn set_reserved_ttbr0(w: &World, cpu: CpuId) -> Applied {
    w.stats.borrow_mut().cpu[cpu].ttbr_writes += 1;
    hw_record(&[], &[part::regs(cpu), part::tlb(cpu)]);
    w.hw.untracked().borrow_mut().set_reserved_ttbr0_base(cpu);
    Applied::Done(OpResult::Unit)
}

/// Records reads and writes of parts of the hardware (`Space::Hw`).
fn hw_record(reads: &[u32], writes: &[u32]) {
    if crate::engine::track::recording() {
        for &p in reads {
            crate::engine::track::record(|| Loc::part(Space::Hw, p), false);
        }
        for &p in writes {
            crate::engine::track::record(|| Loc::part(Space::Hw, p), true);
        }
    }
}
