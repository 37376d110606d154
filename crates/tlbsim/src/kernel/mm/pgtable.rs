//! Page-table manipulation by the kernel (software walks; no TLB involved).
//! Every PTE write gets a fresh version and is reported to observers.

use super::swap::SwapSlot;
use crate::hw::mem::{Desc, Granule, Perms, Pfn, Pte, SwpEntry, TableId, HUGE_LEVEL, LEAF_LEVEL};
use crate::hw::tlb::MmId;
use crate::hw::CpuId;
use crate::kernel::World;
use crate::observe::Event;

/// The PTE of `mm` at `va`.
pub fn get_pte(w: &World, mm: MmId, va: u64) -> Option<Pte> {
    let pgd = w.k.borrow().mms[mm].pgd;
    w.hw.borrow().read_pte(pgd, va)
}

/// The table at `level` that maps `va` under `pgd`, walking down from the
/// PGD (at the granule's start level); a missing table is allocated (counted in `allocated`) if `alloc`,
/// else the walk returns `None`. Panics on a leaf above `level`: callers
/// split huge pages before touching the PTEs under them.
fn table_at(
    mem: &mut crate::hw::mem::PhysMem,
    pgd: TableId,
    va: u64,
    level: u8,
    alloc: bool,
    allocated: &mut u32,
) -> Option<TableId> {
    let (mut table, g) = (pgd, mem.granule());
    for l in g.start_level()..level {
        let idx = g.level_index(va, l);
        match mem.table(table).entries.get(&idx).copied() {
            Some(Desc::Table(next)) => table = next,
            Some(Desc::Page(_) | Desc::NonPresent(_)) => {
                panic!("page-table update at {va:#x} under a huge page")
            }
            None if alloc => {
                let next = mem.alloc_table(l + 1);
                *allocated += 1;
                mem.table_mut(table).entries.insert(idx, Desc::Table(next));
                table = next;
            }
            None => return None,
        }
    }
    Some(table)
}

/// Writes (or clears) the leaf of `mm` at `va` in its table at `level`,
/// allocating tables above it for a write. Returns the old leaf, the new
/// one and the number of table pages allocated.
fn set_leaf(
    w: &World,
    mm: MmId,
    va: u64,
    level: u8,
    new: Option<(Pfn, Perms)>,
) -> (Option<Pte>, Option<Pte>, u32) {
    let pgd = w.k.borrow().mms[mm].pgd;
    let newpte = new.map(|(pfn, perms)| Pte {
        pfn,
        perms,
        version: w.next_pte_version(),
    });
    let mut allocated = 0;
    // Tables only (`table_at`, the entry).
    let mut mem = w.hw.page_tables_mut();
    let Some(table) = table_at(&mut mem, pgd, va, level, newpte.is_some(), &mut allocated) else {
        return (None, None, 0);
    };
    let idx = w.granule.level_index(va, level);
    let t = mem.table_mut(table);
    let old = match newpte {
        Some(p) => t.entries.insert(idx, Desc::Page(p)),
        None => t.entries.remove(&idx),
    };
    let old = match old {
        Some(Desc::Page(p)) => Some(p),
        Some(Desc::Table(_)) => panic!("leaf write at {va:#x} over a table"),
        Some(Desc::NonPresent(e)) => panic!("present-PTE write at {va:#x} over {e:?}"),
        None => None,
    };
    (old, newpte, allocated)
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
    let va = w.granule.page_down(va);
    let (old, new, allocated) = set_leaf(w, mm, va, LEAF_LEVEL, new);
    if old.is_some() || new.is_some() {
        w.emit(Event::PteWrite {
            cpu,
            mm,
            va,
            old,
            new,
        });
    }
    (old, allocated)
}

