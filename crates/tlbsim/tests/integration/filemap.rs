//! Regular files' page cache and its faults (kernel/mm/filemap.rs):
//! fault-around, copy-on-write of a page fault-around mapped, PMD-mapped
//! large folios and their split, the cache outliving `munmap`, and what
//! they do to will-it-scale's tlb_flush1/3.

use super::common;
use std::cell::Cell;
use std::rc::Rc;
use tlbsim::config::{FileLargeFolios, KernelConfig};
use tlbsim::hw::mem::{Perms, PAGE_SIZE_4K as PAGE_SIZE};
use tlbsim::kernel::fork::sys_clone_thread;
use tlbsim::kernel::mm::filemap::{sys_create_file, sys_mmap_file};
use tlbsim::kernel::mm::pgtable::{get_pte, huge_leaves, pte_tables};
use tlbsim::kernel::mm::{sys_madvise_dontneed, sys_mmap, sys_munmap};
use tlbsim::kernel::{Ctx, World};

const PMD: u64 = 2 << 20;

/// A 2-CPU Skylake world under x86-tlb-gen with the checker, with
/// `fault_around_bytes` and `file_large_folios` as given.
fn world(fault_around_bytes: u64, large: FileLargeFolios) -> Rc<World> {
    let k = KernelConfig {
        tlb_policy: "x86-tlb-gen".into(),
        asid_allocator: "none".into(),
        fault_around_bytes,
        file_large_folios: large,
        ..KernelConfig::default()
    };
    common::world_with("skylake-4c8t", 2, k)
}

/// Flushes (`flush_tlb_*` calls) so far.
fn flushes(w: &World) -> u64 {
    w.stats.borrow().flush_latency_ns.summary().count
}

/// Flush IPIs CPU 1 received so far.
fn ipis1(w: &World) -> u64 {
    let c = &w.stats.borrow().cpu[common::cpuid(1)];
    c.ipi_call + c.ipi_call_single
}

/// Starts a thread of the caller's process on CPU 1 that touches a page
/// of its own and computes for 5 ms (it stays in `mm_cpumask`, running),
/// and waits until it has touched its page.
async fn busy_thread_on_cpu1(ctx: &Ctx) {
    let own = sys_mmap(ctx, PAGE_SIZE, Perms::RW).await;
    let ready: Rc<Cell<bool>> = Rc::default();
    let set = Rc::clone(&ready);
    sys_clone_thread(
        ctx,
        "busy",
        Some(common::cpuid(1)),
        Box::new(move |c: Ctx| {
            Box::pin(async move {
                assert!(c.user_access(own, true).await);
                set.set(true);
                c.user_work(5_000_000).await;
            })
        }),
    )
    .await;
    while !ready.get() {
        ctx.user_work(10_000).await;
    }
}

/// What [`private_read_then_write`] saw.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct PrivateRw {
    /// Pages mapped read-only after reading pages 5 and 6 (fault-around
    /// of the second read), and the pages the fault-around window of page
    /// 6 has in the VMA plus page 5 if outside it.
    mapped_ro: u64,
    window_pages: u64,
    /// Faults taken by the two reads.
    read_faults: u64,
    /// Flushes and CPU 1's flush IPIs during the write of page 7.
    write_flushes: u64,
    write_ipis: u64,
    /// Page 7 is now writable, in a frame other than the cached page.
    copied: bool,
}

