//! Kernel-model scenarios built directly on the library API.

use std::cell::Cell;
use std::rc::Rc;
use tlbsim::config::KernelConfig;
use tlbsim::driver::TimingDriver;
use tlbsim::hw::mem::{Granule, Perms, PAGE_SIZE_4K as PAGE_SIZE};
use tlbsim::hw::tlb::MmId;
use tlbsim::kernel::fork::{spawn_kthread, spawn_user};
use tlbsim::kernel::mm::sys_mmap;
use tlbsim::kernel::{Ctx, TaskState, World};

fn world(cpus: u32) -> Rc<World> {
    world_on("ampere-32", cpus)
}

/// A world on profile `name` cut to `cpus` CPUs, with the checker.
fn world_on(name: &str, cpus: u32) -> Rc<World> {
    super::common::world_with(name, cpus, KernelConfig::default())
}

/// A world on ampere-32 cut to `cpus` CPUs with 64 KiB pages, with the
/// checker.
fn world_64k(cpus: u32) -> Rc<World> {
    let k = KernelConfig {
        granule: Granule::K64,
        ..KernelConfig::default()
    };
    super::common::world_with("ampere-32", cpus, k)
}

#[test]
fn with_64k_pages_one_fault_maps_sixteen_4k_touches() {
    use tlbsim::kernel::mm::pgtable::get_pte;
    let w = world_64k(1);
    let seen: Rc<Cell<(u64, u64, bool)>> = Rc::default();
    let out = Rc::clone(&seen);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let w = Rc::clone(&ctx.w);
                let mm = ctx.mm().unwrap();
                let faults = |w: &World| w.stats.borrow().total().page_faults;
                // Two 64 KiB pages, written 4 KiB at a time.
                let p = sys_mmap(&ctx, 2 * 65536, Perms::RW).await;
                assert_eq!(p % 65536, 0, "64 KiB aligned");
                let before = faults(&w);
                for i in 0..32 {
                    ctx.user_access(p + i * PAGE_SIZE, true).await;
                }
                let n = faults(&w) - before;
                let pte = |va| get_pte(&w, mm, va).map(|p| p.pfn);
                let same = pte(p) == pte(p + 0xf000) && pte(p) != pte(p + 0x1_0000);
                out.set((n, w.stats.borrow().total().page_faults, same));
            })
        }),
    );
    let (n, _, same) = seen.get();
    assert_eq!(n, 2, "one write fault per 64 KiB page");
    assert!(same, "a PTE maps the whole 64 KiB page");
}

#[test]
fn with_64k_pages_mmap_mprotect_and_munmap_lengths_round_to_64k() {
    let w = world_64k(1);
    let seen: Rc<Cell<(u64, u64, bool, bool)>> = Rc::default();
    let out = Rc::clone(&seen);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                use tlbsim::kernel::mm::{sys_mprotect, sys_munmap};
                let w = Rc::clone(&ctx.w);
                let mm = ctx.mm().unwrap();
                let vma = |w: &World, va: u64| {
                    let k = w.k.borrow();
                    let v = k.mms[mm]
                        .vmas
                        .values()
                        .find(|v| v.start <= va && va < v.end)
                        .copied();
                    v
                };
                // PAGE_ALIGN(1) = 64 KiB, and a 64 KiB gap to the next.
                let a = sys_mmap(&ctx, 1, Perms::RW).await;
                let b = sys_mmap(&ctx, 4096, Perms::RW).await;
                let len = vma(&w, a).map(|v| v.end - v.start).unwrap();
                // mprotect of 4 KiB covers the whole page.
                assert!(sys_mprotect(&ctx, a, 4096, Perms::R).await);
                let ro = vma(&w, a + 0xf000).is_some_and(|v| v.perms == Perms::R);
                // munmap of 1 byte removes the whole page.
                sys_munmap(&ctx, b, 1).await;
                let gone = vma(&w, b + 0x8000).is_none();
                out.set((len, a - b, ro, gone));
            })
        }),
    );
    assert_eq!(seen.get(), (65536, 2 * 65536, true, true));
}

use super::common::{self, run_process};

/// Maps `pages` private pages and writes each; returns the address.
async fn written_private_pages(ctx: &Ctx, pages: u64) -> u64 {
    use tlbsim::kernel::mm::swap::PageData;
    use tlbsim::kernel::mm::sys_mmap_private;
    let p = sys_mmap_private(ctx, pages * PAGE_SIZE, Perms::RW, PageData::Compressible).await;
    for i in 0..pages {
        ctx.user_access(p + i * PAGE_SIZE, true).await;
    }
    p
}

/// What the kernel thread saw: its active_mm, TTBR0's mm, that mm's mm_count.
type Seen = (Option<MmId>, Option<MmId>, u32);

