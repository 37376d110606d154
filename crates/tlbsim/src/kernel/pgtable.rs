//! Page-table manipulation by the kernel (software walks; no TLB involved).
//! Every PTE write gets a fresh version and is reported to observers.

use super::World;
use crate::hw::mem::{
    level_index, level_shift, Desc, Perms, Pfn, Pte, TableId, HPAGE_PAGES, HPAGE_SIZE, HUGE_LEVEL,
    LEVELS, PAGE_SIZE,
};
use crate::hw::tlb::MmId;
use crate::hw::CpuId;
use crate::observe::Event;

/// The PTE of `mm` at `va`.
pub fn get_pte(w: &World, mm: MmId, va: u64) -> Option<Pte> {
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    w.hw.borrow().read_pte(pgd, va)
}

/// Writes (or clears, with `None`) the PTE of `mm` at `va`, allocating
/// intermediate tables as needed. Returns the old value and the number of
/// table pages allocated.
pub fn set_pte(
    w: &World,
    cpu: CpuId,
    mm: MmId,
    va: u64,
    new: Option<(u64, crate::hw::mem::Perms)>,
) -> (Option<Pte>, u32) {
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    let va = va & !(PAGE_SIZE - 1);
    let mut allocated = 0;
    let newpte = new.map(|(pfn, perms)| Pte {
        pfn,
        perms,
        version: w.next_pte_version(),
    });
    let old = {
        let mut hw = w.hw.borrow_mut();
        let mut table = pgd;
        let mut found = true;
        for level in 0..LEVELS - 1 {
            let idx = level_index(va, level);
            match hw.mem.table(table).entries.get(&idx).copied() {
                Some(Desc::Table(next)) => table = next,
                Some(Desc::Page(_)) => {
                    // Callers split huge pages before touching their PTEs.
                    panic!("set_pte at {va:#x} inside a huge page of mm {mm}")
                }
                None => {
                    if newpte.is_none() {
                        found = false;
                        break;
                    }
                    let next = hw.mem.alloc_table(level + 1);
                    allocated += 1;
                    hw.mem
                        .table_mut(table)
                        .entries
                        .insert(idx, Desc::Table(next));
                    table = next;
                }
            }
        }
        if !found {
            return (None, 0);
        }
        let idx = level_index(va, LEVELS - 1);
        let t = hw.mem.table_mut(table);
        let old = match newpte {
            Some(p) => t.entries.insert(idx, Desc::Page(p)),
            None => t.entries.remove(&idx),
        };
        match old {
            Some(Desc::Page(p)) => Some(p),
            _ => None,
        }
    };
    if old.is_some() || newpte.is_some() {
        w.emit(Event::PteWrite {
            cpu,
            mm,
            va,
            old,
            new: newpte,
        });
    }
    (old, allocated)
}

/// Present 4 KiB PTEs of `mm` in `[start, end)`, in address order (huge
/// pages are not listed: see [`huge_leaves`]).
pub fn present_ptes(w: &World, mm: MmId, start: u64, end: u64) -> Vec<(u64, Pte)> {
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    let hw = w.hw.borrow();
    let mut out = Vec::new();
    collect(&hw.mem, pgd, 0, 0, start, end, &mut out);
    out
}

fn collect(
    mem: &crate::hw::mem::PhysMem,
    table: TableId,
    level: u8,
    base: u64,
    start: u64,
    end: u64,
    out: &mut Vec<(u64, Pte)>,
) {
    let sh = level_shift(level);
    for (&idx, d) in &mem.table(table).entries {
        let lo = base | (u64::from(idx) << sh);
        let hi = lo + (1u64 << sh);
        if hi <= start || lo >= end {
            continue;
        }
        match *d {
            Desc::Table(next) => collect(mem, next, level + 1, lo, start, end, out),
            Desc::Page(p) if level == LEVELS - 1 => out.push((lo, p)),
            Desc::Page(_) => {} // a huge page: see huge_leaves()
        }
    }
}

/// Is the PMD entry of `mm` for `va` empty (no PTE table, no huge page)?
pub fn pmd_none(w: &World, mm: MmId, va: u64) -> bool {
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    let hw = w.hw.borrow();
    let mut table = pgd;
    for level in 0..HUGE_LEVEL {
        match hw.mem.table(table).entries.get(&level_index(va, level)) {
            Some(Desc::Table(next)) => table = *next,
            _ => return true,
        }
    }
    !hw.mem
        .table(table)
        .entries
        .contains_key(&level_index(va, HUGE_LEVEL))
}

/// The 2 MiB leaves of `mm` overlapping `[start, end)`: the address of
/// each huge page and its leaf (first frame, permissions, version).
pub fn huge_leaves(w: &World, mm: MmId, start: u64, end: u64) -> Vec<(u64, Pte)> {
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    let hw = w.hw.borrow();
    let mut out = Vec::new();
    collect_huge(&hw.mem, pgd, 0, 0, start, end, &mut out);
    out
}

