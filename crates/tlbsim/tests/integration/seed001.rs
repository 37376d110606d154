//! Seed 001's kernel paths: shared anonymous memory, MADV_PAGEOUT through
//! the reverse map and reclaim, swap-in from zram; the checker on them.

use super::common::{arm64, experiment, file, run_ok};
use tlbsim::check::Invariant;
use tlbsim::config::Experiment;
use tlbsim::explore::{check, CheckOptions, Failure, Strategy};
use tlbsim::sim::{run, RunOptions, SimError};

/// `schedules` random schedules from seed 1, each cut at `max_actions`.
fn random(schedules: u64, max_actions: usize) -> CheckOptions {
    CheckOptions {
        strategy: Strategy::Random,
        schedules,
        seed: 1,
        max_actions,
        max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
        speculation: 2,
        cpus: None,
    }
}

/// The first violation of `schedules` random schedules of `e` (each cut
/// at `max_actions`), if any.
fn first_failure(e: &Experiment, schedules: u64, max_actions: usize) -> Option<Failure> {
    check(e, &random(schedules, max_actions))
        .expect("check runs")
        .failure
}

/// Sets `[workload]` parameters of `e`.
fn set_params(e: &mut Experiment, params: &[(&str, toml::Value)]) {
    for (k, v) in params {
        e.workload.params.insert((*k).into(), v.clone());
    }
}

/// The search found a violation of `invariant`.
fn assert_breaks(f: &Failure, invariant: Invariant) {
    assert_eq!(f.report.invariant(), Some(invariant), "{}", f.report);
}

const SMALL_BENCH: &str = "name = \"swap-bench\"\nsize_bytes = 65536\niterations = 5\ncpu = 1";

#[test]
fn swap_bench_pages_every_page_out_each_round_and_back_in_the_next() {
    let o = run_ok(&arm64("arm64-stock", 2, SMALL_BENCH));
    let r = &o.stats.reclaim;
    // 16 pages, 5 rounds: every round pages all 16 out; every round but
    // the first faults them back in from zram (same-filled pages).
    assert_eq!((r.pgsteal, r.pswpout, r.pswpin, r.kept), (80, 80, 64, 0));
    assert_eq!(o.checker.verdict, "pass");
    // Before batching, each page-out flushes its page at once, by
    // broadcast (the process is pinned to CPU 1 but arm64-stock always
    // broadcasts); the 81st flush is exit_mmap's flush_tlb_mm.
    assert_eq!(o.stats.total.flushes_broadcast, 81);
    let task = o.stats.cpu_time_by_task.iter().find(|t| t.comm == "a.out");
    let task = task.expect("the benchmark's own row");
    let share = |f: &str| {
        task.functions
            .iter()
            .find(|x| x.function == f)
            .map_or(0.0, |x| x.share_pct)
    };
    for f in [
        "ptep_clear_flush",
        "shrink_folio_list",
        "zram_write_page",
        "zram_read_page",
    ] {
        assert!(share(f) > 0.0, "{f} takes time");
    }
    // The flush is inlined into ptep_clear_flush (arm64 flush_tlb_page is
    // static inline): no time of its own.
    assert_eq!(share("flush_tlb_page"), 0.0);
}

#[test]
fn a_local_flush_policy_flushes_a_pinned_process_locally() {
    // Seed 000's v2 skips the broadcast when the mm runs only here: the
    // page-out flush of a pinned process is local.
    let o = run_ok(&arm64("arm64-skip-broadcast-v2", 2, SMALL_BENCH));
    assert_eq!(o.stats.total.flushes_broadcast, 0);
    assert_eq!(o.stats.total.flushes_local, 81);
    assert_eq!(o.checker.verdict, "pass");
}

fn field_error(e: &tlbsim::config::Experiment) -> (String, String) {
    match run(e, &RunOptions::default()) {
        Err(SimError::Field {
            section,
            key,
            message,
        }) => (format!("{section}.{key}"), message),
        other => panic!("expected a field error, got {other:?}"),
    }
}

