//! Creating a task (kernel/fork.c): `fork()`, `clone()` of a thread and
//! `vfork()` (`copy_process()`), the copy of an address space
//! (`dup_mmap()`), the references that keep one alive (`mmput()`,
//! `mmdrop()`) and `mm_release()`; and the first tasks, a kernel thread
//! (`kernel_thread()`) or the first user process.

use super::entry::{syscall_enter, syscall_exit};
use super::mm::anon::copy_swap_pte;
use super::mm::huge_memory::split_huge_range;
use super::mm::pgtable::{present_ptes, set_pte, set_swp_entry, swp_entries};
use super::mm::{MmuGather, TASK_SIZE};
use super::sched::{block_until_woken, enqueue, wake_up};
use super::tlbflush::flush_tlb_mm;
use super::{Ctx, Program, TaskId, TaskState, Vma, World};
use crate::hw::cpumask::CpuMask;
use crate::hw::mem::{Perms, Pte, SwpEntry};
use crate::hw::tlb::MmId;
use crate::hw::CpuId;
use crate::observe::Event;
use std::rc::Rc;

/// `fork()`/`clone()` of a process: copies the address space and starts
/// `program` in the child. Returns the child's id.
pub async fn sys_fork(ctx: &Ctx, name: &str, program: Program) -> TaskId {
    sys_fork_pinned(ctx, name, None, program).await
}

/// The CPUs a new child may run on: `pin` alone, or its parent's.
fn child_affinity(w: &World, parent: TaskId, pin: Option<CpuId>) -> Option<CpuMask> {
    match pin {
        Some(c) => {
            let mut m = CpuMask::new(w.ncpus());
            m.set(c);
            Some(m)
        }
        None => w.k.borrow().tasks[parent].affinity.clone(),
    }
}

/// [`sys_fork`], the child pinned to CPU `pin` from its creation if given
/// (replay's recorded placement: the child's first CPU).
pub async fn sys_fork_pinned(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    let _f = ctx.func(crate::label!("kernel_clone"));
    syscall_enter(ctx, "fork").await;
    let w = &ctx.w;
    ctx.work(w.profile.kernel.fork_ns).await;
    let mm = match ctx.mm() {
        Some(m) => Some(dup_mmap(ctx, m).await),
        None => None,
    };
    let child = w.new_task(name.to_string(), mm, ctx.cpu(), Some(ctx.task), program);
    let affinity = child_affinity(w, ctx.task, pin);
    {
        let mut k = w.k.borrow_mut();
        k.tasks[ctx.task].children += 1;
        k.tasks[child].state = TaskState::Runnable;
        k.tasks[child].affinity = affinity;
    }
    enqueue(ctx, child, true).await; // wake_up_new_task()
    syscall_exit(ctx, "fork").await;
    child
}

/// `clone(CLONE_VM | ...)`: starts a thread sharing this task's mm,
/// optionally pinned to one CPU. Threads are reaped with `sys_wait` by the
/// task that created them (a simplification of CLONE_THREAD).
pub async fn sys_clone_thread(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    clone_vm(ctx, "clone", name, pin, program).await
}

/// The system call `call` creating a `CLONE_VM` child that owes nobody a
/// wake-up ([`copy_process_vm`]).
async fn clone_vm(
    ctx: &Ctx,
    call: &'static str,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    let _f = ctx.func(crate::label!("kernel_clone"));
    syscall_enter(ctx, call).await;
    let child = copy_process_vm(ctx, name, pin, program, false).await;
    syscall_exit(ctx, call).await;
    child
}

/// `vfork()` (`clone(CLONE_VM | CLONE_VFORK)`, also glibc's
/// `posix_spawn()`): a child process that runs in this task's mm, no copy
/// made (`copy_mm()` with `CLONE_VM`: `mmget()`), until it execs or exits
/// (`mm_release()`); this task waits for that (`wait_for_vfork_done()`).
/// Returns the child's id.
pub async fn sys_vfork(ctx: &Ctx, name: &str, program: Program) -> TaskId {
    let _f = ctx.func(crate::label!("kernel_clone"));
    syscall_enter(ctx, "vfork").await;
    let child = copy_process_vm(ctx, name, None, program, true).await;
    // wait_for_vfork_done(): until complete_vfork_done() in the child.
    while ctx.w.k.borrow().tasks[child].vfork_parent == Some(ctx.task) {
        block_until_woken(ctx).await;
    }
    syscall_exit(ctx, "vfork").await;
    child
}

/// [`sys_vfork`] for a replay, the child pinned to CPU `pin` from its
/// creation if given, and without the parent's wait: the trace has it
/// (the parent's sleep until the child's wake-up at its exec).
pub async fn sys_vfork_replayed(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
) -> TaskId {
    clone_vm(ctx, "vfork", name, pin, program).await
}

