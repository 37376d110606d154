//! The experiment file: which machine, kernel policies, workload, checker
//! and seed.

use super::profile::Profile;
use crate::hw::mem::Granule;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An experiment: which machine, kernel policies, workload and seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// What the experiment is.
    pub experiment: ExperimentMeta,
    /// Overrides of the profile.
    #[serde(default)]
    pub machine: MachineOverrides,
    /// Kernel policies.
    #[serde(default)]
    pub kernel: KernelConfig,
    /// The workload and its parameters.
    pub workload: WorkloadConfig,
    /// The checker.
    #[serde(default)]
    pub checker: CheckerConfig,
    /// Virtual machines: when set, the workload runs inside each of them
    /// (a guest kernel with `[kernel]`'s policies), not on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmConfig>,
    /// A profile the caller loaded from a file (the library does no I/O;
    /// see [`super::is_profile_path`]). When set it is used instead of the built-in
    /// profile named by `experiment.profile`.
    #[serde(skip)]
    pub profile_data: Option<Profile>,
}

/// Identification of an experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentMeta {
    /// Short name.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Built-in profile name, or a profile file ending in `.toml` (a path
    /// relative to the experiment file), which the caller loads into
    /// [`Experiment::profile_data`].
    pub profile: String,
    /// Root seed of every random stream.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Stop the run (as an error) past this much simulated time.
    #[serde(default = "default_limit")]
    pub max_sim_time_ns: u64,
}

fn default_seed() -> u64 {
    1
}
fn default_limit() -> u64 {
    600_000_000_000
}

/// Virtual machines run by KVM on the host (`kernel/arm64/kvm`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    /// How many VMs (1 to 255: one 8-bit VMID each, VMID 0 is the
    /// host's).
    pub count: u32,
    /// vCPUs per VM.
    pub vcpus: u32,
    /// What the host's KVM does about guests' broadcasts, by name
    /// (`tlbsim policies` lists them; `kernel/arm64/kvm`).
    #[serde(default = "default_kvm_policy")]
    pub kvm_policy: String,
    /// Where vCPU threads run.
    #[serde(default)]
    pub placement: Placement,
}

/// Where the vCPU threads of `[vm]` run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Pinned one to one: VM `v`'s vCPU `i` on CPU `(v - 1) * vcpus + i`
    /// (`taskset`; the seed's setup). No CPU runs two vCPUs.
    #[default]
    Pinned,
    /// Allowed on every CPU, first placed as pinned ones would be (wrapping
    /// around when there are more vCPUs than CPUs); the host scheduler
    /// moves them and shares CPUs between them by time slices.
    Floating,
}

fn default_kvm_policy() -> String {
    "kvm-stock".into()
}

/// Profile overrides.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineOverrides {
    /// Total CPUs (the profile's cluster size and socket count are kept
    /// unless set below).
    pub cpus: Option<u32>,
    /// Sockets (a small machine cut from a multi-socket profile).
    pub sockets: Option<u32>,
    /// Dies per socket.
    pub dies_per_socket: Option<u32>,
    /// FEAT_TLBIRANGE on or off.
    pub tlbirange: Option<bool>,
    /// The walk-cache reading (`arm64.walk_cache_after_ttbr_write`):
    /// `"asid-tagged"`, `"flush-on-ttbr-change"` or `"no-new-root-walks"`.
    /// arm64 profiles only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk_cache_after_ttbr_write: Option<super::WalkCacheAfterTtbrWrite>,
}

