//! x86 policies (seed 004 and successors): what each sends where, what the
//! checker accepts, and the configuration errors that keep arm64 and x86
//! apart.

use tlbsim::check::Invariant;
use tlbsim::config::Experiment;
use tlbsim::driver::RunError;
use tlbsim::sim::{RunOutput, SimError};

const X86_POLICIES: [&str; 4] = [
    "x86-lazy-legacy",
    "x86-tlb-gen",
    "x86-pcid",
    "x86-lazy-cpumask",
];

use super::common::{self, run_seed};

fn experiment(profile: &str, policy: &str, cpus: u32, workload: &str, extra: &str) -> Experiment {
    let none = "asid_allocator = \"none\"\n";
    common::experiment(profile, policy, cpus, none, workload, extra)
}

fn ipis(o: &RunOutput) -> u64 {
    o.stats.total.ipi_call + o.stats.total.ipi_call_single
}

#[test]
fn legacy_ipis_the_cpu_the_task_left_and_tlb_gen_does_not() {
    let wl = "name = \"madv-migrate\"\niterations = 400";
    let legacy = run_seed(&experiment("skylake-4c8t", "x86-lazy-legacy", 2, wl, ""), 1).unwrap();
    let tlb_gen = run_seed(&experiment("skylake-4c8t", "x86-tlb-gen", 2, wl, ""), 1).unwrap();
    assert_eq!(legacy.checker.verdict, "pass");
    assert_eq!(tlb_gen.checker.verdict, "pass");
    // Every madvise but the first finds the previous CPU lazy in mm_cpumask.
    assert!(ipis(&legacy) >= 399, "legacy IPIs: {}", ipis(&legacy));
    assert!(ipis(&tlb_gen) <= 2, "tlb-gen IPIs: {}", ipis(&tlb_gen));
    let (l, t) = (
        legacy.metrics["iteration_us"],
        tlb_gen.metrics["iteration_us"],
    );
    // The saved time is one IPI round trip (send, delivery, handler, ack).
    let k = &legacy.profile.kernel;
    let round_trip_us =
        (k.ipi_send_ns + k.ipi_latency_ns + k.ipi_handler_ns + k.ipi_ack_ns) as f64 / 1e3;
    assert!(
        l - t > 0.8 * round_trip_us && l - t < 1.5 * round_trip_us,
        "legacy {l:.2} us vs tlb-gen {t:.2} us, round trip {round_trip_us:.2} us"
    );
}

#[test]
fn churn_stress_passes_every_x86_policy() {
    for p in X86_POLICIES {
        for seed in 1..=4 {
            let e = experiment(
                "skylake-4c8t",
                p,
                4,
                "name = \"churn\"",
                "[checker]\nspeculative_walks = true",
            );
            let o = run_seed(&e, seed).unwrap_or_else(|e| panic!("{p} seed {seed}: {e}"));
            assert_eq!(o.checker.verdict, "pass", "{p} seed {seed}");
            assert!(o.stats.tables_freed > 0, "{p}: tables were freed");
        }
    }
}

#[test]
fn skipping_lazy_cpus_when_tables_are_freed_is_caught() {
    let e = experiment(
        "skylake-4c8t",
        "x86-tlb-gen-before-b956575",
        4,
        "name = \"churn\"",
        "[checker]\nspeculative_walks = true",
    );
    for seed in 1..=3 {
        match run_seed(&e, seed) {
            Err(SimError::Run(RunError::Violation(r))) => {
                assert_eq!(r.invariant, Invariant::NoStaleWalk, "seed {seed}: {r}");
            }
            other => panic!("seed {seed}: expected a violation, got {other:?}"),
        }
    }
}

#[test]
fn processes_flush_locally_and_threads_need_other_cpus() {
    let wl = |mode: &str| {
        format!("name = \"tlb-flush\"\nvariant = 2\nmode = \"{mode}\"\ntasks = 4\niterations = 300")
    };
    let procs = run_seed(
        &experiment("skylake-4c8t", "x86-pcid", 4, &wl("processes"), ""),
        1,
    )
    .unwrap();
    let threads = run_seed(
        &experiment("skylake-4c8t", "x86-pcid", 4, &wl("threads"), ""),
        1,
    )
    .unwrap();
    assert_eq!(procs.checker.verdict, "pass");
    assert_eq!(threads.checker.verdict, "pass");
    assert!(ipis(&procs) < 10, "processes: {} IPIs", ipis(&procs));
    // Each madvise of a thread IPIs the other three CPUs running the mm.
    assert!(
        ipis(&threads) > 3 * 4 * 250,
        "threads: {} IPIs",
        ipis(&threads)
    );
    assert!(procs.metrics["loops_per_s"] > threads.metrics["loops_per_s"]);
}