#[test]
fn a_kernel_thread_borrows_the_previous_mm_lazily() {
    let w = world(2);
    // A user process on CPU0 computes for 10 ms (longer than a 4 ms slice).
    let user = spawn_user(
        &w,
        "user",
        common::cpuid(0),
        Box::new(|ctx: Ctx| {
            Box::pin(async move {
                let p = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                ctx.user_access(p, true).await;
                ctx.user_work(10_000_000).await;
                ctx.user_access(p, false).await;
            })
        }),
    );
    let user_mm = w.k.borrow().tasks[user].mm.unwrap();
    // A kernel thread on CPU0 runs when the user's slice ends.
    let seen: Rc<Cell<Option<Seen>>> = Rc::default();
    let seen2 = Rc::clone(&seen);
    let kt = spawn_kthread(
        &w,
        "kworker/0",
        common::cpuid(0),
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                ctx.work(5_000).await;
                let k = ctx.w.k.borrow();
                let me = &k.tasks[ctx.task];
                let ttbr_mm = ctx.w.hw.borrow().cpus[ctx.cpu()].ttbr0().map(|t| t.mm);
                let count = me.active_mm.map_or(0, |m| k.mms[m].count);
                seen2.set(Some((me.active_mm, ttbr_mm, count)));
            })
        }),
    );
    let mut d = TimingDriver::new(Rc::clone(&w), 1_000_000_000);
    let end = d
        .run_until(|w| {
            let k = w.k.borrow();
            k.tasks[user].state == TaskState::Zombie && k.tasks[kt].state == TaskState::Zombie
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(end >= 10_000_000);
    let (active, ttbr, count) = seen.get().expect("the kernel thread ran");
    assert_eq!(active, Some(user_mm), "kthread borrows the user's mm");
    assert_eq!(
        ttbr,
        Some(user_mm),
        "TTBR0 keeps pointing at it (arm64 lazy TLB)"
    );
    assert_eq!(count, 2, "mm_count: the user plus the lazy borrower");
    assert!(w.failure().is_none());
    let k = w.k.borrow();
    assert_eq!(k.mms[user_mm].users, 0, "exit released the mm");
    assert_eq!(
        k.tasks[user].cpu,
        common::cpuid(1),
        "a preempted task is re-queued on the idle CPU"
    );
}

#[test]
fn swap_entries_survive_fork_and_mremap_and_every_slot_is_freed_at_the_end() {
    use tlbsim::kernel::exit::sys_wait;
    use tlbsim::kernel::fork::sys_fork;
    use tlbsim::kernel::mm::madvise::sys_madvise_pageout;
    use tlbsim::kernel::mm::mremap::sys_mremap;
    use tlbsim::kernel::mm::sys_munmap;
    const PAGES: u64 = 4;
    let w = world(2);
    let swapped: Rc<Cell<(usize, usize)>> = Rc::default();
    let seen = Rc::clone(&swapped);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let len = PAGES * PAGE_SIZE;
                let p = written_private_pages(&ctx, PAGES).await;
                sys_madvise_pageout(&ctx, p, len).await;
                {
                    let k = ctx.w.k.borrow();
                    seen.set((k.swap.used, k.folios.len()));
                }
                // The child shares the swap entries: it reads page 0 (into
                // the swap cache: the parent's entry still refers to the
                // slot) and writes page 1 (a copy of its own).
                let child = Box::new(move |c: Ctx| -> tlbsim::kernel::TaskFuture {
                    Box::pin(async move {
                        c.user_access(p, false).await;
                        c.user_access(p + PAGE_SIZE, true).await;
                    })
                });
                sys_fork(&ctx, "child", child).await;
                while sys_wait(&ctx).await.is_some() {}
                // The parent moves the mapping and reads every page back.
                let q = sys_mremap(&ctx, p, len).await.expect("one VMA");
                for i in 0..PAGES {
                    ctx.user_access(q + i * PAGE_SIZE, false).await;
                }
                sys_munmap(&ctx, q, len).await;
            })
        }),
    );
    assert_eq!(swapped.get(), (PAGES as usize, 0), "all paged out");
    let st = w.stats.borrow();
    // 4 out, no second write; 4 in: the child reads pages 0 and 1 into
    // the swap cache (the parent's entries still refer to their slots),
    // where the parent finds them, and the parent reads pages 2 and 3.
    assert_eq!((st.reclaim.pswpout, st.reclaim.pswpin), (4, 4));
    let k = w.k.borrow();
    assert_eq!(k.swap.used, 0, "every slot freed");
    assert!(k.swap.cache.is_empty());
    assert!(k.folios.is_empty(), "every folio freed");
}

#[test]
fn madv_free_pages_are_dropped_unless_written_again() {
    use tlbsim::kernel::mm::madvise::{sys_madvise_free, sys_madvise_pageout};
    const PAGES: u64 = 4;
    let w = world(2);
    let after: Rc<Cell<[u64; 3]>> = Rc::default();
    let seen = Rc::clone(&after);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let len = PAGES * PAGE_SIZE;
                let p = written_private_pages(&ctx, PAGES).await;
                sys_madvise_free(&ctx, p, len).await;
                // Page 0 is written again: it must not be dropped.
                ctx.user_access(p, true).await;
                sys_madvise_pageout(&ctx, p, len).await;
                let r = ctx.w.stats.borrow().reclaim;
                seen.set([r.pgsteal, r.kept, r.pswpout]);
                // The next page-out writes page 0 to swap.
                sys_madvise_pageout(&ctx, p, len).await;
                for i in 0..PAGES {
                    ctx.user_access(p + i * PAGE_SIZE, false).await;
                }
            })
        }),
    );
    // Three clean pages dropped without a write; page 0, written again,
    // kept mapped (its PTE put back) and swap-backed again.
    assert_eq!(after.get(), [3, 1, 0]);
    let r = &w.stats.borrow().reclaim;
    // Then written out and read back; the dropped pages read as the zero
    // page (no swap-in).
    assert_eq!((r.pgsteal, r.pswpout, r.pswpin), (4, 1, 1));
    let k = w.k.borrow();
    assert_eq!(k.swap.used, 0, "every slot freed at exit");
}

#[test]
fn a_swap_cache_page_migrates_with_its_cache_entry() {
    use tlbsim::kernel::exit::sys_wait;
    use tlbsim::kernel::fork::sys_fork;
    use tlbsim::kernel::mm::madvise::sys_madvise_pageout;
    use tlbsim::kernel::mm::migrate::sys_migrate_pages;
    use tlbsim::kernel::mm::pgtable::get_pte;
    // Two nodes, CPUs 0-1 on node 0: pages are allocated on node 0.
    let w = world_on("ampere-2s", 4);
    let seen: Rc<Cell<[u64; 2]>> = Rc::default();
    let child_saw = Rc::clone(&seen);
    let parent_saw = Rc::clone(&seen);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let p = written_private_pages(&ctx, 1).await;
                sys_madvise_pageout(&ctx, p, PAGE_SIZE).await;
                // The child reads the page back into the swap cache (the
                // parent's swap entry still uses the slot), then migrates
                // itself to node 1: the folio moves with its cache entry.
                let child = Box::new(move |c: Ctx| -> tlbsim::kernel::TaskFuture {
                    Box::pin(async move {
                        c.user_access(p, false).await;
                        sys_migrate_pages(&c, c.task, 0, 1).await;
                        let mm = c.mm().unwrap();
                        let pfn = get_pte(&c.w, mm, p).map_or(0, |x| x.pfn);
                        let s = child_saw.get();
                        child_saw.set([pfn, s[1]]);
                    })
                });
                sys_fork(&ctx, "child", child).await;
                while sys_wait(&ctx).await.is_some() {}
                // The parent's fault finds the moved folio in the swap cache.
                ctx.user_access(p, false).await;
                let pfn = get_pte(&ctx.w, ctx.mm().unwrap(), p).map_or(0, |x| x.pfn);
                let s = parent_saw.get();
                parent_saw.set([s[0], pfn]);
            })
        }),
    );
    let [child_pfn, parent_pfn] = seen.get();
    assert_ne!(child_pfn, 0);
    assert_eq!(child_pfn, parent_pfn, "both map the migrated frame");
    let st = w.stats.borrow();
    assert_eq!(st.reclaim.pgmigrate_success, 1);
    assert_eq!((st.reclaim.pswpout, st.reclaim.pswpin), (1, 1), "read once");
    assert_eq!(w.k.borrow().swap.used, 0, "every slot freed at exit");
}