/// Kernel policy selection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelConfig {
    /// TLB-flush and switch_mm policy, by name.
    #[serde(default = "default_tlb_policy")]
    pub tlb_policy: String,
    /// ASID allocator, by name.
    #[serde(default = "default_asid_allocator")]
    pub asid_allocator: String,
    /// ASID width override (bits).
    pub asid_bits: Option<u8>,
    /// Kernel page-table isolation: ASIDs in even/odd pairs.
    #[serde(default)]
    pub kpti: bool,
    /// Readers of mmap_lock sleep when they must wait (Linux before 5.3 and
    /// since 5.12; writers still spin); otherwise every waiter spins (5.3-
    /// 5.11, reader optimistic spinning). See `Ctx::down`.
    #[serde(default)]
    pub mmap_lock_readers_sleep: bool,
    /// `zap_page_range()` (MADV_DONTNEED) flushes its whole range even when
    /// it cleared no PTE: Linux 4.14-4.18 (4647706ebeee, reverted by
    /// 50c150f26261 for 4.19). Off: the flush covers only cleared PTEs.
    #[serde(default)]
    pub zap_flush_always: bool,
    /// `tlb_gather_mmu()` does not count the gather in
    /// `mm->tlb_flush_pending` and `tlb_finish_mmu()` never checks
    /// `mm_tlb_flush_nested()`: Linux before 4.13 (99baac21e458, "mm: fix
    /// MADV_[FREE|DONTNEED] TLB flush miss problem"). A `MADV_DONTNEED`
    /// that finds the PTEs another's gather already cleared flushes nothing
    /// and returns while that gather's flush is still to come. `false`
    /// (4.13+): a nested gather flushes the whole mm. Left out of the JSON
    /// when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gather_ignores_nested: bool,
    /// `tlb_remove_table()` frees a page-table page at once, before the
    /// gather's flush, when the mm has fewer than two users (`if
    /// (atomic_read(&tlb->mm->mm_users) < 2) { __tlb_remove_table(table);
    /// return; }`: no other thread to race with), as every kernel with
    /// `HAVE_RCU_TABLE_FREE` did before a6f572084fbe ("mm/tlb: Remove
    /// tlb_remove_table() non-concurrent condition", 4.19): arm64 from
    /// 3.18 (safe from 4.0 on, whose `__flush_tlb_pgtable()` invalidated
    /// each table first: `pgtable_free_tlbi = "sync-per-table"`) and x86
    /// 4.14-4.18 built with `CONFIG_PARAVIRT` (48a8b97cfd80). The CPU's own
    /// walk caches, and lazy CPUs', may still point at the table. Left out
    /// of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub table_free_single_user_at_once: bool,
    /// `munmap()` removes the VMAs under the mmap_lock held for writing,
    /// then downgrades it to a read hold for the unmap and the page-table
    /// freeing (`downgrade_write()`, Linux 4.20+, dd2283f2605e "mm: mmap:
    /// zap pages with read mmap_sem in munmap"), so a `MADV_DONTNEED` of
    /// another thread can run at the same time. `false` (the model's
    /// default, and Linux before 4.20): the whole call holds it for
    /// writing. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub munmap_downgrade: bool,
    /// `/proc/PID/clear_refs`' soft-dirty clearing write-protects the PTEs
    /// inside a full-mm `mmu_gather` whose `tlb_finish_mmu()` flushes
    /// nothing, no entry having been removed (0758cd830494, 5.5, until
    /// 912efa17e512, 5.12, which flushes the mm as mprotect does;
    /// `kernel/task_mmu.rs`). Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_refs_gather: bool,
    /// x86's `flush_tlb_range()` macro passes `freed_tables = false`, so a
    /// flush that retracts a page table (`pmdp_collapse_flush()` in
    /// `MADV_COLLAPSE` and khugepaged) skips lazy CPUs: Linux 4.20
    /// (016c4d92cd16) to 6.14, until 3ef938c35035 (CVE-2025-22045;
    /// `kernel/mm/khugepaged.rs`). Ignored on arm64, whose
    /// `flush_tlb_range()` invalidates every level. Left out of the JSON
    /// when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flush_tlb_range_leaf_only: bool,
    /// khugepaged's collapse frees the page table it retracted right after
    /// its TLB flush, without `tlb_remove_table_sync_one()`: every kernel
    /// from ba76149f47d8 ("thp: khugepaged", 2.6.38) until 2ba99c5e0881
    /// ("mm/khugepaged: fix GUP-fast interaction by sending IPI", 6.1).
    /// Where the flush sends no IPI (arm64), a GUP-fast walk with
    /// interrupts off may read the freed table. Left out of the JSON when
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub khugepaged_no_table_sync: bool,
    /// The huge zero page counts its mappings (`huge_zero_refcount`, one
    /// per mapping as in Linux 3.8-4.8) and reclaim's shrinker frees it
    /// when none is left (`shrink_huge_zero_page_scan()`); a later read
    /// fault allocates it again. Off (the model's default): it is kept for
    /// the whole run. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub huge_zero_shrinker: bool,
    /// `zap_huge_pmd()` drops the huge zero page's reference at once,
    /// before the gather's TLB flush: Linux 3.8 to 4.5, until aa88b68c3b1d
    /// ("thp: keep huge zero page pinned until tlb flush", 4.6). With
    /// `huge_zero_shrinker`, the shrinker can free the page while a CPU
    /// still maps it. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub huge_zero_put_before_flush: bool,
    /// `CONFIG_PT_RECLAIM` (Linux 6.14+ on x86): `MADV_DONTNEED` over a PTE
    /// table's whole range frees the table if it is left empty
    /// (`MmuGather::reclaim_empty_pte_tables`). Off: tables are freed only
    /// by munmap (the model's default). Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pt_reclaim: bool,
    /// With `pt_reclaim`, the reclaimed table's `pte_free_tlb()` is given
    /// the address one past the table's range: Linux 7.0 to 7.1.8
    /// (4c640eb4181c until 478a1c3abebf, "mm: fix incorrect flush address
    /// in direct page table reclaim", CVE-2026-74674). Left out of the JSON
    /// when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pt_reclaim_flush_past_end: bool,
    /// A nested gather's `tlb_finish_mmu()` (`mm_tlb_flush_nested()`)
    /// resets the gather (`__tlb_reset_range()`: `freed_tables` and the
    /// `cleared_*` bits dropped) and flushes only the call's range, last
    /// level only on arm64: Linux 4.20-5.1, until 7a30df49f63a ("mm:
    /// mmu_gather: remove __tlb_reset_range() for force flush"), which
    /// flushes the whole mm with `freed_tables` set. With
    /// `munmap_downgrade`, a munmap that freed page tables while another
    /// thread's `MADV_DONTNEED` gathered leaves the walk caches pointing at
    /// them. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gather_nested_reset_range: bool,
    /// `mm->tlb_flush_batched` is the `bool` of Linux 4.13-5.16
    /// (3ea277194daa until 5ee2fa2f0636, "mm/rmap: fix potential batched
    /// TLB flush race"): `flush_tlb_batched_pending()` stores `false` after
    /// its flush and can erase a `true` that reclaim stored meanwhile
    /// (`kernel/mm/tlbbatch_bool.rs`). `false` (5.17+): the pending/flushed
    /// generation pair. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tlb_flush_batched_bool: bool,
    /// The machine is out of memory for `GFP_NOWAIT` allocations: every
    /// `tlb_remove_table()` fails to allocate its batch page and frees the
    /// table through `tlb_remove_table_one()` (an IPI to every other CPU,
    /// then the free), inside the gather, before its final flush. A
    /// condition of the run, not a kernel version. Left out of the JSON
    /// when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub table_batch_alloc_fails: bool,
    /// `tlb_remove_table_one()` frees the table without invalidating the
    /// TLB first, as every kernel did before d86564a2f085 ("mm/tlb, x86/mm:
    /// Support invalidating TLB caches for RCU_TABLE_FREE", 4.19), which
    /// calls `tlb_table_invalidate()` (a `tlb_flush_mmu_tlbonly()`) first:
    /// x86 4.14-4.18 built with `CONFIG_PARAVIRT` (9e52fc2b50de) freed a
    /// table the paging-structure caches still pointed at. Matters only
    /// with `table_batch_alloc_fails`. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub table_free_one_without_invalidate: bool,
    /// Transparent huge pages (`/sys/kernel/mm/transparent_hugepage/enabled`):
    /// `"always"` backs anonymous memory with 2 MiB pages where a write
    /// fault finds a whole aligned 2 MiB of the VMA without a PTE table;
    /// `"never"` (default) uses 4 KiB pages only. See docs/model.md.
    #[serde(default)]
    pub thp: Thp,
    /// The huge zero page (`/sys/kernel/mm/transparent_hugepage/
    /// use_zero_page`, on by default in every Linux since 3.8): with
    /// `thp = "always"`, a read fault where a huge page fits maps the
    /// shared huge zero page read-only at the PMD, and the first write
    /// replaces it (`"cow-alloc"`: Linux 3.8-5.7; `"cow-split"`: 5.8+).
    /// `"alloc-on-read"` is `use_zero_page = 0`. `"off"` (the model's
    /// default, a deliberate divergence until adopted, docs/model.md) maps
    /// the 4 KiB zero page on a read fault. Left out of the JSON when off.
    #[serde(default, skip_serializing_if = "ThpZeroPage::is_off")]
    pub thp_huge_zero_page: ThpZeroPage,
    /// arm64 `__switch_to()` executes `dsb(ish)`, completing the TLB
    /// maintenance the CPU issued before the task leaves it (every arm64
    /// kernel; reclaim's deferred flush relies on it when the reclaiming
    /// task migrates). 32-bit ARM's `__switch_to` has no such barrier:
    /// `false` for an ARMv7 kernel (seed 002). Ignored on x86.
    #[serde(default = "yes")]
    pub switch_to_dsb: bool,
    /// `migrate_pages()` unmaps a batch of folios with `TTU_BATCH_FLUSH`
    /// and flushes once before copying them (Linux 6.3+, 7e12beb8ca2a);
    /// otherwise each unmap flushes at once. The flushes are deferred only
    /// where the policy defers (x86's `tlb_gen` policies, arm64's
    /// `arm64-tlbbatch*`). Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub migrate_batch_flush: bool,
    /// `mremap()`'s `move_ptes()` as in Linux 4.9-4.18 (5d1904204c99 until
    /// eb66ae030829, CVE-2018-18281): the old range of a PTE table is
    /// flushed after the new table's lock is dropped and only if a moved
    /// PTE was dirty; otherwise once after the whole move, with every lock
    /// dropped. `false` (4.19+): flushed under both locks whenever a
    /// present PTE moved (`kernel/mm/mremap.rs`). Left out of the JSON when
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mremap_flush_unlocked: bool,
    /// `migrate_vma_collect_pmd()` as in Linux 4.14-6.0 (8c3328f1f36a
    /// until 60bae7370896): the range whose PTEs it replaced by migration
    /// entries is flushed after the PTE table's lock is dropped. `false`
    /// (6.0+): before (`kernel/mm/migrate_device.rs`). Left out of the
    /// JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub migrate_vma_flush_unlocked: bool,
    /// The `nopcid` boot parameter (x86): the kernel clears
    /// `X86_FEATURE_PCID` and leaves `CR4.PCIDE` clear, so every mm runs
    /// under PCID 0 and every CR3 write flushes; since 44126343d58c (7.1)
    /// it turns INVLPGB off with it. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nopcid: bool,
    /// With `nopcid`, INVLPGB stays on, as in Linux 6.15 (4afeb0ed1753)
    /// until 44126343d58c (CVE-2026-64229): an mm active on more than 3
    /// CPUs gets a global ASID, and its flushes are INVLPGBs naming a
    /// non-zero PCID, which raise #GP while `CR4.PCIDE` is clear. Left out
    /// of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nopcid_keeps_invlpgb: bool,
    /// Resident folios (shmem and private anonymous pages) above which
    /// `kswapd` (a kernel thread on the last CPU) reclaims, down to 15/16
    /// of the limit (a stand-in for the low and high watermarks); 0: every
    /// folio as soon as it is added (a machine with no free memory, where
    /// kswapd never sleeps while a page is resident). `None`: no kswapd,
    /// only `MADV_PAGEOUT` reclaims. Left out of the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_pages: Option<u64>,
    /// Resident folios above which an allocation reclaims itself before
    /// it proceeds (direct reclaim, `__alloc_pages_direct_reclaim()`
    /// → `try_to_free_pages()`: the faulting task runs
    /// `shrink_folio_list()` on the oldest folios, with its own deferred
    /// batch). Linux spaces its min, low and high watermarks evenly; with
    /// `memory_limit_pages` as the low one and kswapd stopping 1/16 below,
    /// `memory_limit_pages + memory_limit_pages / 16` is the faithful
    /// choice. Needs `memory_limit_pages`, and must not be below it.
    /// `None`: no direct reclaim (kswapd alone). Left out of the JSON when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_min_pages: Option<u64>,
    /// `CONFIG_HZ`: turns the periodic timer tick on at this rate,
    /// overriding the profile's `kernel.hz` (whose `tick_handler_ns` it
    /// needs). `None`: the profile's, if any; without either there is no
    /// tick. Left out of the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hz: Option<u32>,
    /// How arm64 invalidates the walk caches for page-table pages it frees
    /// (`free_pgtables()`). `"deferred"` (default, Linux 4.20+, Will
    /// Deacon's "arm64: tlb: Avoid synchronous TLBIs when freeing page
    /// tables"): the gather notes `freed_tables` and its one `tlb_flush()`
    /// at the end invalidates all levels. `"sync-per-table"` (Linux 4.0-4.19,
    /// RHEL 8's 4.18): `__pte_free_tlb()`/`__pmd_free_tlb()` each issue
    /// `__flush_tlb_pgtable()` (`TLBI VAE1IS` at the table's address, then
    /// `DSB ISH`) as they free the table, and `tlb_flush()` is last-level
    /// only and does nothing for a full-mm teardown.
    /// `"gather-all-levels"` (3.18-3.19): nothing per table, all levels at
    /// the end ([`PgtableFreeTlbi::GatherAllLevels`]). arm64 only. Left out
    /// of the JSON when `"deferred"`.
    #[serde(default, skip_serializing_if = "PgtableFreeTlbi::is_deferred")]
    pub pgtable_free_tlbi: PgtableFreeTlbi,
    /// arm64 `flush_tlb_fix_spurious_fault()` is the generic
    /// `flush_tlb_page()` (Linux 3.7-5.9: a write fault that finds the PTE
    /// already writable flushes that page) rather than a no-op (5.10+, Will
    /// Deacon's "arm64: mm: Make flush_tlb_fix_spurious_fault() a no-op").
    /// arm64 only. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spurious_fault_flush: bool,
    /// The base page size in KiB, the kernel's build-time granule: 4
    /// (`CONFIG_ARM64_4K_PAGES`, and x86's only size) or 64
    /// (`CONFIG_ARM64_64K_PAGES`, arm64 only, as RHEL 8's aarch64 kernel
    /// is built): with 48-bit VAs, 3 table levels of 13 index bits under a
    /// 64-entry top table, and 512 MiB PMD blocks (THP). Page counts
    /// elsewhere in `[kernel]` (`memory_limit_pages`) count these pages.
    /// See docs/model.md, Kernel. Key `page_size_kib`, parsed once: any
    /// other value than 4 or 64 is an error naming its line. Left out of
    /// the JSON when 4.
    #[serde(
        rename = "page_size_kib",
        default = "default_granule",
        skip_serializing_if = "is_default_granule",
        with = "page_size_kib"
    )]
    pub granule: Granule,
    /// arm64 `__flush_tlb_range()`'s limit on per-page TLBIs, as each
    /// Linux version had it: `"max-tlbi-ops"` (the model's default, Linux
    /// 4.20+: from `MAX_TLBI_OPS = PTRS_PER_PTE` strides on, flush the
    /// whole ASID; 512 pages with 4 KiB pages, 8192 with 64 KiB) or
    /// `"max-tlb-range"` (Linux 4.1-4.19, 05ac65305437: above
    /// `MAX_TLB_RANGE = 1024UL << PAGE_SHIFT` bytes, per-page TLBIs
    /// whatever the stride, no range operations). Left out of the JSON
    /// when default. Ignored on x86.
    #[serde(default, skip_serializing_if = "Arm64FlushRangeLimit::is_default")]
    pub arm64_flush_range_limit: Arm64FlushRangeLimit,
    /// `fault_around_bytes` (debugfs, mm/memory.c; Linux 3.15+ default
    /// 65536): a read fault on a regular file maps the already cached
    /// pages of this aligned window around it read-only
    /// (`do_fault_around()`); a value of one page or less turns
    /// fault-around off. A power of two, at most `PMD_SIZE`. Left out of
    /// the JSON when default.
    #[serde(
        default = "default_fault_around_bytes",
        skip_serializing_if = "is_default_fault_around_bytes"
    )]
    pub fault_around_bytes: u64,
    /// The read-around window of a page-cache miss in a file mapping, in
    /// KiB (`/sys/block/<dev>/queue/read_ahead_kb`, the bdi's `ra_pages`;
    /// Linux default `VM_READAHEAD_PAGES` = 128 KiB): `filemap_fault()`'s
    /// `do_sync_mmap_readahead()` reads this many KiB centred on the
    /// missing page. 0 reads the missing page only. Left out of the JSON
    /// when default.
    #[serde(
        default = "default_read_ahead_kb",
        skip_serializing_if = "is_default_read_ahead_kb"
    )]
    pub read_ahead_kb: u64,
    /// Folio size the filesystem of regular files caches them in:
    /// `"small"` (default: one base page a folio, every filesystem before
    /// large folios) or `"pmd"` (PMD-sized folios, which `finish_fault()`
    /// and fault-around map with one PMD where it fits: the model's
    /// stand-in for ext4 on Linux 6.16+, which caches files in large
    /// folios, docs/model.md "Page cache of regular files"). Left out of
    /// the JSON when `"small"`.
    #[serde(default, skip_serializing_if = "FileLargeFolios::is_small")]
    pub file_large_folios: FileLargeFolios,
    /// What `__unmap_hugepage_range()` flushes after it unshares a
    /// hugetlb PMD table (`kernel/mm/hugetlb.rs`). Left out of the JSON
    /// when `"unshared-tables"`.
    #[serde(default, skip_serializing_if = "HugetlbUnshareFlush::is_default")]
    pub hugetlb_unshare_flush: HugetlbUnshareFlush,
    /// arm64's `tlb_flush()` decides on leaf-only invalidation
    /// (`VALE1IS`, `TLBF_NOWALKCACHE`) from `tlb->freed_tables` alone, so
    /// a gather that only unshared hugetlb PMD tables leaves the walk
    /// caches' entries to them: Linux 6.19 (8ce720d5bd91) to 7.0.11, and
    /// the stable kernels that took 8ce720d5bd91, until c2ff4764e03e
    /// (CVE-2026-63875). arm64 only, with `hugetlb_unshare_flush =
    /// "unshared-tables"`. Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub arm64_tlb_flush_ignores_unshared: bool,
    /// x86's `pte_accessible()` of Linux 3.8-3.12: a `PROT_NONE` PTE is
    /// never accessible, even while a flush of its mm is pending, so
    /// migration's `ptep_clear_flush()` skips the flush a NUMA scan still
    /// owes (fixed by 20841405940e, 3.13). x86 only. Left out of the JSON
    /// when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pte_accessible_ignores_pending: bool,
    /// `mm->tlb_flush_pending` is a bool (Linux 3.13-4.12): raising it sets
    /// it, dropping it clears it, so the first of two overlapping NUMA
    /// scans to finish clears it while the other still owes its flush
    /// (fixed by 16af97dc5a89, 4.13, a counter). Left out of the JSON when
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tlb_flush_pending_bool: bool,
    /// Whether and how `mremap` moves a whole PTE table when it moves a
    /// `PMD_SIZE`-aligned `PMD_SIZE` (`move_normal_pmd()`,
    /// `kernel/mm/mremap.rs`). Left out of the JSON when `"rmap-locks"`.
    #[serde(default, skip_serializing_if = "MremapMovePmd::is_default")]
    pub mremap_move_pmd: MremapMovePmd,
    /// With `mremap_move_pmd` not `"off"`, an aligned `PUD_SIZE` whose PUD
    /// points to a PMD table moves by its PUD entry (`move_normal_pud()`,
    /// `CONFIG_HAVE_MOVE_PUD`: x86 and arm64 since 5.11), under the same
    /// rmap-lock rule. `false`: Linux 5.0-5.10 (PMD moves only). Left
    /// out of the JSON when true.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub mremap_move_pud: bool,
}