/// The swap or migration entry in the PTE of `mm` at `va`, if it holds
/// one (`is_swap_pte()`, `pte_to_swp_entry()`).
pub fn get_swp_entry(w: &World, mm: MmId, va: u64) -> Option<SwpEntry> {
    let pgd = w.k.borrow().mms[mm].pgd;
    let hw = w.hw.borrow();
    let (mut table, g) = (pgd, hw.granule);
    for level in g.start_level()..=LEAF_LEVEL {
        match hw.mem.table(table).entries.get(&g.level_index(va, level)) {
            Some(Desc::Table(next)) => table = *next,
            Some(Desc::NonPresent(e)) if level == LEAF_LEVEL => return Some(*e),
            _ => return None,
        }
    }
    None
}

/// The swap slot in the PTE of `mm` at `va`, if it holds a swap entry.
pub fn get_swap_pte(w: &World, mm: MmId, va: u64) -> Option<SwapSlot> {
    match get_swp_entry(w, mm, va)? {
        SwpEntry::Swap(s) => Some(s),
        SwpEntry::Migration(_) => None,
    }
}

/// Is the PTE of `mm` at `va` empty, neither present nor a swap or
/// migration entry (`pte_none()`)?
pub fn pte_none(w: &World, mm: MmId, va: u64) -> bool {
    get_pte(w, mm, va).is_none() && get_swp_entry(w, mm, va).is_none()
}

/// Writes swap or migration entry `e` into the empty PTE of `mm` at `va`,
/// or clears the entry there (`None`), allocating tables above it for a
/// write. No observer is told: such an entry translates nothing. Returns
/// the entry it replaced and the number of table pages allocated.
pub fn set_swp_entry(w: &World, mm: MmId, va: u64, e: Option<SwpEntry>) -> (Option<SwpEntry>, u32) {
    let pgd = w.k.borrow().mms[mm].pgd;
    let mut allocated = 0;
    let mut hw = w.hw.borrow_mut();
    let alloc = e.is_some();
    let Some(table) = table_at(&mut hw.mem, pgd, va, LEAF_LEVEL, alloc, &mut allocated) else {
        return (None, 0);
    };
    let idx = hw.granule.level_index(va, LEAF_LEVEL);
    let t = hw.mem.table_mut(table);
    let old = match e {
        Some(e) => t.entries.insert(idx, Desc::NonPresent(e)),
        None => t.entries.remove(&idx),
    };
    match old {
        Some(Desc::NonPresent(o)) => (Some(o), allocated),
        None => (None, allocated),
        Some(d) => panic!("swap-entry write at {va:#x} over {d:?}"),
    }
}

/// Writes swap entry `slot` into the empty PTE of `mm` at `va`, or clears
/// the entry there (see [`set_swp_entry`]).
pub fn set_swap_pte(
    w: &World,
    mm: MmId,
    va: u64,
    slot: Option<SwapSlot>,
) -> (Option<SwpEntry>, u32) {
    set_swp_entry(w, mm, va, slot.map(SwpEntry::Swap))
}

/// The swap and migration entries of `mm` in `[start, end)`, in address
/// order.
pub fn swp_entries(w: &World, mm: MmId, start: u64, end: u64) -> Vec<(u64, SwpEntry)> {
    let mut out = Vec::new();
    visit_level(w, mm, start, end, LEAF_LEVEL, |_, lo, d| {
        if let Desc::NonPresent(e) = *d {
            out.push((lo, e));
        }
    });
    out
}

/// Present base-page PTEs of `mm` in `[start, end)`, in address order (huge
/// pages are not listed: see [`huge_leaves`]).
pub fn present_ptes(w: &World, mm: MmId, start: u64, end: u64) -> Vec<(u64, Pte)> {
    leaves(w, mm, start, end, LEAF_LEVEL)
}

/// The PMD-sized leaves of `mm` overlapping `[start, end)`: the address of
/// each huge page and its leaf (first frame, permissions, version).
pub fn huge_leaves(w: &World, mm: MmId, start: u64, end: u64) -> Vec<(u64, Pte)> {
    leaves(w, mm, start, end, HUGE_LEVEL)
}

