//! Page migration between NUMA nodes (mm/mempolicy.c, mm/migrate.c):
//! `migrate_pages(2)`, as the `migratepages` tool drives it, moves every
//! page of a process that lies on one node to another.
//!
//! Before Linux 6.3 `migrate_pages()` moves one folio at a time
//! (`unmap_and_move()`: its lock, `try_to_migrate()` with an immediate
//! flush, the copy). Since 6.3 (7e12beb8ca2a, `[kernel]
//! migrate_batch_flush`) `migrate_pages(2)`'s `MIGRATE_SYNC` mode runs
//! `migrate_pages_sync()`: each batch first in `MIGRATE_ASYNC` mode
//! (`migrate_pages_batch()`: every folio try-locked, a busy one left for
//! later, the batch unmapped with `TTU_BATCH_FLUSH` and flushed once,
//! `try_to_unmap_flush()`, before any page is copied: a translation still
//! live during the copy could write to the old page after it was copied,
//! a lost write), then each folio left over alone, synchronously (its lock
//! waited for, its unmap flushed at once). No folio lock is waited for
//! while another is held.
//!
//! Shmem and private anonymous folios move (an anonymous one leaves
//! migration entries in its PTEs while it moves, and takes its swap-cache
//! entry with it).

use super::folio::{folio_lock, folio_lock_new, folio_trylock, folio_unlock, Folio, Mapping};
use super::pgtable::{get_pte, get_swp_entry, present_ptes, pte_tables, set_pte, set_swp_entry};
use super::rmap::try_to_migrate;
use super::shmem::{cpu_node, ShmemEntry};
use super::tlbbatch::try_to_unmap_flush;
use crate::hw::mem::{Pfn, Pte, SwpEntry};
use crate::hw::tlb::MmId;
use crate::kernel::entry::{syscall_enter, syscall_exit};
use crate::kernel::{Ctx, TaskId, Vma};

/// `migrate_pages(pid, maxnode, old_nodes, new_nodes)` for one node pair
/// (`do_migrate_pages()` with `MPOL_MF_MOVE_ALL`): under `target`'s
/// `mmap_lock`, isolates every resident shmem folio it maps on node `from`
/// and moves them to node `to`. Returns the folios moved.
pub async fn sys_migrate_pages(ctx: &Ctx, target: TaskId, from: u32, to: u32) -> u64 {
    let _f = ctx.func(crate::label!("kernel_migrate_pages"));
    syscall_enter(ctx, "migrate_pages").await;
    let mm = ctx.w.k.borrow().tasks[target].mm;
    let mut moved = 0;
    if let Some(mm) = mm.filter(|&m| ctx.w.k.borrow().mms[m].live) {
        ctx.mmap_read_lock(mm).await;
        let folios = queue_pages(ctx, mm, from).await;
        moved = migrate_pages(ctx, &folios, to).await;
        ctx.mmap_read_unlock(mm).await;
    }
    syscall_exit(ctx, "migrate_pages").await;
    moved
}

/// `queue_pages_range()` → `queue_folios_pte_range()`: per PTE table of
/// each VMA of `mm`, under its lock, isolates the folios on node `from`
/// not already isolated.
async fn queue_pages(ctx: &Ctx, mm: MmId, from: u32) -> Vec<Pfn> {
    let _f = ctx.func(crate::label!("queue_pages_range"));
    let w = &ctx.w;
    let vmas: Vec<Vma> = w.k.borrow().mms[mm].vmas.values().copied().collect();
    let mut out = Vec::new();
    for v in vmas {
        for table_va in pte_tables(w, mm, v.start, v.end) {
            let span = w.granule.pmd_size();
            let (lo, hi) = (v.start.max(table_va), v.end.min(table_va + span));
            ctx.ptl_lock(mm, lo).await;
            let ptes = present_ptes(w, mm, lo, hi);
            {
                let mut k = w.k.borrow_mut();
                for (_, p) in &ptes {
                    let on_node = k.folios.get(&p.pfn).is_some_and(|f| f.node == from);
                    if on_node && k.folios.isolate(p.pfn) {
                        out.push(p.pfn);
                        // The isolation's reference.
                        w.hw.borrow_mut().mem.get_frame(p.pfn);
                    }
                }
            }
            ctx.work(w.profile.kernel.pte_update_ns * ptes.len() as u64)
                .await;
            ctx.ptl_unlock(mm, lo).await;
        }
    }
    out
}

/// The profile's NUMA costs; a workload that migrates refuses a profile
/// without them before running (`Workload::check`).
fn numa(w: &crate::kernel::World) -> &crate::config::NumaParams {
    w.profile
        .numa
        .as_ref()
        .expect("a migrating workload runs only on a profile with [numa] (checked at setup)")
}

/// One folio of a batch after its unmap.
struct Unmapped {
    src: Pfn,
    dst: Pfn,
    /// Where it was mapped, and how.
    ptes: Vec<(MmId, u64, Pte)>,
}

