//! Machine profiles: topology, TLB geometry, invalidation and kernel path
//! costs, each with its unit in its name; the built-in ones and profile
//! files.

use super::limits;
use super::location::{parse_toml, ConfigError};
use super::MachineOverrides;
use serde::{Deserialize, Serialize};

pub use crate::hw::params::{Arch, WalkCacheAfterTtbrWrite};

/// A machine profile: the hardware and the kernel's fixed costs on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name, e.g. `ampere-32`.
    pub name: String,
    /// One line saying which real machine this is.
    pub description: String,
    /// Instruction-set family.
    pub arch: Arch,
    /// CPUs, clusters, sockets.
    pub topology: Topology,
    /// TLB geometry and walk costs.
    pub tlb: TlbParams,
    /// arm64 invalidation and interconnect costs (arm64 profiles only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm64: Option<Arm64Params>,
    /// x86 invalidation costs (x86 profiles only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x86: Option<X86Params>,
    /// Kernel path costs.
    pub kernel: KernelCosts,
    /// Reclaim, swap and zram costs: needed only by workloads that page
    /// memory out (`madvise(MADV_PAGEOUT)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapCosts>,
    /// NUMA nodes and page-copy costs: needed only by workloads that
    /// migrate pages between nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<NumaParams>,
    /// KVM world-switch costs: needed only by experiments that run
    /// virtual machines (`[vm]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virt: Option<VirtCosts>,
    /// Page-cache read and write costs: needed only by workloads that
    /// copy files (unixbench's `fstime`, `fsbuffer`, `fsdisk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileCosts>,
}

/// The costs of `read()` and `write()` on a file whose pages are in the
/// page cache (`kernel/file.rs`), beyond the system call's entry and exit.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCosts {
    /// A `read()`'s fixed work: `fdget_pos`, `filemap_read`'s page-cache
    /// lookup and `touch_atime`, without the copy.
    pub file_read_ns: u64,
    /// A `write()`'s fixed work: `fdget_pos`, `generic_perform_write`'s
    /// `write_begin`/`write_end` on a cached page, `file_update_time` and
    /// marking the folio dirty, without the copy.
    pub file_write_ns: u64,
    /// Copying one KiB between a user buffer and a cached page
    /// (`copy_page_to_iter` / `copy_page_from_iter_atomic`).
    pub copy_user_ns_per_kib: u64,
}

/// The costs of KVM's world switch between a guest and the host (VHE:
/// the host kernel at EL2).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtCosts {
    /// From the guest's trapping instruction to the host's exit handler
    /// (`__kvm_vcpu_run` returning: guest state saved, host state
    /// restored, traps deactivated).
    pub guest_exit_ns: u64,
    /// From `__kvm_vcpu_run`'s call to the guest's next instruction
    /// (host state saved, guest state and traps restored, `ERET`).
    pub guest_entry_ns: u64,
    /// KVM's run-loop work around a blocking exit besides the switch
    /// itself: `kvm_arch_vcpu_put()` and `kvm_arch_vcpu_load()` (timer,
    /// vGIC and system-register state), charged as the vCPU thread's
    /// kernel work.
    pub vcpu_put_load_ns: u64,
    /// Stage-2 translations each CPU caches for guests' walks
    /// (`hw/stage2.rs`; a miss reads the 4 stage-2 levels).
    pub stage2_cache_entries: u32,
}

/// NUMA layout and the cost of moving a page (`migrate_pages()`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaParams {
    /// Memory nodes; CPUs are split among them in order, equally (node
    /// of CPU `c` = `c * nodes / cpus`).
    pub nodes: u32,
    /// Copying a 4 KiB page within a node (`folio_copy()`).
    pub page_copy_local_ns: u64,
    /// Copying a 4 KiB page to another node.
    pub page_copy_remote_ns: u64,
    /// `migrate_pages()`'s work on one folio besides unmapping, copying
    /// and remapping it: isolation, destination allocation, the page-cache
    /// slot update, the free.
    pub migrate_folio_ns: u64,
}

/// Costs of page reclaim and of swapping to a zram device
/// (`drivers/block/zram`), per 4 KiB page.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwapCosts {
    /// `shrink_folio_list()`'s work on one folio besides unmapping it and
    /// its I/O: isolation from the LRU, the folio lock, swap-slot
    /// allocation, swap-cache insertion and removal, the free.
    pub reclaim_folio_ns: u64,
    /// A swap-in fault's work besides `page_fault_ns` and the device read:
    /// swap-cache lookup, allocating the folio (not cleared), page-cache
    /// insertion, `swap_free()`.
    pub swapin_ns: u64,
    /// zram write of a page: scanning it for one repeated word
    /// (`page_same_filled()`), which every write does first.
    pub zram_same_check_ns: u64,
    /// zram read of a same-filled page: filling 4 KiB with its word
    /// (`zram_fill_page()`, `memset64`).
    pub zram_same_fill_ns: u64,
    /// zram write of a page that is not same-filled: compressing it
    /// (default `lzo-rle`) and storing it in zsmalloc.
    pub zram_compress_ns: u64,
    /// zram read of a compressed page: decompressing it.
    pub zram_decompress_ns: u64,
}

