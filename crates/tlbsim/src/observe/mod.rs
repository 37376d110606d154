//! The event stream the model emits for observers (the checker). Observers
//! see events and may read the machine; they never change it.

use crate::engine::Ns;
use crate::hw::mem::{Granule, MaybePte, Pte, TableId};
use crate::hw::tlb::{Asid, LeafEntry, MmId, TlbiScope, WalkEntry};
use crate::hw::Arch;
use crate::hw::{CpuId, Hw};
use std::fmt;

pub mod violation;

pub use violation::{Clock, Invariant, Violation};

/// The id of a kernel's task. Inside a kernel it is the kernel's own
/// number, an index in its task table from 0 (the idle tasks first, one a
/// CPU); in the event stream it is machine-wide ([`TaskId::in_kernel`]):
/// kernel `k`'s task `i` is `k <<`
/// [`KERNEL_ID_SHIFT`](crate::hw::tlb::KERNEL_ID_SHIFT)` | i`, as an
/// [`MmId`] is, so the host's ids (kernel 0) are the same in both.
/// Printed (`Display` and `Debug`) as the bare number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct TaskId(usize);

crate::hw::tlb::kernel_id!(
    TaskId,
    usize,
    crate::engine::state::ByTask,
    crate::engine::track::part::task,
    "task",
    usize::MAX
);

