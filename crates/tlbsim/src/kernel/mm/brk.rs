//! `brk(2)`: moving the end of the heap (mm/mmap.c, `SYSCALL_DEFINE1(brk)`
//! and `do_brk_flags()`, Linux 4.18; the logic is the same through 6.x,
//! where the shrink goes through `do_vmi_align_munmap()`).
//!
//! Growing extends the heap VMA (or creates it) and maps nothing: the new
//! pages are faulted in on first touch, so a growing `brk` never flushes.
//! Shrinking unmaps the released pages like `munmap` and flushes if any
//! was mapped. `brk(0)` (any address below `start_brk`) returns the
//! current break, as glibc's `sbrk(0)` and ld.so use it.

use super::mmap::{do_munmap, find_vma, page_align};
use crate::hw::mem::Perms;
use crate::hw::tlb::MmId;
use crate::kernel::entry::{call_range, syscall_enter, syscall_exit};
use crate::kernel::{Ctx, Vma};

/// Where every address space's heap begins (`mm->start_brk`): below the
/// lowest address `mmap` hands out (`mm::MMAP_MIN_ADDR`), as an
/// ELF program's heap follows its data segment low in the address space.
/// Linux randomises it (`arch_randomize_brk()`); the model does not.
pub const START_BRK: u64 = 0x0200_0000;

/// `brk(brk)`: sets the end of the heap to `brk` if it can and returns
/// the break in force afterwards (the old one when the request was
/// refused or below `start_brk`, as Linux returns it).
pub async fn sys_brk(ctx: &Ctx, brk: u64) -> u64 {
    let _f = ctx.func(crate::label!("__do_sys_brk"));
    syscall_enter(ctx, "brk").await;
    let w = &ctx.w;
    let mm = ctx.mm().expect("user task");
    ctx.mmap_write_lock(mm).await;
    let (min_brk, origbrk) = {
        let k = w.k.borrow();
        let m = &k.mms[mm];
        (m.start_brk, m.brk)
    };
    let newbrk = page_align(ctx, brk);
    let oldbrk = page_align(ctx, origbrk);
    let set = if brk < min_brk {
        false
    } else if oldbrk == newbrk {
        true
    } else if brk <= origbrk {
        // Always allow shrinking brk: do_munmap() of the released pages.
        call_range(ctx, mm, newbrk, oldbrk);
        ctx.work(w.profile.kernel.munmap_ns).await;
        do_munmap(ctx, mm, newbrk, oldbrk).await;
        true
    } else if !brk_fits(ctx, mm, oldbrk, newbrk) {
        false
    } else {
        // do_brk_flags(): the work of inserting or expanding a VMA.
        ctx.work(w.profile.kernel.mmap_ns).await;
        do_brk_flags(ctx, mm, oldbrk, newbrk);
        true
    };
    if set {
        w.k.borrow_mut().mms[mm].brk = brk;
    }
    let r = w.k.borrow().mms[mm].brk;
    ctx.mmap_write_unlock(mm).await;
    syscall_exit(ctx, "brk").await;
    r
}

/// The checks before growing `[oldbrk, newbrk)`: "Check against existing
/// mmap mappings" (`find_vma(mm, oldbrk)`: the next VMA must start at
/// least a page above the new break) and the model's layout limit (the
/// heap stays below the mmap area, in place of `RLIMIT_DATA`).
fn brk_fits(ctx: &Ctx, mm: MmId, oldbrk: u64, newbrk: u64) -> bool {
    let page = ctx.w.granule.page_size();
    if newbrk + page > super::mmap::MMAP_MIN_ADDR {
        return false;
    }
    let k = ctx.w.k.borrow();
    let next = k.mms[mm].vmas.range(oldbrk..).next().map(|(_, v)| v.start);
    let inside = find_vma(&ctx.w, mm, oldbrk).is_some();
    !inside && next.is_none_or(|start| newbrk + page <= start)
}

/// `do_brk_flags(addr, len)`: expands the heap VMA that ends at `oldbrk`
/// (`vma_merge()` with the previous anonymous read-write VMA) or inserts a
/// new private anonymous read-write one over `[oldbrk, newbrk)`.
fn do_brk_flags(ctx: &Ctx, mm: MmId, oldbrk: u64, newbrk: u64) {
    let mut k = ctx.w.k.borrow_mut();
    let prev = k.mms[mm]
        .vmas
        .range(..oldbrk)
        .next_back()
        .map(|(_, v)| *v)
        .filter(|v| {
            v.end == oldbrk && v.perms == Perms::RW && !v.file_backed() && v.anon.is_some()
        });
    if let Some(v) = prev {
        let m = &mut k.mms[mm];
        m.vmas.get_mut(&v.start).expect("just found").end = newbrk;
        return;
    }
    *k.anon_ids += 1;
    let id = *k.anon_ids;
    k.mms[mm].vmas.insert(
        oldbrk,
        Vma {
            start: oldbrk,
            end: newbrk,
            perms: Perms::RW,
            rmap_order: 0,
            shmem: None,
            anon: Some(super::AnonMap {
                id,
                pgoff: oldbrk / super::mm_types::PGOFF_UNIT,
                data: super::swap::PageData::Compressible,
            }),
        },
    );
}
