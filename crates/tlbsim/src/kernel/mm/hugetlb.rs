//! hugetlbfs and its page tables (mm/hugetlb.c, fs/hugetlbfs/inode.c,
//! Linux 5.15, with what later versions changed named where it is): a
//! file of 2 MiB huge pages mapped `MAP_SHARED`, faulted in by
//! `hugetlb_fault()` and unmapped by `__unmap_hugepage_range()`, and the
//! PMD sharing of `CONFIG_ARCH_WANT_HUGE_PMD_SHARE` (x86, arm64 with 4 KiB
//! pages): address spaces that map the same `PUD_SIZE` (1 GiB) of a file,
//! `PUD_SIZE` aligned in each, point their PUDs at one PMD table
//! (`huge_pmd_share()`), and an unmap detaches it from its own address
//! space alone (`huge_pmd_unshare()`), leaving the table to the others.
//!
//! The locks are Linux's: the file's `i_mmap_rwsem` (read by a fault
//! while it may share, written by an unmap while it may unshare), and the
//! PMD table's own lock (`huge_pte_lock()` → `pmd_lockptr()`: the lock
//! lives in the table's page, so every sharer takes the same one).
//!
//! What the model leaves out (docs/model.md, "hugetlbfs"): the huge page
//! pool and its reservations (a fault always gets a page), private
//! hugetlb mappings, `mprotect`/`madvise`/`mremap` of a hugetlb VMA, and
//! fork's copy of the page tables (`copy_hugetlb_page_range()`: the child
//! maps the file's pages at its own faults, sharing the table then).

use super::mm_types::{ShmemId, ShmemMap};
use super::mmu_gather::MmuGather;
use super::pgtable::{
    get_pte, pmd_alloc, pmd_table, pmd_table_leaves, pud_clear, pud_populate,
    renew_pmd_table_leaves, set_huge,
};
use super::shmem::ShmemInode;
use super::swap::PageData;
use crate::hw::mem::{Perms, Pfn, Pte, TableId};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::{Ctx, LockId, Vma, World};
use crate::observe::Event;
use std::collections::{BTreeMap, BTreeSet};

/// `PUD_SIZE` with 4 KiB pages: what one shared PMD table maps (1 GiB).
pub const PUD_SIZE: u64 = 1 << 30;

/// A hugetlbfs file (its inode and `address_space`).
#[derive(Debug, Clone, Default)]
pub struct HugetlbfsInode {
    /// `i_size` in bytes (a multiple of the huge page size).
    pub size: u64,
    /// `mapping->i_mmap_rwsem`.
    pub i_mmap_rwsem: LockId,
    /// Its huge pages by the page index (in 4 KiB units, `PGOFF_UNIT`)
    /// of their first page, with their first frame: the page cache, which
    /// holds one reference on each frame.
    pub pages: BTreeMap<u64, Pfn>,
}

/// PMD tables shared between address spaces, and the PMD tables' locks.
#[derive(Debug, Clone, Default)]
pub struct PmdShares {
    /// Each shared table, with every address space whose PUD points at it
    /// and the `PUD_SIZE`-aligned address of that PUD there. Linux only
    /// counts them (the table page's `page_count()`; `pt_share_count`
    /// since 6.13); the model lists them so that a write in the table is
    /// reported as the change of each address space's view it is. A table
    /// is listed only while two or more share it.
    pub sharers: BTreeMap<TableId, BTreeSet<(MmId, u64)>>,
    /// `pmd_lockptr()` of each PMD table, created on first use and kept
    /// for the page's next lives (table pages are reused).
    pub ptl: BTreeMap<TableId, LockId>,
}

/// Does `v` map a hugetlbfs file (`is_vm_hugetlb_page()`: `VM_HUGETLB`
/// in the VMA's own flags)?
pub fn is_vm_hugetlb_page(v: &Vma) -> bool {
    v.shmem.is_some_and(|s| s.hugetlb)
}

/// Creates a file of `size` bytes (rounded up to the huge page size) on a
/// hugetlbfs mount, with no page yet (`open(O_CREAT)`, `ftruncate()`).
/// One system call's cost. Returns its id.
pub async fn sys_create_hugetlbfs_file(ctx: &Ctx, size: u64) -> ShmemId {
    syscall_enter(ctx, "ftruncate").await;
    let hpage = ctx.w.granule.pmd_size();
    let rwsem = ctx.w.new_lock("i_mmap_rwsem");
    let inode = ShmemInode {
        live: true,
        data: PageData::Compressible,
        hugetlbfs: Some(HugetlbfsInode {
            size: size.div_ceil(hpage) * hpage,
            i_mmap_rwsem: rwsem,
            pages: BTreeMap::new(),
        }),
        ..Default::default()
    };
    let id = super::shmem::add_inode(&mut ctx.w.k.borrow_mut(), inode);
    syscall_exit(ctx, "ftruncate").await;
    id
}