/// Topology of a machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Total number of CPUs.
    pub cpus: u32,
    /// CPUs per cluster (sharing an L2 / a mesh stop).
    pub cpus_per_cluster: u32,
    /// Sockets (NUMA nodes); CPUs are split evenly between them.
    pub sockets: u32,
    /// Dies per socket; a socket's CPUs are split evenly between them
    /// (what TLBI by affinity encodes, [`crate::hw::dvm_affinity`], and
    /// where per-die misc nodes sit; arm64 only). One when the profile
    /// does not say (the x86 profiles, where nothing uses it).
    #[serde(default = "one_die")]
    pub dies_per_socket: u32,
}

fn one_die() -> u32 {
    1
}

/// TLB geometry and page-walk costs of one CPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbParams {
    /// Leaf entries of the unified (L2) TLB.
    pub tlb_entries: u32,
    /// Associativity of the unified TLB.
    pub tlb_ways: u32,
    /// Entries of the walk cache (intermediate levels), fully associative.
    pub walk_cache_entries: u32,
    /// Cost of a TLB hit seen by a memory access.
    pub tlb_hit_ns: u64,
    /// Cost of reading one page-table level during a walk.
    pub walk_level_ns: u64,
    /// ASID width in bits (8 or 16).
    pub asid_bits: u8,
}

/// arm64 invalidation costs: DVM messages, DVM Sync at the misc node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arm64Params {
    /// FEAT_TLBIRANGE (ARMv8.4 range TLBIs) present.
    pub tlbirange: bool,
    /// Issue cost of a local (non-shareable) TLBI by VA or range.
    pub tlbi_local_ns: u64,
    /// Cost of a local `TLBI ASIDE1`/`VMALLE1` (a scan of the whole TLB).
    pub tlbi_local_all_ns: u64,
    /// Issue cost of a shareable TLBI (the CPU does not wait for it).
    pub tlbi_broadcast_issue_ns: u64,
    /// Time for a DVM operation to reach and be applied by its targets.
    pub dvm_op_latency_ns: u64,
    /// Extra latency when the DVM operation crosses sockets.
    pub dvm_cross_socket_ns: u64,
    /// Work each target CPU spends on a DVM operation by VA or range.
    pub dvm_op_target_stall_ns: u64,
    /// Work each target CPU spends on a DVM `ASIDE1IS`/`VMALLE1IS` (a scan
    /// of the whole TLB).
    pub dvm_op_target_stall_all_ns: u64,
    /// Fixed misc-node service time of one DVM Sync.
    pub dvm_sync_base_ns: u64,
    /// Misc-node service time per target CPU of one DVM Sync (responses are
    /// collected one requester at a time).
    pub dvm_sync_per_target_ns: u64,
    /// TLBI by affinity: a per-CPU register limits where this CPU's
    /// broadcasts go (HiSilicon's `LSUDVMBM_EL2`; absent means false).
    #[serde(default)]
    pub tlbi_affinity: bool,
    /// Which misc nodes serve DVM Syncs, one Sync at a time each: one for
    /// the machine, or one per die (a Sync queues at those of the dies it
    /// reaches). Absent means `"machine"`.
    #[serde(default)]
    pub dvm_sync_domain: SyncDomain,
    /// Time each busy CPU a DVM Sync reaches loses while it answers it
    /// (its pipeline stalls until its earlier accesses are complete; 0
    /// where no victim-side measurement exists). docs/model.md.
    pub dvm_sync_target_stall_ns: u64,
    /// Cost of a DSB that has no broadcast TLBI to wait for.
    pub dsb_local_ns: u64,
    /// Cost of ISB.
    pub isb_ns: u64,
    /// Cost of writing TTBR0/ASID (context switch of translation regime).
    pub ttbr_write_ns: u64,
    /// What the CPU may do with its walk-cache entries once TTBR0 has
    /// been written, in particular while it points at the reserved (empty)
    /// table with the ASID left in TTBR1 (docs/model.md, "Walk cache after
    /// the reserved TTBR0"). Absent means `"asid-tagged"`, the Arm ARM's
    /// rule; written into the resolved profile only when it is not that.
    #[serde(default, skip_serializing_if = "WalkCacheAfterTtbrWrite::is_default")]
    pub walk_cache_after_ttbr_write: WalkCacheAfterTtbrWrite,
}

/// Where DVM Syncs are served ([`Arm64Params::dvm_sync_domain`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncDomain {
    /// One misc node for the whole machine.
    #[default]
    Machine,
    /// One misc node per die.
    Die,
}

