//! The modelled hardware: topology, per-CPU TLBs and translation registers,
//! physical memory holding page tables, and arm64 broadcast invalidation
//! (DVM operations in flight, DVM Sync at the misc node).
//!
//! This module holds state and semantics only; *when* things happen is the
//! driver's decision (see `crate::driver`).

pub mod cell;
pub mod cpu;
pub mod cpumask;
pub mod dvm_affinity;
pub mod mem;
pub mod params;
pub mod stage2;
pub mod tlb;

use cpumask::CpuMask;
use mem::{Desc, Granule, PhysMem, Pte, TableId, HUGE_LEVEL, LEAF_LEVEL};
pub use params::{Arch, HwParams, WalkCacheAfterTtbrWrite};
use rustc_hash::FxHashMap;
use tlb::{Asid, LeafEntry, MmId, Tlb, TlbiScope, Vmid, WalkEntry};

pub use cpu::{CpuId, CpuVec};

/// A user context as `cpu_do_switch_mm()` installs it: an address space's
/// top-level table in TTBR0 and its ASID (in TTBR1 on arm64 since v4.15,
/// [`UserRegs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttbr0 {
    /// Address space (ground truth, not visible to hardware lookups).
    pub mm: MmId,
    /// Top-level table.
    pub pgd: TableId,
    /// ASID programmed with it.
    pub asid: Asid,
}

/// The current ASID of a CPU's user (non-global) translations, and the
/// address space it was loaded for (ground truth, not visible to hardware
/// lookups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsidContext {
    /// Address space the ASID was loaded for.
    pub mm: MmId,
    /// The ASID.
    pub asid: Asid,
}

/// The user half of a CPU's translation registers, split as arm64 keeps
/// it with `TCR_EL1.A1 = 1` (v4.15+, 7655abb95386 "arm64: mm: Move ASID
/// from TTBR0 to TTBR1"): TTBR0's base and the ASID, which
/// `cpu_set_reserved_ttbr0()` changes apart. Kernels that keep the ASID
/// in TTBR0 (arm64 before v4.15; 32-bit ARM with LPAE) and x86's CR3
/// always write both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserRegs {
    /// `TTBR0_EL1.BADDR`: a user address space's top-level table (`mm`,
    /// `pgd`), or `None` for the reserved (empty) table.
    pub base: Option<(MmId, TableId)>,
    /// The current ASID (`TTBR1_EL1.ASID`, or TTBR0's where the kernel
    /// keeps it there), or `None` for ASID 0, which tags no user entry.
    pub asid: Option<AsidContext>,
}

impl UserRegs {
    /// Both halves as one user context, if TTBR0 holds user tables.
    pub fn ttbr0(&self) -> Option<Ttbr0> {
        let (mm, pgd) = self.base?;
        let a = self.asid?;
        Some(Ttbr0 {
            mm,
            pgd,
            asid: a.asid,
        })
    }
}

impl std::fmt::Display for Ttbr0 {
    /// `mm0 table 3 asid 1`: the address space, its top-level table and
    /// the ASID (x86: the PCID tag).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mm{} table {} asid {}", self.mm, self.pgd, self.asid)
    }
}

impl CpuHw {
    /// The user context installed, if TTBR0 holds user tables: what user
    /// accesses translate with.
    pub fn ttbr0(&self) -> Option<Ttbr0> {
        self.user.ttbr0()
    }

    /// The VMID a TLBI of `scope` by this CPU applies to: an EL2
    /// operation by VMID (`VMALLS12E1`) to `VTTBR_EL2`'s, an EL1 one to
    /// the VMID the CPU runs under, or, issued by the host (VMID 0) with
    /// `HCR_EL2.TGE` clear, to `VTTBR_EL2`'s (the guest's EL1&0 regime).
    pub fn tlbi_vmid(&self, scope: TlbiScope) -> Vmid {
        match scope {
            TlbiScope::VmallS12 => self.vttbr_vmid,
            _ if self.vmid == 0 && !self.hcr_tge => self.vttbr_vmid,
            _ => self.vmid,
        }
    }

    /// The tag this CPU's lookups under `asid` match: `(VMID, asid)`.
    pub fn tag(&self, asid: Asid) -> tlb::Tag {
        tlb::Tag {
            vmid: self.vmid,
            asid,
        }
    }
}

/// Hardware state of one CPU.
#[derive(Debug, Clone)]
pub struct CpuHw {
    /// TLB and walk cache. Fill it only through [`Hw::access`] and
    /// [`Hw::speculate`]: broadcast invalidations visit only the CPUs whose
    /// fills those recorded ([`Hw::dvm_apply_all`]).
    pub tlb: Tlb,
    /// TTBR0's base and the current ASID. Write them through
    /// [`Hw::set_ttbr0`] and [`Hw::set_reserved_ttbr0_base`] (which apply
    /// the walk-cache reading); read them with [`CpuHw::ttbr0`].
    pub user: UserRegs,
    /// Broadcast TLBIs issued by this CPU and not yet applied everywhere.
    pub inflight: u32,
    /// A broadcast TLBI was issued since this CPU's last DSB ISH.
    pub dvm_since_dsb: bool,
    /// The VMID this CPU's fills and EL1 TLBIs are tagged with:
    /// `VTTBR_EL2.VMID` while it runs a guest, 0 while it runs the host
    /// (whose EL2&0 regime the model tags as VMID 0).
    pub vmid: Vmid,
    /// `VTTBR_EL2.VMID` as last written (by KVM's vCPU load).
    pub vttbr_vmid: Vmid,
    /// `HCR_EL2.FB`: the guest's local (non-shareable) EL1 TLBIs are
    /// broadcast to the inner-shareable domain ([`Hw::forces_broadcast`]).
    pub hcr_fb: bool,
    /// `HCR_EL2.TGE` (VHE): set while the host runs, so that EL1 TLB
    /// maintenance at EL2 applies to the host's EL2&0 regime (VMID 0 in
    /// the model); KVM clears it around maintenance of a guest's regime
    /// (`enter_vmid_context()`), which then applies to `VTTBR_EL2`'s VMID
    /// ([`CpuHw::tlbi_vmid`]).
    pub hcr_tge: bool,
    /// x86 `CR4.PCIDE`: process-context identifiers enabled, set by the
    /// kernel at boot when it uses them (`setup_pcid()`); while clear, an
    /// `INVLPGB` naming a non-zero PCID raises #GP
    /// ([`Hw::rejects_tlbi`]). Unused on arm64.
    pub cr4_pcide: bool,
    /// The (VMID, ASID) tags this CPU is a holder of ([`Hw::holders`]),
    /// in no order.
    held_asids: Vec<HolderKey>,
    /// Socket of the CPU.
    pub socket: u32,
    /// Die of the CPU (numbered across the machine).
    pub die: u32,
    /// Cluster of the CPU.
    pub cluster: u32,
    /// Cached stage-2 translations (guests' walks; cost only).
    pub s2: stage2::S2Cache,
    /// The broadcast-affinity register (TLBI by affinity,
    /// [`dvm_affinity`]): the CPUs this CPU's broadcasts reach, as
    /// encoded; `None`: every CPU (its reset value, and the only value on
    /// machines without the feature).
    pub dvm_affinity: Option<CpuMask>,
    /// The CPUs this CPU's broadcast TLBIs since its last DSB ISH reached,
    /// unless `dvm_reach_all`: where its next DVM Sync goes.
    dvm_reach: CpuMask,
    /// One of those broadcasts reached every CPU.
    dvm_reach_all: bool,
}