/// The leaves at `level` of `mm` overlapping `[start, end)`, in address
/// order, with the address each maps from.
fn leaves(w: &World, mm: MmId, start: u64, end: u64, level: u8) -> Vec<(u64, Pte)> {
    let mut out = Vec::new();
    visit_level(w, mm, start, end, level, |_, lo, d| {
        if let Desc::Page(p) = *d {
            out.push((lo, p));
        }
    });
    out
}

/// The PTE tables of `mm` that map part of `[start, end)`, in address
/// order, by the first address each maps: what `change_pmd_range()` and
/// `zap_pmd_range()` visit (every PMD that points at a table, even one
/// whose PTEs in the range are all empty: the visit takes the table's
/// lock, which orders it after whoever emptied them).
pub fn pte_tables(w: &World, mm: MmId, start: u64, end: u64) -> Vec<u64> {
    let mut out = Vec::new();
    visit_level(w, mm, start, end, HUGE_LEVEL, |_, lo, d| {
        if let Desc::Table(_) = *d {
            out.push(lo);
        }
    });
    out
}

/// Calls `f(mem, va, desc)` for every descriptor at `level` of `mm` whose
/// span overlaps `[start, end)`, in address order.
fn visit_level(
    w: &World,
    mm: MmId,
    start: u64,
    end: u64,
    level: u8,
    mut f: impl FnMut(&crate::hw::mem::PhysMem, u64, &Desc),
) {
    let pgd = w.k.borrow().mms[mm].pgd;
    let hw = w.hw.borrow();
    if start >= end {
        return;
    }
    // A range inside one table at `level` (an mprotect or fault of a few
    // pages): walk down to that table, then visit it alone.
    let g = hw.granule;
    let parent_shift = g.level_shift(level) + g.bits_per_level();
    if level > g.start_level() && start >> parent_shift == (end - 1) >> parent_shift {
        let mut table = pgd;
        for l in g.start_level()..level {
            match hw.mem.table(table).entries.get(&g.level_index(start, l)) {
                Some(Desc::Table(next)) => table = *next,
                _ => return,
            }
        }
        let base = (start >> parent_shift) << parent_shift;
        visit(&hw.mem, table, level, base, (start, end), level, &mut f);
        return;
    }
    visit(
        &hw.mem,
        pgd,
        g.start_level(),
        0,
        (start, end),
        level,
        &mut f,
    );
}

fn visit(
    mem: &crate::hw::mem::PhysMem,
    table: TableId,
    level: u8,
    base: u64,
    (start, end): (u64, u64),
    leaf_level: u8,
    f: &mut impl FnMut(&crate::hw::mem::PhysMem, u64, &Desc),
) {
    let sh = mem.granule().level_shift(level);
    for (&idx, d) in &mem.table(table).entries {
        let lo = base | (u64::from(idx) << sh);
        if lo + (1u64 << sh) <= start || lo >= end {
            continue;
        }
        match *d {
            Desc::Table(next) if level < leaf_level => {
                visit(mem, next, level + 1, lo, (start, end), leaf_level, f)
            }
            _ if level == leaf_level => f(mem, lo, d),
            _ => {}
        }
    }
}

/// Is the PMD entry of `mm` for `va` empty (no PTE table, no huge page)?
pub fn pmd_none(w: &World, mm: MmId, va: u64) -> bool {
    let pgd = w.k.borrow().mms[mm].pgd;
    let hw = w.hw.borrow();
    let (mut table, g) = (pgd, hw.granule);
    for level in g.start_level()..HUGE_LEVEL {
        match hw.mem.table(table).entries.get(&g.level_index(va, level)) {
            Some(Desc::Table(next)) => table = *next,
            _ => return true,
        }
    }
    !hw.mem
        .table(table)
        .entries
        .contains_key(&g.level_index(va, HUGE_LEVEL))
}