#[test]
fn swapping_workloads_refuse_a_profile_without_swap_costs_and_a_missing_cpu() {
    // cortex-a15-2 (seed 002's board) has no [swap] section.
    let e = experiment("cortex-a15-2", "arm64-stock", 2, "", SMALL_BENCH, "");
    let (key, message) = field_error(&e);
    assert_eq!(key, "workload.name");
    assert!(message.contains("[swap]"), "{message}");
    let e = arm64("arm64-stock", 2, "name = \"swap-bench\"\ncpu = 2");
    let (key, message) = field_error(&e);
    assert_eq!(key, "workload.cpu");
    assert!(message.contains("CPU 2 does not exist"), "{message}");
    let e = arm64("arm64-stock", 2, "name = \"pageout-race\"\nop = \"swap\"");
    assert_eq!(field_error(&e).0, "workload.op");
}

fn explore(policy: &str, op: &str, fork: bool, schedules: u64) -> Option<Failure> {
    let mut e = file("experiments/seed001-explore.toml");
    e.kernel.tlb_policy = policy.into();
    set_params(
        &mut e,
        &[
            ("op", toml::Value::String(op.into())),
            ("fork", toml::Value::Boolean(fork)),
        ],
    );
    first_failure(&e, schedules, 200_000)
}

const RACES: [(&str, bool); 4] = [
    ("touch", false),
    ("mprotect", false),
    ("touch", true),
    ("mprotect", true),
];

#[test]
fn page_out_races_pass_stock_and_a_local_only_flush_is_caught() {
    for (op, fork) in RACES {
        for policy in ["arm64-stock", "arm64-tlbbatch"] {
            if let Some(f) = explore(policy, op, fork, 300) {
                panic!("{policy} {op} fork={fork} fails: {}", f.report);
            }
        }
        let f = explore("mutant-range-no-broadcast", op, fork, 300);
        assert!(
            f.is_some(),
            "{op} fork={fork}: a flush that never leaves the CPU is caught"
        );
    }
}

#[test]
fn the_v6_6_batched_pending_dsb_leaves_a_stale_translation_after_mprotect() {
    // A forked child mprotects while its parent's page-out flush is
    // deferred: the child's flush_tlb_batched_pending() ran only a DSB on
    // its own CPU, which does not complete the parent's TLBI
    // (4b634918384c). The same search passes the mainline batch.
    // (Random schedules from seed 1: found at schedule 4,061 since rmap
    // walks take their reverse map's lock.)
    assert!(explore("arm64-tlbbatch", "mprotect", true, 10_000).is_none());
    let f = explore("arm64-tlbbatch-6.6", "mprotect", true, 10_000).expect("the 6.6 race is found");
    assert_breaks(&f, Invariant::NoStaleHold);
    let text = f.report.to_string();
    assert!(text.contains("after mprotect"), "{text}");
}

#[test]
fn x86_defers_reclaim_flushes_to_its_batch_and_stays_safe() {
    let race = "name = \"pageout-race\"\npages = 2\niterations = 30\nusers = 2\nop = \"touch\"";
    let e = experiment(
        "skylake-4c8t",
        "x86-tlb-gen",
        3,
        "asid_allocator = \"none\"\n",
        race,
        "[checker]\nspeculative_walks = true\n",
    );
    let o = run_ok(&e);
    let r = &o.stats.reclaim;
    // The threads run on the other CPUs: every unmap defers. The users
    // write the pages, so each unmapped PTE is dirty and its batch is
    // flushed before that page's write-out (try_to_unmap_flush_dirty()):
    // one batch flush per page here.
    assert!(
        r.flush_deferred > 0 && r.flush_deferred == r.pgsteal,
        "{r:?}"
    );
    assert!(
        r.batch_flushes > 0 && r.batch_flushes <= r.flush_deferred,
        "{r:?}"
    );
    assert_eq!(o.checker.verdict, "pass");
    for policy in ["x86-tlb-gen", "x86-pcid"] {
        let mut e = file("experiments/seed001-explore.toml");
        e.experiment.profile = "skylake-4c8t".into();
        e.kernel.tlb_policy = policy.into();
        e.kernel.asid_allocator = "none".into();
        let o = random(500, 20_000);
        let r = check(&e, &o).expect("check runs");
        assert!(
            r.failure.is_none(),
            "{policy}: {:?}",
            r.failure.map(|f| f.report)
        );
    }
}