#[test]
fn hackbench_over_sockets_blocks_senders_on_the_shared_send_buffer() {
    // One group of 4 senders and 4 receivers, 200 messages each way. With
    // a send buffer of 3 messages (2 x 704 + 2 bytes) the senders sharing
    // a receiver's socket block and are woken together once it drains to
    // a quarter: many more context switches than with Linux 3.5's 233.
    let run = |sndbuf: u64| {
        let wl = format!(
            "name = \"hackbench\"\ngroups = 1\nfds = 4\nloops = 50\ntransport = \"socket\"\nsocket_sndbuf_bytes = {sndbuf}"
        );
        let o = super::common::run_ok(&super::common::arm64("arm64-stock", 2, &wl));
        assert_eq!(o.checker.verdict, "pass");
        o.stats.total.context_switches
    };
    let (tight, roomy) = (run(2 * 704 + 2), run(163_840));
    assert!(tight > 2 * roomy, "tight {tight} vs roomy {roomy}");
    // The pipe transport still runs the same workload.
    let wl = "name = \"hackbench\"\ngroups = 1\nfds = 4\nloops = 50\ntransport = \"pipe\"";
    let o = super::common::run_ok(&super::common::arm64("arm64-stock", 2, wl));
    assert_eq!(o.checker.verdict, "pass");
    // An unknown transport is an error naming the parameter.
    let bad = "name = \"hackbench\"\ntransport = \"udp\"";
    let e = tlbsim::sim::run(
        &super::common::arm64("arm64-stock", 2, bad),
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[workload] transport"), "{e}");
}

#[test]
fn brk_grows_without_flushing_shrinks_like_munmap_and_fork_inherits_the_break() {
    use tlbsim::kernel::exit::sys_wait;
    use tlbsim::kernel::fork::sys_fork;
    use tlbsim::kernel::mm::brk::{sys_brk, START_BRK};
    let w = world(2);
    let seen: Rc<Cell<[u64; 6]>> = Rc::default();
    let out = Rc::clone(&seen);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let flushes = |c: &Ctx| {
                    let t = c.w.stats.borrow().total();
                    t.flushes_broadcast + t.flushes_local + t.flushes_skipped
                };
                // brk(0) asks for the break; growing maps nothing.
                let b0 = sys_brk(&ctx, 0).await;
                let b1 = sys_brk(&ctx, b0 + 3 * PAGE_SIZE + 10).await;
                let grown = flushes(&ctx);
                for i in 0..3 {
                    assert!(ctx.user_access(b0 + i * PAGE_SIZE, true).await);
                }
                // The child inherits the heap and the break.
                let child = Box::new(move |c: Ctx| -> tlbsim::kernel::TaskFuture {
                    Box::pin(async move {
                        assert_eq!(sys_brk(&c, 0).await, b1);
                        assert!(c.user_access(b0, true).await);
                    })
                });
                sys_fork(&ctx, "child", child).await;
                while sys_wait(&ctx).await.is_some() {}
                let before = flushes(&ctx);
                // Shrinking to one page unmaps the two touched pages above.
                let b2 = sys_brk(&ctx, b0 + PAGE_SIZE).await;
                let shrunk = flushes(&ctx) - before;
                let gone = !ctx.user_access(b0 + PAGE_SIZE, false).await;
                assert!(ctx.user_access(b0, true).await, "the page below stays");
                // Below start_brk: refused, the break stays.
                let b3 = sys_brk(&ctx, START_BRK - PAGE_SIZE).await;
                out.set([b0, b1, grown, b2, shrunk + 10 * u64::from(gone), b3]);
            })
        }),
    );
    let [b0, b1, grown, b2, shrunk, b3] = seen.get();
    assert_eq!(b0, START_BRK);
    assert_eq!(b1, START_BRK + 3 * PAGE_SIZE + 10);
    assert_eq!(grown, 0, "no flush while only growing");
    assert_eq!(b2, START_BRK + PAGE_SIZE);
    assert_eq!(
        shrunk,
        1 + 10,
        "one range flush, and the pages are unmapped"
    );
    assert_eq!(b3, b2);
}

/// A 2-CPU Skylake world with THP on and the huge zero page as `mode`,
/// under x86 `policy`, with the checker.
fn huge_zero_world(policy: &str, mode: tlbsim::config::ThpZeroPage) -> Rc<World> {
    let k = KernelConfig {
        tlb_policy: policy.into(),
        asid_allocator: "none".into(),
        thp: tlbsim::config::Thp::Always,
        thp_huge_zero_page: mode,
        ..KernelConfig::default()
    };
    super::common::world_with("skylake-4c8t", 2, k)
}

/// What [`huge_zero_cow`] saw.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct ZeroCow {
    /// After the read: 2 MiB leaves over the region, and whether the one
    /// leaf is the huge zero page, read-only; PTE tables there.
    read_leaves: usize,
    read_zero_ro: bool,
    read_tables: usize,
    /// Page faults taken by reading all 512 pages.
    read_faults: u64,
    /// Flushes and CPU1's flush IPIs during the first write.
    write_flushes: u64,
    write_ipis_cpu1: u64,
    /// After the write: the leaf at the region is huge and writable (not
    /// the zero page); the PTE of its second page is the 4 KiB zero page.
    written_huge_rw: bool,
    second_pte_zero: bool,
    /// CPU1 still caches its unrelated 4 KiB page after the write's flush.
    cpu1_kept_other: bool,
}