/// `pte_accessible(mm, pte)`: may a TLB hold a translation of the
/// present PTE `pte` of `mm`? One that grants no access (`PROT_NONE`,
/// which neither x86 nor arm64 makes valid to the hardware) only while a
/// flush of `mm` is pending (`mm_tlb_flush_pending()`: the change that
/// made it so may not have flushed yet); any other always (arm64's
/// `pte_valid()` since 07509e10dcc7; before it, only a young PTE, and the
/// model has no access flag). x86 3.8-3.12 (`[kernel]
/// pte_accessible_ignores_pending`): a `PROT_NONE` PTE never (fixed by
/// 20841405940e).
pub fn pte_accessible(w: &World, mm: MmId, pte: Pte) -> bool {
    pte.perms != Perms::NONE
        || (!w.kcfg.pte_accessible_ignores_pending && w.k.borrow().mms[mm].tlb_flush_pending > 0)
}

/// The PTE table the PMD of `mm` for `va` points to, with its instance
/// (`pmd_pgtable()` of a PMD read without a lock), if it is one.
pub fn pmd_pgtable(w: &World, mm: MmId, va: u64) -> Option<(TableId, u64)> {
    let pgd = w.k.borrow().mms[mm].pgd;
    let hw = w.hw.borrow();
    let g = hw.granule;
    let mut table = pgd;
    for level in g.start_level()..=HUGE_LEVEL {
        match hw.mem.table(table).entries.get(&g.level_index(va, level)) {
            Some(Desc::Table(next)) => table = *next,
            _ => return None,
        }
    }
    Some((table, hw.mem.table(table).instance))
}

/// `move_normal_pmd()`'s page-table work (`pmd_clear(old_pmd)`,
/// `pmd_populate(mm, new_pmd, pmd_pgtable(pmd))`): the PTE table that maps
/// `old` in `mm` is detached there and installed to map `new` (both
/// `PMD_SIZE` aligned), allocating the tables above `new` as needed. Its
/// present PTEs now translate `new`'s addresses (`renew_moved()`).
/// Returns the table and the number of table pages allocated, or `None`
/// (nothing done) if `old`'s PMD does not point to a PTE table or `new`'s
/// is not empty.
pub fn move_pmd_pgtable(
    w: &World,
    cpu: CpuId,
    mm: MmId,
    old: u64,
    new: u64,
) -> Option<(TableId, u32)> {
    if pmd_pgtable(w, mm, old).is_none() || !pmd_none(w, mm, new) {
        return None;
    }
    let t = pmd_clear_pgtable(w, mm, old)?;
    let pgd = w.k.borrow().mms[mm].pgd;
    let mut allocated = 0;
    {
        let mut mem = w.hw.page_tables_mut();
        let pmd = table_at(&mut mem, pgd, new, HUGE_LEVEL, true, &mut allocated)
            .expect("allocating walk");
        let idx = mem.granule().level_index(new, HUGE_LEVEL);
        mem.table_mut(pmd).entries.insert(idx, Desc::Table(t));
    }
    renew_moved(w, cpu, mm, (t, LEAF_LEVEL), (old, new));
    Some((t, allocated))
}

/// `move_normal_pud()`'s page-table work (`pud_clear(old_pud)`,
/// `set_pud_at(mm, new_addr, new_pud, pud)`): the PMD table that maps
/// `old` in `mm` is detached there and installed to map `new` (both
/// `PUD_SIZE` aligned), with the PTE tables under it. Everything it maps
/// now translates `new`'s addresses (`renew_moved()`). Returns the table
/// and the number of table pages allocated, or `None` (nothing done) if
/// `old`'s PUD does not point to a PMD table, `new`'s is not empty, or the
/// granule has no PUD level of its own under the top one.
pub fn move_pud_pmd_table(
    w: &World,
    cpu: CpuId,
    mm: MmId,
    old: u64,
    new: u64,
) -> Option<(TableId, u32)> {
    if HUGE_LEVEL - 1 <= w.granule.start_level() || pmd_table(w, mm, new).is_some() {
        return None;
    }
    let t = pud_clear(w, mm, old)?;
    let allocated = pud_populate(w, mm, new, t);
    renew_moved(w, cpu, mm, (t, HUGE_LEVEL), (old, new));
    Some((t, allocated))
}