/// `mmap(addr, len, prot, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0)` of
/// hugetlbfs file `file`: a VMA mapping the file from its start at
/// `addr`, which the caller chooses `PUD_SIZE` aligned where it wants its
/// PMD tables shared (`hugetlb_get_unmapped_area()` itself aligns to the
/// huge page size only). `None` (`EINVAL`, `EEXIST`) if `addr` or `len`
/// is not huge-page aligned, the file is shorter, or the range is taken.
pub async fn sys_mmap_hugetlb(
    ctx: &Ctx,
    file: ShmemId,
    addr: u64,
    len: u64,
    perms: Perms,
) -> Option<u64> {
    let _f = ctx.func(crate::label!("do_mmap"));
    syscall_enter(ctx, "mmap").await;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_write_lock(mm).await;
    ctx.work(ctx.w.profile.kernel.mmap_ns).await;
    let hpage = ctx.w.granule.pmd_size();
    let mapped = {
        let mut k = ctx.w.k.borrow_mut();
        let size = k.shmem[file as usize]
            .hugetlbfs
            .as_ref()
            .map_or(0, |h| h.size);
        let end = addr.checked_add(len).filter(|&e| e <= super::TASK_SIZE);
        let free = |vmas: &BTreeMap<u64, Vma>, end: u64| {
            !vmas.values().any(|v| v.start < end && addr < v.end)
        };
        match end {
            Some(end)
                if addr.is_multiple_of(hpage)
                    && len.is_multiple_of(hpage)
                    && len > 0
                    && len <= size
                    && free(&k.mms[mm].vmas, end) =>
            {
                k.shmem[file as usize].mms.insert(mm);
                let shmem = Some(ShmemMap {
                    id: file,
                    pgoff: 0,
                    shared: true,
                    hugetlb: true,
                });
                let v = Vma {
                    start: addr,
                    end,
                    perms,
                    rmap_order: 0,
                    shmem,
                    anon: None,
                };
                k.mms[mm].vmas.insert(addr, v);
                Some(addr)
            }
            _ => None,
        }
    };
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "mmap").await;
    mapped
}

/// `hugetlb_fault()` at `va` of hugetlb VMA `v` (5.15): under the file's
/// `i_mmap_rwsem` for reading, `huge_pte_alloc()` finds or makes the PMD
/// table (sharing another address space's where it may), then
/// `hugetlb_no_page()` maps the file's huge page (allocated and added to
/// the file on first use), writable when the VMA is, unless the PMD was
/// filled meanwhile. A present PMD: nothing to do (the model maps every
/// page writable where the VMA is, so no write fault follows).
///
/// 6.1 replaced the `i_mmap_rwsem` here by the VMA's own lock
/// (`hugetlb_vma_lock_read()`); the model keeps the 5.15 lock in every
/// version.
pub async fn hugetlb_fault(ctx: &Ctx, mm: MmId, v: &Vma, va: u64) {
    let _f = ctx.func(crate::label!("hugetlb_fault"));
    let w = &ctx.w;
    let hpage = w.granule.pmd_size();
    let haddr = va & !(hpage - 1);
    let (id, index) = v.shmem_index(haddr).expect("a hugetlb VMA maps a file");
    let rwsem = i_mmap_rwsem(w, id);
    ctx.down(rwsem, true).await;
    let table = huge_pte_alloc(ctx, mm, v, haddr).await;
    if get_pte(w, mm, haddr).is_none() {
        hugetlb_no_page(ctx, mm, v, haddr, table, (id, index)).await;
    }
    ctx.up(rwsem, true).await;
}

