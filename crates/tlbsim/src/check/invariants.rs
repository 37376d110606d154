//! Invariants held by observing events (never by reaching into policies):
//!
//! - **no stale use / hold**: once the kernel call that changed a PTE has
//!   returned, no CPU uses a translation older than that change, nor holds
//!   one while it has the address space loaded (a loaded ASID can be used by
//!   speculative walks at any time). A stale entry that grants nothing the
//!   current PTE does not (e.g. read-only where the PTE became writable) is
//!   allowed: it costs a spurious fault, not a wrong access.
//! - **no stale walk**: no walk goes through a cached intermediate entry to a
//!   page-table page that was freed or reused, and no CPU with the ASID
//!   loaded still caches such an entry when the page is freed.
//! - **ASID isolation**: a CPU never uses, or loads an ASID while holding,
//!   entries of another address space under that ASID.
//!
//! Completion (a DSB completes only its own CPU's TLBIs) is a property of the
//! hardware model; the mutant tests show its consequences are caught.

use crate::engine::Ns;
use crate::hw::mem::{Pte, PAGE_SHIFT};
use crate::hw::tlb::MmId;
use crate::hw::{compatible, CpuId, Hw};
use crate::observe::{Event, Observer};
use std::collections::{HashMap, VecDeque};

/// The invariant checker.
#[derive(Debug)]
pub struct Checker {
    history: VecDeque<(Ns, Event)>,
    history_len: usize,
    /// PTE changes made by the kernel call in progress on each CPU.
    pending: Vec<Vec<(MmId, u64)>>,
    /// Current PTE values (shadow, from PteWrite events).
    current: HashMap<(MmId, u64), Option<Pte>>,
    /// The last committed change of (mm, vpn): entries older than its
    /// version must be compatible with its value.
    committed: HashMap<(MmId, u64), (u64, Option<Pte>)>,
    /// One past the largest PTE version seen.
    version_bound: u64,
    failure: Option<String>,
    /// Events observed.
    pub events_seen: u64,
}

impl Checker {
    /// A checker for `ncpus` CPUs keeping `history_len` events for reports.
    pub fn new(ncpus: usize, history_len: usize) -> Self {
        Self {
            history: VecDeque::with_capacity(history_len + 1),
            history_len,
            pending: vec![Vec::new(); ncpus],
            current: HashMap::new(),
            committed: HashMap::new(),
            version_bound: 1,
            failure: None,
            events_seen: 0,
        }
    }

    fn fail(&mut self, now: Ns, invariant: &str, detail: String) {
        if self.failure.is_some() {
            return;
        }
        let mut r = format!("invariant: {invariant}\nat: {now} ns\n{detail}\nlast events:\n");
        for (t, e) in &self.history {
            r.push_str(&format!("  {t:>12} ns  {e:?}\n"));
        }
        self.failure = Some(r);
    }

    /// Is `e` older than the last committed change of its PTE and
    /// incompatible with the committed value? (Entries that agree with an
    /// in-progress change, or with the committed value, are legitimate.)
    fn stale(&self, mm: MmId, vpn: u64, version: u64, e: &crate::hw::tlb::LeafEntry) -> bool {
        match self.committed.get(&(mm, vpn)) {
            Some(&(v, pte)) => version < v && !compatible(e, pte),
            None => false,
        }
    }

    fn check_loaded_cpu(
        &mut self,
        now: Ns,
        hw: &Hw,
        cpu: CpuId,
        mm: MmId,
        vpn: u64,
        why: (&str, CpuId),
    ) {
        let Some(t) = hw.cpus[cpu].ttbr0 else { return };
        if t.mm != mm {
            return;
        }
        let bad = hw.cpus[cpu]
            .tlb
            .leaf_entries_for(vpn)
            .find(|e| {
                e.asid == t.asid && e.vpn == vpn && e.mm == mm && self.stale(mm, vpn, e.version, e)
            })
            .copied();
        if let Some(e) = bad {
            self.fail(
                now,
                "no stale hold",
                format!(
                    "cpu{cpu} has mm {mm} loaded (ASID {}) and still holds a stale translation of va {:#x} after {} on cpu{} returned: {e:?}, current PTE {:?}",
                    t.asid,
                    vpn << PAGE_SHIFT,
                    why.0,
                    why.1,
                    self.current.get(&(mm, vpn)).copied().flatten()
                ),
            );
        }
    }
}