/// After a table move: every present leaf under table `t` (whose entries
/// are at `level`), which mapped its address under `old`, now maps the
/// same address under `new`. Observers see each as a write clearing it at
/// its old address and one setting it at its new one (`PteWrite`, or
/// `HugePteWrite` for a PMD-sized leaf), with a new version (the checker
/// retires versions by number: the old one is retired at the old
/// address).
fn renew_moved(w: &World, cpu: CpuId, mm: MmId, (t, level): (TableId, u8), (old, new): (u64, u64)) {
    let mut leaves = Vec::new();
    let mut below = Vec::new();
    {
        let mut mem = w.hw.page_tables_mut();
        let sh = mem.granule().level_shift(level);
        for (&i, d) in mem.table_mut(t).entries.iter_mut() {
            let off = u64::from(i) << sh;
            match d {
                Desc::Page(p) => {
                    let was = *p;
                    p.version = w.next_pte_version();
                    leaves.push((off, was, *p));
                }
                Desc::Table(c) if level < LEAF_LEVEL => below.push((off, *c)),
                _ => {}
            }
        }
    }
    for (off, was, p) in leaves {
        let (o, n) = (old + off, new + off);
        if level == LEAF_LEVEL {
            w.emit(Event::PteWrite {
                cpu,
                mm,
                va: o,
                old: Some(was),
                new: None,
            });
            w.emit(Event::PteWrite {
                cpu,
                mm,
                va: n,
                old: None,
                new: Some(p),
            });
        } else {
            w.emit(Event::HugePteWrite {
                cpu,
                mm,
                va: o,
                old: Some(was),
                new: None,
            });
            w.emit(Event::HugePteWrite {
                cpu,
                mm,
                va: n,
                old: None,
                new: Some(p),
            });
        }
    }
    for (off, c) in below {
        renew_moved(w, cpu, mm, (c, level + 1), (old + off, new + off));
    }
}

/// Where PTE table `t` (in its life `instance`, as [`pmd_pgtable`] gave
/// it) of `mm` maps the page `va` had in it when it mapped `va` (`t` may
/// have moved since: `move_normal_pmd()`): `va` itself while `t` still
/// maps it, else the same page of the `PMD_SIZE` `t` maps now; `None` if
/// `mm` no longer has `t` or the table was freed and reused since.
pub fn pte_in_table(w: &World, mm: MmId, (t, instance): (TableId, u64), va: u64) -> Option<u64> {
    let same = {
        let mem = w.hw.page_tables();
        let tab = mem.table(t);
        tab.live && tab.instance == instance
    };
    if !same {
        return None;
    }
    if pmd_pgtable(w, mm, va).is_some_and(|(u, _)| u == t) {
        return Some(va);
    }
    let mask = w.granule.pmd_size() - 1;
    let mut at = None;
    visit_level(w, mm, 0, 1 << 48, HUGE_LEVEL, |_, lo, d| {
        if *d == Desc::Table(t) {
            at = Some(lo | (va & mask));
        }
    });
    at
}