/// What an unmap flushes after `huge_pmd_unshare()` detached a shared
/// hugetlb PMD table from its address space (`[kernel]
/// hugetlb_unshare_flush`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HugetlbUnshareFlush {
    /// Nothing: the caller's flush covers only the huge pages it cleared
    /// itself, so the unshared `PUD_SIZE` keeps its translations (Linux
    /// before a4a118f2eead, 5.16; CVE-2021-4002).
    None,
    /// `tlb_flush_pmd_range(tlb, address & PUD_MASK, PUD_SIZE)` and
    /// `force_flush`: the range is flushed before `i_mmap_rwsem` is
    /// released (a4a118f2eead, 5.16, to 6.18).
    ForceFlush,
    /// `tlb_unshare_pmd_ptdesc()`: the range as above, and the gather's
    /// `unshared_tables` (and `fully_unshared_tables` when no sharer is
    /// left) set; `huge_pmd_unshare_flush()` flushes before
    /// `i_mmap_rwsem` is released, then, if fully unshared,
    /// `tlb_remove_table_sync_one()` (8ce720d5bd91, 6.19; stable 6.18.13,
    /// 6.12.74, 6.6.127, 6.1.167, 5.15.203, 5.10.253).
    #[default]
    UnsharedTables,
}

impl HugetlbUnshareFlush {
    /// Is this the default (`"unshared-tables"`)?
    pub fn is_default(&self) -> bool {
        *self == HugetlbUnshareFlush::UnsharedTables
    }
}

