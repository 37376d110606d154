//! The modelled hardware: topology, per-CPU TLBs and translation registers,
//! physical memory holding page tables, and arm64 broadcast invalidation
//! (DVM operations in flight, DVM Sync at the misc node).
//!
//! This module holds state and semantics only; *when* things happen is the
//! driver's decision (see `crate::driver`).

pub mod cpumask;
pub mod mem;
pub mod tlb;

use crate::config::Profile;
use cpumask::CpuMask;
use mem::{
    level_index, level_shift, Desc, PhysMem, Pte, TableId, HPAGE_PAGES, HUGE_LEVEL, LEVELS,
    PAGE_SHIFT,
};
use tlb::{Asid, LeafEntry, MmId, Tlb, TlbiScope, WalkEntry};

/// Index of a CPU.
pub type CpuId = usize;

/// What TTBR0 points at: a user address space's top-level table, tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttbr0 {
    /// Address space (ground truth, not visible to hardware lookups).
    pub mm: MmId,
    /// Top-level table.
    pub pgd: TableId,
    /// ASID programmed with it.
    pub asid: Asid,
}

/// Hardware state of one CPU.
#[derive(Debug, Clone)]
pub struct CpuHw {
    /// TLB and walk cache.
    pub tlb: Tlb,
    /// User translation base, or `None` for the reserved (empty) table.
    pub ttbr0: Option<Ttbr0>,
    /// Broadcast TLBIs issued by this CPU and not yet applied everywhere.
    pub inflight: u32,
    /// A broadcast TLBI was issued since this CPU's last DSB ISH.
    pub dvm_since_dsb: bool,
    /// Time stolen from this CPU by DVM operations it had to process (ns),
    /// charged to its next step.
    pub stolen_ns: u64,
    /// Socket of the CPU.
    pub socket: u32,
    /// Cluster of the CPU.
    pub cluster: u32,
}