/// `hugetlb_no_page()`: the file's huge page at `index` (allocated,
/// cleared and added to the file if missing), mapped at `haddr` under the
/// PMD table's lock if the PMD is still empty.
async fn hugetlb_no_page(
    ctx: &Ctx,
    mm: MmId,
    v: &Vma,
    haddr: u64,
    table: TableId,
    (id, index): (ShmemId, u64),
) {
    let w = &ctx.w;
    let cached = hugetlbfs(w, id, |h| h.pages.get(&index).copied());
    let pfn = match cached {
        Some(p) => p,
        None => {
            // alloc_huge_page(), clear_huge_page(), huge_add_to_page_cache().
            ctx.work(w.profile.kernel.thp_fault_ns.unwrap_or(0)).await;
            // In the same step as the lookup's miss: no other fault can
            // have added the page meanwhile.
            let pfn = w.hw.borrow_mut().mem.alloc_huge();
            let mut k = w.k.borrow_mut();
            let h = k.shmem[id as usize].hugetlbfs.as_mut().expect("hugetlbfs");
            h.pages.insert(index, pfn);
            pfn
        }
    };
    let ptl = pmd_lockptr(w, table);
    ctx.spin_lock(ptl).await;
    if get_pte(w, mm, haddr).is_none() {
        for i in 0..w.granule.hpage_pmd_nr() {
            w.hw.borrow_mut().mem.get_frame(pfn + i);
        }
        set_huge_pte_at(ctx, mm, haddr, Some((pfn, v.perms)));
        ctx.work(w.profile.kernel.pte_update_ns).await;
    }
    ctx.spin_unlock(ptl).await;
}

/// `huge_pte_alloc()`: the PMD table mapping `haddr` in `mm`, found, or
/// shared from another address space (`huge_pmd_share()`) where the VMA
/// may share one (`want_pmd_share()`), or allocated.
async fn huge_pte_alloc(ctx: &Ctx, mm: MmId, v: &Vma, haddr: u64) -> TableId {
    let w = &ctx.w;
    if let Some(t) = pmd_table(w, mm, haddr) {
        return t;
    }
    if vma_shareable(v, haddr) {
        if let Some(t) = huge_pmd_share(ctx, mm, v, haddr).await {
            return t;
        }
    }
    let (t, allocated) = pmd_alloc(w, mm, haddr);
    ctx.work(w.profile.kernel.page_alloc_ns * u64::from(allocated))
        .await;
    t
}

/// `vma_shareable()`: does `v` (a shared mapping: `VM_MAYSHARE`) cover the
/// whole `PUD_SIZE` around `addr`?
fn vma_shareable(v: &Vma, addr: u64) -> bool {
    let base = addr & !(PUD_SIZE - 1);
    v.shared() && v.start <= base && base + PUD_SIZE <= v.end
}

/// `huge_pmd_share()` (5.15, under `i_mmap_rwsem` for reading): walks the
/// file's `i_mmap` for another VMA that maps the same file pages at the
/// same offset in its own `PUD_SIZE`, with the same flags, over all of it
/// (`page_table_shareable()`), and whose PMD table exists; takes a
/// reference on that table (`get_page()`) and, under the table's lock,
/// points this mm's empty PUD at it (`pud_populate()`). `None` if there
/// is no such table (the caller allocates one).
async fn huge_pmd_share(ctx: &Ctx, mm: MmId, v: &Vma, addr: u64) -> Option<TableId> {
    let _f = ctx.func(crate::label!("huge_pmd_share"));
    let w = &ctx.w;
    let (id, idx) = v.shmem_index(addr)?;
    let (spte, sbase) = find_shareable(w, mm, v, id, idx)?;
    let ptl = pmd_lockptr(w, spte);
    ctx.spin_lock(ptl).await;
    let base = addr & !(PUD_SIZE - 1);
    let shared = pmd_table(w, mm, addr).is_none();
    if shared {
        let allocated = pud_populate(w, mm, addr, spte);
        {
            let mut k = w.k.borrow_mut();
            let set = k.pmd_shares.sharers.entry(spte).or_default();
            set.insert(sbase);
            set.insert((mm, base));
        }
        w.emit(Event::TableShare {
            cpu: ctx.cpu(),
            mm,
            from: sbase.0,
            table: spte,
        });
        // This mm now sees every huge page the table maps: new values to
        // it (fresh versions), the same values to the other sharers.
        let others = sharers_but(w, spte, mm);
        for (off, old, new) in renew_pmd_table_leaves(w, spte) {
            emit_view(w, ctx, mm, base + off, None, Some(new));
            for &(m, b) in &others {
                emit_view(w, ctx, m, b + off, Some(old), Some(new));
            }
        }
        ctx.work(w.profile.kernel.page_alloc_ns * u64::from(allocated))
            .await;
    }
    ctx.spin_unlock(ptl).await;
    // Raced with another fault of this mm that populated the PUD (the
    // reference is put back): the caller finds that table.
    Some(pmd_table(w, mm, addr).expect("populated"))
}

