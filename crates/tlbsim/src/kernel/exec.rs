//! `execve()` (fs/exec.c): [`sys_exec`] gives the task a fresh address
//! space and drops the old one.
//!
//! The argument stack of `execve()` (fs/exec.c; the same in Linux 4.18 and
//! 6.x). `__bprm_mm_init()` gives the new address space one stack page
//! just below `STACK_TOP_MAX`, `copy_strings()` writes the arguments and
//! the environment into it, and `setup_arg_pages()` moves it down to the
//! randomised stack top (`randomize_stack_top()`) with `shift_arg_pages()`:
//! the PTEs move (`move_page_tables()`, which flushes the old range) and
//! the page tables left behind are freed under a gather whose
//! `tlb_finish_mmu()` flushes again. The host counts these two range
//! flushes on every exec (docs/research/seed000-libtool-launch.md).
//!
//! Modelled: one page of strings (the model's programs have short
//! argument lists and environments), written by a fault taken in the
//! kernel as `get_user_pages_remote()` does, after the switch to the new
//! mm rather than before it; the stack is not grown afterwards
//! (`expand_stack()` maps nothing).

use super::entry::{syscall_enter, syscall_exit};
use super::fork::{mm_release, mmput};
use super::mm::memory::handle_mm_fault;
use super::mm::mremap::move_page_tables;
use super::mm::{MmuGather, TASK_SIZE};
use super::{AnonMap, Ctx, Vma};
use crate::config::Arch;
use crate::hw::mem::Perms;
use crate::hw::tlb::MmId;
use rand::Rng as _;

/// `execve()`: replaces the address space with a fresh one, whose only
/// mapping is the argument stack at a random depth
/// ([`super::exec::setup_arg_pages`]).
pub async fn sys_exec(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("begin_new_exec"));
    syscall_enter(ctx, "execve").await;
    let w = &ctx.w;
    ctx.work(w.profile.kernel.exec_ns).await;
    let new = w.new_mm();
    let old = {
        let mut k = w.k.borrow_mut();
        let t = &mut k.tasks[ctx.task];
        let old = t.mm;
        t.mm = Some(new);
        t.active_mm = Some(new);
        old
    };
    // exec_mmap(): exec_mm_release(), then activate_mm().
    mm_release(ctx).await;
    w.policy.switch_mm(ctx, old, new).await;
    if let Some(o) = old {
        mmput(ctx, o).await;
    }
    super::exec::setup_arg_pages(ctx, new).await;
    syscall_exit(ctx, "execve").await;
}

/// `STACK_RND_MASK` of a 64-bit task, in pages: arm64 `0x3ffff >>
/// (PAGE_SHIFT - 12)` (1 GiB whatever the page size), x86-64 `0x3fffff`
/// (16 GiB).
fn stack_rnd_mask(ctx: &Ctx) -> u64 {
    match ctx.w.arch() {
        Arch::Arm64 => 0x3ffff >> (ctx.w.granule.page_shift() - 12),
        Arch::X86 => 0x3f_ffff,
    }
}

/// `__bprm_mm_init()`, `copy_strings()` and `setup_arg_pages()` for the
/// new address space `mm`, which the calling task already runs. The
/// random shift comes from the kernel's stream (`World::random`).
pub async fn setup_arg_pages(ctx: &Ctx, mm: MmId) {
    let _f = ctx.func(crate::label!("setup_arg_pages"));
    let w = &ctx.w;
    let page = w.granule.page_size();
    let (start, end) = (TASK_SIZE - page, TASK_SIZE);
    bprm_mm_init(ctx, mm, start, end);
    // copy_strings(): get_user_pages_remote() faults the page in.
    ctx.mmap_read_lock(mm).await;
    handle_mm_fault(ctx, mm, start, true).await;
    ctx.mmap_read_unlock(mm).await;
    // randomize_stack_top(): the stack top moves down a random number of
    // pages; stack_shift = vm_end - stack_top.
    let rnd = w.random.borrow_mut().gen_range(0..=stack_rnd_mask(ctx));
    let shift = rnd << w.granule.page_shift();
    if shift > 0 {
        ctx.mmap_write_lock(mm).await;
        shift_arg_pages(ctx, mm, (start, end), shift).await;
        ctx.mmap_write_unlock(mm).await;
    }
}

/// `__bprm_mm_init()`: the stack VMA `[start, end)`, anonymous and
/// writable.
fn bprm_mm_init(ctx: &Ctx, mm: MmId, start: u64, end: u64) {
    let mut k = ctx.w.k.borrow_mut();
    *k.anon_ids += 1;
    let id = *k.anon_ids;
    k.mms[mm].vmas.insert(
        start,
        Vma {
            start,
            end,
            perms: Perms::RW,
            rmap_order: 0,
            shmem: None,
            anon: Some(AnonMap {
                id,
                pgoff: start / super::mm::mm_types::PGOFF_UNIT,
                data: super::mm::swap::PageData::Compressible,
            }),
        },
    );
}

/// `shift_arg_pages(vma, shift)`: the VMA spans old and new range while
/// the PTEs move down by `shift`, then shrinks to the new range, and the
/// tables only the old range used are freed (`free_pgd_range()`, with
/// `tlb_finish_mmu()` over the old range).
async fn shift_arg_pages(ctx: &Ctx, mm: MmId, (start, end): (u64, u64), shift: u64) {
    let _f = ctx.func(crate::label!("shift_arg_pages"));
    let (new_start, new_end) = (start - shift, end - shift);
    set_range(ctx, mm, start, new_start, end);
    move_page_tables(ctx, mm, (start, new_start, end - start), false).await;
    set_range(ctx, mm, new_start, new_start, new_end);
    let mut tlb = MmuGather::begin(ctx, mm, false).await;
    tlb.free_pgtables(ctx, start, end).await;
    tlb.finish(ctx).await;
}

/// `vma_adjust()`: the VMA that starts at `key` now spans `[start, end)`,
/// its page offset kept (the pages keep their index).
fn set_range(ctx: &Ctx, mm: MmId, key: u64, start: u64, end: u64) {
    let mut k = ctx.w.k.borrow_mut();
    let vmas = &mut k.mms[mm].vmas;
    let v = vmas.remove(&key).expect("the stack VMA");
    vmas.insert(start, Vma { start, end, ..v });
}