impl Observer for Checker {
    fn event(&mut self, now: Ns, ev: &Event, hw: &Hw) {
        self.events_seen += 1;
        if self.failure.is_some() {
            return;
        }
        if self.history_len > 0 {
            if self.history.len() == self.history_len {
                self.history.pop_front();
            }
            self.history.push_back((now, ev.clone()));
        }
        match *ev {
            Event::PteWrite {
                cpu, mm, va, new, ..
            } => {
                let vpn = va >> PAGE_SHIFT;
                self.current.insert((mm, vpn), new);
                if let Some(p) = new {
                    self.version_bound = self.version_bound.max(p.version + 1);
                }
                self.pending[cpu].push((mm, vpn));
            }
            Event::CallExit { cpu, call, .. } => {
                let changes = std::mem::take(&mut self.pending[cpu]);
                for &(mm, vpn) in &changes {
                    let cur = self.current.get(&(mm, vpn)).copied().flatten();
                    let v = cur.map_or(self.version_bound, |p| p.version);
                    self.committed.insert((mm, vpn), (v, cur));
                }
                for &(mm, vpn) in &changes {
                    for c in 0..hw.ncpus() {
                        self.check_loaded_cpu(now, hw, c, mm, vpn, (call, cpu));
                    }
                }
            }
            Event::LeafUse {
                cpu,
                running,
                entry,
            } => {
                if entry.mm != running {
                    self.fail(
                        now,
                        "ASID isolation",
                        format!(
                            "cpu{cpu} runs mm {running} but used a translation of mm {} under ASID {} for va {:#x}",
                            entry.mm,
                            entry.asid,
                            entry.vpn << PAGE_SHIFT
                        ),
                    );
                } else if self.stale(entry.mm, entry.vpn, entry.version, &entry) {
                    self.fail(
                        now,
                        "no stale use",
                        format!(
                            "cpu{cpu} used a stale translation of mm {} va {:#x}: {entry:?}, current PTE {:?}",
                            entry.mm,
                            entry.vpn << PAGE_SHIFT,
                            self.current.get(&(entry.mm, entry.vpn)).copied().flatten()
                        ),
                    );
                }
            }
            Event::WalkUse {
                cpu,
                running,
                entry,
            } => {
                let t = hw.mem.table(entry.next);
                if entry.mm != running {
                    self.fail(
                        now,
                        "ASID isolation",
                        format!("cpu{cpu} runs mm {running} but walked through a cached table entry of mm {}: {entry:?}", entry.mm),
                    );
                } else if !t.live || t.instance != entry.next_instance {
                    self.fail(
                        now,
                        "no stale walk",
                        format!(
                            "cpu{cpu} walked mm {} through a cached entry to table page {} that was freed{}: {entry:?}",
                            entry.mm,
                            entry.next,
                            if t.live { " and reused" } else { "" }
                        ),
                    );
                }
            }
            Event::AsidLoad { cpu, mm, asid } => {
                let tlb = &hw.cpus[cpu].tlb;
                let other = tlb
                    .leaf_entries()
                    .find(|e| e.asid == asid && e.mm != mm)
                    .copied();
                let stale = tlb
                    .leaf_entries()
                    .find(|e| e.asid == asid && e.mm == mm && self.stale(mm, e.vpn, e.version, e))
                    .copied();
                let bad_walk = tlb
                    .walk_entries()
                    .find(|e| {
                        e.asid == asid && {
                            let t = hw.mem.table(e.next);
                            e.mm != mm || !t.live || t.instance != e.next_instance
                        }
                    })
                    .copied();
                if let Some(e) = other {
                    self.fail(
                        now,
                        "ASID isolation",
                        format!("cpu{cpu} loads ASID {asid} for mm {mm} while holding a translation of mm {} under it: {e:?}", e.mm),
                    );
                } else if let Some(e) = stale {
                    self.fail(
                        now,
                        "no stale hold",
                        format!("cpu{cpu} loads ASID {asid} for mm {mm} while holding a stale translation: {e:?}"),
                    );
                } else if let Some(e) = bad_walk {
                    self.fail(
                        now,
                        "no stale walk",
                        format!("cpu{cpu} loads ASID {asid} for mm {mm} while its walk cache holds {e:?} (other mm or freed table)"),
                    );
                }
            }
            Event::TableFree {
                cpu,
                mm,
                table,
                instance,
            } => {
                for c in 0..hw.ncpus() {
                    let Some(t) = hw.cpus[c].ttbr0 else { continue };
                    let held = hw.cpus[c]
                        .tlb
                        .walk_entries()
                        .find(|e| {
                            e.asid == t.asid && e.next == table && e.next_instance == instance
                        })
                        .copied();
                    if let Some(e) = held {
                        self.fail(
                            now,
                            "no stale walk",
                            format!(
                                "cpu{cpu} freed table page {table} of mm {mm} while cpu{c} (ASID {} loaded) still caches a walk entry to it: {e:?}",
                                t.asid
                            ),
                        );
                        break;
                    }
                }
            }
            Event::CallEnter { .. }
            | Event::Tlbi { .. }
            | Event::DsbDone { .. }
            | Event::MmFree { .. } => {}
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn events_seen(&self) -> u64 {
        self.events_seen
    }
}