/// x86 invalidation costs: INVLPG, CR3 writes, PCIDs, AMD INVLPGB.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct X86Params {
    /// The CPU has PCIDs (CR4.PCIDE usable) and INVPCID.
    pub pcid: bool,
    /// `INVLPG` of one page (local).
    pub invlpg_ns: u64,
    /// Flush of every entry of one PCID (`INVPCID` single-context, or a CR3
    /// write with flush), not counting the refill misses (modelled).
    pub flush_pcid_ns: u64,
    /// A CR3 write (with or without the flush of its PCID).
    pub cr3_write_ns: u64,
    /// AMD `INVLPGB` (broadcast invalidation) is available.
    pub invlpgb: bool,
    /// Issue cost of one `INVLPGB` (the CPU does not wait for it).
    #[serde(default)]
    pub invlpgb_issue_ns: u64,
    /// Time for an `INVLPGB` to reach and be applied by every CPU.
    #[serde(default)]
    pub invlpgb_latency_ns: u64,
    /// Extra latency when it crosses sockets.
    #[serde(default)]
    pub invlpgb_cross_socket_ns: u64,
    /// Work each target CPU spends on one `INVLPGB` (by page).
    #[serde(default)]
    pub invlpgb_target_stall_ns: u64,
    /// Work each target CPU spends on one `INVLPGB` of a whole ASID.
    #[serde(default)]
    pub invlpgb_target_stall_all_ns: u64,
    /// `TLBSYNC` once this CPU's `INVLPGB`s have completed everywhere.
    #[serde(default)]
    pub tlbsync_ns: u64,
    /// Extra `TLBSYNC` time per CPU of the machine (acknowledgements
    /// gathered one at a time); 0 when they are gathered in parallel.
    #[serde(default)]
    pub tlbsync_per_cpu_ns: u64,
    /// Are `TLBSYNC`s of different CPUs served one at a time (like DVM Sync
    /// at an arm64 misc node)?
    #[serde(default)]
    pub tlbsync_serialized: bool,
    /// Pages one `INVLPGB` can invalidate (CPUID 0x80000008 EDX\[15:0\] + 1,
    /// Linux `invlpgb_count_max`).
    #[serde(default = "one")]
    pub invlpgb_max_pages: u64,
    /// Global ASIDs available to INVLPGB (Linux: `MAX_ASID_AVAILABLE`).
    #[serde(default)]
    pub global_asids: u32,
}

/// Costs of the hardware steps, in the terms the drivers use: local and
/// broadcast invalidation, its completion, barriers, translation-base
/// writes. Derived from the profile's architecture section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCosts {
    /// A local invalidation of one page (TLBI VA / INVLPG).
    pub inval_local_ns: u64,
    /// A local invalidation of a whole ASID/PCID or everything.
    pub inval_local_all_ns: u64,
    /// Issue cost of a broadcast invalidation.
    pub bcast_issue_ns: u64,
    /// Time for a broadcast invalidation to reach every target.
    pub bcast_latency_ns: u64,
    /// Extra latency when it crosses sockets.
    pub bcast_cross_socket_ns: u64,
    /// Target work for a broadcast by page.
    pub bcast_target_stall_ns: u64,
    /// Target work for a broadcast of a whole ASID.
    pub bcast_target_stall_all_ns: u64,
    /// Fixed service time of a completion barrier (DVM Sync / TLBSYNC).
    pub sync_base_ns: u64,
    /// Service time per CPU of the machine of a completion barrier.
    pub sync_per_target_ns: u64,
    /// Completion barriers are served one at a time, machine-wide.
    pub sync_serialized: bool,
    /// Time each busy CPU a completion barrier reaches loses answering it.
    pub sync_target_stall_ns: u64,
    /// Completion barriers are served by a node per die, not one node.
    pub sync_domain_die: bool,
    /// A local barrier (DSB that waits for nothing remote).
    pub barrier_ns: u64,
    /// ISB.
    pub isb_ns: u64,
    /// Write of the translation base (TTBR0 / CR3).
    pub ttbr_write_ns: u64,
}