/// A small migration run of shared (or private) memory: 2048 pages, 2
/// round trips, on 4 CPUs.
fn migrate_mem(profile: &str, policy: &str, batch: bool, shared: bool) -> tlbsim::sim::RunOutput {
    let alloc = if policy.starts_with("x86") {
        "asid_allocator = \"none\"\n"
    } else {
        ""
    };
    let kernel = format!("{alloc}migrate_batch_flush = {batch}\n");
    let wl = format!("name = \"migrate-bench\"\npages = 2048\nthreads = 3\niterations = 2\ntouches_per_round = 4\nshared = {shared}");
    run_ok(&experiment(profile, policy, 4, &kernel, &wl, ""))
}

/// [`migrate_mem`] of shared memory.
fn migrate(profile: &str, policy: &str, batch: bool) -> tlbsim::sim::RunOutput {
    migrate_mem(profile, policy, batch, true)
}

/// arm64's migration before batching (`arm64-stock`, a DSB ISH per page)
/// and after (`arm64-tlbbatch`, one per batch): both move most pages and
/// pass the checker; batching saves nine DSBs in ten at least.
fn assert_arm64_batching_saves_dsbs(shared: bool) {
    let before = migrate_mem("ampere-2s", "arm64-stock", false, shared);
    let after = migrate_mem("ampere-2s", "arm64-tlbbatch", true, shared);
    for o in [&before, &after] {
        assert_eq!(o.checker.verdict, "pass");
        assert!(
            o.stats.reclaim.pgmigrate_success > 7_000,
            "{:?}",
            o.stats.reclaim
        );
    }
    assert!(before.stats.total.dsb_ish > after.stats.total.dsb_ish * 10);
    assert!(after.elapsed_ns < before.elapsed_ns);
}

#[test]
fn migration_batches_its_flushes_on_arm64_and_x86() {
    // Before 6.3 every unmap flushes: one DSB ISH (arm64), IPIs to the
    // threads' CPUs (x86) per page; batched, one per batch of 512.
    assert_arm64_batching_saves_dsbs(true);
    let before = migrate("epyc-2s", "x86-tlb-gen", false);
    let after = migrate("epyc-2s", "x86-tlb-gen", true);
    assert!(before.stats.total.ipi_call > 10 * after.stats.total.ipi_call.max(1));
    assert_eq!(
        after.stats.reclaim.batch_flushes, 16,
        "2 round trips x 2 moves x 4 batches"
    );
    // A migrating workload refuses a profile without two NUMA nodes.
    let e = super::common::arm64("arm64-stock", 4, "name = \"migrate-bench\"");
    assert!(matches!(
        tlbsim::sim::run(&e, &RunOptions::default()),
        Err(SimError::Field { key, .. }) if key == "name"
    ));
}

#[test]
fn migration_races_pass_and_an_unsynced_batch_is_caught() {
    let mut e = file("experiments/seed001-migrate.toml");
    e.machine.cpus = Some(4);
    e.kernel.migrate_batch_flush = true;
    for (k, v) in [
        ("pages", 4),
        ("iterations", 2),
        ("touches_per_round", 2),
        ("gap_ns", 200),
    ] {
        e.workload.params.insert(k.into(), toml::Value::Integer(v));
    }
    let o = random(500, 50_000);
    for (policy, fails) in [
        ("arm64-stock", false),
        ("arm64-tlbbatch", false),
        ("mutant-tlbbatch-no-batch-sync", true),
    ] {
        e.kernel.tlb_policy = policy.into();
        let r = check(&e, &o).expect("check runs");
        assert_eq!(
            r.failure.is_some(),
            fails,
            "{policy}: {:?}",
            r.failure.map(|f| f.report)
        );
    }
}

#[test]
fn x86_invlpgb_flushes_a_reclaim_batch_with_one_broadcast() {
    let kernel = "asid_allocator = \"none\"\nmigrate_batch_flush = true\n";
    let wl = "name = \"migrate-bench\"\npages = 2048\nthreads = 3\niterations = 2\ntouches_per_round = 4";
    let o = run_ok(&experiment("epyc-2s", "x86-invlpgb", 4, kernel, wl, ""));
    let r = &o.stats.reclaim;
    // 6.15+: every batch is one INVLPGB of all non-global entries and a
    // TLBSYNC; no flush IPIs for them (the 2 left are the exit's).
    assert_eq!(r.batch_flushes, 16);
    assert_eq!(o.stats.total.tlbi_broadcast, 16);
    assert!(o.stats.total.ipi_call <= 2, "{}", o.stats.total.ipi_call);
    assert_eq!(o.checker.verdict, "pass");
}