/// A broadcast invalidation on its way to its targets.
#[derive(Debug, Clone)]
pub struct Inflight {
    /// Issuing CPU.
    pub issuer: CpuId,
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

/// How an access was satisfied, for costs and statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessInfo {
    /// The TLB hit.
    pub tlb_hit: bool,
    /// Levels read from memory by the walk (0 on a hit).
    pub levels_walked: u8,
    /// A walk-cache entry shortened the walk.
    pub walk_cache_hit: bool,
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
#[derive(Debug)]
pub struct Hw {
    /// Per-CPU state.
    pub cpus: Vec<CpuHw>,
    /// Page tables and frames.
    pub mem: PhysMem,
    /// Broadcast invalidations in flight, by id (slots reused).
    pub inflight: Vec<Option<Inflight>>,
    free_inflight: Vec<usize>,
}

impl Hw {
    /// Builds the machine of `p`.
    pub fn new(p: &Profile) -> Self {
        let n = p.topology.cpus as usize;
        let per_socket = n.div_ceil(p.topology.sockets as usize);
        let cpus = (0..n)
            .map(|i| CpuHw {
                tlb: Tlb::new(
                    p.tlb.tlb_entries as usize,
                    p.tlb.tlb_ways as usize,
                    p.tlb.walk_cache_entries as usize,
                ),
                ttbr0: None,
                inflight: 0,
                dvm_since_dsb: false,
                stolen_ns: 0,
                socket: (i / per_socket) as u32,
                cluster: (i / p.topology.cpus_per_cluster as usize) as u32,
            })
            .collect();
        Self {
            cpus,
            mem: PhysMem::default(),
            inflight: Vec::new(),
            free_inflight: Vec::new(),
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
        let Some(ttbr) = self.cpus[cpu].ttbr0 else {
            return (Err(Fault::Translation), info);
        };
        let vpn = va >> PAGE_SHIFT;
        let c = &mut self.cpus[cpu];
        if let Some(e) = c.tlb.lookup(ttbr.asid, vpn) {
            info.tlb_hit = true;
            trace.push(AccessTrace::UsedLeaf(e));
            if (write && !e.perms.write()) || !e.perms.read() {
                // A faulting entry is dropped; the retry after the fault walks
                // again (docs/model.md: permission faults).
                c.tlb.remove(ttbr.asid, vpn);
                return (Err(Fault::Permission), info);
            }
            return (Ok(()), info);
        }
        let Some((pte, huge)) = self.walk(cpu, ttbr, va, trace, &mut info) else {
            return (Err(Fault::Translation), info);
        };
        if (write && !pte.perms.write()) || !pte.perms.read() {
            return (Err(Fault::Permission), info);
        }
        self.fill_leaf(cpu, ttbr, vpn, pte, huge);
        (Ok(()), info)
    }

    /// The table walk of `va` through `ttbr`: starts from the deepest
    /// walk-cache entry (recorded in `trace`), else from the PGD, caches
    /// every table descriptor it reads, and returns the leaf if `va` is
    /// mapped: the PTE, or for a 2 MiB leaf its first frame's PTE and
    /// `true`. `info` counts the levels read.
    fn walk(
        &mut self,
        cpu: CpuId,
        ttbr: Ttbr0,
        va: u64,
        trace: &mut Vec<AccessTrace>,
        info: &mut AccessInfo,
    ) -> Option<(Pte, bool)> {
        let (mut level, mut table) = match self.cpus[cpu].tlb.walk_lookup(ttbr.asid, va) {
            Some(w) => {
                info.walk_cache_hit = true;
                trace.push(AccessTrace::UsedWalk(w));
                (w.level + 1, w.next)
            }
            None => (0, ttbr.pgd),
        };
        loop {
            info.levels_walked += 1;
            let idx = level_index(va, level);
            match self.mem.table(table).entries.get(&idx).copied() {
                Some(Desc::Table(next)) if level < LEVELS - 1 => {
                    let inst = self.mem.table(next).instance;
                    self.cpus[cpu].tlb.walk_insert(WalkEntry {
                        asid: ttbr.asid,
                        level,
                        va_prefix: va >> level_shift(level),
                        next,
                        next_instance: inst,
                        mm: ttbr.mm,
                    });
                    level += 1;
                    table = next;
                }
                Some(Desc::Page(pte)) if level == LEVELS - 1 => return Some((pte, false)),
                Some(Desc::Page(pte)) if level == HUGE_LEVEL => return Some((pte, true)),
                _ => return None,
            }
        }
    }

    /// Fills the TLB with the leaf the walk of `vpn` found (`huge`: a 2 MiB
    /// leaf, cached as one entry).
    fn fill_leaf(&mut self, cpu: CpuId, ttbr: Ttbr0, vpn: u64, pte: Pte, huge: bool) {
        let e = LeafEntry {
            asid: ttbr.asid,
            vpn: if huge { vpn & !(HPAGE_PAGES - 1) } else { vpn },
            pfn: pte.pfn,
            perms: pte.perms,
            version: pte.version,
            mm: ttbr.mm,
        };
        if huge {
            self.cpus[cpu].tlb.insert_huge(e);
        } else {
            self.cpus[cpu].tlb.insert(e);
        }
    }

    /// A speculative table walk of `va` by `cpu` through its current TTBR0:
    /// the hardware may do this at any time the tables are installed (it
    /// fills the TLB and walk cache; no permission check, no fault). Used
    /// walk-cache entries go to `trace`, as for an access.
    pub fn speculate(&mut self, cpu: CpuId, va: u64, trace: &mut Vec<AccessTrace>) {
        let Some(ttbr) = self.cpus[cpu].ttbr0 else {
            return;
        };
        let vpn = va >> PAGE_SHIFT;
        if self.cpus[cpu].tlb.lookup(ttbr.asid, vpn).is_some() {
            return;
        }
        if let Some((pte, huge)) = self.walk(cpu, ttbr, va, trace, &mut AccessInfo::default()) {
            self.fill_leaf(cpu, ttbr, vpn, pte, huge);
        }
    }

    /// The PTE currently mapping `va` under `pgd`, if any (a software walk
    /// that touches no TLB). Inside a 2 MiB leaf, its 4 KiB view: the frame
    /// of `va`'s page, the leaf's permissions and version.
    pub fn read_pte(&self, pgd: TableId, va: u64) -> Option<Pte> {
        let mut table = pgd;
        for level in 0..LEVELS {
            match self.mem.table(table).entries.get(&level_index(va, level)) {
                Some(Desc::Table(next)) => table = *next,
                Some(Desc::Page(p)) if level == LEVELS - 1 => return Some(*p),
                Some(Desc::Page(p)) => {
                    return Some(Pte {
                        pfn: p.pfn + ((va >> PAGE_SHIFT) & (HPAGE_PAGES - 1)),
                        ..*p
                    })
                }
                None => return None,
            }
        }
        None
    }

    /// Starts a broadcast TLBI from `issuer` to every CPU in `targets`.
    /// Returns the in-flight id; targets apply it with [`Hw::dvm_apply`].
    pub fn tlbi_broadcast(&mut self, issuer: CpuId, scope: TlbiScope, targets: CpuMask) -> usize {
        self.cpus[issuer].inflight += 1;
        self.cpus[issuer].dvm_since_dsb = true;
        let f = Inflight {
            issuer,
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
        let scope = f.scope;
        let done = f.pending.is_empty();
        let issuer = f.issuer;
        self.cpus[target].tlb.invalidate(scope);
        if done {
            self.inflight[id] = None;
            self.free_inflight.push(id);
            self.cpus[issuer].inflight -= 1;
        }
        done
    }

    /// Applies in-flight operation `id` at every remaining target, calling
    /// `on_target(cpu_state, cpu)` for each. Returns the issuer.
    pub fn dvm_apply_all(
        &mut self,
        id: usize,
        mut on_target: impl FnMut(&mut CpuHw, CpuId),
    ) -> CpuId {
        let f = self.inflight[id].take().expect("live in-flight op");
        for t in f.pending.iter() {
            let c = &mut self.cpus[t];
            c.tlb.invalidate(f.scope);
            on_target(c, t);
        }
        self.free_inflight.push(id);
        self.cpus[f.issuer].inflight -= 1;
        f.issuer
    }

    /// A local (non-shareable) TLBI on `cpu`.
    pub fn tlbi_local(&mut self, cpu: CpuId, scope: TlbiScope) {
        self.cpus[cpu].tlb.invalidate(scope);
    }

    /// Points TTBR0 of `cpu` at `t` (or the reserved table).
    pub fn set_ttbr0(&mut self, cpu: CpuId, t: Option<Ttbr0>) {
        self.cpus[cpu].ttbr0 = t;
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