/// CPU0 maps 6 MiB and reads the first aligned 2 MiB; a thread on CPU1
/// writes an unrelated page and reads the same 2 MiB, then computes (it
/// stays in `mm_cpumask`, not lazy); CPU0 writes the 2 MiB's first page.
fn huge_zero_cow(policy: &str, mode: tlbsim::config::ThpZeroPage) -> ZeroCow {
    const HPAGE_SIZE: u64 = 2 << 20;
    use tlbsim::kernel::fork::sys_clone_thread;
    use tlbsim::kernel::mm::pgtable::{get_pte, huge_leaves, pte_tables};
    let w = huge_zero_world(policy, mode);
    let seen: Rc<Cell<ZeroCow>> = Rc::default();
    let out = Rc::clone(&seen);
    run_process(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let w = Rc::clone(&ctx.w);
                let mm = ctx.mm().unwrap();
                let mut s = ZeroCow::default();
                let p = sys_mmap(&ctx, 3 * HPAGE_SIZE, Perms::RW).await;
                let other = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                let base = (p + HPAGE_SIZE - 1) & !(HPAGE_SIZE - 1);
                let faults = |w: &World| w.stats.borrow().total().page_faults;
                let f0 = faults(&w);
                for i in 0..512 {
                    assert!(ctx.user_access(base + i * PAGE_SIZE, false).await);
                }
                s.read_faults = faults(&w) - f0;
                let leaves = huge_leaves(&w, mm, base, base + HPAGE_SIZE);
                s.read_leaves = leaves.len();
                s.read_zero_ro = leaves.first().is_some_and(|&(_, l)| {
                    w.hw.borrow().mem.is_huge_zero_pfn(l.pfn) && l.perms == Perms::R
                });
                s.read_tables = pte_tables(&w, mm, base, base + HPAGE_SIZE).len();
                let ready: Rc<Cell<bool>> = Rc::default();
                let set = Rc::clone(&ready);
                sys_clone_thread(
                    &ctx,
                    "reader",
                    Some(common::cpuid(1)),
                    Box::new(move |c: Ctx| {
                        Box::pin(async move {
                            assert!(c.user_access(other, true).await);
                            assert!(c.user_access(base + PAGE_SIZE, false).await);
                            set.set(true);
                            c.user_work(2_000_000).await;
                        })
                    }),
                )
                .await;
                while !ready.get() {
                    ctx.user_work(10_000).await;
                }
                // flush_tlb_range/page/mm calls (each timed once).
                let flushes = |w: &World| w.stats.borrow().flush_latency_ns.summary().count;
                let ipis1 = |w: &World| {
                    let c = &w.stats.borrow().cpu[common::cpuid(1)];
                    c.ipi_call + c.ipi_call_single
                };
                let (fl0, ipi0) = (flushes(&w), ipis1(&w));
                assert!(ctx.user_access(base, true).await);
                s.write_flushes = flushes(&w) - fl0;
                s.write_ipis_cpu1 = ipis1(&w) - ipi0;
                s.written_huge_rw = huge_leaves(&w, mm, base, base + HPAGE_SIZE)
                    .first()
                    .is_some_and(|&(_, l)| {
                        !w.hw.borrow().mem.is_huge_zero_pfn(l.pfn) && l.perms == Perms::RW
                    });
                s.second_pte_zero = get_pte(&w, mm, base + PAGE_SIZE)
                    .is_some_and(|p| p.pfn == tlbsim::hw::mem::ZERO_PFN && p.perms == Perms::R);
                s.cpu1_kept_other = w.hw.borrow().cpus[common::cpuid(1)]
                    .tlb
                    .leaf_entries_for(other / PAGE_SIZE)
                    .any(|e| e.vpn == other / PAGE_SIZE);
                out.set(s);
            })
        }),
    );
    seen.get()
}

#[test]
fn the_huge_zero_page_is_mapped_on_read_and_copied_with_one_2mib_flush() {
    use tlbsim::config::ThpZeroPage;
    // 3.8-5.7: the read maps the huge zero page (one fault, one read-only
    // PMD leaf, no PTE table); the first write copies it into a new huge
    // page with one flush of its 2 MiB, which IPIs CPU1 (running, in
    // mm_cpumask). Kernels before 4.20 count that flush in 4 KiB pages
    // (512 > 33): a full flush, so CPU1 also loses an unrelated entry;
    // 4.20+ invalidate one 2 MiB entry and CPU1 keeps it.
    for (policy, full) in [
        ("x86-lazy-legacy", true),
        ("x86-tlb-gen-before-b956575", true),
        ("x86-tlb-gen", false),
    ] {
        let s = huge_zero_cow(policy, ThpZeroPage::CowAlloc);
        assert_eq!(
            (s.read_leaves, s.read_zero_ro, s.read_tables, s.read_faults),
            (1, true, 0, 1),
            "{policy}: {s:?}"
        );
        assert_eq!(
            (s.write_flushes, s.write_ipis_cpu1),
            (1, 1),
            "{policy}: {s:?}"
        );
        assert!(s.written_huge_rw, "{policy}: {s:?}");
        assert_eq!(s.cpu1_kept_other, !full, "{policy}: {s:?}");
    }
    // 5.8+: the write splits the huge zero page (its 2 MiB flush) into
    // 4 KiB zero-page PTEs and the retry copies one of them (a page flush).
    let s = huge_zero_cow("x86-tlb-gen", ThpZeroPage::CowSplit);
    assert_eq!((s.read_leaves, s.read_zero_ro), (1, true), "{s:?}");
    assert_eq!((s.write_flushes, s.write_ipis_cpu1), (2, 2), "{s:?}");
    assert!(!s.written_huge_rw && s.second_pte_zero, "{s:?}");
    // Off (the model's default): the read maps the 4 KiB zero page, which
    // leaves a PTE table, one fault per page.
    let s = huge_zero_cow("x86-tlb-gen", ThpZeroPage::Off);
    assert_eq!(
        (s.read_leaves, s.read_tables, s.read_faults),
        (0, 1, 512),
        "{s:?}"
    );
    // use_zero_page = 0: the read allocates the huge page, the write
    // needs no fault and no flush.
    let s = huge_zero_cow("x86-tlb-gen", ThpZeroPage::AllocOnRead);
    assert_eq!(
        (s.read_leaves, s.read_zero_ro, s.read_faults),
        (1, false, 1),
        "{s:?}"
    );
    assert_eq!((s.write_flushes, s.written_huge_rw), (0, true), "{s:?}");
}