/// A (VMID, ASID) pair as one key of [`Hw`]'s holder index.
type HolderKey = u32;

/// The holder-index key of `(vmid, asid)`.
fn tag(vmid: Vmid, asid: Asid) -> HolderKey {
    (HolderKey::from(vmid) << 16) | HolderKey::from(asid)
}

/// A broadcast invalidation on its way to its targets.
#[derive(Debug, Clone)]
pub struct Inflight {
    /// Issuing CPU.
    pub issuer: CpuId,
    /// The VMID the issuer ran under: EL1 scopes apply within it.
    pub vmid: Vmid,
    /// What it invalidates.
    pub scope: TlbiScope,
    /// Targets that have not applied it yet.
    pub pending: CpuMask,
}

/// Why a user access failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No valid translation (demand paging, or unmapped).
    Translation,
    /// The translation forbids the access.
    Permission,
}

impl std::fmt::Display for Fault {
    /// `translation fault` or `permission fault`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fault::Translation => "translation fault",
            Fault::Permission => "permission fault",
        })
    }
}

/// How an access was satisfied, for costs and statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessInfo {
    /// The TLB hit.
    pub tlb_hit: bool,
    /// Levels read from memory by the walk (0 on a hit).
    pub levels_walked: u8,
    /// A walk-cache entry shortened the walk.
    pub walk_cache_hit: bool,
    /// Stage-2 table entries read to translate the walk's IPAs (a guest's
    /// walk only, [`stage2`]).
    pub s2_levels: u8,
}

/// What the checker may want to see about one access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessTrace {
    /// A leaf entry from the TLB was used.
    UsedLeaf(LeafEntry),
    /// A walk went through a cached intermediate entry.
    UsedWalk(WalkEntry),
}

/// The machine.
#[derive(Debug, Clone)]
pub struct Hw {
    /// Per-CPU state.
    pub cpus: CpuVec<CpuHw>,
    /// Page tables and frames.
    pub mem: PhysMem,
    /// Broadcast invalidations in flight, by id (slots reused).
    pub inflight: Vec<Option<Inflight>>,
    free_inflight: Vec<usize>,
    /// Scratch for the targets one broadcast visits (kept, so that
    /// applying a broadcast allocates nothing; empty between uses).
    visit: Vec<CpuId>,
    /// Per (VMID, ASID): the CPUs whose TLB may hold entries tagged with it (a
    /// superset: set by every fill, cleared by an invalidation of the whole
    /// ASID or the whole TLB there), so that a broadcast invalidation by
    /// ASID visits only those TLBs. A simulator index, not hardware:
    /// skipping the other TLBs removes nothing they hold. Looked up only,
    /// never iterated.
    holders: FxHashMap<HolderKey, Holders>,
    /// The machine has TLBI by affinity (`arm64.tlbi_affinity`).
    tlbi_affinity: bool,
    /// What cached walks are good for after a TTBR0 write
    /// (`arm64.walk_cache_after_ttbr_write`; x86: ASID-tagged).
    pub walk_cache_reading: WalkCacheAfterTtbrWrite,
    /// The profile's instruction-set family: reports name TLB
    /// maintenance in its terms ([`tlb::TlbiScope::insn`]).
    pub arch: Arch,
    /// The translation granule (`kernel.page_size_kib`): the walker's
    /// levels and index bits, the TLBs' page numbers, the frames' size.
    pub granule: Granule,
}

/// The CPUs that may hold entries of one ASID: a mask to test, and the
/// same CPUs as a list to visit (in no order; visiting order has no
/// effect, as each CPU's TLB is its own).
#[derive(Debug, Clone)]
struct Holders {
    mask: CpuMask,
    list: Vec<CpuId>,
}

impl Hw {
    /// Builds the machine `p` describes.
    pub fn new(p: &HwParams) -> Self {
        let (n, g) = (p.cpus, p.granule);
        let per_socket = n.div_ceil(p.sockets);
        let per_die = per_socket.div_ceil(p.dies_per_socket);
        let cpus = (0..n)
            .map(|i| CpuHw {
                tlb: Tlb::with_granule(p.tlb_entries, p.tlb_ways, p.walk_cache_entries, g),
                user: UserRegs::default(),
                vmid: 0,
                vttbr_vmid: 0,
                hcr_fb: false,
                hcr_tge: true,
                cr4_pcide: false,
                s2: stage2::S2Cache::new(p.stage2_cache_entries),
                inflight: 0,
                dvm_since_dsb: false,
                held_asids: Vec::new(),
                socket: (i / per_socket) as u32,
                die: ((i / per_socket) * p.dies_per_socket + (i % per_socket) / per_die) as u32,
                cluster: (i / p.cpus_per_cluster) as u32,
                dvm_affinity: None,
                dvm_reach: CpuMask::new(n),
                dvm_reach_all: false,
            })
            .collect();
        Self {
            cpus,
            mem: PhysMem::new(g),
            inflight: Vec::new(),
            free_inflight: Vec::new(),
            visit: Vec::new(),
            holders: FxHashMap::default(),
            tlbi_affinity: p.tlbi_affinity,
            walk_cache_reading: p.walk_cache_reading,
            arch: p.arch,
            granule: g,
        }
    }

    /// Number of CPUs.
    pub fn ncpus(&self) -> usize {
        self.cpus.len()
    }

    /// Translates and performs a user access on `cpu`, filling the TLB and
    /// walk cache as hardware would. `trace` receives what was used.
    pub fn access(
        &mut self,
        cpu: CpuId,
        va: u64,
        write: bool,
        trace: &mut Vec<AccessTrace>,
    ) -> (Result<(), Fault>, AccessInfo) {
        let mut info = AccessInfo::default();
        let Some(ttbr) = self.cpus[cpu].ttbr0() else {
            return (Err(Fault::Translation), info);
        };
        let vpn = va >> self.granule.page_shift();
        let c = &mut self.cpus[cpu];
        let vmid = c.vmid;
        if let Some(e) = c.tlb.lookup(vmid, ttbr.asid, vpn) {
            info.tlb_hit = true;
            trace.push(AccessTrace::UsedLeaf(e));
            if (write && !e.perms.write()) || !e.perms.read() {
                // A faulting entry is dropped; the retry after the fault walks
                // again (docs/model.md: permission faults).
                c.tlb.remove(vmid, ttbr.asid, vpn);
                return (Err(Fault::Permission), info);
            }
            return (Ok(()), info);
        }
        let cx = AsidContext {
            mm: ttbr.mm,
            asid: ttbr.asid,
        };
        let Some((pte, huge)) = self.walk(cpu, cx, Some(ttbr.pgd), va, trace, &mut info) else {
            return (Err(Fault::Translation), info);
        };
        if (write && !pte.perms.write()) || !pte.perms.read() {
            return (Err(Fault::Permission), info);
        }
        if vmid != 0 {
            // The page the walk found is an IPA too.
            info.s2_levels += self.cpus[cpu]
                .s2
                .translate(vmid, stage2::Ipa::Frame(pte.pfn));
        }
        self.fill_leaf(cpu, cx, vpn, pte, huge);
        (Ok(()), info)
    }