/// A thread on CPU 1 runs in the mm; CPU 0 maps a 1 MiB file
/// `MAP_PRIVATE`, reads pages 5 then 6 and writes page 7.
fn private_read_then_write(fault_around_bytes: u64) -> PrivateRw {
    let w = world(fault_around_bytes, FileLargeFolios::Small);
    common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let mut s = PrivateRw::default();
        busy_thread_on_cpu1(&ctx).await;
        let f = sys_create_file(&ctx, 1 << 20).await;
        let p = sys_mmap_file(&ctx, f, 1 << 20, Perms::RW, false).await;
        let faults = |w: &World| w.stats.borrow().total().page_faults;
        let f0 = faults(&w);
        assert!(ctx.user_access(p + 5 * PAGE_SIZE, false).await);
        assert!(ctx.user_access(p + 6 * PAGE_SIZE, false).await);
        s.read_faults = faults(&w) - f0;
        // Read-only PTEs over the first 32 pages (the ones
        // read-around cached), against the pages of page 6's
        // aligned fault-around window inside the VMA.
        let mapped = (0..32)
            .filter(|i| get_pte(&w, mm, p + i * PAGE_SIZE).is_some_and(|e| e.perms == Perms::R))
            .count() as u64;
        let win = (p + 6 * PAGE_SIZE) & !(fault_around_bytes - 1);
        let in_window = (win + fault_around_bytes - win.max(p)) / PAGE_SIZE;
        // Page 5, mapped by the first read, may lie outside it.
        let page5_outside = u64::from(p + 5 * PAGE_SIZE < win);
        s.mapped_ro = mapped;
        s.window_pages = in_window + page5_outside;
        let cached = get_pte(&w, mm, p + 7 * PAGE_SIZE).map(|e| e.pfn);
        let (fl0, ipi0) = (flushes(&w), ipis1(&w));
        assert!(ctx.user_access(p + 7 * PAGE_SIZE, true).await);
        s.write_flushes = flushes(&w) - fl0;
        s.write_ipis = ipis1(&w) - ipi0;
        s.copied = get_pte(&w, mm, p + 7 * PAGE_SIZE)
            .is_some_and(|e| e.perms == Perms::RW && Some(e.pfn) != cached);
        s
    })
}

#[test]
fn fault_around_maps_the_cached_neighbours_and_a_write_then_copies_with_one_flush() {
    // The first read misses the page cache: read-around caches 128 KiB
    // around it and finish_fault maps page 5 alone. The second read's
    // fault-around maps every cached page of its aligned 64 KiB window
    // read-only, page 7 among them; writing page 7 copies it
    // (wp_page_copy), whose ptep_clear_flush IPIs the other thread's CPU.
    let s = private_read_then_write(65536);
    assert_eq!(s.mapped_ro, s.window_pages, "{s:?}");
    assert!(s.mapped_ro >= 3, "{s:?}");
    assert_eq!(
        (s.read_faults, s.write_flushes, s.write_ipis, s.copied),
        (2, 1, 1, true),
        "{s:?}"
    );
    // Without fault-around page 7 is not mapped: its write is a
    // do_cow_fault on an empty PTE, with nothing to flush.
    let s = private_read_then_write(4096);
    assert_eq!(
        (
            s.mapped_ro,
            s.read_faults,
            s.write_flushes,
            s.write_ipis,
            s.copied
        ),
        (2, 2, 0, 0, true),
        "{s:?}"
    );
}

/// What [`shared_pmd`] saw.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct SharedPmd {
    /// After writing page 0: one writable PMD leaf over the first 2 MiB.
    written_pmd_rw: bool,
    /// Flushes and CPU 1's IPIs of a 4 KiB MADV_DONTNEED of page 1.
    madvise_flushes: u64,
    madvise_ipis: u64,
    /// After it: no PMD leaf and no PTE table there.
    split_left_nothing: bool,
    /// After reading page 1: a read-only PMD leaf again, on the same
    /// frames (the page cache kept the folio).
    reread_pmd_ro_same: bool,
    /// Flushes of writing page 2 (a write to the read-only PMD).
    write_flushes: u64,
}

