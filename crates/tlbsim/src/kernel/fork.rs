//! The address-space side of creating a task (kernel/fork.c): the copy
//! of an address space (`dup_mmap()`) and the references that keep one
//! alive (`mmput()`, `mmdrop()`).

use super::mm::anon::copy_swap_pte;
use super::mm::huge_memory::split_huge_range;
use super::mm::pgtable::{present_ptes, set_pte, set_swp_entry, swp_entries};
use super::mm::{MmuGather, TASK_SIZE};
use super::tlbflush::flush_tlb_mm;
use super::{Ctx, Vma};
use crate::hw::mem::{Perms, Pte, SwpEntry};
use crate::hw::tlb::MmId;
use crate::observe::Event;

/// `dup_mmap()`: copies VMAs and PTEs into a new address space of the
/// same fork tree, write-protecting private writable pages in both
/// (copy-on-write) and sharing swap entries, then `flush_tlb_mm(oldmm)`.
pub async fn dup_mmap(ctx: &Ctx, old: MmId) -> MmId {
    let _f = ctx.func(crate::label!("dup_mmap"));
    let w = &ctx.w;
    let new = w.new_mm();
    ctx.mmap_write_lock(old).await;
    let vmas = {
        let mut k = w.k.borrow_mut();
        let vmas = k.mms[old as usize].vmas.clone();
        let base = k.mms[old as usize].mmap_base;
        let (start_brk, brk) = (k.mms[old as usize].start_brk, k.mms[old as usize].brk);
        let family = k.mms[old as usize].family;
        let child = &mut k.mms[new as usize];
        child.vmas = vmas.clone();
        child.mmap_base = base;
        child.start_brk = start_brk;
        child.brk = brk;
        child.family = family;
        for s in vmas.values().filter_map(|v| v.shmem) {
            k.shmem[s.id as usize].mms.insert(new);
        }
        vmas
    };
    // vma_needs_copy(): a shared VMA's PTEs are not copied; the child
    // faults its pages in from the object.
    let shared = |va: u64| {
        vmas.range(..=va)
            .next_back()
            .is_some_and(|(_, v)| v.end > va && v.shared())
    };
    split_huge_range(ctx, old, 0, TASK_SIZE).await;
    // copy_pte_range() takes each source table's lock in turn; one lock
    // over the copy is modelled (the child is not yet visible).
    ctx.ptl_lock(old, 0).await;
    let mut ptes = present_ptes(w, old, 0, TASK_SIZE);
    ptes.retain(|&(va, _)| !shared(va));
    let cpu = ctx.cpu();
    for &(va, p) in &ptes {
        let ro = Perms(p.perms.0 & !2);
        if p.perms.write() {
            set_pte(w, cpu, old, va, Some((p.pfn, ro)));
        }
        w.hw.borrow_mut().mem.get_frame(p.pfn);
        set_pte(w, cpu, new, va, Some((p.pfn, ro)));
    }
    // copy_nonpresent_pte(): swap entries are shared with the child; a
    // migration entry (a page another task is migrating) is copied,
    // read-only in both (the migration's reverse-map walk finds the
    // child's too).
    let mut swapped = swp_entries(w, old, 0, TASK_SIZE);
    swapped.retain(|&(va, _)| !shared(va));
    for &(va, e) in &swapped {
        match e {
            SwpEntry::Swap(slot) => {
                copy_swap_pte(w, new, va, slot);
            }
            SwpEntry::Migration(p) => {
                let ro = SwpEntry::Migration(Pte {
                    perms: Perms(p.perms.0 & !2),
                    ..p
                });
                set_swp_entry(w, old, va, None);
                set_swp_entry(w, old, va, Some(ro));
                set_swp_entry(w, new, va, Some(ro));
            }
        }
    }
    ctx.work(w.profile.kernel.fork_per_pte_ns * (ptes.len() + swapped.len()) as u64)
        .await;
    ctx.ptl_unlock(old, 0).await;
    // Unconditional in every Linux version, even when no PTE was
    // write-protected (kernel/fork.c, `out:` of dup_mmap()).
    flush_tlb_mm(ctx, old).await;
    ctx.mmap_write_unlock(old).await;
    new
}

/// `mmput()`: drops a user; the last one tears the address space down
/// (`exit_mmap`: zap everything, free the tables, flush the ASID).
pub async fn mmput(ctx: &Ctx, mm: MmId) {
    let _f = ctx.func(crate::label!("mmput"));
    let w = &ctx.w;
    let last = ctx
        .atomic_dec_and_test(|| {
            let mut k = w.k.borrow_mut();
            let m = &mut k.mms[mm as usize];
            m.users -= 1;
            m.users == 0
        })
        .await;
    if !last {
        return;
    }
    let mut g = MmuGather::begin(ctx, mm, true).await;
    g.zap(ctx, 0, TASK_SIZE).await;
    let removed: Vec<Vma> = std::mem::take(&mut w.k.borrow_mut().mms[mm as usize].vmas)
        .into_values()
        .filter(Vma::shared)
        .collect();
    g.free_pgtables(ctx, 0, TASK_SIZE).await;
    g.finish(ctx).await;
    super::mm::shmem::release_unmapped(ctx, mm, &removed);
    mmdrop(ctx, mm).await;
}

/// `mmdrop()`: drops a reference to the structure; the last frees the PGD.
pub async fn mmdrop(ctx: &Ctx, mm: MmId) {
    let w = &ctx.w;
    let last = ctx
        .atomic_dec_and_test(|| {
            let mut k = w.k.borrow_mut();
            let m = &mut k.mms[mm as usize];
            m.count -= 1;
            m.count == 0
        })
        .await;
    if last {
        let pgd = w.k.borrow().mms[mm as usize].pgd;
        let instance = w.hw.borrow().mem.table(pgd).instance;
        w.hw.borrow_mut().mem.free_table(pgd);
        w.k.borrow_mut().mms[mm as usize].live = false;
        w.emit(Event::TableFree {
            cpu: ctx.cpu(),
            mm,
            table: pgd,
            instance,
        });
        w.emit(Event::MmFree { mm });
    }
}
