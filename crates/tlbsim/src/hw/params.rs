//! The hardware [`Hw`](super::Hw) is built from: the instruction-set
//! family, the topology, the TLB geometry and the features the model
//! distinguishes. A machine profile (`config::Profile::hw_params`) fills
//! it; the hardware depends on nothing above it.

use super::mem::Granule;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Instruction-set family of a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// ARMv8-A / ARMv9-A with DVM broadcast invalidation.
    Arm64,
    /// x86-64: IPI shootdowns, INVLPG, CR3/PCID, optionally AMD INVLPGB.
    X86,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::Arm64 => "arm64",
            Arch::X86 => "x86",
        })
    }
}

/// What a CPU may do with cached walks (intermediate, table-level TLB
/// entries) after a TTBR0 write, in particular after
/// `cpu_set_reserved_ttbr0()` leaves TTBR0 on the reserved (empty) table
/// and the ASID current in TTBR1 (`TCR_EL1.A1 = 1`): the three readings of
/// docs/research/walk-cache-reserved-ttbr0.md. Every reading keeps leaf
/// entries tagged by (VMID, ASID).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WalkCacheAfterTtbrWrite {
    /// Cached walks are tagged by VMID and ASID only and stay usable while
    /// their ASID is current, whatever TTBR0 points at: a walk may start
    /// from a cached intermediate entry (and fill new entries) with TTBR0
    /// on the reserved table; a walk from the reserved root reads an empty
    /// table and caches nothing. Arm ARM DDI 0487 M.a.a D8.17 R_NWYRD,
    /// D8.16.3.1 R_XXNPZ and R_SCBSR; Cortex-A57/A72 TRM 5.6.
    #[default]
    AsidTagged,
    /// A TTBR0 write (the reserved table, or `cpu_do_switch_mm()`'s)
    /// discards the cached walks of the regime written (the CPU's VMID):
    /// none cached before it is used after it (a conservative
    /// implementation; no architectural source).
    FlushOnTtbrChange,
    /// No walk starts from the reserved root, but cached walks of the
    /// current ASID stay usable (research reading C1: a reserved TTBR0
    /// with `TCR_EL1.EPD0 = 0`).
    NoNewRootWalks,
}

impl WalkCacheAfterTtbrWrite {
    /// Is this the default reading (`asid-tagged`)?
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The name used in TOML (`asid-tagged`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::AsidTagged => "asid-tagged",
            Self::FlushOnTtbrChange => "flush-on-ttbr-change",
            Self::NoNewRootWalks => "no-new-root-walks",
        }
    }
}

impl fmt::Display for WalkCacheAfterTtbrWrite {
    /// The TOML name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters of a modelled machine ([`Hw::new`](super::Hw::new)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwParams {
    /// Instruction-set family: reports name TLB maintenance in its terms.
    pub arch: Arch,
    /// CPUs (`topology.cpus`).
    pub cpus: usize,
    /// Sockets (`topology.sockets`): a CPU's socket is `cpu / (cpus /
    /// sockets)`, rounded up.
    pub sockets: usize,
    /// Dies per socket (`topology.dies_per_socket`).
    pub dies_per_socket: usize,
    /// CPUs per cluster (`topology.cpus_per_cluster`).
    pub cpus_per_cluster: usize,
    /// Leaf TLB entries per CPU (`tlb.tlb_entries`).
    pub tlb_entries: usize,
    /// The leaf TLB's associativity (`tlb.tlb_ways`).
    pub tlb_ways: usize,
    /// Walk-cache entries per CPU (`tlb.walk_cache_entries`).
    pub walk_cache_entries: usize,
    /// Stage-2 (IPA to PA) cache entries per CPU (`virt.
    /// stage2_cache_entries`; 0 without virtualization).
    pub stage2_cache_entries: usize,
    /// The machine has TLBI by affinity (`arm64.tlbi_affinity`).
    pub tlbi_affinity: bool,
    /// What cached walks are good for after a TTBR0 write
    /// (`arm64.walk_cache_after_ttbr_write`; x86: ASID-tagged).
    pub walk_cache_reading: WalkCacheAfterTtbrWrite,
    /// The translation granule (`kernel.page_size_kib`).
    pub granule: Granule,
}