/// How `move_page_tables()` moves an aligned `PMD_SIZE` (`[kernel]
/// mremap_move_pmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MremapMovePmd {
    /// PTE by PTE (`move_ptes()`), as every range: Linux before
    /// `CONFIG_HAVE_MOVE_PMD` (x86 before 5.0, arm64 before 5.10).
    Off,
    /// `move_normal_pmd()` moves the PMD entry, taking the rmap locks
    /// only when `copy_vma()` said they are needed (`need_rmap_locks`,
    /// false for a new VMA, which rmap walks visit after the old one):
    /// the generic code of 2c91bd4a4e2e as x86 selected it in 5.0
    /// (9f132f7e1455) and arm64 in 5.10 (45544eee9606), to 5.13.2, until
    /// 97113eb39fa7 (CVE-2022-41222; the 5.4 and 5.10 stable branches took
    /// it only in 2022).
    NeedRmapLocks,
    /// `move_normal_pmd()` under the rmap locks in write mode always
    /// (97113eb39fa7, 5.14; stable 5.13.3).
    #[default]
    RmapLocks,
}

impl MremapMovePmd {
    /// Is this the default (`"rmap-locks"`)?
    pub fn is_default(&self) -> bool {
        *self == MremapMovePmd::RmapLocks
    }
}

