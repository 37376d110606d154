//! The effects of the steps a task posts, shared by the drivers: what an
//! access, a TLBI or a TTBR0 write does to the machine, the counters it
//! bumps and the events the observer sees. Drivers add time (the timing
//! driver) or choose the order (the explorer); the effects are the same.

use crate::hw::tlb::TlbiScope;
use crate::hw::{AccessInfo, AccessTrace, CpuId, Fault, Ttbr0};
use crate::kernel::World;
use crate::observe::Event;

/// A user access by `cpu`: translates (filling TLB and walk cache), counts
/// hits, misses and walks, and reports every cached entry it used.
pub fn access(
    w: &World,
    cpu: CpuId,
    va: u64,
    write: bool,
    trace: &mut Vec<AccessTrace>,
) -> (Result<(), Fault>, AccessInfo) {
    trace.clear();
    let (r, info) = w.hw.borrow_mut().access(cpu, va, write, trace);
    {
        let mut st = w.stats.borrow_mut();
        let c = &mut st.cpu[cpu];
        if info.tlb_hit {
            c.tlb_hits += 1;
        } else {
            c.tlb_misses += 1;
            c.page_walks += 1;
            c.walk_levels += u64::from(info.levels_walked);
            c.walk_cache_hits += u64::from(info.walk_cache_hit);
        }
    }
    let running = w.hw.borrow().cpus[cpu].ttbr0.map(|t| t.mm);
    if let Some(running) = running {
        for tr in trace.drain(..) {
            w.emit(match tr {
                AccessTrace::UsedLeaf(entry) => Event::LeafUse {
                    cpu,
                    running,
                    entry,
                },
                AccessTrace::UsedWalk(entry) => Event::WalkUse {
                    cpu,
                    running,
                    entry,
                },
            });
        }
    }
    (r, info)
}

/// A speculative table walk of `va` by `cpu` through its current TTBR0
/// (see [`crate::hw::Hw::speculate`]); walk-cache entries it used are
/// reported like a demand walk's.
pub fn speculate(w: &World, cpu: CpuId, va: u64, trace: &mut Vec<AccessTrace>) {
    let Some(t) = w.hw.borrow().cpus[cpu].ttbr0 else {
        return;
    };
    trace.clear();
    w.hw.borrow_mut().speculate(cpu, va, trace);
    for tr in trace.drain(..) {
        if let AccessTrace::UsedWalk(entry) = tr {
            w.emit(Event::WalkUse {
                cpu,
                running: t.mm,
                entry,
            });
        }
    }
}

/// A TLBI by `cpu`. A local one takes effect at once; a broadcast one is
/// put in flight to every CPU and its id returned (the driver delivers it).
pub fn tlbi(w: &World, cpu: CpuId, scope: TlbiScope, broadcast: bool) -> Option<usize> {
    let id = if broadcast {
        w.stats.borrow_mut().cpu[cpu].tlbi_broadcast += 1;
        let targets = crate::hw::cpumask::CpuMask::full(w.ncpus());
        Some(w.hw.borrow_mut().tlbi_broadcast(cpu, scope, targets))
    } else {
        w.stats.borrow_mut().cpu[cpu].tlbi_local += 1;
        w.hw.borrow_mut().tlbi_local(cpu, scope);
        None
    };
    w.emit(Event::Tlbi {
        cpu,
        scope,
        broadcast,
    });
    id
}

/// A TTBR0 write (`None`: the reserved, empty tables).
pub fn set_ttbr0(w: &World, cpu: CpuId, t: Option<Ttbr0>) {
    w.hw.borrow_mut().set_ttbr0(cpu, t);
    if let Some(t) = t {
        w.emit(Event::AsidLoad {
            cpu,
            mm: t.mm,
            asid: t.asid,
        });
    }
}

/// An x86 CR3 write on `cpu`: flushes the entries of PCID `flush` (if any),
/// then installs `cr3`; one instruction, so no access sees the state
/// between.
pub fn load_cr3(w: &World, cpu: CpuId, cr3: Option<Ttbr0>, flush: Option<crate::hw::tlb::Asid>) {
    if let Some(pcid) = flush {
        w.stats.borrow_mut().cpu[cpu].tlbi_local += 1;
        w.hw.borrow_mut().tlbi_local(cpu, TlbiScope::Asid(pcid));
        w.emit(Event::Tlbi {
            cpu,
            scope: TlbiScope::Asid(pcid),
            broadcast: false,
        });
    }
    set_ttbr0(w, cpu, cr3);
}

/// A function-call IPI reaches `target`: counted like /proc/interrupts
/// ("Single function call interrupts" when the call had one target).
pub fn ipi_received(w: &World, target: CpuId, single: bool) {
    let mut st = w.stats.borrow_mut();
    if single {
        st.cpu[target].ipi_call_single += 1;
    } else {
        st.cpu[target].ipi_call += 1;
    }
}