    /// The table walk of `va` under `cx`'s ASID: starts from the deepest
    /// walk-cache entry (recorded in `trace`), else from `root` (TTBR0's
    /// user tables; `None`, the reserved table, has no entry: nothing is
    /// found or cached), caches every table descriptor it reads, and
    /// returns the leaf if `va` is mapped: the PTE, or for a 2 MiB leaf its
    /// first frame's PTE and `true`. `info` counts the levels read.
    fn walk(
        &mut self,
        cpu: CpuId,
        cx: AsidContext,
        root: Option<TableId>,
        va: u64,
        trace: &mut Vec<AccessTrace>,
        info: &mut AccessInfo,
    ) -> Option<(Pte, bool)> {
        let (vmid, g) = (self.cpus[cpu].vmid, self.granule);
        let (mut level, mut table) = match self.cpus[cpu].tlb.walk_lookup(vmid, cx.asid, va) {
            Some(w) => {
                info.walk_cache_hit = true;
                trace.push(AccessTrace::UsedWalk(w));
                (w.level + 1, w.next)
            }
            None => (g.start_level(), root?),
        };
        let vmid = self.cpus[cpu].vmid;
        loop {
            info.levels_walked += 1;
            if vmid != 0 {
                let s2 = self.cpus[cpu].s2.translate(vmid, stage2::Ipa::Table(table));
                info.s2_levels += s2;
            }
            let idx = g.level_index(va, level);
            match self.mem.table(table).entries.get(&idx).copied() {
                Some(Desc::Table(next)) if level < LEAF_LEVEL => {
                    let inst = self.mem.table(next).instance;
                    self.note_holder(cpu, vmid, cx.asid);
                    self.cpus[cpu].tlb.walk_insert(WalkEntry {
                        vmid,
                        asid: cx.asid,
                        level,
                        va_prefix: va >> g.level_shift(level),
                        next,
                        next_instance: inst,
                        mm: cx.mm,
                    });
                    level += 1;
                    table = next;
                }
                Some(Desc::Page(pte)) if level == LEAF_LEVEL => return Some((pte, false)),
                Some(Desc::Page(pte)) if level == HUGE_LEVEL => return Some((pte, true)),
                _ => return None,
            }
        }
    }

    /// Fills the TLB with the leaf the walk of `vpn` found (`huge`: a 2 MiB
    /// leaf, cached as one entry).
    fn fill_leaf(&mut self, cpu: CpuId, cx: AsidContext, vpn: u64, pte: Pte, huge: bool) {
        let vmid = self.cpus[cpu].vmid;
        let e = LeafEntry {
            vmid,
            asid: cx.asid,
            vpn: if huge {
                vpn & !(self.granule.hpage_pmd_nr() - 1)
            } else {
                vpn
            },
            pfn: pte.pfn,
            perms: pte.perms,
            version: pte.version,
            mm: cx.mm,
        };
        self.note_holder(cpu, vmid, cx.asid);
        if huge {
            self.cpus[cpu].tlb.insert_huge(e);
        } else {
            self.cpus[cpu].tlb.insert(e);
        }
    }

    /// `cpu`'s TLB is about to cache an entry tagged `(vmid, asid)`.
    fn note_holder(&mut self, cpu: CpuId, vmid: Vmid, asid: Asid) {
        let n = self.cpus.len();
        let c = &mut self.cpus[cpu];
        let asid = tag(vmid, asid);
        if c.held_asids.last() == Some(&asid) {
            return;
        }
        let h = self.holders.entry(asid).or_insert_with(|| Holders {
            mask: CpuMask::new(n),
            list: Vec::new(),
        });
        if !h.mask.test_and_set(cpu) {
            h.list.push(cpu);
            c.held_asids.push(asid);
        }
    }

    /// `cpu` holds no entry tagged `asid` (a [`tag`]) any more.
    fn forget_holder(&mut self, cpu: CpuId, asid: HolderKey) {
        let c = &mut self.cpus[cpu];
        if let Some(i) = c.held_asids.iter().position(|&a| a == asid) {
            c.held_asids.swap_remove(i);
            self.drop_holder(cpu, asid);
        }
    }

    /// Takes `cpu` out of the holders of `asid` (a [`tag`]).
    fn drop_holder(&mut self, cpu: CpuId, asid: HolderKey) {
        if let Some(h) = self.holders.get_mut(&asid) {
            if h.mask.test_and_clear(cpu) {
                let i = h.list.iter().position(|&c| c == cpu).expect("listed");
                h.list.swap_remove(i);
            }
        }
    }

    /// Applies `scope`, issued under `vmid`, to `cpu`'s TLB.
    fn invalidate(&mut self, cpu: CpuId, vmid: Vmid, scope: TlbiScope) {
        self.cpus[cpu].tlb.invalidate(vmid, scope);
        match scope {
            TlbiScope::Asid(asid) => return self.forget_holder(cpu, tag(vmid, asid)),
            TlbiScope::Va { .. } | TlbiScope::Range { .. } => return,
            TlbiScope::All | TlbiScope::VmallS12 | TlbiScope::AllE1 => {}
        }
        // The VMIDs a VMID-wide scope empties: this one, or every guest's.
        let every_guest = scope == TlbiScope::AllE1;
        let gone = move |v: Vmid| if every_guest { v != 0 } else { v == vmid };
        if scope != TlbiScope::All {
            // EL2 scopes take stage 2 too.
            self.cpus[cpu].s2.invalidate(gone);
        }
        let mut held = std::mem::take(&mut self.cpus[cpu].held_asids);
        held.retain(|&t| {
            let drop = gone((t >> 16) as Vmid);
            if drop {
                self.drop_holder(cpu, t);
            }
            !drop
        });
        self.cpus[cpu].held_asids = held;
    }

    /// A speculative table walk of `va` by `cpu` in its current context
    /// ([`Hw::walk_context`]): the hardware may do this at any time (it
    /// fills the TLB and walk cache; no permission check, no fault), but a
    /// leaf that grants no access is not a valid translation to the
    /// hardware and is not cached (a `PROT_NONE` PTE: x86 clears
    /// `_PAGE_PRESENT`, arm64 `PTE_VALID`; only its walk is). With
    /// TTBR0 on the reserved table, only a walk that starts from a cached
    /// walk of the current ASID gets anywhere. Used walk-cache entries go
    /// to `trace`, as for an access.
    pub fn speculate(&mut self, cpu: CpuId, va: u64, trace: &mut Vec<AccessTrace>) {
        let Some(cx) = self.walk_context(cpu) else {
            return;
        };
        let vpn = va >> self.granule.page_shift();
        let vmid = self.cpus[cpu].vmid;
        if self.cpus[cpu].tlb.lookup(vmid, cx.asid, vpn).is_some() {
            return;
        }
        let root = self.cpus[cpu].user.base.map(|(_, pgd)| pgd);
        let info = &mut AccessInfo::default();
        if let Some((pte, huge)) = self.walk(cpu, cx, root, va, trace, info) {
            if pte.perms != mem::Perms::NONE {
                self.fill_leaf(cpu, cx, vpn, pte, huge);
            }
        }
    }