/// `page_table_shareable()` over the file's `i_mmap` (the address spaces
/// that map file `id`, in id order): the PMD table of another VMA of the
/// file with `v`'s flags that maps page `idx` at the same offset of its
/// `PUD_SIZE` and covers all of it, with the sharer and its PUD base.
fn find_shareable(
    w: &World,
    mm: MmId,
    v: &Vma,
    id: ShmemId,
    idx: u64,
) -> Option<(TableId, (MmId, u64))> {
    let candidates: Vec<(MmId, Vma)> = {
        let k = w.k.borrow();
        k.shmem[id as usize]
            .mms
            .iter()
            .filter(|&&m| k.mms[m].live)
            .flat_map(|&m| {
                k.mms[m]
                    .vmas
                    .values()
                    .filter(move |s| {
                        s.shmem.is_some_and(|x| x.id == id) && (m, s.start) != (mm, v.start)
                    })
                    .map(move |s| (m, *s))
            })
            .collect()
    };
    let pmd_mask = w.granule.pmd_size() - 1;
    let addr_off = v.address_of(id, idx)? & (PUD_SIZE - 1) & !pmd_mask;
    candidates.into_iter().find_map(|(m, s)| {
        let saddr = s.address_of(id, idx)?;
        let sbase = saddr & !(PUD_SIZE - 1);
        let same_slot = saddr & (PUD_SIZE - 1) & !pmd_mask == addr_off;
        let covers = s.start <= sbase && sbase + PUD_SIZE <= s.end;
        if !(same_slot && covers && s.perms == v.perms && s.shared() == v.shared()) {
            return None;
        }
        pmd_table(w, m, saddr).map(|t| (t, (m, sbase)))
    })
}

/// `huge_pmd_unshare()` (5.15; the caller holds `i_mmap_rwsem` for
/// writing and the table's lock): if the PMD table mapping `addr` in `mm`
/// is shared (its page count above one), clears this mm's PUD
/// (`pud_clear()`) and drops its reference (`Some`): the caller
/// goes on at the next `PUD_SIZE`. The table and its entries stay, for the
/// other address spaces; returns how many address spaces still share
/// it. Nothing is flushed here (since 8ce720d5bd91 the caller's gather
/// records the unshare: [`MmuGather::hugetlb_unshared`]).
pub(crate) fn huge_pmd_unshare(ctx: &Ctx, mm: MmId, addr: u64) -> Option<usize> {
    let w = &ctx.w;
    let t = pmd_table(w, mm, addr)?;
    let base = addr & !(PUD_SIZE - 1);
    let shared = {
        let k = w.k.borrow();
        k.pmd_shares.sharers.get(&t).is_some_and(|s| s.len() > 1)
    };
    if !shared {
        return None;
    }
    let leaves = pmd_table_leaves(w, t);
    pud_clear(w, mm, addr).expect("the PUD points at the table");
    let left = {
        let mut k = w.k.borrow_mut();
        let set = k.pmd_shares.sharers.get_mut(&t).expect("shared");
        set.remove(&(mm, base));
        let left = set.len();
        if left < 2 {
            k.pmd_shares.sharers.remove(&t);
        }
        left
    };
    // This mm no longer sees the table's huge pages.
    for (off, p) in leaves {
        emit_view(w, ctx, mm, base + off, Some(p), None);
    }
    Some(left)
}

/// `__unmap_hugepage_range_final()` as `unmap_single_vma()` calls it:
/// `__unmap_hugepage_range()` of `[start, end)` of hugetlb VMA `v` under
/// the file's `i_mmap_rwsem` for writing.
pub(crate) async fn unmap_hugepage_range_final(
    tlb: &mut MmuGather,
    ctx: &Ctx,
    v: &Vma,
    start: u64,
    end: u64,
) {
    let id = v.shmem.expect("a hugetlb VMA maps a file").id;
    let rwsem = i_mmap_rwsem(&ctx.w, id);
    ctx.down(rwsem, false).await;
    __unmap_hugepage_range(tlb, ctx, start, end).await;
    ctx.up(rwsem, false).await;
}