/// `migrate_pages()` in `MIGRATE_SYNC` mode (module doc): before 6.3 one
/// folio at a time (`unmap_and_move()`); from 6.3 (`[kernel]
/// migrate_batch_flush`) by batches of [`NR_MAX_BATCHED_MIGRATION`], each
/// first in `MIGRATE_ASYNC` mode (`migrate_pages_batch()`), then its busy
/// folios one at a time (`migrate_pages_sync()`'s fallback). A folio
/// someone else still references after its unmap (a fault waiting for
/// its lock) is put back where it was (Linux's `folio_migrate_mapping()`
/// fails with -EAGAIN and retries; the model does not retry). Returns the
/// folios moved.
pub async fn migrate_pages(ctx: &Ctx, folios: &[Pfn], to: u32) -> u64 {
    let mut moved = 0;
    if !ctx.w.kcfg.migrate_batch_flush {
        for &src in folios {
            moved += unmap_and_move(ctx, src, to).await;
        }
    } else {
        for batch in folios.chunks(NR_MAX_BATCHED_MIGRATION) {
            let (m, busy) = migrate_pages_batch(ctx, batch, to).await;
            moved += m;
            for src in busy {
                moved += unmap_and_move(ctx, src, to).await;
            }
        }
    }
    ctx.w.stats.borrow_mut().reclaim.pgmigrate_success += moved;
    moved
}

/// `NR_MAX_BATCHED_MIGRATION`: folios per batch (`HPAGE_PMD_NR`).
pub const NR_MAX_BATCHED_MIGRATION: usize = 512;

/// `migrate_pages_batch()` in `MIGRATE_ASYNC` mode (6.3+): each folio's
/// lock tried (a busy one is left, returned for the synchronous
/// fallback; the model tries before allocating the destination, Linux
/// after, and frees it), the locked ones unmapped
/// (`migrate_folio_unmap()`: destination allocated and locked,
/// `try_to_migrate()` with `TTU_BATCH_FLUSH`), one flush, then each moved
/// ([`migrate_folio_move`]). Returns the folios moved and the busy ones.
async fn migrate_pages_batch(ctx: &Ctx, folios: &[Pfn], to: u32) -> (u64, Vec<Pfn>) {
    let _f = ctx.func(crate::label!("migrate_pages_batch"));
    let w = &ctx.w;
    // A migrating workload refuses a profile without [numa] (its check()).
    let per_folio = numa(w).migrate_folio_ns;
    let (mut unmapped, mut busy) = (Vec::new(), Vec::new());
    for &src in folios {
        ctx.work(per_folio).await;
        if !folio_trylock(ctx, src).await {
            busy.push(src);
            continue;
        }
        let dst = w.hw.borrow_mut().mem.alloc_frame();
        folio_lock_new(ctx, dst);
        let ptes = try_to_migrate(ctx, src, true).await;
        unmapped.push(Unmapped { src, dst, ptes });
    }
    try_to_unmap_flush(ctx).await;
    let mut moved = 0;
    for u in unmapped {
        if migrate_folio_move(ctx, &u, to).await {
            moved += 1;
        }
    }
    (moved, busy)
}

/// One folio alone, synchronously: before 6.3 every folio
/// (`unmap_and_move()`), since then a folio the asynchronous batch found
/// busy. Its lock is waited for (holding no other), its unmap flushed at
/// once, then it is moved. Returns 1 if it moved.
async fn unmap_and_move(ctx: &Ctx, src: Pfn, to: u32) -> u64 {
    let _f = ctx.func(crate::label!("unmap_and_move"));
    let w = &ctx.w;
    ctx.work(numa(w).migrate_folio_ns).await;
    let dst = w.hw.borrow_mut().mem.alloc_frame();
    folio_lock_new(ctx, dst);
    folio_lock(ctx, src).await;
    let ptes = try_to_migrate(ctx, src, false).await;
    let u = Unmapped { src, dst, ptes };
    u64::from(migrate_folio_move(ctx, &u, to).await)
}