/// The folio size of regular files' page cache (`[kernel]
/// file_large_folios`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileLargeFolios {
    /// One base page per folio.
    #[default]
    Small,
    /// PMD-sized folios (`mapping_set_large_folios()`; ext4 since 6.16).
    Pmd,
}

impl FileLargeFolios {
    /// Is this the default (`"small"`)?
    pub fn is_small(&self) -> bool {
        *self == FileLargeFolios::Small
    }
}

fn default_fault_around_bytes() -> u64 {
    65536
}

fn is_default_fault_around_bytes(b: &u64) -> bool {
    *b == default_fault_around_bytes()
}

fn default_read_ahead_kb() -> u64 {
    128
}

fn is_default_read_ahead_kb(k: &u64) -> bool {
    *k == default_read_ahead_kb()
}

/// When arm64 invalidates walk caches for freed page-table pages
/// (`[kernel] pgtable_free_tlbi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PgtableFreeTlbi {
    /// Linux 4.20+: once, in the gather's `tlb_flush()` (non-last-level).
    #[default]
    Deferred,
    /// Linux 4.0-4.19: a synchronous `TLBI VAE1IS; DSB ISH` per freed
    /// table page (`__flush_tlb_pgtable()`, 285994a62c80).
    SyncPerTable,
    /// Linux 3.18-3.19 (5e5f6dc10546 "arm64: mm: enable HAVE_RCU_TABLE_FREE
    /// logic" until 285994a62c80 "arm64: Invalidate the TLB corresponding
    /// to intermediate page table levels"): no TLBI per table; the gather's
    /// `tlb_flush()` invalidates all levels of its range (3.18's
    /// `flush_tlb_range()` is `TLBI VAE1IS`) and the whole ASID for a
    /// full-mm teardown. Safe unless a table is freed before that flush
    /// (`[kernel] table_free_single_user_at_once`, which 3.18 had).
    GatherAllLevels,
}