    /// The context in which `cpu` may walk now, from its root or from its
    /// cached walks: its current ASID while TTBR0 holds user tables, and,
    /// with TTBR0 on the reserved table, under `asid-tagged` and
    /// `no-new-root-walks` (the ASID's cached walks stay usable). `None`
    /// when no walk is possible: ASID 0, or the reserved table under
    /// `flush-on-ttbr-change` (whose write discarded the regime's cached
    /// walks).
    /// The checker treats the ASID as loaded there (no stale walk).
    pub fn walk_context(&self, cpu: CpuId) -> Option<AsidContext> {
        let u = &self.cpus[cpu].user;
        match (u.base, self.walk_cache_reading) {
            (Some(_), _) => u.asid,
            (None, WalkCacheAfterTtbrWrite::FlushOnTtbrChange) => None,
            (
                None,
                WalkCacheAfterTtbrWrite::AsidTagged | WalkCacheAfterTtbrWrite::NoNewRootWalks,
            ) => u.asid,
        }
    }

    /// Can a speculative walk of `va` by `cpu` change anything now? Not
    /// when it has no walk context, nor when TTBR0 is on the reserved
    /// table and neither a leaf nor a cached walk of the current ASID
    /// covers `va` (a walk from the empty table finds nothing and caches
    /// nothing). Reads the TLB without touching its LRU order.
    pub fn may_speculate(&self, cpu: CpuId, va: u64) -> bool {
        let Some(cx) = self.walk_context(cpu) else {
            return false;
        };
        let c = &self.cpus[cpu];
        c.user.base.is_some() || c.tlb.has_walk(c.vmid, cx.asid, va)
    }

    /// The PTE currently mapping `va` under `pgd`, if any (a software walk
    /// that touches no TLB). Inside a huge leaf, its base-page view: the
    /// frame of `va`'s page, the leaf's permissions and version.
    pub fn read_pte(&self, pgd: TableId, va: u64) -> Option<Pte> {
        let (mut table, g) = (pgd, self.granule);
        for level in g.start_level()..=LEAF_LEVEL {
            match self.mem.table(table).entries.get(&g.level_index(va, level)) {
                Some(Desc::Table(next)) => table = *next,
                Some(Desc::Page(p)) if level == LEAF_LEVEL => return Some(*p),
                Some(Desc::Page(p)) => {
                    return Some(Pte {
                        pfn: p.pfn + ((va >> g.page_shift()) & (g.hpage_pmd_nr() - 1)),
                        ..*p
                    })
                }
                Some(Desc::NonPresent(_)) | None => return None,
            }
        }
        None
    }

    /// Starts a broadcast TLBI from `issuer` to the CPUs its
    /// broadcast-affinity register reaches (every CPU unless set). Returns
    /// the in-flight id; targets apply it with [`Hw::dvm_apply`].
    pub fn tlbi_broadcast_scoped(&mut self, issuer: CpuId, scope: TlbiScope) -> usize {
        let c = &mut self.cpus[issuer];
        // The register limits EL1 operations; KVM's EL2 ones (by VMID,
        // every guest) reach everyone.
        let el2 = matches!(scope, TlbiScope::VmallS12 | TlbiScope::AllE1);
        let targets = match &c.dvm_affinity {
            Some(m) if !el2 => {
                c.dvm_reach.or_with(m);
                m.clone()
            }
            _ => {
                c.dvm_reach_all = true;
                CpuMask::full(self.cpus.len())
            }
        };
        self.tlbi_broadcast(issuer, scope, targets)
    }

    /// Where `cpu`'s next DVM Sync goes: the CPUs its broadcasts reached
    /// since its last one (`None`: every CPU); starts the next account.
    pub fn take_dvm_reach(&mut self, cpu: CpuId) -> Option<CpuMask> {
        let c = &mut self.cpus[cpu];
        let reach = (!std::mem::replace(&mut c.dvm_reach_all, false)).then(|| c.dvm_reach.clone());
        c.dvm_reach.clear_all();
        reach
    }

    /// Writes `cpu`'s broadcast-affinity register asking for `want`
    /// (`None`: no limit); it holds what the encoding can say
    /// ([`dvm_affinity::encode`]).
    /// On a machine without the register (`arm64.tlbi_affinity = false`)
    /// the write changes nothing: policies that write it require the
    /// feature, so this is only a guard.
    pub fn set_dvm_affinity(&mut self, cpu: CpuId, want: Option<&CpuMask>) {
        if !self.tlbi_affinity {
            return;
        }
        let v = want.and_then(|m| dvm_affinity::encode(&self.cpus, cpu, m));
        self.cpus[cpu].dvm_affinity = v;
    }

    /// Starts a broadcast TLBI from `issuer` to every CPU in `targets`.
    /// Returns the in-flight id; targets apply it with [`Hw::dvm_apply`].
    pub fn tlbi_broadcast(&mut self, issuer: CpuId, scope: TlbiScope, targets: CpuMask) -> usize {
        self.cpus[issuer].inflight += 1;
        self.cpus[issuer].dvm_since_dsb = true;
        let f = Inflight {
            issuer,
            vmid: self.cpus[issuer].tlbi_vmid(scope),
            scope,
            pending: targets,
        };
        match self.free_inflight.pop() {
            Some(i) => {
                self.inflight[i] = Some(f);
                i
            }
            None => {
                self.inflight.push(Some(f));
                self.inflight.len() - 1
            }
        }
    }

    /// Applies in-flight operation `id` at `target`. Returns true when it is
    /// now complete everywhere (the issuer's in-flight count dropped).
    pub fn dvm_apply(&mut self, id: usize, target: CpuId) -> bool {
        let f = self.inflight[id].as_mut().expect("live in-flight op");
        if !f.pending.test_and_clear(target) {
            return false;
        }
        let (scope, vmid) = (f.scope, f.vmid);
        let done = f.pending.is_empty();
        let issuer = f.issuer;
        self.invalidate(target, vmid, scope);
        if done {
            self.inflight[id] = None;
            self.free_inflight.push(id);
            self.cpus[issuer].inflight -= 1;
        }
        done
    }

