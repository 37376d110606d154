//! The steps a task posts to its driver ([`Op`]) and their results.

use super::{LockId, TaskId};
use crate::config::Arch;
use crate::engine::exec::Mailbox;
use crate::hw::cpumask::CpuMask;
use crate::hw::tlb::{Asid, TlbiScope};
use crate::hw::{CpuId, Fault, Ttbr0};

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
    /// A `DSB` (`dsb(opt)` in arch/arm64/include/asm/barrier.h).
    Dsb(Dsb),
    /// `ISB`.
    Isb,
    /// Writes TTBR0 and the ASID of this CPU together
    /// ([`crate::hw::Hw::set_ttbr0`]): a user context
    /// (`cpu_do_switch_mm()`), or with `None` the reserved table and ASID 0
    /// (kernels that keep the ASID in TTBR0).
    SetTtbr0(Option<Ttbr0>),
    /// Points TTBR0 at the reserved table and leaves the ASID, which lives
    /// in TTBR1 (`TCR_EL1.A1 = 1`): arm64's `cpu_set_reserved_ttbr0()`
    /// since v4.15 ([`crate::hw::Hw::set_reserved_ttbr0_base`]).
    SetReservedTtbr0,
    /// Writes this CPU's broadcast-affinity register (TLBI by affinity,
    /// HiSilicon's `LSUDVMBM_EL2`) asking to reach these CPUs (`None`: no
    /// limit); later broadcast TLBIs of this CPU go where it says
    /// ([`crate::hw::dvm_affinity`]).
    SetDvmAffinity(Option<CpuMask>),
    /// Writes this CPU's `VTTBR_EL2.VMID` and `HCR_EL2.FB` (KVM's vCPU
    /// load): once the CPU enters the guest, its fills and EL1 TLBIs are
    /// tagged with the VMID, and with FB the guest's local TLBIs are
    /// broadcast ([`crate::hw::Hw::forces_broadcast`]).
    SetVttbr {
        /// The VMID.
        vmid: crate::hw::tlb::Vmid,
        /// `HCR_EL2.FB`.
        fb: bool,
    },
    /// Writes this CPU's `HCR_EL2.TGE` (VHE): cleared, the host's EL1 TLB
    /// maintenance applies to the guest regime of `VTTBR_EL2`
    /// (`enter_vmid_context()`); set again after (`exit_vmid_context()`).
    SetHcrTge(bool),
    /// KVM's guest entry (`__kvm_vcpu_run`, `ERET` to EL1) by a vCPU
    /// thread: the CPU runs this guest context (a vCPU,
    /// [`crate::step::Cx`]) until the guest exits; the step then completes
    /// with [`OpResult::GuestExit`].
    EnterGuest(usize),
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
    /// `hrtimer_start(&sl->timer, ns, HRTIMER_MODE_REL)` of an
    /// `hrtimer_sleeper` for the posting task: in `ns` the timer's
    /// interrupt reaches this CPU and its handler wakes the task
    /// ([`crate::kernel::hrtimer`]) if its sleep numbered `seq` is still
    /// the one armed.
    HrtimerStart {
        /// Relative expiry, ns.
        ns: u64,
        /// The sleep it ends (`Task::hrtimer_seq` when armed).
        seq: u64,
    },
    /// One atomic read-modify-write of a shared kernel variable.
    Atomic,
    /// One atomic on a lock's word outside `Lock`/`Unlock` (a sleeping
    /// rwsem's count): like `Atomic`, but the timing driver moves the
    /// lock's cache line to this CPU.
    LockWord(LockId),
    /// Acquires a lock exclusively (waits while it is held).
    Lock(LockId),
    /// Acquires a lock shared (reader side of a reader-writer lock).
    LockShared(LockId),
    /// Releases an exclusive hold.
    Unlock(LockId),
    /// Releases a shared hold.
    UnlockShared(LockId),
    /// Turns the posting task's exclusive hold into a shared one
    /// (`downgrade_write()`), letting the readers queued first in.
    Downgrade(LockId),
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