/// Kernel path costs on the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelCosts {
    /// Syscall entry plus exit, no work.
    pub syscall_ns: u64,
    /// VMA lookup/split/merge work of one mprotect call.
    pub mprotect_vma_ns: u64,
    /// Work of mmap (VMA allocation and insertion).
    pub mmap_ns: u64,
    /// VMA work of munmap.
    pub munmap_ns: u64,
    /// Base work of madvise(MADV_DONTNEED).
    pub madvise_ns: u64,
    /// A small pipe write or read, beyond the syscall entry and exit.
    pub pipe_rw_ns: u64,
    /// Per-PTE work of a page-table update (read, modify, write).
    pub pte_update_ns: u64,
    /// Exception entry/exit and handler of a page fault, without allocation.
    pub page_fault_ns: u64,
    /// Allocating and zeroing a 4 KiB page.
    pub page_alloc_ns: u64,
    /// A transparent-huge-page fault's work beyond `page_fault_ns`:
    /// allocate, clear and map 2 MiB. Needed only with `kernel.thp =
    /// "always"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp_fault_ns: Option<u64>,
    /// A filesystem's `->page_mkwrite()` (`do_page_mkwrite()`, mm/memory.c)
    /// on the first write to a page of a `MAP_SHARED` regular file: ext4's
    /// `ext4_page_mkwrite()` walks the folio's blocks (delalloc
    /// reservation, buffers dirtied, `file_update_time()`), so the cost
    /// grows with the folio. Charged by `do_shared_fault()` and
    /// `wp_page_shared()` on regular files (kernel/mm/filemap.rs). Absent:
    /// 0 ns, which no real filesystem costs (the built-in profiles'
    /// machines were not measured for it; `tlbsim calibrate` measures it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_mkwrite_ns: Option<u64>,
    /// Allocating a 4 KiB page and copying another into it, the work of a
    /// copy-on-write fault that copies (`wp_page_copy()` →
    /// `__wp_page_copy_user()`, mm/memory.c) beyond `page_fault_ns`, its
    /// flush and its PTE updates. A copy from the zero page allocates a
    /// zeroed page instead and costs `page_alloc_ns`. Absent:
    /// `page_alloc_ns` (the built-in profiles' machines were not measured
    /// for it; `tlbsim calibrate` measures it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_copy_ns: Option<u64>,
    /// A read fault's fault-around, per page of its window
    /// (`fault_around_bytes`): `filemap_map_pages()`'s walk of the page
    /// cache over the window (each folio looked up, referenced, locked
    /// and released; each PTE checked), beyond `page_fault_ns` and the
    /// PTEs it writes. Charged per window page by `do_fault_around()`
    /// (kernel/mm/filemap.rs). Absent: 0 ns (the built-in profiles'
    /// machines were not measured for it; `tlbsim calibrate` measures
    /// it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_around_page_ns: Option<u64>,
    /// Base work of fork (task struct, mm copy without page tables).
    pub fork_ns: u64,
    /// Per-PTE work of copying page tables at fork.
    pub fork_per_pte_ns: u64,
    /// Base work of exec (binary load, new mm).
    pub exec_ns: u64,
    /// Base work of exit (files, signals, reaping).
    pub exit_ns: u64,
    /// Scheduler work of one context switch, without switch_mm.
    pub context_switch_ns: u64,
    /// Kernel work of moving the calling task off its CPU in
    /// `sched_setaffinity` beyond the context switches the model runs: the
    /// stopper thread (`migration/N`), run-queue locking, and idle exit and
    /// entry on both CPUs.
    pub migrate_ns: u64,
    /// An uncontended atomic read-modify-write or cpumask update.
    pub atomic_ns: u64,
    /// Moving a cache line between CPUs (lock hand-off, an atomic on a
    /// line another CPU held last).
    pub cacheline_transfer_ns: u64,
    /// The same between CPUs of different sockets (default:
    /// `cacheline_transfer_ns`).
    #[serde(default)]
    pub cacheline_cross_socket_ns: Option<u64>,
    /// Wake-up of another CPU (reschedule IPI delivery).
    pub resched_ipi_ns: u64,
    /// Delivery of a function-call IPI to a running CPU, from the end of
    /// the write that sent it.
    pub ipi_latency_ns: u64,
    /// Sender's cost of one IPI send operation (one interrupt-controller
    /// write: GICv3 `ICC_SGI1R`, x2APIC `ICR`).
    pub ipi_send_ns: u64,
    /// CPUs one send operation can target (1: one write per target CPU;
    /// 16: a GICv3 target list or an x2APIC logical cluster). Targets are
    /// grouped by `cpu / ipi_cpus_per_send`.
    pub ipi_cpus_per_send: u32,
    /// From a handler's return to the waiting sender seeing its
    /// acknowledgement (the `call_single_data` flag's cache line).
    pub ipi_ack_ns: u64,
    /// Exception entry and exit around an IPI handler.
    pub ipi_handler_ns: u64,
    /// Scheduler time slice.
    pub time_slice_ns: u64,
    /// `CONFIG_HZ` of the machine's kernel: each CPU takes a periodic
    /// timer interrupt this many times a second (`kernel/tick.rs`).
    /// `None` (absent): no tick is modelled, as before issue 17. An
    /// experiment's `[kernel] hz` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hz: Option<u32>,
    /// One timer tick interrupt from entry to exit (the tick handler,
    /// `update_process_times()` and the softirq work it raises). Needed
    /// when `hz` is set (here or in the experiment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_handler_ns: Option<u64>,
    /// CFS `sysctl_sched_latency` before CPU-count scaling.
    pub sched_latency_ns: u64,
    /// CFS `sysctl_sched_wakeup_granularity` before CPU-count scaling.
    pub wakeup_granularity_ns: u64,
}