/// `pmdp_huge_get_and_clear()` of a PMD pointing to a PTE table: detaches
/// the table that maps `va` (`PMD_SIZE` aligned) from `mm`'s tree and
/// returns it (to be freed by the caller after its flush), or `None` if
/// there is none.
pub fn pmd_clear_pgtable(w: &World, mm: MmId, va: u64) -> Option<TableId> {
    let pgd = w.k.borrow().mms[mm].pgd;
    let mut hw = w.hw.borrow_mut();
    let g = hw.granule;
    let mut table = pgd;
    for level in g.start_level()..HUGE_LEVEL {
        match hw.mem.table(table).entries.get(&g.level_index(va, level)) {
            Some(Desc::Table(next)) => table = *next,
            _ => return None,
        }
    }
    let idx = g.level_index(va, HUGE_LEVEL);
    match hw.mem.table(table).entries.get(&idx) {
        Some(&Desc::Table(t)) => {
            hw.mem.table_mut(table).entries.remove(&idx);
            Some(t)
        }
        _ => None,
    }
}

/// Writes (or clears, with `None`) the PMD-sized leaf of `mm` at `va`
/// (`PMD_SIZE` aligned, no PTE table there), mapping the `HPAGE_PMD_NR`
/// frames from the given one; allocates upper tables as needed. Observers see one
/// `HugePteWrite`. Returns the old leaf and the number of table pages
/// allocated.
pub fn set_huge(
    w: &World,
    cpu: CpuId,
    mm: MmId,
    va: u64,
    new: Option<(Pfn, Perms)>,
) -> (Option<Pte>, u32) {
    assert_eq!(
        va % w.granule.pmd_size(),
        0,
        "huge page at {va:#x} not aligned"
    );
    let (old, new, allocated) = set_leaf(w, mm, va, HUGE_LEVEL, new);
    if old.is_some() || new.is_some() {
        w.emit(Event::HugePteWrite {
            cpu,
            mm,
            va,
            old,
            new,
        });
    }
    (old, allocated)
}

/// The PMD table of `mm` that maps `va` (the page `huge_pte_offset()`
/// returns a pointer into), if the PUD points to one.
pub fn pmd_table(w: &World, mm: MmId, va: u64) -> Option<TableId> {
    let pgd = w.k.borrow().mms[mm].pgd;
    let mem = w.hw.page_tables();
    let g = mem.granule();
    let mut table = pgd;
    for level in g.start_level()..HUGE_LEVEL {
        match mem.table(table).entries.get(&g.level_index(va, level)) {
            Some(Desc::Table(next)) => table = *next,
            _ => return None,
        }
    }
    Some(table)
}

/// `huge_pmd_alloc()`: the PMD table of `mm` that maps `va`, allocating
/// it and the tables above it if missing; returns it and the number of
/// table pages allocated.
pub fn pmd_alloc(w: &World, mm: MmId, va: u64) -> (TableId, u32) {
    let pgd = w.k.borrow().mms[mm].pgd;
    let mut allocated = 0;
    let mut mem = w.hw.page_tables_mut();
    let t = table_at(&mut mem, pgd, va, HUGE_LEVEL, true, &mut allocated).expect("allocating walk");
    (t, allocated)
}

/// `pud_populate(mm, pud, pmd)`: points the empty PUD of `mm` for `va` at
/// PMD table `t` (another address space's: `huge_pmd_share()`),
/// allocating the tables above it if missing. Returns the number of
/// table pages allocated.
pub fn pud_populate(w: &World, mm: MmId, va: u64, t: TableId) -> u32 {
    let pgd = w.k.borrow().mms[mm].pgd;
    let mut allocated = 0;
    let mut mem = w.hw.page_tables_mut();
    let pud =
        table_at(&mut mem, pgd, va, HUGE_LEVEL - 1, true, &mut allocated).expect("allocating walk");
    let idx = mem.granule().level_index(va, HUGE_LEVEL - 1);
    let old = mem.table_mut(pud).entries.insert(idx, Desc::Table(t));
    assert!(
        old.is_none(),
        "pud_populate() over a present PUD at {va:#x}"
    );
    allocated
}