/// A thread on CPU 1 runs in the mm; CPU 0 maps a 4 MiB file
/// `MAP_SHARED` with `large` folios, writes page 0, madvises page 1,
/// reads page 1 and writes page 2.
fn shared_pmd(large: FileLargeFolios) -> SharedPmd {
    let w = world(65536, large);
    common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let mut s = SharedPmd::default();
        busy_thread_on_cpu1(&ctx).await;
        let f = sys_create_file(&ctx, 4 << 20).await;
        let p = sys_mmap_file(&ctx, f, 4 << 20, Perms::RW, true).await;
        if large == FileLargeFolios::Pmd {
            assert_eq!(p % PMD, 0, "thp_get_unmapped_area aligns large-folio files");
        }
        assert!(ctx.user_access(p, true).await);
        let leaf = |w: &World| huge_leaves(w, mm, p, p + PMD).first().map(|&(_, l)| l);
        let first = leaf(&w);
        s.written_pmd_rw = first.is_some_and(|l| l.perms == Perms::RW);
        let (fl0, ipi0) = (flushes(&w), ipis1(&w));
        sys_madvise_dontneed(&ctx, p + PAGE_SIZE, PAGE_SIZE).await;
        s.madvise_flushes = flushes(&w) - fl0;
        s.madvise_ipis = ipis1(&w) - ipi0;
        s.split_left_nothing = leaf(&w).is_none() && pte_tables(&w, mm, p, p + PMD).is_empty();
        assert!(ctx.user_access(p + PAGE_SIZE, false).await);
        s.reread_pmd_ro_same =
            leaf(&w).is_some_and(|l| l.perms == Perms::R && Some(l.pfn) == first.map(|f| f.pfn));
        let fl1 = flushes(&w);
        assert!(ctx.user_access(p + 2 * PAGE_SIZE, true).await);
        s.write_flushes = flushes(&w) - fl1;
        s
    })
}

#[test]
fn a_shared_pmd_mapped_file_folio_is_split_with_one_flush_by_madvise_and_by_a_write() {
    // PMD-sized folios: the write maps the whole folio with one writable
    // PMD; a 4 KiB MADV_DONTNEED splits it (pmdp_huge_clear_flush: one
    // flush, an IPI to CPU 1) and leaves no PTE table; the read-back maps
    // the cached folio with a read-only PMD again; the next page's write
    // splits that (wp_huge_pmd) and maps it writable: one more flush.
    let s = shared_pmd(FileLargeFolios::Pmd);
    assert_eq!(
        s,
        SharedPmd {
            written_pmd_rw: true,
            madvise_flushes: 1,
            madvise_ipis: 1,
            split_left_nothing: true,
            reread_pmd_ro_same: true,
            write_flushes: 1,
        }
    );
    // Small folios: PTEs only. The write mapped page 0 alone (no
    // fault-around on a write), so the madvise of page 1 clears nothing
    // and flushes nothing; the write to page 2, which the read of page 1
    // mapped read-only by fault-around, is made writable in place
    // (wp_page_shared; x86 does not flush for it).
    let s = shared_pmd(FileLargeFolios::Small);
    assert_eq!(
        (s.written_pmd_rw, s.madvise_flushes, s.write_flushes),
        (false, 0, 0),
        "{s:?}"
    );
}

#[test]
fn the_page_cache_outlives_munmap_and_a_second_mapping_finds_its_pages() {
    let w = world(65536, FileLargeFolios::Small);
    let (cached, grown, same) = common::run_process_for(&w, move |ctx: Ctx| async move {
        let w = Rc::clone(&ctx.w);
        let mm = ctx.mm().unwrap();
        let f = sys_create_file(&ctx, 1 << 20).await;
        let p = sys_mmap_file(&ctx, f, 1 << 20, Perms::RW, true).await;
        assert!(ctx.user_access(p, true).await);
        let pfn = get_pte(&w, mm, p).unwrap().pfn;
        sys_munmap(&ctx, p, 1 << 20).await;
        let frames = w.hw.borrow().mem.live_frames as u64;
        let cached = w.k.borrow().shmem[f as usize].pages.len() as u64;
        let q = sys_mmap_file(&ctx, f, 1 << 20, Perms::RW, false).await;
        assert!(ctx.user_access(q, false).await);
        let same = get_pte(&w, mm, q).is_some_and(|e| e.pfn == pfn);
        let grown = w.hw.borrow().mem.live_frames as u64 - frames;
        (cached, grown, same)
    });
    // The write's read-around cached 128 KiB from the file's start (the
    // window centred on page 0, clipped at 0: pages 0-31) and munmap left
    // them cached; the
    // second mapping's read maps the same frame, allocating no page (a
    // PTE table for the new mapping at most).
    assert_eq!(cached, 32);
    assert!(same, "the second mapping maps the cached frame");
    assert!(grown <= 1, "{grown} frames allocated");
}