    /// Applies in-flight operation `id` at every remaining target and
    /// returns it (its issuer, and in `pending` the targets it reached). An
    /// invalidation by ASID visits only the targets whose TLB may hold the
    /// ASID (an index of fills): its cost is one per such target.
    pub fn dvm_apply_all(&mut self, id: usize) -> Inflight {
        let f = self.inflight[id].take().expect("live in-flight op");
        let mut visit = std::mem::take(&mut self.visit);
        match f.scope {
            TlbiScope::Va { asid, .. } | TlbiScope::Range { asid, .. } | TlbiScope::Asid(asid) => {
                let h = self.holders.get(&tag(f.vmid, asid));
                let h = h.map_or(&[][..], |h| &h.list[..]);
                visit.extend(h.iter().copied().filter(|&c| f.pending.test(c)));
            }
            TlbiScope::All | TlbiScope::VmallS12 | TlbiScope::AllE1 => {
                visit.extend(f.pending.iter())
            }
        }
        for t in visit.drain(..) {
            self.invalidate(t, f.vmid, f.scope);
        }
        self.visit = visit;
        self.free_inflight.push(id);
        self.cpus[f.issuer].inflight -= 1;
        f
    }

    /// A local (non-shareable) TLBI on `cpu`, under its VMID
    /// ([`CpuHw::tlbi_vmid`]).
    pub fn tlbi_local(&mut self, cpu: CpuId, scope: TlbiScope) {
        let vmid = self.cpus[cpu].tlbi_vmid(scope);
        self.invalidate(cpu, vmid, scope);
    }

    /// Would a local TLBI by `cpu` be broadcast? Under `HCR_EL2.FB`, a
    /// guest's (VMID not 0) EL1 TLBIs go to the inner-shareable domain
    /// (Arm ARM D13.2.47; KVM sets FB by default, `HCR_GUEST_FLAGS`).
    pub fn forces_broadcast(&self, cpu: CpuId) -> bool {
        let c = &self.cpus[cpu];
        c.hcr_fb && c.vmid != 0
    }

    /// Does `cpu` refuse a TLBI of `scope` (broadcast if `broadcast`) and
    /// fault instead? On x86, an `INVLPGB` with the PCID flag and a
    /// non-zero PCID while `CR4.PCIDE` is clear raises #GP (AMD APM vol.
    /// 3, INVLPGB; the fault quoted in 44126343d58c's commit message).
    /// The model's broadcasts by ASID (`Asid`, `Range`, `Va`) are the
    /// INVLPGBs that name a PCID.
    #[inline]
    pub fn rejects_tlbi(&self, cpu: CpuId, scope: TlbiScope, broadcast: bool) -> bool {
        if self.arch != Arch::X86 || !broadcast || self.cpus[cpu].cr4_pcide {
            return false;
        }
        match scope {
            TlbiScope::Asid(a)
            | TlbiScope::Range { asid: a, .. }
            | TlbiScope::Va { asid: a, .. } => a != 0,
            _ => false,
        }
    }

    /// Are `cpu`'s non-shareable barriers upgraded to inner-shareable?
    /// While it runs a guest: KVM sets `HCR_EL2.BSU` to inner shareable
    /// for every guest (`HCR_GUEST_FLAGS`), so that a guest's `DSB NSH`
    /// waits for what FB made a broadcast.
    pub fn upgrades_barriers(&self, cpu: CpuId) -> bool {
        self.cpus[cpu].vmid != 0
    }

    /// Writes `cpu`'s `VTTBR_EL2.VMID` and `HCR_EL2.FB` (KVM's
    /// `__load_stage2` on vCPU load, `HCR_EL2` from `vcpu->arch.hcr_el2`):
    /// they take effect when the CPU enters the guest.
    pub fn set_vttbr(&mut self, cpu: CpuId, vmid: Vmid, fb: bool) {
        let c = &mut self.cpus[cpu];
        c.vttbr_vmid = vmid;
        c.hcr_fb = fb;
    }

    /// `cpu` writes `HCR_EL2.TGE` ([`CpuHw::hcr_tge`]).
    pub fn set_hcr_tge(&mut self, cpu: CpuId, tge: bool) {
        self.cpus[cpu].hcr_tge = tge;
    }

    /// `cpu` enters the guest: its fills and EL1 TLBIs are tagged with
    /// `VTTBR_EL2.VMID` (and FB applies) until it exits.
    pub fn enter_guest(&mut self, cpu: CpuId) {
        let c = &mut self.cpus[cpu];
        c.vmid = c.vttbr_vmid;
    }

    /// `cpu` exits to the host.
    pub fn exit_guest(&mut self, cpu: CpuId) {
        self.cpus[cpu].vmid = 0;
    }

    /// Writes TTBR0 of `cpu` together with the ASID: `t`'s tables and
    /// ASID (`cpu_do_switch_mm()`, which on v4.15+ writes the ASID to
    /// TTBR1 and then the base to TTBR0, folded into one write here; an
    /// x86 CR3 load), or, with `None`, the reserved table and ASID 0 (a
    /// kernel that keeps the ASID in TTBR0: arm64 before v4.15, 32-bit ARM
    /// with LPAE). Under `flush-on-ttbr-change` the write discards the
    /// regime's cached walks.
    pub fn set_ttbr0(&mut self, cpu: CpuId, t: Option<Ttbr0>) {
        self.cpus[cpu].user = UserRegs {
            base: t.map(|t| (t.mm, t.pgd)),
            asid: t.map(|t| AsidContext {
                mm: t.mm,
                asid: t.asid,
            }),
        };
        self.ttbr_written(cpu);
    }

    /// Points TTBR0 of `cpu` at the reserved table and leaves the ASID
    /// (in TTBR1) as it is: arm64's `cpu_set_reserved_ttbr0()` since v4.15.
    /// Under `flush-on-ttbr-change` the write discards the regime's cached
    /// walks.
    pub fn set_reserved_ttbr0_base(&mut self, cpu: CpuId) {
        self.cpus[cpu].user.base = None;
        self.ttbr_written(cpu);
    }

    /// A TTBR0 write on `cpu` took effect: under `flush-on-ttbr-change`
    /// no walk cached before it in the regime it wrote (the VMID the CPU
    /// runs under) is used after it. Other guests' and the host's cached
    /// walks belong to their own TTBRs, which it did not write.
    fn ttbr_written(&mut self, cpu: CpuId) {
        if self.walk_cache_reading == WalkCacheAfterTtbrWrite::FlushOnTtbrChange {
            let vmid = self.cpus[cpu].vmid;
            self.cpus[cpu].tlb.drop_walk_cache(vmid);
        }
    }

    /// `cpu`'s user registers as they are, for a world switch to save.
    pub fn user_regs(&self, cpu: CpuId) -> UserRegs {
        self.cpus[cpu].user
    }

    /// Makes `r` the user registers `cpu` translates with, as a world
    /// switch restores a regime's own registers: no write of the running
    /// regime's TTBR0, so no walk-cache reading applies.
    pub fn restore_user_regs(&mut self, cpu: CpuId, r: UserRegs) {
        self.cpus[cpu].user = r;
    }
}

