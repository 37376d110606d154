//! arm64 behaviours of Linux 4.18 (RHEL 8, seed 000's kernel) that later
//! kernels dropped, each a `[kernel]` setting: the synchronous TLBI per
//! freed page-table page and the spurious-fault flush.

use super::common;
use std::cell::Cell;
use std::rc::Rc;
use tlbsim::config::{KernelConfig, PgtableFreeTlbi};
use tlbsim::hw::mem::{Granule, Perms, PAGE_SIZE_4K as PAGE_SIZE};
use tlbsim::hw::Fault;
use tlbsim::kernel::mm::{handle_page_fault, sys_mmap, sys_munmap};
use tlbsim::kernel::{Ctx, World};

/// A 2-CPU ampere-32 world under arm64-stock with `k`'s 4.18 settings, with
/// the checker.
fn world(k: KernelConfig) -> Rc<World> {
    common::world_with("ampere-32", 2, k)
}

/// Every flush decision so far (arm64-stock broadcasts each).
fn flushes(ctx: &Ctx) -> u64 {
    let t = ctx.w.stats.borrow().total();
    t.flushes_broadcast + t.flushes_local + t.flushes_skipped
}

use common::run_process as run;

/// Flushes and freed tables of one munmap of a written page (its PTE
/// table is freed: nothing else is mapped in it), and of the whole run,
/// whose exit frees the tables of a second written mapping.
fn munmap_and_exit(mode: PgtableFreeTlbi, g: Granule) -> [u64; 4] {
    let w = world(KernelConfig {
        pgtable_free_tlbi: mode,
        granule: g,
        ..KernelConfig::default()
    });
    let (page, pmd) = (g.page_size(), g.pmd_size());
    let seen: Rc<Cell<[u64; 2]>> = Rc::default();
    let out = Rc::clone(&seen);
    run(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let kept = sys_mmap(&ctx, page, Perms::RW).await;
                assert!(ctx.user_access(kept, true).await);
                // The PMD_SIZE a PTE table maps, wholly inside `a`.
                let a = sys_mmap(&ctx, 2 * pmd, Perms::RW).await;
                let inside = (a + pmd - 1) & !(pmd - 1);
                assert!(ctx.user_access(inside, true).await);
                let (f0, t0) = (flushes(&ctx), ctx.w.stats.borrow().tables_freed);
                sys_munmap(&ctx, a, 2 * pmd).await;
                let (f1, t1) = (flushes(&ctx), ctx.w.stats.borrow().tables_freed);
                out.set([f1 - f0, t1 - t0]);
            })
        }),
    );
    let [munmap_flushes, munmap_tables] = seen.get();
    let st = w.stats.borrow();
    let t = st.total();
    let all = t.flushes_broadcast + t.flushes_local + t.flushes_skipped;
    [munmap_flushes, munmap_tables, all, st.tables_freed]
}

#[test]
fn linux_4_18_flushes_each_freed_table_at_once_and_nothing_at_a_full_teardown() {
    for g in [Granule::K4, Granule::K64] {
        one_granule_4_18_table_flushes(g);
    }
}

fn one_granule_4_18_table_flushes(g: Granule) {
    let [f, tables, all, all_tables] = munmap_and_exit(PgtableFreeTlbi::Deferred, g);
    assert!(tables >= 1, "the munmap freed its PTE table");
    assert_eq!(f, 1, "4.20+: one gather flush (all levels) for the munmap");
    assert_eq!(
        all, 2,
        "and one flush_tlb_mm() for the exit, which freed tables"
    );
    assert!(all_tables > tables, "the exit freed tables too");
    let [f, tables18, all, all_tables18] = munmap_and_exit(PgtableFreeTlbi::SyncPerTable, g);
    assert_eq!(tables18, tables, "the same tables are freed");
    assert_eq!(all_tables18, all_tables);
    assert_eq!(
        f,
        tables + 1,
        "4.18: one TLBI per freed table, then the last-level range"
    );
    assert_eq!(
        all,
        all_tables + 1,
        "4.18: the exit flushes only its tables (tlb_flush() returns for a full mm)"
    );
}

#[test]
fn churn_under_4_18_table_flushes_passes_the_checker_with_speculative_walks() {
    for p in ["arm64-stock", "arm64-cpumask-tracking"] {
        for seed in 1..=3 {
            let e = common::experiment(
                "ampere-32",
                p,
                4,
                "pgtable_free_tlbi = \"sync-per-table\"\n",
                "name = \"churn\"\nrounds = 10",
                "[checker]\nspeculative_walks = true\n",
            );
            let o = common::run_seed(&e, seed).unwrap_or_else(|e| panic!("{p} seed {seed}: {e}"));
            assert_eq!(o.checker.verdict, "pass");
            assert!(o.stats.tables_freed > 0, "{p}: tables were freed");
        }
    }
}

/// Flushes of one write fault that finds the PTE already writable.
fn spurious_write_fault_flushes(spurious_fault_flush: bool) -> u64 {
    let w = world(KernelConfig {
        spurious_fault_flush,
        ..KernelConfig::default()
    });
    let seen: Rc<Cell<u64>> = Rc::default();
    let out = Rc::clone(&seen);
    run(
        &w,
        Box::new(move |ctx: Ctx| {
            Box::pin(async move {
                let a = sys_mmap(&ctx, PAGE_SIZE, Perms::RW).await;
                assert!(ctx.user_access(a, true).await);
                let f0 = flushes(&ctx);
                assert!(handle_page_fault(&ctx, a, true, Fault::Permission).await);
                out.set(flushes(&ctx) - f0);
            })
        }),
    );
    seen.get()
}

#[test]
fn a_spurious_write_fault_flushes_the_page_only_before_5_10() {
    assert_eq!(spurious_write_fault_flushes(false), 0, "5.10+: a no-op");
    assert_eq!(
        spurious_write_fault_flushes(true),
        1,
        "3.7-5.9: flush_tlb_page()"
    );
}

#[test]
fn the_4_18_settings_are_refused_for_an_x86_policy() {
    for (line, key) in [
        (
            "pgtable_free_tlbi = \"sync-per-table\"\n",
            "pgtable_free_tlbi",
        ),
        ("spurious_fault_flush = true\n", "spurious_fault_flush"),
    ] {
        let e = common::experiment(
            "skylake-4c8t",
            "x86-tlb-gen",
            2,
            &format!("asid_allocator = \"none\"\n{line}"),
            "name = \"churn\"\nrounds = 1",
            "",
        );
        let err = tlbsim::sim::run(&e, &Default::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("[kernel] {key}")), "{err}");
        assert!(err.contains("arm64"), "{err}");
    }
    // A bad value names the field too.
    let text = "[experiment]\nname = \"t\"\nprofile = \"ampere-32\"\n[kernel]\npgtable_free_tlbi = \"later\"\n[workload]\nname = \"churn\"\n";
    let err = tlbsim::config::parse_toml::<tlbsim::config::Experiment>("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("pgtable_free_tlbi"), "{err}");
}