/// Whether an `experiment.profile` value (or `--profile` argument) names a
/// profile file rather than a built-in profile: it ends in `.toml`.
pub fn is_profile_path(profile: &str) -> bool {
    profile.ends_with(".toml")
}

/// Parses the text of a profile file (same format as `profiles/*.toml`);
/// errors name the file, line and field. The profile is not yet validated
/// (that happens when a run resolves it, after overrides).
pub fn parse_profile(file: &str, text: &str) -> Result<Profile, ConfigError> {
    parse_toml(file, text)
}

/// Built-in profiles: `(name, TOML text)`.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    (
        "ampere-32",
        include_str!("../../../../profiles/ampere-32.toml"),
    ),
    (
        "ampere-2s",
        include_str!("../../../../profiles/ampere-2s.toml"),
    ),
    (
        "cortex-a15-2",
        include_str!("../../../../profiles/cortex-a15-2.toml"),
    ),
    (
        "snapdragon-888",
        include_str!("../../../../profiles/snapdragon-888.toml"),
    ),
    (
        "kunpeng-920",
        include_str!("../../../../profiles/kunpeng-920.toml"),
    ),
    (
        "skylake-4c8t",
        include_str!("../../../../profiles/skylake-4c8t.toml"),
    ),
    ("epyc-2s", include_str!("../../../../profiles/epyc-2s.toml")),
    (
        "thunderx2-2s",
        include_str!("../../../../profiles/thunderx2-2s.toml"),
    ),
    (
        "hisi-96-dvmbm",
        include_str!("../../../../profiles/hisi-96-dvmbm.toml"),
    ),
];

/// Loads a built-in profile by name.
pub fn builtin_profile(name: &str) -> Result<Profile, ConfigError> {
    let Some((_, text)) = BUILTIN_PROFILES.iter().find(|(n, _)| *n == name) else {
        let names: Vec<_> = BUILTIN_PROFILES.iter().map(|(n, _)| *n).collect();
        return Err(ConfigError {
            file: "<profiles>".into(),
            line: None,
            message: format!(
                "unknown profile \"{name}\" (built-in: {}; or a profile file ending in .toml)",
                names.join(", ")
            ),
        });
    };
    let p: Profile = parse_toml(&format!("<built-in profile {name}>"), text)?;
    Ok(p)
}

impl Profile {
    /// Applies experiment overrides, validating them.
    pub fn apply(&mut self, o: &MachineOverrides) {
        if let Some(c) = o.cpus {
            self.topology.cpus = c;
        }
        if let Some(s) = o.sockets {
            self.topology.sockets = s;
        }
        if let Some(d) = o.dies_per_socket {
            self.topology.dies_per_socket = d;
        }
        if let Some(r) = o.tlbirange {
            if let Some(a) = self.arm64.as_mut() {
                a.tlbirange = r;
            }
        }
        if let Some(r) = o.walk_cache_after_ttbr_write {
            if let Some(a) = self.arm64.as_mut() {
                a.walk_cache_after_ttbr_write = r;
            }
        }
    }

    /// The arm64 section (present on every validated arm64 profile).
    pub fn arm64(&self) -> &Arm64Params {
        self.arm64
            .as_ref()
            .expect("validated arm64 profile has an [arm64] section")
    }

    /// The x86 section (present on every validated x86 profile).
    pub fn x86(&self) -> &X86Params {
        self.x86
            .as_ref()
            .expect("validated x86 profile has an [x86] section")
    }

    /// The KVM world-switch costs. Experiments with virtual machines
    /// are refused at setup when the profile has none
    /// (`sim::check_vms`), so this holds while they run.
    pub fn virt_costs(&self) -> &VirtCosts {
        self.virt
            .as_ref()
            .expect("a VM experiment runs only on a profile with [virt] (checked at setup)")
    }

    /// The step costs of this machine's architecture.
    pub fn step_costs(&self) -> StepCosts {
        match self.arch {
            Arch::Arm64 => {
                let a = self.arm64();
                StepCosts {
                    inval_local_ns: a.tlbi_local_ns,
                    inval_local_all_ns: a.tlbi_local_all_ns,
                    bcast_issue_ns: a.tlbi_broadcast_issue_ns,
                    bcast_latency_ns: a.dvm_op_latency_ns,
                    bcast_cross_socket_ns: a.dvm_cross_socket_ns,
                    bcast_target_stall_ns: a.dvm_op_target_stall_ns,
                    bcast_target_stall_all_ns: a.dvm_op_target_stall_all_ns,
                    sync_base_ns: a.dvm_sync_base_ns,
                    sync_per_target_ns: a.dvm_sync_per_target_ns,
                    sync_serialized: true,
                    sync_target_stall_ns: a.dvm_sync_target_stall_ns,
                    sync_domain_die: a.dvm_sync_domain == SyncDomain::Die,
                    barrier_ns: a.dsb_local_ns,
                    isb_ns: a.isb_ns,
                    ttbr_write_ns: a.ttbr_write_ns,
                }
            }
            Arch::X86 => {
                let x = self.x86();
                StepCosts {
                    inval_local_ns: x.invlpg_ns,
                    inval_local_all_ns: x.flush_pcid_ns,
                    bcast_issue_ns: x.invlpgb_issue_ns,
                    bcast_latency_ns: x.invlpgb_latency_ns,
                    bcast_cross_socket_ns: x.invlpgb_cross_socket_ns,
                    bcast_target_stall_ns: x.invlpgb_target_stall_ns,
                    bcast_target_stall_all_ns: x.invlpgb_target_stall_all_ns,
                    sync_base_ns: x.tlbsync_ns,
                    sync_per_target_ns: x.tlbsync_per_cpu_ns,
                    sync_serialized: x.tlbsync_serialized,
                    // TLBSYNC waits only for this CPU's INVLPGBs at the
                    // targets (no victim-side measurement exists).
                    sync_target_stall_ns: 0,
                    sync_domain_die: false,
                    barrier_ns: 0,
                    isb_ns: 0,
                    ttbr_write_ns: x.cr3_write_ns,
                }
            }
        }
    }