impl PgtableFreeTlbi {
    /// Is this the default (`"deferred"`)?
    pub fn is_deferred(&self) -> bool {
        *self == PgtableFreeTlbi::Deferred
    }
}

/// When arm64's `__flush_tlb_range()` gives up per-page TLBIs for one
/// whole-ASID flush (`[kernel] arm64_flush_range_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arm64FlushRangeLimit {
    /// Linux 4.20+ (Will Deacon's 2018 series: "arm64: tlbflush: Allow
    /// stride to be specified for __flush_tlb_range()" and "arm64: tlbi:
    /// Set MAX_TLBI_OPS to PTRS_PER_PTE"): `end - start >= MAX_TLBI_OPS *
    /// stride` with `MAX_TLBI_OPS = PTRS_PER_PTE`, one TLBI per stride.
    #[default]
    MaxTlbiOps,
    /// Linux 4.1-4.19 (05ac65305437, "arm64: fix soft lockup due to large
    /// tlb flush range"): `end - start > MAX_TLB_RANGE` with
    /// `MAX_TLB_RANGE = 1024UL << PAGE_SHIFT`; below it one TLBI per base
    /// page (the function had no stride), no range operations.
    MaxTlbRange,
}

impl Arm64FlushRangeLimit {
    /// Is this the model's default (`"max-tlbi-ops"`)?
    pub fn is_default(&self) -> bool {
        *self == Self::MaxTlbiOps
    }
}