/// One observable event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `cpu` switched to a task: its user address space, or `None` for a
    /// kernel thread or the idle task (which keep TTBR0 lazily). Emitted
    /// after `switch_mm`, before the task runs.
    Running {
        /// CPU.
        cpu: CpuId,
        /// The task (the previous one while the scheduler runs, `mm`
        /// `None`).
        task: TaskId,
        /// The task's mm.
        mm: Option<MmId>,
    },
    /// A kernel call (syscall or fault) started on `cpu` for `mm`.
    CallEnter {
        /// CPU.
        cpu: CpuId,
        /// Task.
        task: TaskId,
        /// Name of the call.
        call: &'static str,
    },
    /// The kernel call on `cpu` returned to user space.
    CallExit {
        /// CPU.
        cpu: CpuId,
        /// Task.
        task: TaskId,
        /// Name of the call.
        call: &'static str,
    },
    /// A PTE of `mm` at `va` was written (`new == None`: cleared).
    PteWrite {
        /// CPU writing.
        cpu: CpuId,
        /// Address space.
        mm: MmId,
        /// Virtual address (page aligned).
        va: u64,
        /// Old value.
        old: Option<Pte>,
        /// New value.
        new: Option<Pte>,
    },
    /// The 2 MiB leaf of `mm` at `va` (2 MiB aligned) was written: one
    /// descriptor, whose 4 KiB page `i` maps frame `pfn + i` of the value
    /// (`new == None`: cleared). A checker counts it as the 512 PTE writes
    /// of its pages.
    HugePteWrite {
        /// CPU writing.
        cpu: CpuId,
        /// Address space.
        mm: MmId,
        /// Virtual address (2 MiB aligned).
        va: u64,
        /// Old value (its first frame).
        old: Option<Pte>,
        /// New value (its first frame).
        new: Option<Pte>,
    },
    /// The call in progress on `cpu` guarantees, when it returns, that no
    /// translation of `[start, end)` older than the call remains unless it
    /// agrees with the PTE then (munmap, madvise, mprotect).
    CallRange {
        /// CPU.
        cpu: CpuId,
        /// Address space.
        mm: MmId,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// A data frame was freed; its last mapping was `mm` at `va`.
    FrameFree {
        /// CPU freeing it.
        cpu: CpuId,
        /// Frame.
        pfn: crate::hw::mem::Pfn,
        /// Address space of the last mapping.
        mm: MmId,
        /// Virtual address of the last mapping.
        va: u64,
    },
    /// The 512 frames of a huge page, from `pfn`, were freed together; its
    /// last mapping was `mm` at `va` (2 MiB aligned). A checker counts it
    /// as the 512 frees of its frames.
    HugeFrameFree {
        /// CPU freeing it.
        cpu: CpuId,
        /// First frame.
        pfn: crate::hw::mem::Pfn,
        /// Address space of the last mapping.
        mm: MmId,
        /// Virtual address of the last mapping.
        va: u64,
    },
    /// The kernel began copying data frame `pfn`'s contents elsewhere: its
    /// write-out to swap (`pageout()`) or its copy to a new frame
    /// (`migrate_folio()`). A store to the frame after this is lost.
    CopyOut {
        /// CPU copying.
        cpu: CpuId,
        /// Frame.
        pfn: crate::hw::mem::Pfn,
    },
    /// A page-table page was freed (returned to the allocator).
    TableFree {
        /// CPU freeing it.
        cpu: CpuId,
        /// Owner.
        mm: MmId,
        /// Table page.
        table: TableId,
        /// Its instance before the free.
        instance: u64,
    },
    /// `mm`'s tree now also links page-table page `table`, which another
    /// address space's tree links too (a hugetlb PMD table shared by
    /// `huge_pmd_share()`): its free concerns the walk caches of every
    /// address space that linked it.
    TableShare {
        /// CPU linking it.
        cpu: CpuId,
        /// Address space that now links it.
        mm: MmId,
        /// An address space whose tree linked it already.
        from: MmId,
        /// Table page.
        table: TableId,
    },
    /// A lockless software walk (GUP-fast, interrupts off) read a PTE of
    /// `mm` at `va` in page-table page `table`, reached through a PMD it
    /// read earlier, when `table` was at `instance`.
    SoftwareWalk {
        /// CPU.
        cpu: CpuId,
        /// Address space walked.
        mm: MmId,
        /// Address looked up.
        va: u64,
        /// The PTE table the PMD pointed to.
        table: TableId,
        /// Its instance when the PMD was read.
        instance: u64,
    },
    /// An access used a cached leaf translation.
    LeafUse {
        /// CPU.
        cpu: CpuId,
        /// Address space the CPU runs (TTBR0's).
        running: MmId,
        /// The entry.
        entry: LeafEntry,
        /// The access stored through it (a write that did not fault).
        store: bool,
    },
    /// A walk went through a cached intermediate entry.
    WalkUse {
        /// CPU.
        cpu: CpuId,
        /// Address space the CPU runs.
        running: MmId,
        /// The entry.
        entry: WalkEntry,
    },
    /// TTBR0 was loaded with `mm` under `asid` on `cpu`.
    AsidLoad {
        /// CPU.
        cpu: CpuId,
        /// Address space.
        mm: MmId,
        /// ASID.
        asid: Asid,
    },
    /// A TLBI was issued.
    Tlbi {
        /// CPU.
        cpu: CpuId,
        /// Scope.
        scope: TlbiScope,
        /// Inner-shareable (broadcast).
        broadcast: bool,
    },
    /// The CPU refused a TLB maintenance instruction and raised a fault
    /// instead: nothing was invalidated, and the kernel oopses (x86: an
    /// `INVLPGB` naming a non-zero PCID while `CR4.PCIDE` is clear raises
    /// #GP; [`crate::hw::Hw::rejects_tlbi`]).
    TlbiFault {
        /// CPU.
        cpu: CpuId,
        /// Scope of the refused instruction.
        scope: TlbiScope,
        /// Inner-shareable (broadcast).
        broadcast: bool,
    },
    /// A DSB ISH completed on `cpu`.
    DsbDone {
        /// CPU.
        cpu: CpuId,
    },
    /// An address space was torn down for good (mm_count reached 0).
    MmFree {
        /// Address space.
        mm: MmId,
    },
}