#[test]
fn exec_moves_its_argument_page_to_a_random_depth_with_two_flushes() {
    use tlbsim::kernel::exec::sys_exec;
    use tlbsim::kernel::mm::pgtable::get_pte;
    use tlbsim::kernel::mm::TASK_SIZE;
    // (VMAs, the stack VMA's range, its page mapped there, flushes, tables
    // freed) after one exec, at 4 and 64 KiB pages.
    type Seen = (usize, u64, u64, bool, u64, u64);
    let exec = |k: KernelConfig| {
        let w = super::common::world_with("ampere-32", 2, k);
        let seen: Rc<Cell<Seen>> = Rc::default();
        let out = Rc::clone(&seen);
        run_process(
            &w,
            Box::new(move |ctx: Ctx| {
                Box::pin(async move {
                    let stats = |c: &Ctx| {
                        let st = c.w.stats.borrow();
                        let t = st.total();
                        (t.flushes_broadcast + t.flushes_local, st.tables_freed)
                    };
                    let (f0, t0) = stats(&ctx);
                    sys_exec(&ctx).await;
                    let (f1, t1) = stats(&ctx);
                    let mm = ctx.mm().unwrap();
                    let w = Rc::clone(&ctx.w);
                    let (n, v) = {
                        let k = w.k.borrow();
                        let vmas = &k.mms[mm].vmas;
                        (vmas.len(), *vmas.values().next().unwrap())
                    };
                    let mapped = get_pte(&w, mm, v.start).is_some();
                    out.set((n, v.start, v.end, mapped, f1 - f0, t1 - t0));
                })
            }),
        );
        seen.get()
    };
    for granule in [Granule::K4, Granule::K64] {
        let kib = granule.page_size_kib();
        let page = kib << 10;
        let k = KernelConfig {
            granule,
            ..KernelConfig::default()
        };
        let (n, start, end, mapped, flushes, freed) = exec(k);
        assert_eq!(n, 1, "{kib} KiB: the stack is the new mm's only VMA");
        assert_eq!(end - start, page, "{kib} KiB: one page of strings");
        assert!(end < TASK_SIZE, "{kib} KiB: moved down from the top");
        assert!(TASK_SIZE - end <= 1 << 30, "{kib} KiB: by at most 1 GiB");
        assert!(mapped, "{kib} KiB: the written page moved with it");
        // move_ptes()'s flush, then tlb_finish_mmu()'s over the old range
        // if the page left its PTE table, which is then freed (with 4 KiB
        // pages almost always: 2 MiB tables against a 1 GiB shift).
        assert_eq!(flushes, 1 + freed.min(1), "{kib} KiB: {freed} tables freed");
        if kib == 4 {
            assert!(freed >= 1, "this run's shift leaves the 2 MiB table");
        }
    }
}

/// What the parent of a `vfork()` saw.
#[derive(Debug, Clone, Copy, Default)]
struct Vforked {
    /// The child ran in the parent's mm before its exec.
    shared: bool,
    /// When `sys_vfork` returned, the child had exec'd (its mm is its own).
    execed_first: bool,
    /// Flushes the vfork made (a fork flushes the parent's mm).
    flushes: u64,
}

#[test]
fn vfork_shares_the_mm_and_the_parent_waits_for_the_exec() {
    use tlbsim::kernel::exec::sys_exec;
    use tlbsim::kernel::fork::sys_vfork;
    let k = KernelConfig {
        tlb_policy: "x86-tlb-gen".into(),
        asid_allocator: "none".into(),
        ..KernelConfig::default()
    };
    let w = super::common::world_with("skylake-4c8t", 2, k);
    let v = super::common::run_process_for(&w, move |ctx: Ctx| async move {
        let mine = ctx.mm();
        let seen: Rc<Cell<bool>> = Rc::default();
        let saw = Rc::clone(&seen);
        let flushes = |w: &World| w.stats.borrow().flush_latency_ns.summary().count;
        let f0 = flushes(&ctx.w);
        let child = sys_vfork(
            &ctx,
            "child",
            Box::new(move |c| {
                Box::pin(async move {
                    saw.set(c.mm() == mine);
                    c.user_work(50_000).await;
                    sys_exec(&c).await;
                    c.user_work(50_000).await;
                })
            }),
        )
        .await;
        let execed = ctx.w.k.borrow().tasks[child].mm != mine;
        Vforked {
            shared: seen.get(),
            execed_first: execed,
            flushes: flushes(&ctx.w) - f0,
        }
    });
    assert!(v.shared && v.execed_first, "{v:?}");
    assert_eq!(v.flushes, 0, "a vfork copies and flushes nothing");
}