    /// Checks the internal consistency of a profile as a description of a
    /// whole machine (a built-in profile, a profile file): its CPUs split
    /// evenly into sockets, dies and clusters ([`Profile::check_topology`]).
    /// The error starts with the field (`topology.sockets = 3 ...`).
    pub fn validate(&self) -> Result<(), String> {
        self.check_topology(true)?;
        self.check_rest()
    }

    /// [`Profile::validate`] for the machine a run resolved, after an
    /// experiment's `[machine]` overrides or `--cpus`. With `cut` (the CPU
    /// count was set by `[machine] cpus` or `--cpus`: a small machine cut
    /// from the profile, which keeps its socket, die and cluster sizes as
    /// far as the CPUs go, 3 CPUs of ampere-2s's 2 sockets say) the CPUs
    /// need not split evenly; otherwise they must, as in a whole machine.
    pub fn validate_resolved(&self, cut: bool) -> Result<(), String> {
        self.check_topology(!cut)?;
        self.check_rest()
    }

    /// The topology as the model uses it (`hw::Hw::new`): a CPU's
    /// socket is `cpu / (cpus / sockets)`, its die the same within the
    /// socket, its cluster `cpu / cpus_per_cluster`. So the CPUs must split
    /// evenly into sockets and a socket's evenly into dies (otherwise the
    /// model's sockets and dies are not the ones configured: 4 CPUs over 3
    /// sockets make 2 sockets), and clusters must tile each die (a cluster
    /// shares an L2, which never spans dies). With `whole` false (a cut
    /// machine), only that there are CPUs for every socket and die.
    pub fn check_topology(&self, whole: bool) -> Result<(), String> {
        let t = &self.topology;
        if t.cpus == 0 || t.cpus > limits::MAX_CPUS {
            return Err(format!(
                "topology.cpus = {} (must be 1..={})",
                t.cpus,
                limits::MAX_CPUS
            ));
        }
        if t.cpus_per_cluster == 0 || t.sockets == 0 {
            return Err("topology.cpus_per_cluster and topology.sockets must be >= 1".into());
        }
        if t.sockets > t.cpus {
            return Err("topology.sockets exceeds topology.cpus".into());
        }
        if !whole {
            return match t.dies_per_socket {
                0 => Err("topology.dies_per_socket = 0 (must be 1..=cpus per socket)".into()),
                d if d > t.cpus / t.sockets => Err(format!(
                    "topology.dies_per_socket = {d} (must be 1..=cpus per socket)"
                )),
                _ => Ok(()),
            };
        }
        if !t.cpus.is_multiple_of(t.sockets) {
            return Err(format!(
                "topology.sockets = {} does not divide topology.cpus = {} evenly (the model gives every socket the same number of CPUs)",
                t.sockets, t.cpus
            ));
        }
        let per_socket = t.cpus / t.sockets;
        if t.dies_per_socket == 0 || t.dies_per_socket > per_socket {
            return Err(format!(
                "topology.dies_per_socket = {} (must be 1..=cpus per socket)",
                t.dies_per_socket
            ));
        }
        if !per_socket.is_multiple_of(t.dies_per_socket) {
            return Err(format!(
                "topology.dies_per_socket = {} does not divide the {per_socket} CPUs of a socket evenly (the model gives every die the same number of CPUs)",
                t.dies_per_socket
            ));
        }
        let per_die = per_socket / t.dies_per_socket;
        let one_die = t.sockets == 1 && t.dies_per_socket == 1;
        if !per_die.is_multiple_of(t.cpus_per_cluster) {
            let what = if one_die {
                format!("topology.cpus = {}", t.cpus)
            } else {
                format!("the {per_die} CPUs of a die")
            };
            return Err(format!(
                "topology.cpus_per_cluster = {} does not divide {what} evenly (clusters must tile every die)",
                t.cpus_per_cluster
            ));
        }
        Ok(())
    }