#[test]
fn linux_4_12_lacked_flush_tlb_batched_pending_and_the_checker_finds_the_race() {
    // x86-lazy-legacy is Linux 4.12: reclaim already batched its flushes
    // (4.3+), but flush_tlb_batched_pending() came with 3ea277194daa in
    // 4.13 (Nadav Amit's race): a child's mprotect that finds the PTE
    // already cleared by its parent's page-out returns while the flush is
    // still deferred. The 4.13+ tlb_gen policy passes the same search.
    let search = |policy: &str| {
        let mut e = file("experiments/seed001-explore.toml");
        e.experiment.profile = "skylake-4c8t".into();
        e.kernel.tlb_policy = policy.into();
        e.kernel.asid_allocator = "none".into();
        first_failure(&e, 3_000, 20_000)
    };
    let f = search("x86-lazy-legacy").expect("the 4.12 race is found");
    assert_breaks(&f, Invariant::NoStaleHold);
    assert!(
        f.report.to_string().contains("after mprotect"),
        "{}",
        f.report
    );
    assert!(search("x86-tlb-gen").is_none());
}

#[test]
fn kswapd_reclaims_above_the_memory_limit_and_stays_safe() {
    // No MADV_PAGEOUT: the main thread only waits; kswapd (on the last
    // CPU, no mm, no mmap_lock) reclaims whenever a fault takes the page
    // cache above one page, while the users fault, write and mprotect.
    let mut e = file("experiments/seed001-explore.toml");
    e.machine.cpus = Some(4);
    e.kernel.memory_limit_pages = Some(1);
    e.workload
        .params
        .insert("madvise".into(), toml::Value::Boolean(false));
    e.workload
        .params
        .insert("iterations".into(), toml::Value::Integer(6));
    e.workload
        .params
        .insert("fork".into(), toml::Value::Boolean(false));
    let o = run_ok(&e);
    assert!(o.stats.reclaim.pgsteal > 0, "{:?}", o.stats.reclaim);
    assert_eq!(o.checker.verdict, "pass");
    assert!(o.stats.cpu_time_by_task.iter().any(|t| t.comm == "kswapd0"));
    let opts = random(1_000, 50_000);
    for policy in ["arm64-stock", "arm64-tlbbatch"] {
        e.kernel.tlb_policy = policy.into();
        let r = check(&e, &opts).expect("check runs");
        assert!(
            r.failure.is_none(),
            "{policy}: {:?}",
            r.failure.map(|f| f.report)
        );
    }
    // A limit of 0: kswapd reclaims every folio as soon as it is added,
    // so it takes more than under a limit of 1, and stays safe.
    e.kernel.memory_limit_pages = Some(0);
    let zero = run_ok(&e);
    assert!(
        zero.stats.reclaim.pgsteal > o.stats.reclaim.pgsteal,
        "{:?} vs {:?}",
        zero.stats.reclaim,
        o.stats.reclaim
    );
    assert_eq!(zero.checker.verdict, "pass");
}

#[test]
fn the_v6_6_race_with_kswapd_reclaiming_on_another_cpu() {
    // kswapd clears a page and defers its flush; a user's mprotect of
    // that one page finds nothing to change and, on 6.6, runs only a DSB
    // of its own CPU before returning.
    let search = |policy: &str| {
        let mut e = file("experiments/seed001-kswapd.toml");
        e.kernel.tlb_policy = policy.into();
        first_failure(&e, 5_000, 50_000)
    };
    let f = search("arm64-tlbbatch-6.6").expect("found with kswapd too");
    assert_breaks(&f, Invariant::NoStaleHold);
    assert!(search("arm64-tlbbatch").is_none());
    assert!(search("arm64-stock").is_none());
}

#[test]
fn rcu_table_freeing_closes_the_lazy_switch_window_of_x86() {
    // A lazy CPU handling a flush IPI clears its mm_cpumask bit one step
    // before it writes CR3; an exit_mmap on another CPU then skips it. A
    // kernel that frees page tables right after the flush IPIs (x86
    // before 6.15) frees the table while that CPU still caches a walk to
    // it; 6.15's RCU table freeing (x86-invlpgb) waits for the handler.
    // docs/validation.md, "An open x86 finding".
    let search = |policy: &str| {
        let mut e = file("experiments/seed001-migrate.toml");
        e.experiment.profile = "epyc-2s".into();
        e.machine.cpus = Some(4);
        e.kernel.tlb_policy = policy.into();
        e.kernel.asid_allocator = "none".into();
        for (k, v) in [
            ("pages", 4),
            ("iterations", 0),
            ("touches_per_round", 2),
            ("gap_ns", 200),
        ] {
            e.workload.params.insert(k.into(), toml::Value::Integer(v));
        }
        first_failure(&e, 3_000, 50_000)
    };
    let f = search("x86-tlb-gen").expect("the window is found before 6.15");
    assert_breaks(&f, Invariant::NoStaleWalk);
    assert!(search("x86-invlpgb").is_none());
}