fn default_granule() -> Granule {
    Granule::K4
}

fn is_default_granule(g: &Granule) -> bool {
    *g == default_granule()
}

/// `kernel.page_size_kib` as the [`Granule`] it names: written as its page
/// size in KiB, read from 4 or 64 only.
mod page_size_kib {
    use crate::hw::mem::Granule;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(g: &Granule, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(g.page_size_kib())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Granule, D::Error> {
        let kib = i64::deserialize(d)?;
        u32::try_from(kib)
            .ok()
            .and_then(Granule::from_kib)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{kib} KiB pages (must be 4, CONFIG_ARM64_4K_PAGES and x86, or 64, CONFIG_ARM64_64K_PAGES)"
                ))
            })
    }
}

/// Transparent huge page mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thp {
    /// 4 KiB pages only.
    #[default]
    Never,
    /// Anonymous write faults map 2 MiB pages where they fit.
    Always,
}

/// How the huge zero page is mapped and copied on write
/// (`[kernel] thp_huge_zero_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThpZeroPage {
    /// The model's behaviour before the huge zero page was built, which no
    /// Linux has: a read fault maps the 4 KiB zero page (its PTE table
    /// then keeps the 2 MiB from becoming a huge page).
    #[default]
    Off,
    /// Linux with `use_zero_page = 0` (and Linux before 3.8): no huge zero
    /// page; a read fault where a huge page fits allocates one, as a write
    /// fault does (`do_huge_pmd_anonymous_page()` skips its zero-page
    /// branch).
    AllocOnRead,
    /// Linux 3.8-5.7 (the huge zero page came in 3.8; until 3917c80280c9): a write to the
    /// huge zero page allocates and clears a new huge page, clears the PMD
    /// with its 2 MiB flush (`pmdp_huge_clear_flush_notify()`) and maps it
    /// (`do_huge_pmd_wp_page()`, its `alloc:` path).
    CowAlloc,
    /// Linux 5.8+ (3917c80280c9, "thp: change CoW semantics for
    /// anon-THP"): a write to the huge zero page splits it into 512
    /// read-only 4 KiB zero-page PTEs (`__split_huge_zero_page_pmd()`,
    /// with its 2 MiB flush) and the write is retried as a 4 KiB
    /// copy-on-write of the zero page.
    CowSplit,
}

impl ThpZeroPage {
    /// Is this the model's default (`"off"`)?
    pub fn is_off(&self) -> bool {
        *self == ThpZeroPage::Off
    }