#[test]
fn invlpgb_replaces_ipis_once_the_mm_has_a_global_asid() {
    let wl = "name = \"tlb-flush\"\nvariant = 2\nmode = \"threads\"\ntasks = 8\niterations = 300\nwarmup_ns = 33000000";
    let base = run_seed(&experiment("epyc-2s", "x86-pcid", 8, wl, ""), 1).unwrap();
    let bcast = run_seed(&experiment("epyc-2s", "x86-invlpgb", 8, wl, ""), 1).unwrap();
    assert_eq!(bcast.checker.verdict, "pass");
    assert_eq!(base.stats.total.tlbi_broadcast, 0);
    assert!(bcast.stats.total.tlbi_broadcast > 8 * 300, "INVLPGBs");
    // The warm-up, before the global ASID, still flushes by IPI.
    assert!(
        ipis(&bcast) * 2 < ipis(&base),
        "IPIs: invlpgb {} vs pcid {}",
        ipis(&bcast),
        ipis(&base)
    );
}

#[test]
fn pcid_keeps_recent_address_spaces_across_switches() {
    // Five processes (fewer than the 6 PCIDs) exchanging messages through
    // pipes on one CPU: with PCIDs the switches reload CR3 without flushing
    // (only each mm's first load flushes).
    let wl = "name = \"hackbench\"\ngroups = 1\nfds = 2\nloops = 3000\nruns = 1";
    let nopcid = run_seed(&experiment("skylake-4c8t", "x86-tlb-gen", 1, wl, ""), 1).unwrap();
    let pcid = run_seed(&experiment("skylake-4c8t", "x86-pcid", 1, wl, ""), 1).unwrap();
    assert_eq!(pcid.checker.verdict, "pass");
    assert!(
        pcid.stats.total.tlbi_local * 4 < nopcid.stats.total.tlbi_local,
        "flushes: pcid {} vs no pcid {}",
        pcid.stats.total.tlbi_local,
        nopcid.stats.total.tlbi_local
    );
}

#[test]
fn arch_mismatches_are_config_errors_naming_the_field() {
    let wl = "name = \"madv-migrate\"\niterations = 10";
    let e = experiment("ampere-32", "x86-tlb-gen", 4, wl, "");
    let msg = run_seed(&e, 1).unwrap_err().to_string();
    assert!(
        msg.contains("[kernel] tlb_policy") && msg.contains("arm64 machine"),
        "{msg}"
    );
    let e = experiment("skylake-4c8t", "arm64-stock", 4, wl, "");
    let msg = run_seed(&e, 1).unwrap_err().to_string();
    assert!(
        msg.contains("[kernel] tlb_policy") && msg.contains("x86 machine"),
        "{msg}"
    );
    let mut e = experiment("skylake-4c8t", "x86-pcid", 4, wl, "");
    e.kernel.asid_allocator = "arm64-asid-reserved".into();
    let msg = run_seed(&e, 1).unwrap_err().to_string();
    assert!(
        msg.contains("[kernel] asid_allocator") && msg.contains("\"none\""),
        "{msg}"
    );
    let e = experiment("skylake-4c8t", "x86-invlpgb", 4, wl, "");
    let msg = run_seed(&e, 1).unwrap_err().to_string();
    assert!(msg.contains("no INVLPGB"), "{msg}");
}

