//! The event stream the model emits for observers (the checker). Observers
//! see events and may read the machine; they never change it.

use crate::engine::Ns;
use crate::hw::mem::{Pte, TableId};
use crate::hw::tlb::{Asid, LeafEntry, MmId, TlbiScope, WalkEntry};
use crate::hw::{CpuId, Hw};

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
        task: usize,
        /// The task's mm.
        mm: Option<MmId>,
    },
    /// A kernel call (syscall or fault) started on `cpu` for `mm`.
    CallEnter {
        /// CPU.
        cpu: CpuId,
        /// Task.
        task: usize,
        /// Name of the call.
        call: &'static str,
    },
    /// The kernel call on `cpu` returned to user space.
    CallExit {
        /// CPU.
        cpu: CpuId,
        /// Task.
        task: usize,
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
    /// The event with its CPU, mm and task numbers passed through `cpu`,
    /// `mm` and `task` (a guest kernel's own numbers made machine-wide,
    /// [`crate::kernel::World::emit`]). Entries in `LeafUse`/`WalkUse`
    /// come from the hardware and are machine-wide already.
    pub fn renumbered(
        self,
        cpu: impl Fn(CpuId) -> CpuId,
        mm: impl Fn(MmId) -> MmId,
        task: impl Fn(usize) -> usize,
    ) -> Event {
        use Event as E;
        match self {
            E::Running {
                cpu: c,
                task: t,
                mm: m,
            } => E::Running {
                cpu: cpu(c),
                task: task(t),
                mm: m.map(mm),
            },
            E::CallEnter {
                cpu: c,
                task: t,
                call,
            } => E::CallEnter {
                cpu: cpu(c),
                task: task(t),
                call,
            },
            E::CallExit {
                cpu: c,
                task: t,
                call,
            } => E::CallExit {
                cpu: cpu(c),
                task: task(t),
                call,
            },
            E::PteWrite {
                cpu: c,
                mm: m,
                va,
                old,
                new,
            } => E::PteWrite {
                cpu: cpu(c),
                mm: mm(m),
                va,
                old,
                new,
            },
            E::HugePteWrite {
                cpu: c,
                mm: m,
                va,
                old,
                new,
            } => E::HugePteWrite {
                cpu: cpu(c),
                mm: mm(m),
                va,
                old,
                new,
            },
            E::CallRange {
                cpu: c,
                mm: m,
                start,
                end,
            } => E::CallRange {
                cpu: cpu(c),
                mm: mm(m),
                start,
                end,
            },
            E::FrameFree {
                cpu: c,
                pfn,
                mm: m,
                va,
            } => E::FrameFree {
                cpu: cpu(c),
                pfn,
                mm: mm(m),
                va,
            },
            E::HugeFrameFree {
                cpu: c,
                pfn,
                mm: m,
                va,
            } => E::HugeFrameFree {
                cpu: cpu(c),
                pfn,
                mm: mm(m),
                va,
            },
            E::CopyOut { cpu: c, pfn } => E::CopyOut { cpu: cpu(c), pfn },
            E::TableFree {
                cpu: c,
                mm: m,
                table,
                instance,
            } => E::TableFree {
                cpu: cpu(c),
                mm: mm(m),
                table,
                instance,
            },
            E::LeafUse {
                cpu: c,
                running,
                entry,
                store,
            } => E::LeafUse {
                cpu: cpu(c),
                running: mm(running),
                entry,
                store,
            },
            E::WalkUse {
                cpu: c,
                running,
                entry,
            } => E::WalkUse {
                cpu: cpu(c),
                running: mm(running),
                entry,
            },
            E::AsidLoad {
                cpu: c,
                mm: m,
                asid,
            } => E::AsidLoad {
                cpu: cpu(c),
                mm: mm(m),
                asid,
            },
            E::Tlbi {
                cpu: c,
                scope,
                broadcast,
            } => E::Tlbi {
                cpu: cpu(c),
                scope,
                broadcast,
            },
            E::DsbDone { cpu: c } => E::DsbDone { cpu: cpu(c) },
            E::MmFree { mm: m } => E::MmFree { mm: mm(m) },
        }
    }
}

/// Something that watches a run.
pub trait Observer {
    /// Called for every event, after the model applied it.
    fn event(&mut self, now_ns: Ns, ev: &Event, hw: &Hw);
    /// The violation found so far, if any: the run stops at the first.
    fn failure(&self) -> Option<crate::check::Violation>;
    /// Whether [`Observer::failure`] would return a violation (asked after
    /// every event; cheaper than cloning the violation).
    fn failed(&self) -> bool {
        self.failure().is_some()
    }
    /// Events examined so far.
    fn events_seen(&self) -> u64;
}