#[test]
fn mremap_before_4_19_lets_reclaim_free_a_page_another_cpu_still_uses() {
    // CVE-2018-18281: Linux 4.9-4.18 flushed a moved clean PTE's old
    // address only after the whole move, its locks dropped; kswapd found
    // the page at its new address, unmapped it (arm64 flushes that
    // address only) and freed it while CPU 1 still read it through the old
    // translation. 4.19 flushes under both page-table locks.
    let search = |policy: &str, unlocked: bool| {
        let mut e = file("experiments/seed001-mremap.toml");
        e.kernel.tlb_policy = policy.into();
        e.kernel.mremap_flush_unlocked = unlocked;
        first_failure(&e, 3_000, 20_000)
    };
    for policy in ["arm64-stock", "arm64-tlbbatch"] {
        let f = search(policy, true).expect("the 4.9-4.18 window is found");
        assert_eq!(
            f.report.invariant(),
            Some(Invariant::NoUseAfterFree),
            "{policy}"
        );
        assert!(search(policy, false).is_none(), "{policy} on 4.19+");
    }
}

#[test]
fn madv_cold_flushes_the_translations_it_makes_old_and_keeps_the_race_checks() {
    let kswapd = |cold: bool, policy: &str| {
        let mut e = file("experiments/seed001-kswapd.toml");
        e.kernel.tlb_policy = policy.into();
        set_params(
            &mut e,
            &[
                ("madvise", toml::Value::Boolean(cold)),
                ("advice", toml::Value::String("cold".into())),
            ],
        );
        e
    };
    // Each MADV_COLD that finds mapped pages flushes them (one range flush
    // at tlb_finish_mmu()); kswapd still reclaims; nothing goes stale.
    // Over 20 iterations: with the experiment's 6, whether any MADV_COLD
    // finds its page mapped depends on the timing of kswapd and the forks.
    let longer = |cold: bool| {
        let mut e = kswapd(cold, "arm64-stock");
        set_params(&mut e, &[("iterations", toml::Value::Integer(20))]);
        run_ok(&e)
    };
    let (cold, none) = (longer(true), longer(false));
    assert!(cold.stats.total.flushes_broadcast > none.stats.total.flushes_broadcast);
    assert!(cold.stats.reclaim.pgsteal > 0);
    assert_eq!(cold.checker.verdict, "pass");
    // Its flush_tlb_batched_pending() is where v6.6's bare DSB falls short.
    let search = |policy: &str| first_failure(&kswapd(true, policy), 3_000, 50_000);
    assert!(search("arm64-tlbbatch").is_none());
    let f = search("arm64-tlbbatch-6.6").expect("v6.6's race");
    assert_breaks(&f, Invariant::NoStaleHold);
}

#[test]
fn a_zap_that_finds_the_pte_cleared_by_kswapd_must_flush_the_deferred_batch() {
    // Threads drop their page with MADV_DONTNEED (mmap_lock for reading:
    // zaps run beside each other and beside kswapd); pages one per PTE
    // table. Without flush_tlb_batched_pending() in zap_pte_range() a zap
    // that finds its PTE already cleared returns with the translation live.
    let search = |policy: &str, schedules: u64| {
        let mut e = file("experiments/seed001-kswapd.toml");
        e.kernel.tlb_policy = policy.into();
        set_params(
            &mut e,
            &[
                ("fork", toml::Value::Boolean(false)),
                ("stride_pages", toml::Value::Integer(512)),
                ("op", toml::Value::String("dontneed-page".into())),
            ],
        );
        first_failure(&e, schedules, 50_000)
    };
    let f = search("mutant-tlbbatch-no-pending-flush", 15_000).expect("found");
    assert_breaks(&f, Invariant::NoStaleHold);
    assert!(
        f.report.to_string().contains("after madvise"),
        "{}",
        f.report
    );
    assert!(search("arm64-tlbbatch", 3_000).is_none());
}