impl Op {
    /// The step as a deadlock report prints it (`load va 0x7f0000001000`,
    /// `lock 3`), naming TLB maintenance in `arch`'s terms
    /// ([`TlbiScope::insn`]).
    pub fn display(&self, arch: Arch) -> OpDisplay<'_> {
        OpDisplay { op: self, arch }
    }
}

/// An [`Op`] on one line, made by [`Op::display`].
#[derive(Debug, Clone, Copy)]
pub struct OpDisplay<'a> {
    op: &'a Op,
    arch: Arch,
}

impl std::fmt::Display for OpDisplay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op {
            Op::Work { ns, user: true } => write!(f, "user work {ns} ns"),
            Op::Work { ns, user: false } => write!(f, "kernel work {ns} ns"),
            Op::Access { va, write: true } => write!(f, "store va {va:#x}"),
            Op::Access { va, write: false } => write!(f, "load va {va:#x}"),
            Op::Tlbi { scope, broadcast } => scope.insn(*broadcast, self.arch).fmt(f),
            Op::Dsb(d) => d.fmt(f),
            Op::Isb => f.write_str("ISB"),
            Op::SetTtbr0(Some(t)) => write!(f, "TTBR0 <- {t}"),
            Op::SetTtbr0(None) => f.write_str("TTBR0 <- reserved (no user tables), ASID 0"),
            Op::SetReservedTtbr0 => f.write_str("TTBR0 <- reserved (no user tables), ASID kept"),
            Op::SetDvmAffinity(Some(m)) => write!(f, "DVM affinity <- cpus {m}"),
            Op::SetDvmAffinity(None) => f.write_str("DVM affinity <- every CPU"),
            Op::SetVttbr { vmid, fb } => {
                write!(f, "VTTBR <- vmid {vmid}{}", if *fb { " FB" } else { "" })
            }
            Op::SetHcrTge(tge) => write!(f, "HCR_EL2.TGE <- {}", u8::from(*tge)),
            Op::EnterGuest(cx) => write!(f, "enter guest context {cx}"),
            Op::LoadCr3 { cr3, flush } => load_cr3(f, *cr3, *flush),
            Op::HrtimerStart { ns, .. } => write!(f, "hrtimer_start +{ns} ns"),
            Op::Atomic => f.write_str("atomic"),
            Op::LockWord(l) => write!(f, "atomic on lock {l}"),
            Op::Lock(l) => write!(f, "lock {l}"),
            Op::LockShared(l) => write!(f, "lock {l} shared"),
            Op::Unlock(l) => write!(f, "unlock {l}"),
            Op::UnlockShared(l) => write!(f, "unlock {l} shared"),
            Op::Downgrade(l) => write!(f, "downgrade lock {l} to shared"),
            Op::SwitchTo(t) => write!(f, "switch to task{t}"),
            Op::Idle => f.write_str("idle"),
            Op::ReschedIpi(c) => write!(f, "resched IPI to cpu{c}"),
            Op::CallFunction {
                targets,
                handler,
                arg,
            } => write!(f, "call function {handler} (arg {arg}) on cpus {targets}"),
        }
    }
}

/// `CR3 <- mm0 table 3 pcid 1, flush pcid 1`: an x86 CR3 write
/// ([`Op::LoadCr3`]).
fn load_cr3(
    f: &mut std::fmt::Formatter<'_>,
    cr3: Option<Ttbr0>,
    flush: Option<Asid>,
) -> std::fmt::Result {
    match cr3 {
        Some(t) => write!(f, "CR3 <- mm{} table {} pcid {}", t.mm, t.pgd, t.asid)?,
        None => f.write_str("CR3 <- init_mm")?,
    }
    match flush {
        Some(pcid) => write!(f, ", flush pcid {pcid}"),
        None => f.write_str(", no flush"),
    }
}

/// The option of a `DSB`: which accesses it waits for, in which domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dsb {
    /// `dsb(ish)`: waits for every access and maintenance operation of this
    /// CPU to complete in the inner-shareable domain — for broadcast TLBIs,
    /// a DVM Sync to every CPU.
    Ish,
    /// `dsb(ishst)`: orders page-table stores before broadcast TLBIs.
    IshSt,
    /// `dsb(nsh)`: waits for this CPU's local TLBIs.
    Nsh,
    /// `dsb(nshst)`: orders page-table stores before local TLBIs.
    NshSt,
}