#[test]
fn device_migration_moves_a_written_page_and_frees_the_old_frame() {
    // The test_hmm ioctl (migrate_vma_setup(), migrate_vma_pages(),
    // migrate_vma_finalize()) on a written page maps a new frame at the
    // same address with the same permissions and frees the old one; a
    // page mapped by a fork's child too is moved in both; the zero page
    // is not taken.
    use tlbsim::kernel::fork::sys_fork;
    use tlbsim::kernel::mm::migrate_device::sys_dmirror_migrate;
    use tlbsim::kernel::mm::pgtable::get_pte;
    let k = KernelConfig {
        tlb_policy: "x86-pcid-6.0".into(),
        asid_allocator: "none".into(),
        ..KernelConfig::default()
    };
    let w = super::common::world_with("skylake-4c8t", 2, k);
    let v = super::common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let p = sys_mmap(&ctx, 2 * PAGE_SIZE, Perms::RW).await;
        ctx.user_access(p, true).await;
        ctx.user_access(p + PAGE_SIZE, false).await;
        let old = get_pte(&w, mm, p).unwrap();
        let moved = sys_dmirror_migrate(&ctx, p, 2 * PAGE_SIZE).await;
        let new = get_pte(&w, mm, p).unwrap();
        let freed = w.hw.borrow().mem.frame_refs(old.pfn) == 0;
        let same_perms = new.perms == old.perms && new.pfn != old.pfn;
        // A fork shares the page: both mappings move.
        let (child_pfn, parent_pfn): (Rc<Cell<u64>>, u64);
        child_pfn = Rc::default();
        let seen = Rc::clone(&child_pfn);
        sys_fork(
            &ctx,
            "child",
            Box::new(move |c| {
                Box::pin(async move {
                    c.user_work(200_000).await;
                    let m = c.mm().unwrap();
                    seen.set(get_pte(&c.w, m, p).map_or(0, |q| q.pfn));
                })
            }),
        )
        .await;
        let again = sys_dmirror_migrate(&ctx, p, PAGE_SIZE).await;
        parent_pfn = get_pte(&w, mm, p).map_or(0, |q| q.pfn);
        while tlbsim::kernel::exit::sys_wait(&ctx).await.is_some() {}
        (
            moved,
            freed,
            same_perms,
            again,
            parent_pfn != new.pfn && parent_pfn == child_pfn.get(),
        )
    });
    assert_eq!(v.0, 1, "the written page moves, the zero page does not");
    assert!(v.1, "the old frame is freed");
    assert!(v.2, "a new frame with the old permissions");
    assert_eq!(v.3, 1, "the page shared with a child moves");
    assert!(v.4, "parent and child map the same new frame");
}

#[test]
fn migrate_pages_6_3_moves_what_it_can_lock_before_waiting_for_a_busy_folio() {
    // Two private pages; a kernel thread holds the second's folio lock
    // for a while. 6.3+'s MIGRATE_SYNC first runs an asynchronous batch
    // that only try-locks: the first page moves at once and the second
    // waits for the synchronous fallback. (The model used to wait for
    // the second's lock while the first was unmapped and locked.)
    use tlbsim::kernel::mm::folio::{folio_lock, folio_unlock};
    use tlbsim::kernel::mm::migrate::migrate_pages;
    use tlbsim::kernel::mm::pgtable::get_pte;
    let k = KernelConfig {
        migrate_batch_flush: true,
        ..KernelConfig::default()
    };
    let w = super::common::world_with("ampere-2s", 2, k);
    // (mm, first page's address, second page's frame), once mapped; then
    // what the locker saw of the first page while it held the second.
    let shared: Rc<Cell<(Option<MmId>, u64, u64)>> = Rc::default();
    let seen: Rc<Cell<u64>> = Rc::default();
    let (sh, saw) = (Rc::clone(&shared), Rc::clone(&seen));
    spawn_kthread(
        &w,
        "locker",
        tlbsim::hw::CpuId::new(1),
        Box::new(move |c: Ctx| {
            Box::pin(async move {
                while sh.get().0.is_none() {
                    c.work(1_000).await;
                }
                let (mm, p, b) = sh.get();
                folio_lock(&c, b).await;
                c.work(200_000).await;
                saw.set(get_pte(&c.w, mm.unwrap(), p).map_or(0, |q| q.pfn));
                folio_unlock(&c, b).await;
            })
        }),
    );
    let v = super::common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let p = sys_mmap(&ctx, 2 * PAGE_SIZE, Perms::RW).await;
        ctx.user_access(p, true).await;
        ctx.user_access(p + PAGE_SIZE, true).await;
        let pfn = |va| get_pte(&w, mm, va).map_or(0, |q| q.pfn);
        let (a, b) = (pfn(p), pfn(p + PAGE_SIZE));
        shared.set((Some(mm), p, b));
        ctx.user_work(20_000).await;
        // queue_pages(): isolated, with the isolation's reference.
        for f in [a, b] {
            assert!(w.k.borrow_mut().folios.isolate(f));
            w.hw.borrow_mut().mem.get_frame(f);
        }
        let moved = migrate_pages(&ctx, &[a, b], 1).await;
        (moved, a, pfn(p), pfn(p + PAGE_SIZE) != b)
    });
    let (moved, a, first_after, second_moved) = v;
    let first_while_busy = seen.get();
    assert_eq!(moved, 2);
    assert!(second_moved);
    assert!(
        first_while_busy != 0 && first_while_busy != a && first_while_busy == first_after,
        "the first page is mapped at its new frame while the second is busy: {first_while_busy} {v:?}"
    );
}

#[test]
fn a_kernel_thread_using_the_mm_is_held_to_the_invariants() {
    // threads' readers as kernel threads under kthread_use_mm(): stock
    // arm64 passes, and a flush that stays local misses the thread's CPU.
    use tlbsim::explore::{check, CheckOptions, Strategy};
    let search = |policy: &str| {
        let mut e = super::common::file("experiments/seed000-switch-race.toml");
        e.kernel.tlb_policy = policy.into();
        for (k, v) in [("kthread_readers", true), ("reader_hop", false)] {
            e.workload.params.insert(k.into(), toml::Value::Boolean(v));
        }
        let o = CheckOptions {
            strategy: Strategy::Random,
            schedules: 300,
            seed: 1,
            max_actions: 50_000,
            max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
            speculation: 2,
            cpus: None,
        };
        check(&e, &o).expect("check runs").failure
    };
    assert!(search("arm64-stock").is_none());
    let f = search("mutant-range-no-broadcast").expect("caught");
    assert_eq!(
        f.report.invariant(),
        Some(tlbsim::check::Invariant::NoStaleHold),
        "{}",
        f.report
    );
}