#[test]
fn above_the_min_watermark_a_fault_reclaims_for_itself() {
    let kswapd = |min: Option<u64>| {
        let mut e = file("experiments/seed001-kswapd.toml");
        e.kernel.memory_min_pages = min;
        e
    };
    // With the min at the limit, faults over it reclaim before they
    // allocate (allocstall); without it only kswapd reclaims.
    let direct = run_ok(&kswapd(Some(1)));
    let only_kswapd = run_ok(&kswapd(None));
    assert!(direct.stats.reclaim.allocstall > 0);
    assert_eq!(only_kswapd.stats.reclaim.allocstall, 0);
    assert!(direct.stats.reclaim.pgsteal > 0);
    assert_eq!(direct.checker.verdict, "pass");
    let faulting_task_reclaims = direct
        .stats
        .cpu_time_by_task
        .iter()
        .filter(|t| t.comm != "kswapd0")
        .flat_map(|t| t.functions.iter())
        .any(|f| f.function == "shrink_folio_list");
    assert!(faulting_task_reclaims, "a user task ran shrink_folio_list");
    let mut e = kswapd(Some(1));
    e.kernel.tlb_policy = "arm64-tlbbatch".into();
    assert!(first_failure(&e, 3_000, 50_000).is_none());
    // A min below the limit, or without kswapd's watermark, is refused.
    let (key, _) = field_error(&kswapd(Some(0)));
    assert_eq!(key, "kernel.memory_min_pages");
    let mut e = kswapd(Some(4));
    e.kernel.memory_limit_pages = None;
    let (key, message) = field_error(&e);
    assert_eq!(key, "kernel.memory_min_pages");
    assert!(message.contains("memory_limit_pages"), "{message}");
}

#[test]
fn reclaim_and_migration_race_mprotect_fork_and_faults_on_the_same_mms() {
    // seed001-explore on the 2-socket profile, the main thread paging out
    // and migrating its pages between the nodes (batched, 6.3+) while
    // forked children fault and mprotect them, and munmap at the end.
    let search = |policy: &str| {
        let mut e = file("experiments/seed001-explore.toml");
        e.experiment.profile = "ampere-2s".into();
        e.kernel.tlb_policy = policy.into();
        e.kernel.migrate_batch_flush = true;
        set_params(&mut e, &[("migrate", toml::Value::Boolean(true))]);
        first_failure(&e, 2_000, 50_000)
    };
    assert!(search("arm64-tlbbatch").is_none());
    assert!(search("arm64-stock").is_none());
    let f = search("arm64-tlbbatch-6.6").expect("v6.6's race");
    assert_breaks(&f, Invariant::NoStaleHold);
    let f = search("mutant-tlbbatch-no-batch-sync").expect("returns before the DSB");
    assert_breaks(&f, Invariant::NoStaleHold);
}

#[test]
fn private_pages_swap_through_swap_entries_and_each_round_writes_them_again() {
    let bench = format!("{SMALL_BENCH}\nshared = false");
    let o = run_ok(&arm64("arm64-stock", 2, &bench));
    let r = &o.stats.reclaim;
    // As the shared benchmark: every round pages all 16 out and every
    // round but the first faults them back in. zram's synchronous swap-in
    // frees the slot of a page only this process maps, so each page-out
    // writes the page again.
    assert_eq!((r.pgsteal, r.pswpout, r.pswpin, r.kept), (80, 80, 64, 0));
    assert_eq!(o.checker.verdict, "pass");
    let task = o.stats.cpu_time_by_task.iter().find(|t| t.comm == "a.out");
    let has = |f: &str| task.is_some_and(|t| t.functions.iter().any(|x| x.function == f));
    assert!(has("do_swap_page"), "faults go through the swap entries");
    assert!(!has("shmem_swapin_folio"));
}

/// seed001-kswapd.toml on private memory (forked children share its pages
/// copy-on-write, and their swap entries) under `policy`.
fn private_kswapd(policy: &str) -> Experiment {
    let mut e = file("experiments/seed001-kswapd.toml");
    e.kernel.tlb_policy = policy.into();
    set_params(&mut e, &[("shared", toml::Value::Boolean(false))]);
    e
}