/// `copy_process()` of a `CLONE_VM` child, a thread or a `vfork()`
/// process: it shares this task's mm (one more user), copies nothing
/// (`fork_ns / 4`), and with `vfork_done` owes this task a wake-up at
/// its [`mm_release`].
async fn copy_process_vm(
    ctx: &Ctx,
    name: &str,
    pin: Option<CpuId>,
    program: Program,
    vfork_done: bool,
) -> TaskId {
    let w = &ctx.w;
    ctx.work(w.profile.kernel.fork_ns / 4).await;
    let mm = ctx.mm().expect("user task");
    // mmget()
    ctx.atomic_inc(|| w.k.borrow_mut().mms[mm].users += 1).await;
    let child = w.new_task(
        name.to_string(),
        Some(mm),
        ctx.cpu(),
        Some(ctx.task),
        program,
    );
    let affinity = child_affinity(w, ctx.task, pin);
    {
        let mut k = w.k.borrow_mut();
        k.tasks[ctx.task].children += 1;
        k.tasks[child].state = TaskState::Runnable;
        k.tasks[child].affinity = affinity;
        k.tasks[child].vfork_parent = vfork_done.then_some(ctx.task);
    }
    enqueue(ctx, child, true).await; // wake_up_new_task()
    child
}

/// `mm_release()` → `complete_vfork_done()`: a `vfork()` child that
/// execs or exits wakes the parent waiting in [`sys_vfork`].
pub(super) async fn mm_release(ctx: &Ctx) {
    let parent = ctx.w.k.borrow_mut().tasks[ctx.task].vfork_parent.take();
    if let Some(p) = parent {
        wake_up(ctx, p).await;
    }
}

/// Starts a kernel thread on `cpu` (no mm: it borrows one lazily).
pub fn spawn_kthread(w: &Rc<World>, name: &str, cpu: CpuId, program: Program) -> TaskId {
    let t = w.new_task(name.to_string(), None, cpu, None, program);
    let mut k = w.k.borrow_mut();
    k.tasks[t].state = TaskState::Runnable;
    k.tasks[t].queued = true;
    let mut m = crate::hw::cpumask::CpuMask::new(w.ncpus());
    m.set(cpu);
    k.tasks[t].affinity = Some(m);
    k.cpus[cpu].rq.push_back(t);
    k.cpus[cpu].need_resched = true;
    t
}

/// Starts the first user process (like init) on `cpu` with a new mm.
pub fn spawn_user(w: &Rc<World>, name: &str, cpu: CpuId, program: Program) -> TaskId {
    let mm = w.new_mm();
    let t = w.new_task(name.to_string(), Some(mm), cpu, None, program);
    let mut k = w.k.borrow_mut();
    k.tasks[t].state = TaskState::Runnable;
    k.tasks[t].queued = true;
    k.cpus[cpu].rq.push_back(t);
    k.cpus[cpu].need_resched = true;
    t
}

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
        let vmas = k.mms[old].vmas.clone();
        let base = k.mms[old].mmap_base;
        let (start_brk, brk) = (k.mms[old].start_brk, k.mms[old].brk);
        let family = k.mms[old].family;
        let child = &mut k.mms[new];
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
    // Huge pages are split (a hugetlb VMA's are not: its page tables are
    // not copied, see kernel/mm/hugetlb.rs).
    for v in vmas.values() {
        if !super::mm::hugetlb::is_vm_hugetlb_page(v) {
            split_huge_range(ctx, old, v.start, v.end).await;
        }
    }
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
            let m = &mut k.mms[mm];
            m.users -= 1;
            m.users == 0
        })
        .await;
    if !last {
        return;
    }
    let mut g = MmuGather::begin(ctx, mm, true).await;
    let vmas: Vec<Vma> = w.k.borrow().mms[mm].vmas.values().copied().collect();
    g.unmap_vmas(ctx, &vmas, 0, TASK_SIZE).await;
    let removed: Vec<Vma> = std::mem::take(&mut w.k.borrow_mut().mms[mm].vmas)
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
            let m = &mut k.mms[mm];
            m.count -= 1;
            m.count == 0
        })
        .await;
    if last {
        let pgd = w.k.borrow().mms[mm].pgd;
        let instance = w.hw.borrow().mem.table(pgd).instance;
        w.hw.borrow_mut().mem.free_table(pgd);
        w.k.borrow_mut().mms[mm].live = false;
        w.emit(Event::TableFree {
            cpu: ctx.cpu(),
            mm,
            table: pgd,
            instance,
        });
        w.emit(Event::MmFree { mm });
    }
}
