//! What the checker reports: the invariants it holds and a violation of
//! one. They sit beside the event stream, below the checker, so that the
//! kernel's registry (a mutant names the invariant it breaks) and the
//! observers' trait name them without depending on the checker.

use super::Event;
use crate::engine::Ns;
use crate::hw::tlb::MmId;
use crate::hw::Arch;
use crate::hw::CpuId;

/// An invariant the checker holds (DESIGN §3). A mutant's registry entry
/// names the one it breaks; a violation report names the one it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// A CPU used a translation retired by a completed kernel call.
    NoStaleUse,
    /// A CPU holds, with the address space loaded, a retired translation.
    NoStaleHold,
    /// A freed data frame is still mapped by a CPU running the mm.
    NoUseAfterFree,
    /// A walk went (or may go) through a cached entry to a freed or reused
    /// page-table page.
    NoStaleWalk,
    /// Two address spaces met under one ASID on one CPU.
    AsidIsolation,
    /// A store reached a data frame after the kernel began copying it out
    /// (to swap or to a migration target): the write is lost.
    NoLostWrite,
    /// A CPU used (or, loading an ASID, held under it) a translation of
    /// another virtual machine or of the host: a security failure, as
    /// ASID isolation is between processes.
    VmidIsolation,
    /// A CPU refused a TLB maintenance instruction the kernel issued and
    /// raised a fault (x86 #GP): the kernel oopses, and nothing was
    /// invalidated.
    ValidTlbi,
}

impl Invariant {
    /// Every invariant, in a fixed order.
    pub const ALL: [Invariant; 8] = [
        Invariant::NoStaleUse,
        Invariant::NoStaleHold,
        Invariant::NoUseAfterFree,
        Invariant::NoStaleWalk,
        Invariant::AsidIsolation,
        Invariant::NoLostWrite,
        Invariant::VmidIsolation,
        Invariant::ValidTlbi,
    ];

    /// The name reports print (`invariant: <name>`).
    pub fn name(self) -> &'static str {
        match self {
            Invariant::NoStaleUse => "no stale use",
            Invariant::NoStaleHold => "no stale hold",
            Invariant::NoUseAfterFree => "no use after free",
            Invariant::NoStaleWalk => "no stale walk",
            Invariant::AsidIsolation => "ASID isolation",
            Invariant::NoLostWrite => "no lost write",
            Invariant::VmidIsolation => "VMID isolation",
            Invariant::ValidTlbi => "valid TLB maintenance",
        }
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A violation of an [`Invariant`]: what the checker found, where and when,
/// and the events that led there (DESIGN §3). The run stops at the first.
///
/// Its `Display` is the report the CLI prints (`invariant: <name>`, `at:
/// <time> ns`, the detail line, then `last events:` one per line), written
/// like a kernel log: addresses in hex, PTEs and TLB entries by their
/// `Display` (never a Rust debug struct). Tests and callers match on the
/// fields rather than that text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant broken.
    pub invariant: Invariant,
    /// The CPUs involved: first the one whose TLB, walk or TTBR0 breaks the
    /// invariant, then (if another) the one whose action exposed it (the
    /// CPU returning from the call, freeing the frame or table).
    pub cpus: Vec<CpuId>,
    /// The address space concerned (the one the offending CPU runs or
    /// loads), when there is one.
    pub mm: Option<MmId>,
    /// The virtual address concerned (page aligned for leaf entries; the
    /// first address a walk-cache entry covers), when there is one.
    pub va: Option<u64>,
    /// Simulated time of the event that revealed it (ns).
    pub time_ns: Ns,
    /// One line for people: what was seen, with the offending entry.
    pub detail: String,
    /// The last events observed, oldest first, this one included (as many
    /// as `[checker] history`), with their times (ns).
    pub history: Vec<(Ns, Event)>,
    /// The machine's instruction-set family, in whose terms the report
    /// names TLB maintenance ([`Event::display`]).
    pub arch: Arch,
    /// The machine's granule, in whose pages the report's TLB entries
    /// count.
    pub granule: crate::hw::mem::Granule,
    /// What the times count: simulated nanoseconds (the timing driver),
    /// or each CPU's own actions (the explorer).
    pub clock: Clock,
}

/// What the times of a [`Violation`] count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clock {
    /// Simulated nanoseconds on one clock for the whole machine (the
    /// timing driver): the history is in time order.
    #[default]
    SimulatedNs,
    /// The explorer's clocks: each CPU counts its own actions, so two
    /// CPUs' times do not compare; the history is in the order the
    /// explorer ran the actions, which is the order that matters.
    PerCpuActions,
}

impl std::fmt::Display for Violation {
    /// Under [`Clock::PerCpuActions`] the events are numbered in the order
    /// the explorer ran them, without times: a time there is one CPU's own
    /// action count, and printed as nanoseconds the events looked out of
    /// order.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.clock {
            Clock::SimulatedNs => write!(
                f,
                "invariant: {}\nat: {} ns\n{}\nlast events:\n",
                self.invariant, self.time_ns, self.detail
            )?,
            Clock::PerCpuActions => write!(
                f,
                "invariant: {}\n{}\nlast events, in the order the explorer ran them:\n",
                self.invariant, self.detail
            )?,
        }
        for (i, (t, e)) in self.history.iter().enumerate() {
            let text = e.display(self.arch, self.granule);
            match self.clock {
                Clock::SimulatedNs => writeln!(f, "  {t:>12} ns  {text}")?,
                Clock::PerCpuActions => writeln!(f, "  {:>4}  {text}", i + 1)?,
            }
        }
        Ok(())
    }
}