#[test]
fn kswapd_swaps_private_pages_shared_after_fork_through_the_swap_cache() {
    let o = run_ok(&private_kswapd("arm64-tlbbatch"));
    let r = &o.stats.reclaim;
    assert!(r.pswpout > 0 && r.pswpin > 0, "{r:?}");
    // A page shared with a fork comes back into the swap cache and keeps
    // its slot; reclaiming it again frees it without a write.
    assert!(r.pgsteal > r.pswpout, "{r:?}");
    assert_eq!(o.checker.verdict, "pass");
    for policy in ["arm64-stock", "arm64-tlbbatch"] {
        let f = first_failure(&private_kswapd(policy), 2_000, 50_000);
        assert!(f.is_none(), "{policy}: {:?}", f.map(|f| f.report));
    }
    // The v6.6 race, and the mutants of the batch, on anonymous pages.
    let f = first_failure(&private_kswapd("arm64-tlbbatch-6.6"), 2_000, 50_000);
    assert_breaks(&f.expect("v6.6 fails"), Invariant::NoStaleHold);
    // Without the batch's sync, a frame is freed while another CPU maps
    // it, and a later call returns with the translation still cached:
    // which the schedule shows first depends on it.
    let f = first_failure(
        &private_kswapd("mutant-tlbbatch-no-batch-sync"),
        200,
        50_000,
    );
    let found = f.expect("caught").report.invariant();
    assert!(
        matches!(
            found,
            Some(Invariant::NoStaleHold | Invariant::NoUseAfterFree)
        ),
        "{found:?}"
    );
}

#[test]
fn a_private_page_written_after_copy_out_is_a_lost_write() {
    // Threads write the pages while MADV_PAGEOUT writes them to swap; the
    // mutant forgets that the cleared PTEs were dirty, so the write-out
    // does not wait for the deferred flush.
    let mut e = file("experiments/seed001-explore.toml");
    let params = [
        ("shared", toml::Value::Boolean(false)),
        ("fork", toml::Value::Boolean(false)),
        ("op", toml::Value::String("touch".into())),
    ];
    set_params(&mut e, &params);
    e.kernel.tlb_policy = "mutant-tlbbatch-clean-pte".into();
    let f = first_failure(&e, 200, 50_000).expect("caught");
    assert_breaks(&f, Invariant::NoLostWrite);
    e.kernel.tlb_policy = "arm64-tlbbatch".into();
    assert!(first_failure(&e, 2_000, 50_000).is_none());
}

#[test]
fn private_pages_migrate_through_migration_entries() {
    // migrate-bench on private memory (as pmbench's own): faults on a page
    // under migration wait at its migration entry; batching still saves
    // all but one DSB per batch.
    assert_arm64_batching_saves_dsbs(false);
    // The checker on a small private mapping migrated while children or
    // threads touch and mprotect it.
    let mut e = file("experiments/seed001-explore.toml");
    e.experiment.profile = "ampere-2s".into();
    e.kernel.migrate_batch_flush = true;
    for fork in [true, false] {
        let params = [
            ("shared", toml::Value::Boolean(false)),
            ("migrate", toml::Value::Boolean(true)),
            ("madvise", toml::Value::Boolean(false)),
            ("fork", toml::Value::Boolean(fork)),
        ];
        set_params(&mut e, &params);
        e.kernel.tlb_policy = "arm64-tlbbatch".into();
        assert!(first_failure(&e, 1_000, 50_000).is_none(), "fork={fork}");
        e.kernel.tlb_policy = "mutant-tlbbatch-no-batch-sync".into();
        let f = first_failure(&e, 200, 50_000).expect("caught");
        assert_breaks(&f, Invariant::NoUseAfterFree);
    }
}