#[test]
fn hugetlb_pmd_tables_are_shared_unshared_and_freed_by_the_last_sharer() {
    // Two processes map the same 1 GiB hugetlbfs file at their own
    // PUD-aligned addresses: the second fault shares the first's PMD
    // table (huge_pmd_share()); the child's munmap unshares it, leaving
    // the parent's mapping whole; the parent's munmap, the last, clears
    // the PMD and frees the table; the page stays in the file.
    use tlbsim::kernel::fork::sys_fork;
    use tlbsim::kernel::mm::hugetlb::{sys_create_hugetlbfs_file, sys_mmap_hugetlb, PUD_SIZE};
    use tlbsim::kernel::mm::pgtable::{get_pte, pmd_table};
    let k = KernelConfig {
        tlb_policy: "arm64-stock".into(),
        asid_allocator: "arm64-asid-reserved".into(),
        ..KernelConfig::default()
    };
    let w = super::common::world_with("ampere-32", 2, k);
    let v = super::common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let (a, b) = (64 * PUD_SIZE, 66 * PUD_SIZE);
        let file = sys_create_hugetlbfs_file(&ctx, PUD_SIZE).await;
        let child_saw: Rc<Cell<(bool, bool)>> = Rc::default();
        let seen = Rc::clone(&child_saw);
        sys_fork(
            &ctx,
            "child",
            Box::new(move |c| {
                Box::pin(async move {
                    // After the parent has mapped and faulted.
                    c.user_work(200_000).await;
                    let m = c.mm().unwrap();
                    assert_eq!(
                        sys_mmap_hugetlb(&c, file, b, PUD_SIZE, Perms::RW).await,
                        Some(b)
                    );
                    c.user_access(b + (2 << 20), false).await;
                    let shared = pmd_table(&c.w, m, b).is_some()
                        && pmd_table(&c.w, m, b) == pmd_table(&c.w, mm, a);
                    let sees_parents_page = get_pte(&c.w, m, b).is_some();
                    seen.set((shared, sees_parents_page));
                    tlbsim::kernel::mm::sys_munmap(&c, b, PUD_SIZE).await;
                })
            }),
        )
        .await;
        assert_eq!(
            sys_mmap_hugetlb(&ctx, file, a, PUD_SIZE, Perms::RW).await,
            Some(a)
        );
        ctx.user_access(a, true).await;
        ctx.user_access(a + (2 << 20), false).await;
        let table = pmd_table(&w, mm, a).unwrap();
        while tlbsim::kernel::exit::sys_wait(&ctx).await.is_some() {}
        let kept = get_pte(&w, mm, a).is_some() && pmd_table(&w, mm, a) == Some(table);
        let pfn = get_pte(&w, mm, a).unwrap().pfn;
        tlbsim::kernel::mm::sys_munmap(&ctx, a, PUD_SIZE).await;
        let freed = !w.hw.page_tables().table(table).live;
        let cached = w.hw.borrow().mem.frame_refs(pfn) == 1;
        (child_saw.get(), kept, freed, cached)
    });
    assert_eq!(
        v.0,
        (true, true),
        "the child shares the parent's PMD table and sees its page"
    );
    assert!(v.1, "the child's munmap leaves the parent's table and page");
    assert!(v.2, "the last sharer's munmap frees the table");
    assert!(v.3, "the file keeps its page");
}

#[test]
fn a_numa_scan_makes_ptes_prot_none_and_a_hinting_fault_restores_them() {
    // task_numa_work() makes the present PTEs of the mm PROT_NONE (the zero
    // page's excepted) and flushes; an access takes a hinting fault
    // (do_numa_page()) that makes the PTE accessible again, same frame; a
    // write then makes it writable; the mm's flush-pending count is back
    // to 0.
    use tlbsim::kernel::mm::numa_balancing::task_numa_work;
    use tlbsim::kernel::mm::pgtable::get_pte;
    let k = KernelConfig {
        tlb_policy: "x86-pcid".into(),
        asid_allocator: "none".into(),
        ..KernelConfig::default()
    };
    let w = super::common::world_with("epyc-2s", 2, k);
    let v = super::common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let p = sys_mmap(&ctx, 2 * PAGE_SIZE, Perms::RW).await;
        ctx.user_access(p, true).await;
        ctx.user_access(p + PAGE_SIZE, false).await; // the zero page
        let before = get_pte(&w, mm, p).unwrap();
        let scanned = task_numa_work(&ctx).await;
        let none = get_pte(&w, mm, p).unwrap().perms == Perms::NONE;
        let zero_kept = get_pte(&w, mm, p + PAGE_SIZE).unwrap().perms == Perms::R;
        let read = ctx.user_access(p, false).await;
        let after_read = get_pte(&w, mm, p).unwrap();
        let wrote = ctx.user_access(p, true).await;
        let after_write = get_pte(&w, mm, p).unwrap();
        let pending = w.k.borrow().mms[mm].tlb_flush_pending;
        (
            scanned,
            none && zero_kept,
            read && after_read.pfn == before.pfn && after_read.perms == Perms::R,
            wrote && after_write.perms == Perms::RW,
            pending,
        )
    });
    assert_eq!(v.0, 1, "one PTE made PROT_NONE (not the zero page's)");
    assert!(v.1, "the scanned PTE is PROT_NONE, the zero page's is not");
    assert!(v.2, "a read's hinting fault maps the same frame again");
    assert!(v.3, "a write then makes it writable");
    assert_eq!(v.4, 0, "no flush left pending");
}