#[test]
fn invlpgb_without_transition_ipis_is_caught() {
    let wl = "name = \"tlb-flush\"\nvariant = 2\nmode = \"threads\"\ntasks = 8\niterations = 300\nwarmup_ns = 33000000";
    let extra = "[checker]\nspeculative_walks = true";
    let good = run_seed(&experiment("epyc-2s", "x86-invlpgb", 128, wl, extra), 1).unwrap();
    assert_eq!(good.checker.verdict, "pass");
    match run_seed(
        &experiment(
            "epyc-2s",
            "mutant-x86-invlpgb-no-transition",
            128,
            wl,
            extra,
        ),
        1,
    ) {
        Err(SimError::Run(RunError::Violation(r))) => {
            assert!(
                matches!(
                    r.invariant,
                    Invariant::NoUseAfterFree | Invariant::NoStaleUse | Invariant::NoStaleHold
                ),
                "{r}"
            );
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn pthread_mmap_chunks_map_write_and_unmap_each_piece() {
    // 2 threads x 2 rounds x 256 KiB each: whole shares, then 64 KiB pieces.
    let wl = |chunk: u32| {
        format!(
            "name = \"pthread-mmap\"\nthreads = 2\nrounds = 2\ndata_mib = 0\nchunk_kib = {chunk}"
        )
    };
    // data_mib = 0 gives no page: rejected, naming the field.
    assert!(run_seed(&experiment("skylake-4c8t", "x86-tlb-gen", 4, &wl(0), ""), 1).is_err());
    let wl = |chunk: u32| wl(chunk).replace("data_mib = 0", "data_mib = 1") + "\n";
    let runs: Vec<_> = [0, 64]
        .iter()
        .map(|&c| run_seed(&experiment("skylake-4c8t", "x86-tlb-gen", 4, &wl(c), ""), 1).unwrap())
        .collect();
    for o in &runs {
        assert_eq!(o.checker.verdict, "pass");
        // Every page of every piece is written once per round: 2 x 2 x 128.
        assert!(
            o.stats.total.page_faults >= 512,
            "{}",
            o.stats.total.page_faults
        );
    }
    let flushes = |o: &RunOutput| o.stats.total.flushes_broadcast + o.stats.total.flushes_local;
    // 8 pieces per share instead of 1: more munmaps, so more flushes.
    assert!(
        flushes(&runs[1]) >= flushes(&runs[0]) + 2 * 2 * 7,
        "{} vs {}",
        flushes(&runs[1]),
        flushes(&runs[0])
    );
    // A piece must be whole pages.
    let e = experiment("skylake-4c8t", "x86-tlb-gen", 4, &wl(3), "");
    assert!(
        matches!(run_seed(&e, 1), Err(tlbsim::sim::SimError::Field { key, .. }) if key == "chunk_kib")
    );
}

#[test]
fn transparent_huge_pages_fault_split_and_free_under_the_checker() {
    // x86 experiments with THP on.
    let thp = |policy: &str, wl: &str| {
        let k = "asid_allocator = \"none\"\nthp = \"always\"\n";
        common::experiment("skylake-4c8t", policy, 4, k, wl, "")
    };
    // pthread-mmap: 2 threads, 16 MiB each.
    let wl = "name = \"pthread-mmap\"\nthreads = 2\nrounds = 2\ndata_mib = 32";
    let on = run_seed(&thp("x86-tlb-gen", wl), 1).unwrap();
    let off = run_seed(&experiment("skylake-4c8t", "x86-tlb-gen", 4, wl, ""), 1).unwrap();
    assert_eq!(on.checker.verdict, "pass");
    // A 16 MiB mapping holds at least 7 aligned 2 MiB pages: 2 threads x 2
    // rounds x >= 7 huge faults, each replacing 512 small ones.
    assert!(
        on.stats.thp_fault_alloc >= 28,
        "{}",
        on.stats.thp_fault_alloc
    );
    assert_eq!(off.stats.thp_fault_alloc, 0);
    assert!(
        on.stats.total.page_faults + 511 * on.stats.thp_fault_alloc
            <= off.stats.total.page_faults + 4 * 512,
        "{} + 511 x {} vs {}",
        on.stats.total.page_faults,
        on.stats.thp_fault_alloc,
        off.stats.total.page_faults
    );
    // munmap of whole huge pages needs no split.
    assert_eq!(on.stats.thp_split_pmd, 0);
    // MADV_DONTNEED of one page inside a huge page splits it (will-it-scale
    // tlb_flush1's loop over 128 MiB of anonymous memory), under every x86
    // policy.
    let wis = "name = \"tlb-flush\"\nvariant = 1\nanonymous = true\ntasks = 3\niterations = 300";
    for policy in ["x86-lazy-legacy", "x86-tlb-gen", "x86-pcid"] {
        let o = run_seed(&thp(policy, wis), 1).unwrap();
        assert_eq!(o.checker.verdict, "pass", "{policy}");
        assert!(
            o.stats.thp_split_pmd >= 3,
            "{policy}: {}",
            o.stats.thp_split_pmd
        );
    }
    // The churn stress with a heap big enough for huge pages: mprotect and
    // madvise split them; the checker passes, and still catches the mutant.
    let churn = "name = \"churn\"\npages = 4096";
    let o = run_seed(&thp("x86-tlb-gen", churn), 2).unwrap();
    assert!(o.stats.thp_split_pmd > 0 && o.checker.verdict == "pass");
    let bad = thp("x86-tlb-gen-before-b956575", churn);
    assert!(run_seed(&bad, 1).is_err());
    // A profile without the cost of a huge fault cannot run THP.
    let e = common::experiment(
        "cortex-a15-2",
        "arm64-stock",
        2,
        "thp = \"always\"\n",
        wl,
        "",
    );
    assert!(
        matches!(run_seed(&e, 1), Err(tlbsim::sim::SimError::Field { key, .. }) if key == "thp")
    );
}

#[test]
fn a_write_fault_that_reuses_the_page_flushes_on_arm64_only() {
    // mprotect RO then RW and a write: the write fault makes the PTE
    // writable again (wp_page_reuse). arm64's ptep_set_access_flags()
    // flushes the stale read-only entry; x86's does not (a spurious fault
    // drops it). 2 processes x 10 iterations: 2 mprotect flushes each on
    // x86, 3 flushes on arm64, beside each process's exec (its stack
    // move flushes twice).
    let wl = "name = \"mprotect\"\niterations = 10";
    let flushes = |profile: &str, policy: &str, kernel: &str| {
        let e = common::experiment(profile, policy, 2, kernel, wl, "");
        let t = run_seed(&e, 1).unwrap().stats.total;
        t.flushes_local + t.flushes_broadcast + t.flushes_skipped
    };
    let x86 = flushes("skylake-4c8t", "x86-tlb-gen", "asid_allocator = \"none\"\n");
    let arm64 = flushes("ampere-32", "arm64-stock", "");
    assert!(x86 < 2 * 2 * 10 + 2 * 2 + 5, "x86: {x86} flushes");
    assert!(arm64 >= 3 * 2 * 10, "arm64: {arm64} flushes");
}

#[test]
fn the_huge_zero_page_needs_thp_and_a_known_mode() {
    let wl = "name = \"pthread-mmap\"\nthreads = 1\nrounds = 1\ndata_mib = 4";
    let k = "asid_allocator = \"none\"\nthp_huge_zero_page = \"cow-alloc\"\n";
    let e = common::experiment("skylake-4c8t", "x86-tlb-gen", 2, k, wl, "");
    assert!(
        matches!(run_seed(&e, 1), Err(SimError::Field { key, .. }) if key == "thp_huge_zero_page")
    );
    let text = "[experiment]\nname = \"t\"\nprofile = \"skylake-4c8t\"\n[kernel]\nthp = \"always\"\nthp_huge_zero_page = \"sometimes\"\n[workload]\nname = \"pthread-mmap\"\n";
    let err = tlbsim::config::parse_toml::<Experiment>("hzp.toml", text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("thp_huge_zero_page"), "{err}");
}

#[test]
fn nopcid_turns_invlpgb_off_since_the_fix_and_faulted_before() {
    // Booted with nopcid: since 44126343d58c the flushes stay IPIs, every
    // CR3 write flushes PCID 0 and the checker passes; before it
    // (nopcid_keeps_invlpgb) the mm's global ASID makes the flush an
    // INVLPGB naming a PCID while CR4.PCIDE is clear, which faults.
    let wl = "name = \"tlb-flush\"\nvariant = 2\nmode = \"threads\"\ntasks = 0\niterations = 200\nwarmup_ns = 33000000";
    let kernel = "asid_allocator = \"none\"\nnopcid = true\n";
    let e = |extra: &str| {
        let k = format!("{kernel}{extra}");
        common::experiment("epyc-2s", "x86-invlpgb", 5, &k, wl, "")
    };
    let fixed = run_seed(&e(""), 1).unwrap();
    assert_eq!(fixed.checker.verdict, "pass");
    assert_eq!(fixed.stats.total.tlbi_broadcast, 0, "no INVLPGB");
    assert!(ipis(&fixed) > 0, "flushes by IPI");
    match run_seed(&e("nopcid_keeps_invlpgb = true\n"), 1) {
        Err(SimError::Run(RunError::Violation(r))) => {
            assert_eq!(r.invariant, Invariant::ValidTlbi, "{r}");
            assert!(r.to_string().contains("INVLPGB pcid"), "{r}");
        }
        other => panic!("expected the #GP, got {other:?}"),
    }
}