/// tlb_flush`variant` in threads mode, 2 tasks of 600 pages, on 2 CPUs
/// of the development host's calibrated profile (what validate-host
/// simulates there) under x86-tlb-gen: flush IPIs received per loop.
/// (On skylake-4c8t the two threads' madvise calls overlap in lockstep:
/// each gather then sees the other's (`mm_tlb_flush_nested()`) and ends
/// with a full flush, a third per tlb_flush3 loop.)
fn ipis_per_loop(variant: u32, large: &str) -> f64 {
    let path = format!(
        "{}/../../docs/data/calibrated-dev-host.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let mut e = common::experiment(
        "skylake-4c8t",
        "x86-tlb-gen",
        2,
        &format!("asid_allocator = \"none\"\nfile_large_folios = \"{large}\"\n"),
        &format!("name = \"tlb-flush\"\nvariant = {variant}\ntasks = 2\niterations = 600"),
        "",
    );
    e.profile_data = Some(tlbsim::config::parse_profile(&path, &text).unwrap());
    let o = common::run_ok(&e);
    let t = &o.stats.total;
    (t.ipi_call + t.ipi_call_single) as f64 / 1200.0
}

#[test]
fn will_it_scale_file_variants_take_two_shootdowns_per_loop_and_tlb_flush2_one() {
    // tlb_flush1 (private file): madvise's flush and, on 15 pages of 16,
    // wp_page_copy's. tlb_flush3 (shared, PMD-sized folios as ext4 on
    // 6.16+): two PMD splits per loop. tlb_flush2 (anonymous): madvise's.
    let v1 = ipis_per_loop(1, "small");
    let v1_large = ipis_per_loop(1, "pmd");
    let v2 = ipis_per_loop(2, "pmd");
    let v3 = ipis_per_loop(3, "pmd");
    let v3_small = ipis_per_loop(3, "small");
    for (name, got, lo, hi) in [
        ("tlb_flush1", v1, 1.8, 2.0),
        ("tlb_flush1 pmd", v1_large, 1.8, 2.0),
        ("tlb_flush2", v2, 0.95, 1.05),
        // Two splits per loop, and a third, full flush in loops where
        // the threads' madvise calls overlap (`mm_tlb_flush_nested()`):
        // on this profile they run in lockstep, so every loop.
        ("tlb_flush3 pmd", v3, 1.9, 3.05),
        ("tlb_flush3 small", v3_small, 0.95, 1.05),
    ] {
        assert!((lo..=hi).contains(&got), "{name}: {got} IPIs per loop");
    }
}

#[test]
fn bad_page_cache_settings_are_refused_naming_the_field() {
    use tlbsim::sim::SimError;
    for (line, key) in [
        ("fault_around_bytes = 3000\n", "fault_around_bytes"),
        ("fault_around_bytes = 0\n", "fault_around_bytes"),
        ("fault_around_bytes = 4194304\n", "fault_around_bytes"),
        ("read_ahead_kb = 1000000\n", "read_ahead_kb"),
    ] {
        let e = common::experiment(
            "skylake-4c8t",
            "x86-tlb-gen",
            2,
            &format!("asid_allocator = \"none\"\n{line}"),
            "name = \"tlb-flush\"\nvariant = 1\ntasks = 2\niterations = 10",
            "",
        );
        match common::run_seed(&e, 1) {
            Err(SimError::Field {
                key: k, message, ..
            }) => assert_eq!(k, key, "{line}: {message}"),
            other => panic!("{line}: {:?}", other.map(|_| ())),
        }
    }
}