    /// Everything [`Profile::validate`] checks but the topology.
    fn check_rest(&self) -> Result<(), String> {
        let t = &self.topology;
        let tl = &self.tlb;
        if tl.tlb_ways == 0 || tl.tlb_entries == 0 || !tl.tlb_entries.is_multiple_of(tl.tlb_ways) {
            return Err("tlb.tlb_entries must be a non-zero multiple of tlb.tlb_ways".into());
        }
        if tl.walk_cache_entries == 0 {
            return Err("tlb.walk_cache_entries must be >= 1".into());
        }
        limits::at_most("tlb.tlb_entries", tl.tlb_entries, limits::MAX_CACHE_ENTRIES)?;
        limits::at_most(
            "tlb.walk_cache_entries",
            tl.walk_cache_entries,
            limits::MAX_CACHE_ENTRIES,
        )?;
        let s2 = self.virt.as_ref().map_or(0, |v| v.stage2_cache_entries);
        limits::at_most("virt.stage2_cache_entries", s2, limits::MAX_CACHE_ENTRIES)?;
        let slots = u64::from(t.cpus)
            * (u64::from(tl.tlb_entries) + u64::from(tl.walk_cache_entries) + u64::from(s2));
        if slots > limits::MAX_MACHINE_SLOTS {
            return Err(format!(
                "tlb.tlb_entries: {} CPUs x ({} TLB + {} walk-cache + {} stage-2 entries) = {slots} cached translations exceed tlbsim's limit of {}",
                t.cpus, tl.tlb_entries, tl.walk_cache_entries, s2, limits::MAX_MACHINE_SLOTS
            ));
        }
        self.check_costs()?;
        if !(2..=16).contains(&tl.asid_bits) {
            return Err(format!("tlb.asid_bits = {} (must be 2..=16)", tl.asid_bits));
        }
        match (self.arch, &self.arm64, &self.x86) {
            (Arch::Arm64, Some(_), None) | (Arch::X86, None, Some(_)) => {}
            (Arch::Arm64, _, _) => {
                return Err("arch = \"arm64\" needs an [arm64] section and no [x86] section".into())
            }
            (Arch::X86, _, _) => {
                return Err("arch = \"x86\" needs an [x86] section and no [arm64] section".into())
            }
        }
        if let Some(x) = &self.x86 {
            if x.invlpgb && (x.invlpgb_latency_ns == 0 || x.global_asids == 0) {
                return Err(
                    "x86.invlpgb = true needs x86.invlpgb_latency_ns and x86.global_asids".into(),
                );
            }
        }
        if self.kernel.ipi_cpus_per_send == 0 {
            return Err("kernel.ipi_cpus_per_send must be >= 1".into());
        }
        if let Some(n) = &self.numa {
            if n.nodes == 0 || n.nodes > t.cpus {
                return Err(format!(
                    "numa.nodes = {} (must be 1..=topology.cpus = {})",
                    n.nodes, t.cpus
                ));
            }
        }
        if self.kernel.time_slice_ns == 0 {
            return Err("kernel.time_slice_ns must be > 0".into());
        }
        self.check_tick()
    }

    /// The periodic tick's settings: `hz` within 1..=[`limits::MAX_HZ`]
    /// and, with it, a `tick_handler_ns` shorter than one tick period.
    fn check_tick(&self) -> Result<(), String> {
        let Some(hz) = self.kernel.hz else {
            return Ok(());
        };
        if hz == 0 || hz > limits::MAX_HZ {
            return Err(format!("kernel.hz = {hz} (must be 1..={})", limits::MAX_HZ));
        }
        let Some(cost) = self.kernel.tick_handler_ns else {
            return Err(
                "kernel.hz is set but the profile has no kernel.tick_handler_ns (the cost of one tick interrupt)"
                    .into(),
            );
        };
        let period = 1_000_000_000 / u64::from(hz);
        if cost >= period {
            return Err(format!(
                "kernel.tick_handler_ns = {cost} is not shorter than one tick period ({period} ns at kernel.hz = {hz})"
            ));
        }
        Ok(())
    }
}

impl Profile {
    /// Every `..._ns` (or `..._ns_per_...`) value of the profile is at most
    /// [`limits::MAX_COST_NS`]; the error names the first that is not, as
    /// `section.key`.
    fn check_costs(&self) -> Result<(), String> {
        let v = toml::Value::try_from(self).map_err(|e| e.to_string())?;
        let Some(sections) = v.as_table() else {
            return Ok(());
        };
        for (section, t) in sections {
            let Some(t) = t.as_table() else { continue };
            for (key, value) in t {
                let cost = key.ends_with("_ns") || key.contains("_ns_per_");
                if let (true, Some(ns)) = (cost, value.as_integer()) {
                    let what = format!("{section}.{key}");
                    let ns = u64::try_from(ns).unwrap_or(u64::MAX);
                    limits::at_most(&what, ns, limits::MAX_COST_NS)?;
                }
            }
        }
        Ok(())
    }
}