/// Does the cached leaf `e` grant nothing that `pte` (the current value)
/// does not? A stale-but-compatible entry (e.g. read-only where the PTE is
/// now writable) costs at most a spurious fault, and is not a violation.
pub fn compatible(e: &LeafEntry, pte: Option<Pte>) -> bool {
    match pte {
        Some(p) => p.pfn == e.pfn && e.perms.subset_of(p.perms),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::builtin_profile;
    use crate::hw::cpu::cpuid;
    use mem::{Perms, PAGE_SHIFT_4K as PAGE_SHIFT};

    /// Maps `pages` base pages from VA 0 in a new address space; returns
    /// its top-level table.
    fn map(hw: &mut Hw, pages: u64) -> TableId {
        let pgd = hw.mem.alloc_table(hw.granule.start_level());
        for vpn in 0..pages {
            map_page(hw, pgd, vpn << hw.granule.page_shift(), 1000 + vpn);
        }
        pgd
    }

    fn contents(hw: &Hw) -> Vec<(Vec<LeafEntry>, Vec<WalkEntry>)> {
        hw.cpus
            .iter()
            .map(|c| {
                (
                    c.tlb.leaf_entries().collect(),
                    c.tlb.walk_entries().copied().collect(),
                )
            })
            .collect()
    }

    /// The entries `hw`'s CPU 0 holds, as (VMID, ASID, vpn).
    fn held(hw: &Hw) -> Vec<(Vmid, Asid, u64)> {
        let mut v: Vec<_> = hw.cpus[cpuid(0)]
            .tlb
            .leaf_entries()
            .map(|e| (e.vmid, e.asid, e.vpn))
            .collect();
        v.sort_unstable();
        v
    }

    /// Adds the 4 KiB page at `va` to the tables under `pgd`.
    fn map_va(hw: &mut Hw, pgd: TableId, va: u64) {
        map_page(hw, pgd, va, 7000);
    }

    /// Maps `va` to frame `pfn` (read-write) under `pgd`, allocating the
    /// missing tables.
    fn map_page(hw: &mut Hw, pgd: TableId, va: u64, pfn: u64) {
        map_page_perms(hw, pgd, va, pfn, Perms::RW);
    }

    /// [`map_page`] with `perms`.
    fn map_page_perms(hw: &mut Hw, pgd: TableId, va: u64, pfn: u64, perms: Perms) {
        let (mut t, g) = (pgd, hw.granule);
        for level in g.start_level()..LEAF_LEVEL {
            let idx = g.level_index(va, level);
            t = match hw.mem.table(t).entries.get(&idx).copied() {
                Some(Desc::Table(next)) => next,
                _ => {
                    let next = hw.mem.alloc_table(level + 1);
                    hw.mem.table_mut(t).entries.insert(idx, Desc::Table(next));
                    next
                }
            };
        }
        let pte = Pte {
            pfn,
            perms,
            version: 1,
        };
        hw.mem
            .table_mut(t)
            .entries
            .insert(g.level_index(va, LEAF_LEVEL), Desc::Page(pte));
    }

    #[test]
    fn invlpgb_naming_a_pcid_faults_only_while_cr4_pcide_is_clear() {
        let p = builtin_profile("epyc-2s").unwrap();
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        let c = cpuid(0);
        let range = |asid| TlbiScope::Range {
            asid,
            va: 0x7f00_0000_0000,
            pages: 1,
            last_level: true,
        };
        assert!(hw.rejects_tlbi(c, TlbiScope::Asid(8), true));
        assert!(hw.rejects_tlbi(c, range(8), true));
        // PCID 0, no PCID operand, or a local flush: no fault.
        assert!(!hw.rejects_tlbi(c, range(0), true));
        assert!(!hw.rejects_tlbi(c, TlbiScope::All, true));
        assert!(!hw.rejects_tlbi(c, TlbiScope::Asid(8), false));
        hw.cpus[c].cr4_pcide = true;
        assert!(!hw.rejects_tlbi(c, TlbiScope::Asid(8), true));
        // arm64 has no such fault.
        let a = builtin_profile("ampere-32").unwrap();
        let arm = Hw::new(&a.hw_params(Granule::K4));
        assert!(!arm.rejects_tlbi(c, TlbiScope::Asid(8), true));
    }

    #[test]
    fn a_speculative_walk_caches_no_prot_none_leaf() {
        let p = builtin_profile("ampere-32").unwrap();
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        let pgd = map(&mut hw, 1);
        map_page_perms(&mut hw, pgd, 1 << PAGE_SHIFT, 1001, Perms::NONE);
        hw.set_ttbr0(
            cpuid(0),
            Some(Ttbr0 {
                mm: MmId::new(1),
                pgd,
                asid: 1,
            }),
        );
        let mut trace = Vec::new();
        hw.speculate(cpuid(0), 1 << PAGE_SHIFT, &mut trace);
        assert!(held(&hw).is_empty(), "no entry for the PROT_NONE page");
        hw.speculate(cpuid(0), 0, &mut trace);
        assert_eq!(held(&hw), [(0, 1, 0)], "the accessible page is cached");
    }

    #[test]
    fn a_64k_walk_reads_three_levels_and_fills_a_64k_entry() {
        let p = builtin_profile("ampere-32").unwrap();
        let mut hw = Hw::new(&p.hw_params(Granule::K64));
        let pgd = hw.mem.alloc_table(1);
        let va = 0x7f00_1234_0000;
        map_page(&mut hw, pgd, va, 77);
        // The tables: level 1 indexed by bits 47:42, 2 by 41:29, 3 by 28:16.
        let l1 = &hw.mem.table(pgd).entries;
        assert_eq!(
            l1.keys().copied().collect::<Vec<_>>(),
            vec![(va >> 42) as u16]
        );
        let Some(&Desc::Table(l2)) = l1.values().next() else {
            panic!("a level-2 table")
        };
        let idx2 = ((va >> 29) & 8191) as u16;
        let Some(&Desc::Table(l3)) = hw.mem.table(l2).entries.get(&idx2) else {
            panic!("a level-3 table at {idx2}")
        };
        assert_eq!(hw.mem.table(l3).level, 3);
        assert!(hw
            .mem
            .table(l3)
            .entries
            .contains_key(&(((va >> 16) & 8191) as u16)));
        hw.set_ttbr0(
            cpuid(0),
            Some(Ttbr0 {
                mm: MmId::new(1),
                pgd,
                asid: 1,
            }),
        );
        let mut trace = Vec::new();
        let (r, first) = hw.access(cpuid(0), va + 0xfff8, false, &mut trace);
        assert!(r.is_ok());
        assert_eq!(first.levels_walked, 3, "48-bit VA, 64 KiB pages: 3 levels");
        // Any byte of the 64 KiB page hits the one entry.
        let (_, again) = hw.access(cpuid(0), va + 0x1000, false, &mut trace);
        assert!(again.tlb_hit);
        assert_eq!(held(&hw), vec![(0, 1, va >> 16)]);
        assert_eq!(hw.read_pte(pgd, va + 0x8000).map(|p| p.pfn), Some(77));
        // The next 64 KiB page is not mapped.
        let (r, _) = hw.access(cpuid(0), va + 0x1_0000, false, &mut trace);
        assert!(r.is_err());
    }

    /// What CPU 0 of a machine with `reading` can do after
    /// `cpu_set_reserved_ttbr0()` (v4.15+: TTBR0's base only; the ASID stays
    /// in TTBR1) once it has walked VA 0 of a mapped mm under ASID 1: (its
    /// walk context; a speculative walk of page 1, which the cached L2
    /// walk covers, used the cached walk and filled a leaf; a speculative
    /// walk of a mapped VA no cached walk covers filled anything; walk
    /// entries left).
    fn after_reserved_ttbr0(reading: WalkCacheAfterTtbrWrite) -> (bool, bool, bool, usize) {
        let mut p = builtin_profile("ampere-32").unwrap();
        p.arm64.as_mut().unwrap().walk_cache_after_ttbr_write = reading;
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        let pgd = map(&mut hw, 4);
        let far = 1u64 << 39; // another L0 entry: no cached walk covers it
        map_va(&mut hw, pgd, far);
        let t = Ttbr0 {
            mm: MmId::new(1),
            pgd,
            asid: 1,
        };
        hw.set_ttbr0(cpuid(0), Some(t));
        let mut trace = Vec::new();
        let (r, info) = hw.access(cpuid(0), 0, false, &mut trace);
        assert!(r.is_ok() && info.levels_walked == 4);
        assert_eq!(hw.cpus[cpuid(0)].tlb.walk_entries().count(), 3);
        hw.set_reserved_ttbr0_base(cpuid(0));
        // User accesses need user tables in TTBR0, whatever the reading.
        let (r, _) = hw.access(cpuid(0), 0, false, &mut Vec::new());
        assert_eq!(r, Err(Fault::Translation));
        let context = hw.walk_context(cpuid(0)).is_some();
        assert_eq!(hw.may_speculate(cpuid(0), 1 << PAGE_SHIFT), context);
        assert!(!hw.may_speculate(cpuid(0), far), "nothing to walk from");
        trace.clear();
        let leaves = hw.cpus[cpuid(0)].tlb.leaf_entries().count();
        hw.speculate(cpuid(0), 1 << PAGE_SHIFT, &mut trace);
        let used = matches!(trace[..], [AccessTrace::UsedWalk(w)] if w.level == 2 && w.asid == 1);
        let filled = hw.cpus[cpuid(0)].tlb.leaf_entries().count() - leaves;
        assert_eq!(used, filled == 1, "a used walk fills the leaf");
        let walks = hw.cpus[cpuid(0)].tlb.walk_entries().count();
        hw.speculate(cpuid(0), far, &mut trace);
        let new_walk = hw.cpus[cpuid(0)].tlb.leaf_entries().count() > leaves + filled
            || hw.cpus[cpuid(0)].tlb.walk_entries().count() > walks;
        (context, used, new_walk, walks)
    }

    #[test]
    fn asid_tagged_cached_walks_stay_usable_after_the_reserved_ttbr0() {
        // The ASID in TTBR1 keeps its cached walks usable (R_NWYRD); the
        // empty root gives no new walk.
        assert_eq!(
            after_reserved_ttbr0(WalkCacheAfterTtbrWrite::AsidTagged),
            (true, true, false, 3)
        );
    }

    #[test]
    fn flush_on_ttbr_change_leaves_no_cached_walk_after_the_reserved_ttbr0() {
        // The write discarded the walk cache: nothing to walk from.
        assert_eq!(
            after_reserved_ttbr0(WalkCacheAfterTtbrWrite::FlushOnTtbrChange),
            (false, false, false, 0)
        );
    }

    #[test]
    fn no_new_root_walks_uses_cached_walks_but_starts_none_from_the_root() {
        assert_eq!(
            after_reserved_ttbr0(WalkCacheAfterTtbrWrite::NoNewRootWalks),
            (true, true, false, 3)
        );
    }

    #[test]
    fn a_ttbr0_write_with_asid_0_leaves_nothing_to_walk_under_any_reading() {
        // Kernels that keep the ASID in TTBR0 (arm64 before v4.15, 32-bit
        // ARM with LPAE) load ASID 0 with the reserved table.
        for reading in [
            WalkCacheAfterTtbrWrite::AsidTagged,
            WalkCacheAfterTtbrWrite::FlushOnTtbrChange,
            WalkCacheAfterTtbrWrite::NoNewRootWalks,
        ] {
            let mut p = builtin_profile("ampere-32").unwrap();
            p.arm64.as_mut().unwrap().walk_cache_after_ttbr_write = reading;
            let mut hw = Hw::new(&p.hw_params(Granule::K4));
            let pgd = map(&mut hw, 4);
            let t = Ttbr0 {
                mm: MmId::new(1),
                pgd,
                asid: 1,
            };
            hw.set_ttbr0(cpuid(0), Some(t));
            let _ = hw.access(cpuid(0), 0, false, &mut Vec::new());
            hw.set_ttbr0(cpuid(0), None);
            assert!(hw.walk_context(cpuid(0)).is_none(), "{reading}");
            let mut trace = Vec::new();
            hw.speculate(cpuid(0), 1 << PAGE_SHIFT, &mut trace);
            assert!(trace.is_empty(), "{reading}");
            // Back on the mm: only flush-on-ttbr-change walks from the root.
            hw.set_ttbr0(cpuid(0), Some(t));
            let (_, info) = hw.access(cpuid(0), 2 << PAGE_SHIFT, false, &mut trace);
            let from_root = reading == WalkCacheAfterTtbrWrite::FlushOnTtbrChange;
            assert_eq!(
                info.levels_walked,
                if from_root { 4 } else { 1 },
                "{reading}"
            );
        }
    }

    #[test]
    fn a_guests_walk_translates_every_table_and_its_page_through_stage_2() {
        let p = builtin_profile("hisi-96-dvmbm").unwrap();
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        let pgd = map(&mut hw, 4);
        let mut trace = Vec::new();
        hw.set_vttbr(cpuid(0), 1, true);
        hw.enter_guest(cpuid(0));
        hw.set_ttbr0(
            cpuid(0),
            Some(Ttbr0 {
                mm: MmId::new(1),
                pgd,
                asid: 1,
            }),
        );
        // Nothing cached: 4 table reads, each table and the page through
        // 4 stage-2 levels: (4 + 1) x (4 + 1) - 1 = 24 reads.
        let (_, first) = hw.access(cpuid(0), 0, false, &mut trace);
        assert_eq!((first.levels_walked, first.s2_levels), (4, 20));
        // The next page: the walk cache gives the last table, whose IPA is
        // cached; only the new page goes through stage 2.
        let (_, next) = hw.access(cpuid(0), 1 << PAGE_SHIFT, false, &mut trace);
        assert_eq!((next.levels_walked, next.s2_levels), (1, 4));
        // The host walks without stage 2.
        hw.exit_guest(cpuid(0));
        let (_, host) = hw.access(cpuid(0), 2 << PAGE_SHIFT, false, &mut trace);
        assert_eq!(host.s2_levels, 0);
        // VMALLS12E1 drops the VM's stage-2 translations too.
        hw.enter_guest(cpuid(0));
        hw.tlbi_local(cpuid(0), TlbiScope::VmallS12);
        let (_, again) = hw.access(cpuid(0), 0, false, &mut trace);
        assert_eq!((again.levels_walked, again.s2_levels), (4, 20));
    }

    #[test]
    fn vmids_keep_guests_apart_and_el2_scopes_reach_across_them() {
        let p = builtin_profile("ampere-32").unwrap();
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        let pgd = map(&mut hw, 4);
        let mut trace = Vec::new();
        let t = |mm| Some(Ttbr0 { mm, pgd, asid: 7 });
        // The host and guests 1 and 2 load ASID 7 on CPU 0 in turn.
        for vmid in 0..3 {
            hw.set_vttbr(cpuid(0), vmid, true);
            hw.enter_guest(cpuid(0));
            hw.set_ttbr0(cpuid(0), t(MmId::new(u32::from(vmid))));
            let _ = hw.access(cpuid(0), 0, false, &mut trace);
            let _ = hw.access(cpuid(0), 1 << PAGE_SHIFT, false, &mut trace);
        }
        assert_eq!(held(&hw).len(), 6);
        // Guest 2 hits only its own entry, filled from its own mm.
        let (r, info) = hw.access(cpuid(0), 0, false, &mut trace);
        assert!(r.is_ok() && info.tlb_hit);
        assert!(matches!(trace.last(), Some(AccessTrace::UsedLeaf(e)) if e.mm == MmId::new(2)));
        // An EL1 TLBI by ASID in guest 2 leaves the host's and guest 1's.
        hw.tlbi_local(cpuid(0), TlbiScope::Asid(7));
        assert_eq!(held(&hw), [(0, 7, 0), (0, 7, 1), (1, 7, 0), (1, 7, 1)]);
        // VMALLE1 from guest 1 (broadcast from CPU 1 running it) takes
        // only guest 1's.
        hw.set_vttbr(cpuid(1), 1, true);
        hw.enter_guest(cpuid(1));
        let id = hw.tlbi_broadcast(cpuid(1), TlbiScope::All, CpuMask::full(hw.ncpus()));
        hw.dvm_apply_all(id);
        assert_eq!(held(&hw), [(0, 7, 0), (0, 7, 1)]);
        // ALLE1 takes every guest's and leaves the host's.
        hw.set_vttbr(cpuid(0), 2, true);
        hw.enter_guest(cpuid(0));
        let _ = hw.access(cpuid(0), 0, false, &mut trace);
        hw.tlbi_local(cpuid(0), TlbiScope::AllE1);
        assert_eq!(held(&hw), [(0, 7, 0), (0, 7, 1)]);
        // HCR_EL2.FB makes a guest's local TLBI a broadcast, not the
        // host's.
        assert!(hw.forces_broadcast(cpuid(0)));
        hw.exit_guest(cpuid(0));
        assert!(!hw.forces_broadcast(cpuid(0)));
        hw.set_vttbr(cpuid(0), 2, false);
        hw.enter_guest(cpuid(0));
        assert!(!hw.forces_broadcast(cpuid(0)));
    }

    #[test]
    fn the_hosts_vmalle1_with_tge_clear_takes_the_guest_of_vttbr_not_the_host() {
        let p = builtin_profile("ampere-32").unwrap();
        let mut hw = Hw::new(&p.hw_params(Granule::K4));
        let pgd = map(&mut hw, 4);
        let mut trace = Vec::new();
        let t = |mm| Some(Ttbr0 { mm, pgd, asid: 7 });
        // Guest 3, then the host, fill an entry on CPU 0.
        hw.set_vttbr(cpuid(0), 3, true);
        hw.enter_guest(cpuid(0));
        hw.set_ttbr0(cpuid(0), t(MmId::new(3)));
        let _ = hw.access(cpuid(0), 0, false, &mut trace);
        hw.exit_guest(cpuid(0));
        hw.set_ttbr0(cpuid(0), t(MmId::new(0)));
        let _ = hw.access(cpuid(0), 0, false, &mut trace);
        assert_eq!(held(&hw), [(0, 7, 0), (3, 7, 0)]);
        // KVM's __kvm_flush_cpu_context(): TGE cleared, VMALLE1.
        hw.set_hcr_tge(cpuid(0), false);
        hw.tlbi_local(cpuid(0), TlbiScope::All);
        assert_eq!(
            held(&hw),
            [(0, 7, 0)],
            "the guest's entry goes, the host's stays"
        );
        // With TGE set, the host's own VMALLE1 takes the host's.
        hw.set_hcr_tge(cpuid(0), true);
        hw.tlbi_local(cpuid(0), TlbiScope::All);
        assert!(held(&hw).is_empty());
    }

    #[test]
    fn a_broadcast_visiting_only_holders_removes_what_visiting_every_cpu_does() {
        let mut p = builtin_profile("ampere-32").unwrap();
        p.topology.cpus = 70;
        let (mut fast, mut naive) = (
            Hw::new(&p.hw_params(Granule::K4)),
            Hw::new(&p.hw_params(Granule::K4)),
        );
        let pgds: Vec<TableId> = (0..4).map(|_| map(&mut fast, 64)).collect();
        for _ in 0..4 {
            map(&mut naive, 64);
        }
        let mut rng = crate::engine::rng::Streams::new(1).stream("holders-test");
        let mut next = |n: u64| rand::Rng::gen_range(&mut rng, 0..n);
        let mut trace = Vec::new();
        let mut most_held = 0;
        for round in 0..2000 {
            // Mostly CPUs 60..70, across a word boundary of the masks.
            let cpu = CpuId::from_index(if next(4) == 0 {
                next(70)
            } else {
                60 + next(10)
            } as usize);
            let mm = next(4) as usize;
            let t = Some(Ttbr0 {
                mm: MmId::from_index(mm),
                pgd: pgds[mm],
                asid: mm as Asid + 1,
            });
            let va = next(64) << PAGE_SHIFT;
            // Host (0) and two guests, the same ASIDs in each.
            let vmid = next(3) as Vmid;
            for hw in [&mut fast, &mut naive] {
                hw.set_vttbr(cpu, vmid, false);
                hw.enter_guest(cpu);
                hw.set_ttbr0(cpu, t);
                let _ = hw.access(cpu, va, false, &mut trace);
            }
            if round % 5 == 4 {
                let held: usize = fast.cpus.iter().map(|c| c.tlb.leaf_entries().count()).sum();
                most_held = most_held.max(held);
                let asid = next(5) as Asid;
                let scope = match next(6) {
                    0 => TlbiScope::Va {
                        asid,
                        va,
                        last_level: false,
                    },
                    1 => TlbiScope::Range {
                        asid,
                        va: 0,
                        pages: 40,
                        last_level: true,
                    },
                    2 => TlbiScope::Asid(asid),
                    3 => TlbiScope::All,
                    4 => TlbiScope::VmallS12,
                    _ => TlbiScope::AllE1,
                };
                let id = fast.tlbi_broadcast(cpu, scope, CpuMask::full(70));
                let f = fast.dvm_apply_all(id);
                assert_eq!((f.issuer, f.pending.count()), (cpu, 70));
                for c in CpuId::all(70) {
                    naive.invalidate(c, vmid, scope);
                }
                assert_eq!(contents(&fast), contents(&naive), "round {round}");
            }
        }
        assert!(most_held > 50, "the TLBs filled up: {most_held} entries");
    }
}