/// How long a write to a read-mapped page takes: of a cached
/// `MAP_PRIVATE` file page (a copy), and of an anonymous page a read
/// mapped to the zero page (a zeroed page), on skylake-4c8t with
/// `page_copy_ns` as given.
fn cow_write_ns(page_copy_ns: Option<u64>) -> (u64, u64) {
    let mut p = tlbsim::config::builtin_profile("skylake-4c8t").unwrap();
    p.kernel.page_copy_ns = page_copy_ns;
    let k = KernelConfig {
        tlb_policy: "x86-tlb-gen".into(),
        asid_allocator: "none".into(),
        ..KernelConfig::default()
    };
    let w = common::world_with_profile(p, 2, k);
    common::run_process_for(&w, move |ctx: Ctx| async move {
        let f = sys_create_file(&ctx, 1 << 20).await;
        let file = sys_mmap_file(&ctx, f, 1 << 20, Perms::RW, false).await;
        let anon = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
        let mut timed = [0; 2];
        for (i, va) in [file + 3 * PAGE_SIZE, anon].into_iter().enumerate() {
            assert!(ctx.user_access(va, false).await);
            let t0 = ctx.now();
            assert!(ctx.user_access(va, true).await);
            timed[i] = ctx.now() - t0;
        }
        (timed[0], timed[1])
    })
}

#[test]
fn a_copy_on_write_copy_costs_page_copy_ns_and_a_zero_page_one_page_alloc_ns() {
    let alloc = tlbsim::config::builtin_profile("skylake-4c8t")
        .unwrap()
        .kernel
        .page_alloc_ns;
    let (file0, anon0) = cow_write_ns(None);
    let (file1, anon1) = cow_write_ns(Some(alloc + 50_000));
    // Without the cost, a copy costs what a zeroed page does.
    assert_eq!(file1 - file0, 50_000, "the copy of a cached page");
    assert_eq!(anon1, anon0, "the zero page's copy is a zeroed page");
}

#[test]
fn fault_around_costs_its_walk_per_window_page() {
    // A read fault on page 8 of a cached private file mapping: its
    // fault-around window is 16 pages (64 KiB); a 4 KiB window is none.
    let fault_ns = |fault_around_bytes: u64, per_page: Option<u64>| {
        let k = KernelConfig {
            tlb_policy: "x86-tlb-gen".into(),
            asid_allocator: "none".into(),
            fault_around_bytes,
            file_large_folios: FileLargeFolios::Small,
            ..KernelConfig::default()
        };
        let mut p = tlbsim::config::builtin_profile("skylake-4c8t").unwrap();
        p.kernel.fault_around_page_ns = per_page;
        let w = common::world_with_profile(p, 2, k);
        common::run_process_for(&w, move |ctx: Ctx| async move {
            let f = sys_create_file(&ctx, 1 << 20).await;
            let p = sys_mmap_file(&ctx, f, 1 << 20, Perms::RW, false).await;
            // Page 0 first: the page cache is then filled.
            assert!(ctx.user_access(p, false).await);
            let t = ctx.now();
            assert!(ctx.user_access(p + 8 * PAGE_SIZE, false).await);
            ctx.now() - t
        })
    };
    let (window, one) = (fault_ns(65536, Some(100)), fault_ns(4096, Some(100)));
    let (window0, one0) = (fault_ns(65536, None), fault_ns(4096, None));
    assert_eq!(window - window0, 16 * 100, "{window} vs {window0}");
    // One page: no fault-around at all (should_fault_around()), no walk.
    assert_eq!(one, one0);
}