/// `__unmap_hugepage_range()` (5.15): for each huge page of `[start, end)`,
/// under its PMD table's lock: a shared table is unshared
/// (`huge_pmd_unshare()`) and the walk skips to the next `PUD_SIZE`;
/// otherwise the PMD is cleared, its range gathered
/// (`tlb_remove_huge_tlb_entry()`) and its page queued on the gather.
///
/// What an unshare adds to the gather is the kernel's
/// ([`MmuGather::hugetlb_unshared`]): nothing before a4a118f2eead (5.16;
/// CVE-2021-4002), when the caller's flush covered only the pages cleared
/// here, so this mm's TLBs kept the unshared range's translations;
/// since then the `PUD_SIZE` is flushed before `i_mmap_rwsem` is
/// released, while no other sharer can free the table.
async fn __unmap_hugepage_range(tlb: &mut MmuGather, ctx: &Ctx, start: u64, end: u64) {
    let _f = ctx.func(crate::label!("__unmap_hugepage_range"));
    let w = &ctx.w;
    let mm = tlb.mm();
    let hpage = w.granule.pmd_size();
    let mut addr = start & !(hpage - 1);
    while addr < end {
        let Some(t) = pmd_table(w, mm, addr) else {
            addr += hpage;
            continue;
        };
        let ptl = pmd_lockptr(w, t);
        ctx.spin_lock(ptl).await;
        if let Some(left) = huge_pmd_unshare(ctx, mm, addr) {
            ctx.spin_unlock(ptl).await;
            let base = addr & !(PUD_SIZE - 1);
            tlb.hugetlb_unshared(ctx, (base, base + PUD_SIZE), left);
            addr = base + PUD_SIZE;
            continue;
        }
        if let Some(old) = get_pte(w, mm, addr) {
            set_huge_pte_at(ctx, mm, addr, None);
            tlb.remove_huge_tlb_entry(addr);
            tlb.remove_page_size(old.pfn, addr);
            ctx.work(w.profile.kernel.pte_update_ns).await;
        }
        ctx.spin_unlock(ptl).await;
        addr += hpage;
    }
    tlb.hugetlb_unmap_end(ctx).await;
}

/// `set_huge_pte_at()` (or `huge_ptep_get_and_clear()`, `new == None`) of
/// the PMD of `mm` at `haddr`: written in the PMD table, which every
/// sharer sees; observers are told of each address space's change.
fn set_huge_pte_at(ctx: &Ctx, mm: MmId, haddr: u64, new: Option<(Pfn, Perms)>) {
    let w = &ctx.w;
    let t = pmd_table(w, mm, haddr);
    let (old, _) = set_huge(w, ctx.cpu(), mm, haddr, new);
    let new = get_pte(w, mm, haddr);
    let others = t.map_or_else(Vec::new, |t| sharers_but(w, t, mm));
    let off = haddr & (PUD_SIZE - 1);
    for (m, base) in others {
        emit_view(w, ctx, m, base + off, old, new);
    }
}

/// The address spaces other than `mm` sharing PMD table `t`, with their
/// `PUD_SIZE`-aligned address of it.
fn sharers_but(w: &World, t: TableId, mm: MmId) -> Vec<(MmId, u64)> {
    let k = w.k.borrow();
    k.pmd_shares
        .sharers
        .get(&t)
        .into_iter()
        .flatten()
        .filter(|&&(m, _)| m != mm)
        .copied()
        .collect()
}

/// Reports that `mm`'s view of the huge page at `va` changed from `old`
/// to `new` through a shared PMD table (no descriptor of `mm`'s own was
/// written).
fn emit_view(w: &World, ctx: &Ctx, mm: MmId, va: u64, old: Option<Pte>, new: Option<Pte>) {
    w.emit(Event::HugePteWrite {
        cpu: ctx.cpu(),
        mm,
        va,
        old,
        new,
    });
}

/// `pmd_lockptr()` of a PMD-sized page: the lock of PMD table `t`.
pub(super) fn pmd_lockptr(w: &World, t: TableId) -> LockId {
    if let Some(&l) = w.k.borrow().pmd_shares.ptl.get(&t) {
        return l;
    }
    let l = w.new_lock("pmd_ptl");
    w.k.borrow_mut().pmd_shares.ptl.insert(t, l);
    l
}

/// The `i_mmap_rwsem` of hugetlbfs file `id`.
fn i_mmap_rwsem(w: &World, id: ShmemId) -> LockId {
    hugetlbfs(w, id, |h| h.i_mmap_rwsem)
}

/// `f` of the hugetlbfs inode of file `id`.
fn hugetlbfs<T>(w: &World, id: ShmemId, f: impl FnOnce(&HugetlbfsInode) -> T) -> T {
    let k = w.k.borrow();
    f(k.shmem[id as usize]
        .hugetlbfs
        .as_ref()
        .expect("a hugetlbfs file"))
}