    /// Does a read fault map the huge zero page?
    pub fn maps_huge_zero_page(&self) -> bool {
        matches!(self, ThpZeroPage::CowAlloc | ThpZeroPage::CowSplit)
    }
}

impl Default for KernelConfig {
    fn default() -> Self {
        Self {
            tlb_policy: default_tlb_policy(),
            asid_allocator: default_asid_allocator(),
            asid_bits: None,
            kpti: false,
            mmap_lock_readers_sleep: false,
            zap_flush_always: false,
            gather_ignores_nested: false,
            table_free_single_user_at_once: false,
            munmap_downgrade: false,
            clear_refs_gather: false,
            flush_tlb_range_leaf_only: false,
            khugepaged_no_table_sync: false,
            huge_zero_shrinker: false,
            huge_zero_put_before_flush: false,
            pt_reclaim: false,
            pt_reclaim_flush_past_end: false,
            gather_nested_reset_range: false,
            tlb_flush_batched_bool: false,
            table_batch_alloc_fails: false,
            table_free_one_without_invalidate: false,
            thp: Thp::Never,
            thp_huge_zero_page: ThpZeroPage::Off,
            switch_to_dsb: true,
            migrate_batch_flush: false,
            mremap_flush_unlocked: false,
            migrate_vma_flush_unlocked: false,
            nopcid: false,
            nopcid_keeps_invlpgb: false,
            memory_limit_pages: None,
            memory_min_pages: None,
            hz: None,
            pgtable_free_tlbi: PgtableFreeTlbi::Deferred,
            spurious_fault_flush: false,
            granule: default_granule(),
            arm64_flush_range_limit: Arm64FlushRangeLimit::MaxTlbiOps,
            fault_around_bytes: default_fault_around_bytes(),
            read_ahead_kb: default_read_ahead_kb(),
            file_large_folios: FileLargeFolios::Small,
            hugetlb_unshare_flush: HugetlbUnshareFlush::UnsharedTables,
            arm64_tlb_flush_ignores_unshared: false,
            pte_accessible_ignores_pending: false,
            tlb_flush_pending_bool: false,
            mremap_move_pmd: MremapMovePmd::RmapLocks,
            mremap_move_pud: true,
        }
    }
}

fn default_tlb_policy() -> String {
    "arm64-stock".into()
}
fn default_asid_allocator() -> String {
    "arm64-asid-reserved".into()
}

/// The files a workload's parameters name, by path as written (a
/// replay's `trace`): the text the caller read, or why it could not read
/// it (the library does no I/O; [`FILE_PARAMS`] lists the parameters
/// that name files).
pub type Files = BTreeMap<String, Result<std::sync::Arc<str>, String>>;

/// The workload parameters that name a file the workload reads (a
/// replay's `trace`, a path relative to the working directory).
pub const FILE_PARAMS: &[&str] = &["trace"];

/// The workload by name plus its own parameters (checked by the workload).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadConfig {
    /// Registered workload name.
    pub name: String,
    /// Workload-specific parameters.
    #[serde(flatten)]
    pub params: BTreeMap<String, toml::Value>,
    /// The files the parameters name, which the caller loads
    /// ([`WorkloadConfig::file_paths`]).
    #[serde(skip)]
    pub files: Files,
}

impl WorkloadConfig {
    /// This configuration with every parameter of `resolved` (the values a
    /// workload parsed, defaults included) that it does not give: the
    /// given values stay as written, so the result parses to the same
    /// workload.
    pub fn with_defaults(&self, resolved: BTreeMap<String, toml::Value>) -> WorkloadConfig {
        let mut params = resolved;
        params.extend(self.params.clone());
        WorkloadConfig {
            name: self.name.clone(),
            params,
            files: self.files.clone(),
        }
    }

    /// The paths the parameters name that [`WorkloadConfig::files`] does
    /// not hold yet: what the caller reads before a run.
    pub fn file_paths(&self) -> Vec<String> {
        FILE_PARAMS
            .iter()
            .filter_map(|k| self.params.get(*k)?.as_str())
            .filter(|p| !self.files.contains_key(*p))
            .map(str::to_string)
            .collect()
    }
}

/// Checker settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckerConfig {
    /// Run the invariant checker.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Events of history kept for a violation report.
    #[serde(default = "default_history")]
    pub history: usize,
    /// Inject speculative table walks: a CPU with user tables installed
    /// (also lazily, under a kernel thread) re-walks its last user VA before
    /// each step of work. Off by default: it changes TLB contents.
    #[serde(default)]
    pub speculative_walks: bool,
}

fn yes() -> bool {
    true
}
fn is_yes(b: &bool) -> bool {
    *b
}
fn default_history() -> usize {
    24
}

impl Default for CheckerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            speculative_walks: false,
            history: default_history(),
        }
    }
}