#[test]
fn mremap_moves_an_aligned_pte_table_whole_and_its_lock_with_it() {
    // mremap(MREMAP_FIXED) of one PMD_SIZE between PMD_SIZE-aligned
    // addresses moves the PTE table itself (move_normal_pmd()): the same
    // table maps the new address, the old one has none, the frames stay,
    // the table's lock is the one the new address now names, and both
    // VMAs' rmap order puts the new one after the old. With
    // `mremap_move_pmd = "off"` it moves PTE by PTE into a new table.
    use tlbsim::config::MremapMovePmd;
    use tlbsim::kernel::mm::mremap::sys_mremap_fixed;
    use tlbsim::kernel::mm::pgtable::{get_pte, pmd_pgtable};
    let run = |how: MremapMovePmd| {
        let k = KernelConfig {
            tlb_policy: "arm64-stock".into(),
            asid_allocator: "arm64-asid-reserved".into(),
            mremap_move_pmd: how,
            ..KernelConfig::default()
        };
        let w = super::common::world_with("ampere-32", 2, k);
        super::common::run_process_for(&w, move |ctx: Ctx| async move {
            let w = Rc::clone(&ctx.w);
            let mm = ctx.mm().unwrap();
            let pmd = w.granule.pmd_size();
            let (a, b) = (1u64 << 30, (1u64 << 30) + 2 * pmd);
            let p = sys_mmap(&ctx, pmd, Perms::RW).await;
            let p = sys_mremap_fixed(&ctx, p, pmd, a).await.expect("moved to a");
            ctx.user_access(a, true).await;
            ctx.user_access(a + 300 * PAGE_SIZE, true).await;
            let frames = [a, a + 300 * PAGE_SIZE].map(|va| get_pte(&w, mm, va).unwrap().pfn);
            let table = pmd_pgtable(&w, mm, a).unwrap().0;
            let lock = ctx.pte_lockptr(mm, a);
            let to = sys_mremap_fixed(&ctx, p, pmd, b).await;
            let now = [b, b + 300 * PAGE_SIZE].map(|va| get_pte(&w, mm, va).map(|p| p.pfn));
            let same_table = pmd_pgtable(&w, mm, b).map(|t| t.0) == Some(table);
            let old_gone = pmd_pgtable(&w, mm, a).is_none() && get_pte(&w, mm, a).is_none();
            let same_lock = ctx.pte_lockptr(mm, b) == lock;
            (to, frames.map(Some) == now, same_table, old_gone, same_lock)
        })
    };
    let (to, frames, same_table, old_gone, same_lock) = run(MremapMovePmd::RmapLocks);
    assert_eq!(to, Some((1 << 30) + 4 * (1 << 20)));
    assert!(frames, "the pages stay mapped at their new addresses");
    assert!(same_table, "the PTE table itself moved");
    assert!(old_gone, "nothing maps the old range");
    assert!(same_lock, "the table's lock moved with it");
    let (_, frames, same_table, old_gone, same_lock) = run(MremapMovePmd::Off);
    assert!(frames && old_gone);
    assert!(!same_table && !same_lock, "PTE by PTE into a new table");
}

#[test]
fn a_pud_sized_mremap_moves_the_pmd_table_and_needs_the_rmap_locks_too() {
    // CVE-2022-41222's experiment (experiments/bugs/mremap-move-pmd.toml)
    // with one PUD_SIZE moved between 64 GiB and 66 GiB: the PMD table
    // moves whole with its PTE tables (move_normal_pud()). Without the
    // rmap locks reclaim frees a page another CPU still maps (random
    // search from seed 1: schedule 6,105); with them the same search
    // passes.
    use tlbsim::explore::{check, CheckOptions, Strategy};
    let search = |how: &str| {
        let mut e = super::common::file("experiments/bugs/mremap-move-pmd.toml");
        e.kernel.mremap_move_pmd = toml::Value::String(how.into()).try_into().unwrap();
        let p = &mut e.workload.params;
        p.insert("stride_pages".into(), toml::Value::Integer(131_072));
        p.insert("mremap_fixed".into(), toml::Value::String("pud".into()));
        let o = CheckOptions {
            strategy: Strategy::Random,
            schedules: 10_000,
            seed: 1,
            max_actions: 200_000,
            max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
            speculation: 2,
            cpus: None,
        };
        check(&e, &o).expect("check runs").failure
    };
    let f = search("need-rmap-locks").expect("the PUD race is found");
    assert_eq!(
        f.report.invariant(),
        Some(tlbsim::check::Invariant::NoUseAfterFree),
        "{}",
        f.report
    );
    let text = f.report.to_string();
    assert!(
        text.contains("va 0x10"),
        "a page of the 64 GiB mapping: {text}"
    );
    assert!(search("rmap-locks").is_none());
}

#[test]
fn mremap_moves_an_aligned_pmd_table_whole_with_its_pte_tables() {
    // One PUD_SIZE between PUD_SIZE-aligned addresses: the PMD table
    // itself moves (move_normal_pud()), with the PTE tables under it and
    // their locks; with `mremap_move_pud = false` (before 5.11) each PTE
    // table moves by its PMD entry instead, into a new PMD table.
    use tlbsim::kernel::mm::mremap::sys_mremap_fixed;
    use tlbsim::kernel::mm::pgtable::{get_pte, pmd_pgtable, pmd_table};
    let run = |pud: bool| {
        let k = KernelConfig {
            tlb_policy: "arm64-stock".into(),
            asid_allocator: "arm64-asid-reserved".into(),
            mremap_move_pud: pud,
            ..KernelConfig::default()
        };
        let w = super::common::world_with("ampere-32", 2, k);
        super::common::run_process_for(&w, move |ctx: Ctx| async move {
            let w = Rc::clone(&ctx.w);
            let mm = ctx.mm().unwrap();
            let (len, far) = (1u64 << 30, 300u64 << 20);
            let (a, b) = (64u64 << 30, 66u64 << 30);
            let p = sys_mmap(&ctx, len, Perms::RW).await;
            let p = sys_mremap_fixed(&ctx, p, len, a).await.expect("moved to a");
            ctx.user_access(a, true).await;
            ctx.user_access(a + far, true).await;
            let pmd = pmd_table(&w, mm, a).unwrap();
            let pte = pmd_pgtable(&w, mm, a + far).unwrap().0;
            let lock = ctx.pte_lockptr(mm, a + far);
            sys_mremap_fixed(&ctx, p, len, b).await.expect("moved to b");
            let mapped = get_pte(&w, mm, b).is_some() && get_pte(&w, mm, b + far).is_some();
            let same_pmd = pmd_table(&w, mm, b) == Some(pmd);
            let same_pte = pmd_pgtable(&w, mm, b + far).map(|t| t.0) == Some(pte);
            let same_lock = ctx.pte_lockptr(mm, b + far) == lock;
            let old_gone = pmd_table(&w, mm, a).is_none() || get_pte(&w, mm, a).is_none();
            (mapped && old_gone, same_pmd, same_pte, same_lock)
        })
    };
    assert_eq!(run(true), (true, true, true, true));
    assert_eq!(run(false), (true, false, true, true), "PMD entries moved");
}