impl Event {
    /// The event of kernel `kernel`, in that kernel's own numbers, made
    /// machine-wide ([`crate::kernel::World::emit`]): its CPUs passed
    /// through `cpu` (a vCPU to the physical CPU it runs on), its mms and
    /// tasks through [`MmId::in_kernel`] and [`TaskId::in_kernel`]. Entries
    /// in `LeafUse`/`WalkUse` come from the hardware and are machine-wide
    /// already.
    pub fn renumbered(mut self, kernel: u32, cpu: impl Fn(CpuId) -> CpuId) -> Event {
        use Event as E;
        let mm = |m: MmId| m.in_kernel(kernel);
        let task = |t: TaskId| t.in_kernel(kernel);
        match &mut self {
            E::Running {
                cpu: c,
                task: t,
                mm: m,
            } => {
                (*c, *t) = (cpu(*c), task(*t));
                *m = m.map(&mm);
            }
            E::CallEnter {
                cpu: c, task: t, ..
            }
            | E::CallExit {
                cpu: c, task: t, ..
            } => (*c, *t) = (cpu(*c), task(*t)),
            E::PteWrite { cpu: c, mm: m, .. }
            | E::HugePteWrite { cpu: c, mm: m, .. }
            | E::CallRange { cpu: c, mm: m, .. }
            | E::FrameFree { cpu: c, mm: m, .. }
            | E::HugeFrameFree { cpu: c, mm: m, .. }
            | E::TableFree { cpu: c, mm: m, .. }
            | E::SoftwareWalk { cpu: c, mm: m, .. }
            | E::AsidLoad { cpu: c, mm: m, .. }
            | E::LeafUse {
                cpu: c, running: m, ..
            }
            | E::WalkUse {
                cpu: c, running: m, ..
            } => (*c, *m) = (cpu(*c), mm(*m)),
            E::CopyOut { cpu: c, .. }
            | E::Tlbi { cpu: c, .. }
            | E::TlbiFault { cpu: c, .. }
            | E::DsbDone { cpu: c } => *c = cpu(*c),
            E::MmFree { mm: m } => *m = mm(*m),
            E::TableShare {
                cpu: c,
                mm: m,
                from: f,
                ..
            } => (*c, *m, *f) = (cpu(*c), mm(*m), mm(*f)),
        }
        self
    }
}

impl Event {
    /// The event as a report's history prints it, one line naming TLB
    /// maintenance in `arch`'s terms (`Tlbi cpu3 VAE1IS asid 2 va
    /// 0x7f0000001000`, `Tlbi cpu3 INVLPG pcid 2 va 0x7f0000001000`);
    /// TLB entries' addresses and huge pages' sizes in granule `g`'s
    /// pages. `Display` on the event itself uses arm64's terms and 4 KiB
    /// pages.
    pub fn display(&self, arch: Arch, g: Granule) -> EventDisplay<'_> {
        EventDisplay { ev: self, arch, g }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.display(Arch::Arm64, Granule::K4).fmt(f)
    }
}

/// An [`Event`] on one line, like a kernel log: its kind, the CPU, the mm,
/// addresses in hex, PTEs and TLB entries by their own `Display`
/// (`PteWrite cpu0 mm0 va 0x7effffffe000 pfn 8 r- v23 -> pfn 8 r- v24`,
/// `CallEnter cpu0 task8 mprotect`). Made by [`Event::display`].
#[derive(Debug, Clone, Copy)]
pub struct EventDisplay<'a> {
    ev: &'a Event,
    arch: Arch,
    g: Granule,
}

impl fmt::Display for EventDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.ev {
            Event::LeafUse { .. }
            | Event::WalkUse { .. }
            | Event::AsidLoad { .. }
            | Event::Tlbi { .. }
            | Event::TlbiFault { .. }
            | Event::DsbDone { .. } => self.fmt_hw(f),
            _ => self.fmt_kernel(f),
        }
    }
}