fn collect_huge(
    mem: &crate::hw::mem::PhysMem,
    table: TableId,
    level: u8,
    base: u64,
    start: u64,
    end: u64,
    out: &mut Vec<(u64, Pte)>,
) {
    let sh = level_shift(level);
    for (&idx, d) in &mem.table(table).entries {
        let lo = base | (u64::from(idx) << sh);
        if lo + (1u64 << sh) <= start || lo >= end {
            continue;
        }
        match *d {
            Desc::Table(next) if level < HUGE_LEVEL => {
                collect_huge(mem, next, level + 1, lo, start, end, out)
            }
            Desc::Page(p) if level == HUGE_LEVEL => out.push((lo, p)),
            _ => {}
        }
    }
}

/// Writes (or clears, with `None`) the 2 MiB leaf of `mm` at `va` (2 MiB
/// aligned, no PTE table there), mapping the 512 frames from the given
/// one; allocates upper tables as needed. Observers see one `PteWrite` per
/// 4 KiB page, with that page's view of the leaf. Returns the old leaf and
/// the number of table pages allocated.
pub fn set_huge(
    w: &World,
    cpu: CpuId,
    mm: MmId,
    va: u64,
    new: Option<(Pfn, Perms)>,
) -> (Option<Pte>, u32) {
    assert_eq!(va % HPAGE_SIZE, 0, "huge page at {va:#x} not aligned");
    let pgd = w.k.borrow().mms[mm as usize].pgd;
    let newpte = new.map(|(pfn, perms)| Pte {
        pfn,
        perms,
        version: w.next_pte_version(),
    });
    let mut allocated = 0;
    let old = {
        let mut hw = w.hw.borrow_mut();
        let mut table = pgd;
        let mut found = true;
        for level in 0..HUGE_LEVEL {
            let idx = level_index(va, level);
            match hw.mem.table(table).entries.get(&idx).copied() {
                Some(Desc::Table(next)) => table = next,
                _ => {
                    if newpte.is_none() {
                        found = false;
                        break;
                    }
                    let next = hw.mem.alloc_table(level + 1);
                    allocated += 1;
                    hw.mem
                        .table_mut(table)
                        .entries
                        .insert(idx, Desc::Table(next));
                    table = next;
                }
            }
        }
        if !found {
            return (None, 0);
        }
        let idx = level_index(va, HUGE_LEVEL);
        let t = hw.mem.table_mut(table);
        let old = match newpte {
            Some(p) => t.entries.insert(idx, Desc::Page(p)),
            None => t.entries.remove(&idx),
        };
        match old {
            Some(Desc::Page(p)) => Some(p),
            Some(Desc::Table(_)) => panic!("set_huge at {va:#x} over a PTE table"),
            None => None,
        }
    };
    let view = |p: Option<Pte>, i: u64| {
        p.map(|p| Pte {
            pfn: p.pfn + i,
            ..p
        })
    };
    if old.is_some() || newpte.is_some() {
        for i in 0..HPAGE_PAGES {
            w.emit(Event::PteWrite {
                cpu,
                mm,
                va: va + i * PAGE_SIZE,
                old: view(old, i),
                new: view(newpte, i),
            });
        }
    }
    (old, allocated)
}

/// `free_pgtables()`: detaches the table pages that overlap `[floor,
/// ceiling)`, hold no entry, and translate no address any VMA of `mm`
/// covers (Linux's floor/ceiling are the neighbouring VMAs).
/// Returns them (to be freed after the TLB flush) with the lowest address
/// each translated.
pub fn detach_empty_tables(w: &World, mm: MmId, floor: u64, ceiling: u64) -> Vec<(TableId, u64)> {
    let (pgd, vmas): (TableId, Vec<(u64, u64)>) = {
        let k = w.k.borrow();
        let m = &k.mms[mm as usize];
        (m.pgd, m.vmas.values().map(|v| (v.start, v.end)).collect())
    };
    let covered = |lo: u64, hi: u64| vmas.iter().any(|&(s, e)| s < hi && lo < e);
    let mut hw = w.hw.borrow_mut();
    let mut out = Vec::new();
    detach(&mut hw.mem, pgd, 0, 0, floor, ceiling, &covered, &mut out);
    out
}

#[allow(clippy::too_many_arguments)]
fn detach(
    mem: &mut crate::hw::mem::PhysMem,
    table: TableId,
    level: u8,
    base: u64,
    floor: u64,
    ceiling: u64,
    covered: &dyn Fn(u64, u64) -> bool,
    out: &mut Vec<(TableId, u64)>,
) {
    let sh = level_shift(level);
    let children: Vec<(u16, TableId)> = mem
        .table(table)
        .entries
        .iter()
        .filter_map(|(&i, d)| match d {
            Desc::Table(t) => Some((i, *t)),
            Desc::Page(_) => None,
        })
        .collect();
    for (idx, child) in children {
        let lo = base | (u64::from(idx) << sh);
        let hi = lo + (1u64 << sh);
        if hi <= floor || lo >= ceiling {
            continue;
        }
        detach(mem, child, level + 1, lo, floor, ceiling, covered, out);
        if !covered(lo, hi) && mem.table(child).entries.is_empty() {
            mem.table_mut(table).entries.remove(&idx);
            out.push((child, lo));
        }
    }
}