/// `pud_clear()` of the PUD of `mm` for `va`: detaches the PMD table it
/// points at from `mm`'s tree and returns it (`None` if there is none).
pub fn pud_clear(w: &World, mm: MmId, va: u64) -> Option<TableId> {
    let pgd = w.k.borrow().mms[mm].pgd;
    let mut allocated = 0;
    let mut mem = w.hw.page_tables_mut();
    let pud = table_at(&mut mem, pgd, va, HUGE_LEVEL - 1, false, &mut allocated)?;
    let idx = mem.granule().level_index(va, HUGE_LEVEL - 1);
    match mem.table(pud).entries.get(&idx).copied() {
        Some(Desc::Table(t)) => {
            mem.table_mut(pud).entries.remove(&idx);
            Some(t)
        }
        _ => None,
    }
}

/// The PMD-sized leaves of PMD table `t`, by their offset from the start
/// of the `PUD_SIZE` the table maps.
pub fn pmd_table_leaves(w: &World, t: TableId) -> Vec<(u64, Pte)> {
    let mem = w.hw.page_tables();
    let sh = mem.granule().pmd_shift();
    mem.table(t)
        .entries
        .iter()
        .filter_map(|(&i, d)| match *d {
            Desc::Page(p) => Some((u64::from(i) << sh, p)),
            _ => None,
        })
        .collect()
}

/// Gives each PMD-sized leaf of PMD table `t` a fresh version (the same
/// frame and permissions; nothing the hardware sees changes): the table
/// becomes visible to one more address space, for which its leaves are
/// new values (a version names one value of one address space's view,
/// and may have been retired there before). Returns each leaf's offset
/// in the `PUD_SIZE` the table maps, with its old and new value.
pub fn renew_pmd_table_leaves(w: &World, t: TableId) -> Vec<(u64, Pte, Pte)> {
    let leaves = pmd_table_leaves(w, t);
    let mut out = Vec::with_capacity(leaves.len());
    for (off, old) in leaves {
        let new = Pte {
            version: w.next_pte_version(),
            ..old
        };
        let mut mem = w.hw.page_tables_mut();
        let idx = mem.granule().level_index(off, HUGE_LEVEL);
        mem.table_mut(t).entries.insert(idx, Desc::Page(new));
        out.push((off, old, new));
    }
    out
}

/// `free_pgtables()`: detaches the table pages that overlap `[floor,
/// ceiling)`, hold no entry, and translate no address any VMA of `mm`
/// covers (Linux's floor/ceiling are the neighbouring VMAs).
/// Returns them (to be freed after the TLB flush) with the lowest address
/// each translated.
pub fn detach_empty_tables(w: &World, mm: MmId, floor: u64, ceiling: u64) -> Vec<(TableId, u64)> {
    let (pgd, vmas): (TableId, Vec<(u64, u64)>) = {
        let k = w.k.borrow();
        let m = &k.mms[mm];
        (m.pgd, m.vmas.values().map(|v| (v.start, v.end)).collect())
    };
    let covered = |lo: u64, hi: u64| vmas.iter().any(|&(s, e)| s < hi && lo < e);
    let mut hw = w.hw.borrow_mut();
    let mut out = Vec::new();
    let top = hw.granule.start_level();
    detach(&mut hw.mem, pgd, top, 0, floor, ceiling, &covered, &mut out);
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
    let sh = mem.granule().level_shift(level);
    let children: Vec<(u16, TableId)> = mem
        .table(table)
        .entries
        .iter()
        .filter_map(|(&i, d)| match d {
            Desc::Table(t) => Some((i, *t)),
            Desc::Page(_) | Desc::NonPresent(_) => None,
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

/// `[start, end)` clipped to the `PMD_SIZE` a PTE table at `table_va`
/// maps in granule `g`.
pub(super) fn clip_table(g: Granule, table_va: u64, start: u64, end: u64) -> (u64, u64) {
    let span = g.pmd_size();
    (start.max(table_va), end.min(table_va + span))
}