impl EventDisplay<'_> {
    /// The events of the kernel: tasks, calls, page-table writes, frees.
    fn fmt_kernel(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Event as E;
        match *self.ev {
            E::Running { cpu, task, mm } => match mm {
                Some(mm) => write!(f, "Running cpu{cpu} task{task} mm{mm}"),
                None => write!(f, "Running cpu{cpu} task{task} (no mm)"),
            },
            E::CallEnter { cpu, task, call } => write!(f, "CallEnter cpu{cpu} task{task} {call}"),
            E::CallExit { cpu, task, call } => write!(f, "CallExit cpu{cpu} task{task} {call}"),
            E::PteWrite {
                cpu,
                mm,
                va,
                old,
                new,
            } => {
                let (old, new) = (MaybePte(old), MaybePte(new));
                write!(f, "PteWrite cpu{cpu} mm{mm} va {va:#x} {old} -> {new}")
            }
            E::HugePteWrite {
                cpu,
                mm,
                va,
                old,
                new,
            } => {
                let (old, new) = (MaybePte(old), MaybePte(new));
                let size = self.g.pmd_size() >> 20;
                write!(
                    f,
                    "HugePteWrite cpu{cpu} mm{mm} va {va:#x} ({size} MiB) {old} -> {new}"
                )
            }
            E::CallRange {
                cpu,
                mm,
                start,
                end,
            } => {
                write!(f, "CallRange cpu{cpu} mm{mm} va {start:#x}-{end:#x}")
            }
            E::FrameFree { cpu, pfn, mm, va } => {
                write!(
                    f,
                    "FrameFree cpu{cpu} pfn {pfn} (last mapped by mm{mm} at va {va:#x})"
                )
            }
            E::HugeFrameFree { cpu, pfn, mm, va } => write!(
                f,
                "HugeFrameFree cpu{cpu} pfn {pfn}-{} (last mapped by mm{mm} at va {va:#x})",
                pfn + self.g.hpage_pmd_nr() - 1
            ),
            E::CopyOut { cpu, pfn } => write!(f, "CopyOut cpu{cpu} pfn {pfn}"),
            E::TableFree {
                cpu,
                mm,
                table,
                instance,
            } => {
                write!(
                    f,
                    "TableFree cpu{cpu} mm{mm} table {table} instance {instance}"
                )
            }
            E::TableShare {
                cpu,
                mm,
                from,
                table,
            } => write!(f, "TableShare cpu{cpu} mm{mm} table {table} (of mm{from})"),
            E::SoftwareWalk {
                cpu,
                mm,
                va,
                table,
                instance,
            } => write!(
                f,
                "SoftwareWalk cpu{cpu} mm{mm} va {va:#x} -> table {table} instance {instance}"
            ),
            E::MmFree { mm } => write!(f, "MmFree mm{mm}"),
            _ => unreachable!("a hardware event, which `fmt` routes to `fmt_hw`"),
        }
    }

    /// The events of the hardware: TLB and walk-cache uses, TTBR0 loads,
    /// invalidations and barriers.
    fn fmt_hw(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Event as E;
        match *self.ev {
            E::LeafUse {
                cpu,
                running,
                entry,
                store,
            } => {
                let access = if store { "store" } else { "load" };
                let entry = entry.show(self.g);
                write!(f, "LeafUse cpu{cpu} running mm{running} {access} {entry}")
            }
            E::WalkUse {
                cpu,
                running,
                entry,
            } => {
                let entry = entry.show(self.g);
                write!(f, "WalkUse cpu{cpu} running mm{running} {entry}")
            }
            E::AsidLoad { cpu, mm, asid } => {
                let tag = match self.arch {
                    Arch::Arm64 => "asid",
                    Arch::X86 => "pcid",
                };
                write!(f, "AsidLoad cpu{cpu} mm{mm} {tag} {asid}")
            }
            E::Tlbi {
                cpu,
                scope,
                broadcast,
            } => {
                write!(f, "Tlbi cpu{cpu} {:#}", scope.insn(broadcast, self.arch))
            }
            E::TlbiFault {
                cpu,
                scope,
                broadcast,
            } => {
                let insn = scope.insn(broadcast, self.arch);
                write!(f, "TlbiFault cpu{cpu} {insn:#}")
            }
            E::DsbDone { cpu } => write!(f, "DsbDone cpu{cpu}"),
            _ => unreachable!("a kernel event, which `fmt` routes to `fmt_kernel`"),
        }
    }
}