fn one() -> u64 {
    1
}

impl Profile {
    /// The hardware [`Hw`](crate::hw::Hw) is built from: this profile's
    /// topology, TLB geometry and arm64 features, for the base pages of
    /// `granule`.
    pub fn hw_params(&self, granule: crate::hw::mem::Granule) -> crate::hw::params::HwParams {
        let (t, tlb) = (&self.topology, &self.tlb);
        crate::hw::params::HwParams {
            arch: self.arch,
            cpus: t.cpus as usize,
            sockets: t.sockets as usize,
            dies_per_socket: t.dies_per_socket as usize,
            cpus_per_cluster: t.cpus_per_cluster as usize,
            tlb_entries: tlb.tlb_entries as usize,
            tlb_ways: tlb.tlb_ways as usize,
            walk_cache_entries: tlb.walk_cache_entries as usize,
            stage2_cache_entries: self
                .virt
                .as_ref()
                .map_or(0, |v| v.stage2_cache_entries as usize),
            tlbi_affinity: self.arm64.as_ref().is_some_and(|a| a.tlbi_affinity),
            walk_cache_reading: self
                .arm64
                .as_ref()
                .map_or_else(Default::default, |a| a.walk_cache_after_ttbr_write),
            granule,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_validate() {
        for (name, _) in BUILTIN_PROFILES {
            let p = builtin_profile(name).unwrap();
            p.validate().unwrap();
        }
    }

    /// ampere-32 (32 CPUs, one socket and die, clusters of 2) with its
    /// topology changed by `f`: the error of [`Profile::validate`] and of
    /// [`Profile::validate_resolved`] for a cut machine.
    fn topology(f: impl Fn(&mut Topology)) -> (Result<(), String>, Result<(), String>) {
        let mut p = builtin_profile("ampere-32").unwrap();
        f(&mut p.topology);
        (p.validate(), p.validate_resolved(true))
    }

    #[test]
    fn cpus_split_evenly_into_sockets_dies_and_clusters() {
        // 32 CPUs on 3 sockets would be 11/11/10: refused, as is a cluster
        // size that does not tile the die.
        let (whole, cut) = topology(|t| t.sockets = 3);
        let e = whole.unwrap_err();
        assert!(
            e.starts_with("topology.sockets = 3 does not divide topology.cpus = 32 evenly"),
            "{e}"
        );
        assert!(cut.is_ok());
        let (whole, _) = topology(|t| t.cpus_per_cluster = 5);
        let e = whole.unwrap_err();
        assert!(
            e.starts_with("topology.cpus_per_cluster = 5 does not divide topology.cpus = 32"),
            "{e}"
        );
        // A cut (`[machine] cpus = 3` of 2-CPU clusters) may be uneven.
        let (whole, cut) = topology(|t| t.cpus = 3);
        assert!(whole.is_err() && cut.is_ok());
        // Two sockets of 16: dies of 8 fit, dies of 3 do not.
        let (whole, _) = topology(|t| (t.sockets, t.dies_per_socket) = (2, 2));
        assert_eq!(whole, Ok(()));
        let (whole, _) = topology(|t| (t.sockets, t.dies_per_socket) = (2, 3));
        let e = whole.unwrap_err();
        assert!(
            e.starts_with("topology.dies_per_socket = 3 does not divide the 16 CPUs of a socket"),
            "{e}"
        );
        let (whole, _) = topology(|t| (t.cpus, t.sockets) = (6, 2));
        let e = whole.unwrap_err();
        assert!(
            e.starts_with("topology.cpus_per_cluster = 2 does not divide the 3 CPUs of a die"),
            "{e}"
        );
        // Even a cut needs a CPU for every socket and die.
        let (_, cut) = topology(|t| (t.cpus, t.sockets, t.dies_per_socket) = (4, 2, 3));
        assert!(cut.unwrap_err().starts_with("topology.dies_per_socket = 3"));
    }

    #[test]
    fn hisi_96_dvmbm_is_kunpeng_920_with_tlbi_by_affinity_and_kvm() {
        // The profile copies kunpeng-920's values as proxies; a value
        // changed in one file and not the other fails here. It adds the
        // feature and KVM's costs (VMs run on it only).
        let mut h = builtin_profile("hisi-96-dvmbm").unwrap();
        let k = builtin_profile("kunpeng-920").unwrap();
        assert!(h.arm64().tlbi_affinity && !k.arm64().tlbi_affinity);
        assert!(h.virt.is_some() && k.virt.is_none());
        h.name = k.name.clone();
        h.description = k.description.clone();
        h.arm64.as_mut().unwrap().tlbi_affinity = false;
        h.virt = None;
        let v = |p: &Profile| toml::Value::try_from(p).unwrap();
        assert_eq!(v(&h), v(&k));
    }
}