impl std::fmt::Display for Dsb {
    /// `DSB ISH`, `DSB ISHST`, `DSB NSH` or `DSB NSHST`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dsb::Ish => "DSB ISH",
            Dsb::IshSt => "DSB ISHST",
            Dsb::Nsh => "DSB NSH",
            Dsb::NshSt => "DSB NSHST",
        })
    }
}

/// The result of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpResult {
    /// Nothing to report.
    Unit,
    /// Outcome of an access.
    Access(Result<(), Fault>),
    /// Why the guest exited (the end of an `EnterGuest`).
    GuestExit(GuestExit),
    /// A user `Work` step cut short, with this much work (ns) left: an
    /// interrupt returned to user space with `need_resched` set
    /// (`ret_to_user_from_irq` → `work_pending`), which happens only with
    /// the timer tick on (`Ctx::user_work`).
    WorkLeft(u64),
}

/// Why a guest exited to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestExit {
    /// The vCPU's idle loop executed `WFI` with nothing to do (trapped by
    /// `HCR_EL2.TWI`): KVM blocks the vCPU thread until an interrupt is
    /// pending for it.
    Wfi,
    /// A physical interrupt for the host arrived (`HCR_EL2.IMO`): KVM
    /// takes it, handles its requests and re-enters.
    Irq,
}

impl std::fmt::Display for OpResult {
    /// `done`, `access done`, `translation fault`, `guest exit on WFI`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpResult::Unit => f.write_str("done"),
            OpResult::Access(Ok(())) => f.write_str("access done"),
            OpResult::Access(Err(fault)) => fault.fmt(f),
            OpResult::GuestExit(GuestExit::Wfi) => f.write_str("guest exit on WFI"),
            OpResult::GuestExit(GuestExit::Irq) => f.write_str("guest exit on IRQ"),
            OpResult::WorkLeft(ns) => write!(f, "user work cut with {ns} ns left"),
        }
    }
}

/// A task's mailbox.
pub type TaskMailbox = Mailbox<Op, OpResult>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;
    use crate::hw::tlb::MmId;

    #[test]
    fn steps_print_without_debug_structs() {
        let tlbi = Op::Tlbi {
            scope: TlbiScope::Asid(3),
            broadcast: true,
        };
        assert_eq!(
            tlbi.display(Arch::Arm64).to_string(),
            "TLBI ASIDE1IS asid 3"
        );
        assert_eq!(tlbi.display(Arch::X86).to_string(), "INVLPGB pcid 3");
        let cr3 = Op::LoadCr3 {
            cr3: Some(Ttbr0 {
                mm: MmId::new(2),
                pgd: 7,
                asid: 3,
            }),
            flush: Some(3),
        };
        assert_eq!(
            cr3.display(Arch::X86).to_string(),
            "CR3 <- mm2 table 7 pcid 3, flush pcid 3"
        );
        let access = Op::Access {
            va: 0x7f00_0000_1000,
            write: true,
        };
        assert_eq!(
            access.display(Arch::Arm64).to_string(),
            "store va 0x7f0000001000"
        );
        let mut targets = CpuMask::new(8);
        targets.set(cpuid(1));
        targets.set(cpuid(2));
        let call = Op::CallFunction {
            targets,
            handler: 0,
            arg: 4,
        };
        assert_eq!(
            call.display(Arch::X86).to_string(),
            "call function 0 (arg 4) on cpus 1-2"
        );
        assert_eq!(
            OpResult::Access(Err(Fault::Permission)).to_string(),
            "permission fault"
        );
        let ttbr = Op::SetTtbr0(Some(Ttbr0 {
            mm: MmId::new(0),
            pgd: 3,
            asid: 1,
        }));
        assert_eq!(
            ttbr.display(Arch::Arm64).to_string(),
            "TTBR0 <- mm0 table 3 asid 1"
        );
    }
}
