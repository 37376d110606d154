//! The steps a task posts to its driver ([`Op`]) and their results.

use super::{LockId, TaskId};
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
    /// Writes TTBR0 (and the ASID) of this CPU.
    SetTtbr0(Option<Ttbr0>),
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

/// The result of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpResult {
    /// Nothing to report.
    Unit,
    /// Outcome of an access.
    Access(Result<(), Fault>),
    /// Why the guest exited (the end of an `EnterGuest`).
    GuestExit(GuestExit),
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

/// A task's mailbox.
pub type TaskMailbox = Mailbox<Op, OpResult>;