/// `migrate_folio_move()`: copies `u.src` to `u.dst`, puts `u.dst` in the
/// page-cache slot, maps it where `u.src` was mapped and frees `u.src`;
/// or, if someone else still references `u.src`, maps `u.src` back and
/// drops `u.dst`. Returns whether it moved.
async fn migrate_folio_move(ctx: &Ctx, u: &Unmapped, to: u32) -> bool {
    let w = &ctx.w;
    let cpu = ctx.cpu();
    let folio = w.k.borrow().folios.get(&u.src).copied();
    let last = u.ptes.last().map(|&(mm, va, _)| (mm, va));
    // Only its cache (a shmem folio's page cache) and the isolation still
    // hold it.
    let refs = w.hw.borrow().mem.frame_refs(u.src);
    let moves = folio.is_some_and(|f| refs == f.cache_refs() + 1);
    // Without a cache, the destination's allocation reference is the
    // migration's own, dropped at the end.
    let cached = folio.is_some_and(|f| f.cache_refs() > 0);
    let (keep, gone) = if moves {
        (u.dst, u.src)
    } else {
        (u.src, u.dst)
    };
    if let (true, Some(f)) = (moves, folio) {
        let remote = f.node != to || cpu_node(w, cpu) != to;
        let n = numa(w);
        let copy = if remote {
            n.page_copy_remote_ns
        } else {
            n.page_copy_local_ns
        };
        ctx.emit(crate::observe::Event::CopyOut { cpu, pfn: u.src });
        ctx.work(copy).await; // folio_copy()
        let mut k = w.k.borrow_mut();
        if let Mapping::Shmem { id, index } = f.mapping {
            k.shmem[id as usize]
                .pages
                .insert(index, ShmemEntry::Folio(u.dst));
        }
        // An anonymous folio in the swap cache: the cache entry moves too
        // (folio_migrate_mapping()).
        if let Some(slot) = f.swap {
            k.swap.cache.insert(slot, u.dst);
        }
        k.folios.remove(&u.src);
        k.folios.add(
            u.dst,
            Folio {
                isolated: false,
                node: to,
                ..f
            },
        );
    } else {
        w.k.borrow_mut().folios.putback(u.src);
    }
    match folio.map(|f| f.mapping) {
        Some(Mapping::Anon {
            family,
            anon,
            index,
        }) => {
            let mappers = super::anon::anon_mappers(w, family, anon, index);
            remove_migration_entries(ctx, keep, u.src, &mappers).await;
        }
        _ => remove_migration_ptes(ctx, keep, &u.ptes).await,
    }
    folio_unlock(ctx, u.dst).await;
    folio_unlock(ctx, u.src).await;
    // The isolation's reference on the source; then, for a folio in a cache
    // (a shmem folio's page cache, an anonymous one's swap cache), the
    // cache's reference on the one that goes (the source once moved; the
    // unused destination otherwise: the destination's allocation reference
    // became the cache's); for an anonymous folio off the swap cache, the
    // destination's allocation reference (its PTEs hold their own).
    let (mm, va) = last.unwrap_or((MmId::new(0), 0));
    w.put_frame(cpu, u.src, mm, va);
    w.put_frame(cpu, if cached { gone } else { u.dst }, mm, va);
    moves
}

/// `remove_migration_ptes()` for a shmem folio: maps `pfn` at every
/// address the migration unmapped, with the permissions it had there,
/// where the PTE is still empty in a live shared VMA.
async fn remove_migration_ptes(ctx: &Ctx, pfn: Pfn, ptes: &[(MmId, u64, Pte)]) {
    let w = &ctx.w;
    for &(mm, va, old) in ptes {
        // The lock taken is the one unlocked, even if mremap moved the
        // table meanwhile (its lock goes with it).
        let ptl = ctx.pte_lockptr(mm, va);
        ctx.spin_lock(ptl).await;
        // The VMA may be gone (an address space that mapped the object
        // exited meanwhile).
        let mapped = {
            let k = w.k.borrow();
            let m = &k.mms[mm];
            m.live
                && m.vmas
                    .range(..=va)
                    .next_back()
                    .is_some_and(|(_, v)| v.end > va && v.shared())
        };
        if mapped && get_pte(w, mm, va).is_none() {
            w.hw.borrow_mut().mem.get_frame(pfn);
            set_pte(w, ctx.cpu(), mm, va, Some((pfn, old.perms)));
            ctx.work(w.profile.kernel.pte_update_ns).await;
        }
        ctx.spin_unlock(ptl).await;
    }
}

/// `remove_migration_ptes()` for an anonymous folio (`rmap_walk()` with
/// `remove_migration_pte()`): at every address the reverse map gives for
/// its page (`mappers`: where its PTEs are now, also after an mremap or
/// in a fork made meanwhile), a migration entry for `src` becomes a PTE
/// mapping `pfn` with the entry's permissions.
pub(super) async fn remove_migration_entries(
    ctx: &Ctx,
    pfn: Pfn,
    src: Pfn,
    mappers: &[(MmId, u64)],
) {
    let w = &ctx.w;
    for &(mm, va) in mappers {
        let ptl = ctx.pte_lockptr(mm, va);
        ctx.spin_lock(ptl).await;
        if let Some(SwpEntry::Migration(old)) = get_swp_entry(w, mm, va) {
            if old.pfn == src {
                set_swp_entry(w, mm, va, None);
                w.hw.borrow_mut().mem.get_frame(pfn);
                set_pte(w, ctx.cpu(), mm, va, Some((pfn, old.perms)));
                ctx.work(w.profile.kernel.pte_update_ns).await;
            }
        }
        ctx.spin_unlock(ptl).await;
    }
}

/// `migration_entry_wait()`: a fault found the migration entry of `old`
/// in the PTE of `mm` at `va`; it waits for the folio's lock (held until
/// the migration ends), then returns, and the access retries. The folio
/// is alive while an entry refers to it (its isolation holds it); a
/// reference is taken before the wait.
pub async fn migration_entry_wait(ctx: &Ctx, mm: MmId, va: u64, old: Pte) {
    let _f = ctx.func(crate::label!("migration_entry_wait"));
    let w = &ctx.w;
    w.hw.borrow_mut().mem.get_frame(old.pfn);
    folio_lock(ctx, old.pfn).await;
    folio_unlock(ctx, old.pfn).await;
    w.put_frame(ctx.cpu(), old.pfn, mm, va);
}