#[test]
fn madv_free_beside_kswapd_keeps_the_batch_checks() {
    // The main thread MADV_FREEs its private pages each round (under the
    // PTE lock, after flush_tlb_batched_pending()); kswapd drops the ones
    // nobody wrote since and swaps the others, while threads write them
    // and mprotect one page each.
    let with = |policy: &str| {
        let mut e = private_kswapd(policy);
        let params = [
            ("madvise", toml::Value::Boolean(true)),
            ("advice", toml::Value::String("free".into())),
            ("fork", toml::Value::Boolean(false)),
        ];
        set_params(&mut e, &params);
        e
    };
    let o = run_ok(&with("arm64-tlbbatch"));
    let r = &o.stats.reclaim;
    assert!(r.pgsteal > r.pswpout, "some pages dropped unwritten: {r:?}");
    assert_eq!(o.checker.verdict, "pass");
    assert!(first_failure(&with("arm64-tlbbatch"), 2_000, 50_000).is_none());
    let f = first_failure(&with("arm64-tlbbatch-6.6"), 2_000, 50_000);
    assert_breaks(&f.expect("v6.6 fails"), Invariant::NoStaleHold);
    let f = first_failure(&with("mutant-tlbbatch-no-pending-flush"), 2_000, 50_000);
    assert_breaks(&f.expect("caught"), Invariant::NoStaleHold);
    // MADV_FREE is for private memory.
    let mut e = with("arm64-tlbbatch");
    set_params(&mut e, &[("shared", toml::Value::Boolean(true))]);
    let err = run(&e, &RunOptions::default()).unwrap_err().to_string();
    assert!(err.contains("needs `shared = false`"), "{err}");
}

#[test]
fn a_lazily_freeable_page_someone_still_holds_is_not_dropped() {
    // MADV_FREE, migration and kswapd on the same private pages: kswapd can
    // take a migrated page while the migration still holds it; it must put
    // the PTE back rather than drop the page (ref_count != 1 + map_count).
    // Before that rule, this search freed such a page while its deferred
    // flush was pending (schedule 9,446).
    let mut e = private_kswapd("arm64-tlbbatch");
    e.experiment.profile = "ampere-2s".into();
    let params = [
        ("madvise", toml::Value::Boolean(true)),
        ("advice", toml::Value::String("free".into())),
        ("migrate", toml::Value::Boolean(true)),
        ("fork", toml::Value::Boolean(false)),
        ("pages", toml::Value::Integer(3)),
        ("op", toml::Value::String("touch".into())),
    ];
    set_params(&mut e, &params);
    let f = first_failure(&e, 10_000, 50_000);
    assert!(f.is_none(), "{:?}", f.map(|f| f.report));
}

#[test]
fn reclaim_defers_no_flush_for_a_prot_none_pte() {
    // Two threads each make their page PROT_NONE while the main thread
    // pages the mapping out: a cleared PROT_NONE PTE is not
    // pte_accessible(), so set_tlb_ubc_flush_pending() defers no flush
    // for it (6.4+). Before the change every unmap deferred one.
    let mut e = file("experiments/seed001-explore.toml");
    e.kernel.tlb_policy = "arm64-tlbbatch".into();
    for (k, v) in [
        ("op", toml::Value::String("none-page".into())),
        ("fork", toml::Value::Boolean(false)),
        ("iterations", toml::Value::Integer(4)),
    ] {
        e.workload.params.insert(k.into(), v);
    }
    let o = run_ok(&e);
    let r = &o.stats.reclaim;
    assert!(r.pgsteal >= 2, "{r:?}");
    assert!(
        r.flush_deferred < r.pgsteal,
        "a PROT_NONE page deferred a flush: {r:?}"
    );
    assert_eq!(o.checker.verdict, "pass");
}

#[test]
fn mainline_reclaim_flushes_and_frees_each_full_batch_of_31_and_6_6_once_per_list() {
    // The page-out program's later rounds reclaim clean pages (swapped
    // in by reads): no write-back flush, only the list's deferred one.
    // 6.9+ (bc2ff4cbc329, arm64-tlbbatch) flushes and frees each time 31
    // folios are ready; 6.6 once per list (a PTE table's worth).
    let run = |policy: &str| {
        let mut e = file("experiments/seed001-pageout.toml");
        e.kernel.tlb_policy = policy.into();
        e.workload
            .params
            .insert("iterations".into(), toml::Value::Integer(3));
        run_ok(&e).stats.reclaim
    };
    let (mainline, v6_6) = (run("arm64-tlbbatch"), run("arm64-tlbbatch-6.6"));
    assert_eq!(mainline.pgsteal, v6_6.pgsteal);
    let per_round = mainline.pgsteal / 3;
    assert!(per_round > 31, "{mainline:?}");
    // Two clean rounds, each with per_round / 31 full batches.
    assert_eq!(
        mainline.batch_flushes - v6_6.batch_flushes,
        2 * (per_round / 31),
        "mainline {mainline:?}, 6.6 {v6_6:?}"
    );
}