/// Something that watches a run.
pub trait Observer {
    /// Called for every event, after the model applied it.
    fn event(&mut self, now_ns: Ns, ev: &Event, hw: &Hw);
    /// The violation found so far, if any: the run stops at the first.
    fn failure(&self) -> Option<Violation>;
    /// Whether [`Observer::failure`] would return a violation (asked after
    /// every event; cheaper than cloning the violation).
    fn failed(&self) -> bool {
        self.failure().is_some()
    }
    /// Events examined so far.
    fn events_seen(&self) -> u64;
    /// Records (`engine::track::record`) what [`Observer::event`] will
    /// read and write of the observer's state and of the hardware for
    /// `ev`, while the explorer records an action's footprint: the
    /// observer's state is the model's too, and two actions whose events
    /// it orders must not be swapped. By default, the whole hardware read
    /// and the whole observer state written (sound, and coarse).
    fn record_footprint(&self, ev: &Event) {
        use crate::engine::track::{record, Loc, Space};
        let _ = ev;
        record(|| Loc::all(Space::Hw), false);
        record(|| Loc::all(Space::Check), true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;
    use crate::hw::mem::Perms;
    use crate::hw::tlb::KERNEL_ID_SHIFT;

    const VA: u64 = 0x7eff_ffff_e000;

    fn pte(pfn: u64, perms: Perms, version: u64) -> Option<Pte> {
        Some(Pte {
            pfn,
            perms,
            version,
        })
    }

    #[test]
    fn a_machine_wide_task_id_names_its_kernel_and_prints_as_its_number() {
        let own = TaskId::from_index(8);
        let guest = own.in_kernel(1);
        assert_eq!((guest.kernel(), guest.local()), (1, own));
        assert_eq!(guest.index(), (1 << KERNEL_ID_SHIFT) | 8);
        assert_eq!((own.in_kernel(0), own.kernel()), (own, 0));
        assert_eq!(
            format!("task{own} {:?}", Some(guest)),
            "task8 Some(16777224)"
        );
    }

    #[test]
    fn kernel_events_print_one_log_line_each() {
        let cases = [
            (
                Event::PteWrite {
                    cpu: cpuid(0),
                    mm: MmId::new(0),
                    va: VA,
                    old: pte(8, Perms::R, 23),
                    new: pte(8, Perms::RW, 24),
                },
                "PteWrite cpu0 mm0 va 0x7effffffe000 pfn 8 r- v23 -> pfn 8 rw v24",
            ),
            (
                Event::HugePteWrite {
                    cpu: cpuid(1),
                    mm: MmId::new(2),
                    va: 0x4000_0000,
                    old: pte(512, Perms::RW, 3),
                    new: None,
                },
                "HugePteWrite cpu1 mm2 va 0x40000000 (2 MiB) pfn 512 rw v3 -> none",
            ),
            (
                Event::CallEnter {
                    cpu: cpuid(0),
                    task: TaskId::from_index(8),
                    call: "mprotect",
                },
                "CallEnter cpu0 task8 mprotect",
            ),
            (
                Event::Running {
                    cpu: cpuid(1),
                    task: TaskId::from_index(1),
                    mm: None,
                },
                "Running cpu1 task1 (no mm)",
            ),
            (
                Event::CallRange {
                    cpu: cpuid(0),
                    mm: MmId::new(0),
                    start: VA,
                    end: VA + 0x2000,
                },
                "CallRange cpu0 mm0 va 0x7effffffe000-0x7f0000000000",
            ),
            (
                Event::HugeFrameFree {
                    cpu: cpuid(3),
                    pfn: 1024,
                    mm: MmId::new(1),
                    va: 0x4000_0000,
                },
                "HugeFrameFree cpu3 pfn 1024-1535 (last mapped by mm1 at va 0x40000000)",
            ),
            (
                Event::TableFree {
                    cpu: cpuid(2),
                    mm: MmId::new(0),
                    table: 9,
                    instance: 1,
                },
                "TableFree cpu2 mm0 table 9 instance 1",
            ),
        ];
        for (ev, line) in cases {
            assert_eq!(ev.to_string(), line);
        }
    }

    #[test]
    fn hardware_events_name_tlb_maintenance_in_the_architecture_s_terms() {
        let entry = LeafEntry {
            vmid: 0,
            asid: 1,
            vpn: VA >> crate::hw::mem::PAGE_SHIFT_4K,
            pfn: 10,
            perms: Perms::RW,
            version: 11,
            mm: MmId::new(0),
        };
        let used = Event::LeafUse {
            cpu: cpuid(1),
            running: MmId::new(0),
            entry,
            store: true,
        };
        assert_eq!(
            used.to_string(),
            "LeafUse cpu1 running mm0 store va 0x7effffffe000 -> pfn 10 rw (asid 1, vmid 0, mm 0, v11)"
        );
        let tlbi = Event::Tlbi {
            cpu: cpuid(3),
            scope: TlbiScope::Va {
                asid: 2,
                va: 0x7f00_0000_1000,
                last_level: false,
            },
            broadcast: true,
        };
        assert_eq!(
            tlbi.to_string(),
            "Tlbi cpu3 VAE1IS asid 2 va 0x7f0000001000"
        );
        assert_eq!(
            tlbi.display(Arch::X86, Granule::K4).to_string(),
            "Tlbi cpu3 INVLPGB pcid 2 va 0x7f0000001000"
        );
        let load = Event::AsidLoad {
            cpu: cpuid(1),
            mm: MmId::new(4),
            asid: 7,
        };
        assert_eq!(load.to_string(), "AsidLoad cpu1 mm4 asid 7");
        assert_eq!(
            load.display(Arch::X86, Granule::K4).to_string(),
            "AsidLoad cpu1 mm4 pcid 7"
        );
    }
}
