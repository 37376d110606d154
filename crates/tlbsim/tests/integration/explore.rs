//! The explorer: exhaustive search passes the stock policy, finds each
//! mutant, and every failing schedule replays to the same violation.

use super::common;
use tlbsim::check::Invariant;
use tlbsim::config::{parse_toml, Experiment};
use tlbsim::engine::track::Footprint;
use tlbsim::explore::{
    check, check_replay, format_schedule, parse_schedule, Action, CheckOptions, Chooser,
    DfsChooser, DporChooser, Explorer, Finding, Outcome, Strategy,
};

fn experiment(policy: &str, cpus: u32, workload: &str) -> Experiment {
    common::arm64(policy, cpus, workload)
}

fn opts(strategy: Strategy, schedules: u64) -> CheckOptions {
    CheckOptions {
        strategy,
        schedules,
        seed: 1,
        max_actions: 50_000,
        max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
        speculation: 2,
        cpus: None,
    }
}

const MPROTECT: &str = "name = \"threads\"\nthreads = 2\niterations = 3\nop = \"mprotect\"";
const MUNMAP: &str = "name = \"threads\"\nthreads = 2\niterations = 3\nop = \"munmap\"";

#[test]
fn schedules_print_and_parse_back() {
    let s = vec![
        Action::Step(common::cpuid(0)),
        Action::Step(common::cpuid(0)),
        Action::Step(common::cpuid(1)),
        Action::Deliver(common::cpuid(1)),
        Action::Speculate(common::cpuid(0), 0x7eff_ffff_e000),
    ];
    let text = format_schedule(&s);
    assert_eq!(text, "s0*2 s1 d1 p0:7effffffe000");
    assert_eq!(parse_schedule(&text).unwrap(), s);
    assert!(parse_schedule("s0 x1").unwrap_err().contains("x1"));
}

#[test]
fn exhaustive_search_passes_stock() {
    let r = check(
        &experiment("arm64-stock", 2, MPROTECT),
        &opts(Strategy::Exhaustive(1), 100_000),
    )
    .unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert!(r.exhausted, "the delay-bounded search finishes");
    assert!(r.schedules > 100, "{} schedules", r.schedules);
    assert_eq!(r.completed, r.schedules);
}

/// `strategy` (up to `schedules`) finds the range and free mutants, each
/// with its invariant, and each failing schedule replays to the same
/// report.
fn finds_range_and_free_mutants_and_replays(strategy: Strategy, schedules: u64) {
    for (policy, wl, invariant) in [
        (
            "mutant-range-no-broadcast",
            MPROTECT,
            Invariant::NoStaleHold,
        ),
        ("mutant-free-before-sync", MUNMAP, Invariant::NoStaleWalk),
    ] {
        let e = experiment(policy, 2, wl);
        let r = check(&e, &opts(strategy, schedules)).unwrap();
        let f = r
            .failure
            .unwrap_or_else(|| panic!("{policy}: not found in {} schedules", r.schedules));
        assert_eq!(
            f.report.invariant(),
            Some(invariant),
            "{policy}: {}",
            f.report
        );
        match check_replay(&e, None, &f.schedule).unwrap() {
            Outcome::Violation(again) => {
                assert_eq!(Finding::Violation(again), f.report, "{policy}")
            }
            other => panic!("{policy}: replay gave {other:?}"),
        }
    }
}

#[test]
fn exhaustive_search_finds_each_mutant_and_the_report_replays() {
    finds_range_and_free_mutants_and_replays(Strategy::Exhaustive(2), 100_000);
}

#[test]
fn random_and_pct_runs_are_reproducible() {
    let e = experiment("arm64-stock", 2, MPROTECT);
    for s in [Strategy::Random, Strategy::Pct(3)] {
        let a = check(&e, &opts(s, 20)).unwrap();
        let b = check(&e, &opts(s, 20)).unwrap();
        assert_eq!(a, b);
        assert!(a.failure.is_none());
    }
}

#[test]
fn pct_finds_the_posted_v2_recheck_race_and_passes_the_design() {
    let text = include_str!("../../../../experiments/seed000-switch-race.toml");
    let mut e: Experiment = parse_toml("seed000-switch-race.toml", text).unwrap();
    let o = CheckOptions {
        strategy: Strategy::Pct(4),
        schedules: 1_000,
        seed: 4, // the registry entry's search (see skip_v2_posted.rs)
        max_actions: 20_000,
        max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
        speculation: 2,
        cpus: None,
    };
    let design = check(&e, &o).unwrap();
    assert!(design.failure.is_none(), "{:?}", design.failure);
    e.kernel.tlb_policy = "arm64-skip-broadcast-v2-posted".into();
    let posted = check(&e, &o).unwrap();
    let f = posted.failure.expect("the likely() slip is found");
    assert_eq!(
        f.report.invariant(),
        Some(Invariant::NoStaleHold),
        "{}",
        f.report
    );
    assert!(matches!(
        check_replay(&e, None, &f.schedule).unwrap(),
        Outcome::Violation(_)
    ));
}

fn seed002() -> Experiment {
    common::file("experiments/seed002-explore.toml")
}

#[test]
fn the_allocator_passes_exhaustive_search_with_rollovers() {
    let e = seed002();
    let r = check(&e, &opts(Strategy::Exhaustive(1), 1_000_000)).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert!(r.exhausted);
    assert!(r.schedules > 500, "{} schedules", r.schedules);
    // The configuration really rolls over: a timing run counts them.
    let o = tlbsim::sim::run(&e, &tlbsim::sim::RunOptions::default()).unwrap();
    assert!(
        o.stats.asid_rollovers >= 3,
        "{} rollovers",
        o.stats.asid_rollovers
    );
}

#[test]
fn the_explorer_finds_every_allocator_mutant_and_reports_replay() {
    for (m, invariant) in [
        ("mutant-asid-no-reserve", Invariant::AsidIsolation),
        ("mutant-asid-plain-store", Invariant::NoStaleHold),
        ("mutant-asid-forget-cpu", Invariant::NoStaleWalk),
    ] {
        let mut e = seed002();
        e.kernel.asid_allocator = m.into();
        let r = check(&e, &opts(Strategy::Random, 2_000)).unwrap();
        let f = r
            .failure
            .unwrap_or_else(|| panic!("{m}: not found in {} schedules", r.schedules));
        assert_eq!(f.report.invariant(), Some(invariant), "{m}: {}", f.report);
        match check_replay(&e, None, &f.schedule).unwrap() {
            Outcome::Violation(again) => assert_eq!(Finding::Violation(again), f.report, "{m}"),
            other => panic!("{m}: replay gave {other:?}"),
        }
    }
}

#[test]
fn a_violation_report_reads_like_a_kernel_log() {
    // What `tlbsim check experiments/seed000-safety.toml --policy
    // mutant-range-no-broadcast` reports.
    let mut e = common::file("experiments/seed000-safety.toml");
    e.kernel.tlb_policy = "mutant-range-no-broadcast".to_string();
    let r = check(&e, &opts(Strategy::Random, 200)).unwrap();
    let f = r.failure.expect("the mutant is found");
    let Finding::Violation(v) = &f.report else {
        panic!("not a violation: {}", f.report)
    };
    let text = v.to_string();
    common::assert_reads_like_a_kernel_log(&text);
    // The entry and the PTE as a developer reads them.
    assert!(
        v.detail
            .contains(&format!("va {:#x} -> pfn ", v.va.unwrap())),
        "{}",
        v.detail
    );
    assert!(
        v.detail.contains("current PTE pfn ") || v.detail.contains("current PTE none"),
        "{}",
        v.detail
    );
    // Each event is one line, numbered in the order the explorer ran it
    // (its clocks are per CPU, so no time), its kind then its CPU (or
    // mm): `PteWrite cpu0 mm0 va 0x...`, `Tlbi cpu3 VALE1 asid 1 va 0x...`.
    let n = v.history.len();
    let lines = text.lines().rev().zip(v.history.iter().rev());
    for (i, (line, (_, ev))) in lines.enumerate() {
        assert!(line.ends_with(&ev.to_string()), "{line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.first(), Some(&(n - i).to_string().as_str()), "{line}");
        let kind = words.get(1).copied().unwrap_or("");
        let who = words.get(2).copied().unwrap_or("");
        assert!(kind.chars().all(|c| c.is_ascii_alphanumeric()), "{line}");
        assert!(who.starts_with("cpu") || who.starts_with("mm"), "{line}");
    }
    assert!(text.contains(" PteWrite cpu"), "{text}");
    // Arm64 TLBIs by their instruction names.
    assert!(
        text.contains(" VALE1 asid ") || text.contains(" VAE1 asid "),
        "{text}"
    );
}

fn x86_experiment(policy: &str) -> Experiment {
    let none = "asid_allocator = \"none\"\n";
    let wl = "name = \"threads\"\nthreads = 2\niterations = 3\nop = \"munmap\"\nreader_hop = true";
    common::experiment("skylake-4c8t", policy, 3, none, wl, "")
}

#[test]
fn the_explorer_takes_ipis_and_passes_the_x86_policies() {
    for policy in ["x86-lazy-legacy", "x86-tlb-gen", "x86-pcid"] {
        let r = check(
            &x86_experiment(policy),
            &opts(Strategy::Exhaustive(1), 100_000),
        )
        .unwrap();
        assert!(r.failure.is_none(), "{policy}: {:?}", r.failure);
        assert!(r.exhausted, "{policy}: the bound-1 search finishes");
        assert!(
            r.interrupts >= r.schedules,
            "{policy}: flush IPIs are taken ({} in {} schedules)",
            r.interrupts,
            r.schedules
        );
    }
}

#[test]
fn the_explorer_finds_the_x86_lazy_mutant_and_the_report_replays() {
    let exp = x86_experiment("x86-tlb-gen-before-b956575");
    let r = check(&exp, &opts(Strategy::Random, 1_000)).unwrap();
    let f = r.failure.expect("the lazy CPU's stale walk is found");
    assert_eq!(
        f.report.invariant(),
        Some(Invariant::NoStaleWalk),
        "{}",
        f.report
    );
    // The report names the x86 flushes as x86 does (a local flush of a
    // PCID: INVPCID or a CR3 write), never as arm64 TLBIs.
    let text = f.report.to_string();
    common::assert_reads_like_a_kernel_log(&text);
    assert!(text.contains("flush pcid "), "{text}");
    assert!(!text.contains("TLBI") && !text.contains("E1"), "{text}");
    match check_replay(&exp, None, &f.schedule).unwrap() {
        Outcome::Violation(v) => assert_eq!(v.invariant, Invariant::NoStaleWalk, "{v}"),
        other => panic!("replay: {other:?}"),
    }
    assert_eq!(
        parse_schedule("s0 i1 s1").unwrap(),
        vec![
            Action::Step(common::cpuid(0)),
            Action::Interrupt(common::cpuid(1)),
            Action::Step(common::cpuid(1))
        ]
    );
}

#[test]
fn the_explorer_finds_switch_mm_reading_tlb_gen_before_the_cpumask() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../experiments/seed004-explore-switch.toml"
    ))
    .unwrap();
    let mut exp: Experiment = parse_toml("seed004-explore-switch.toml", &text).unwrap();
    let r = check(&exp, &opts(Strategy::Random, 300)).unwrap();
    assert!(r.failure.is_none(), "x86-pcid: {:?}", r.failure);
    exp.kernel.tlb_policy = "mutant-x86-gen-before-mask".into();
    let r = check(&exp, &opts(Strategy::Random, 2_000)).unwrap();
    let f = r.failure.expect("the missed flush is found");
    assert_eq!(
        f.report.invariant(),
        Some(Invariant::NoStaleHold),
        "{}",
        f.report
    );
    match check_replay(&exp, None, &f.schedule).unwrap() {
        Outcome::Violation(v) => assert_eq!(v.invariant, Invariant::NoStaleHold, "{v}"),
        other => panic!("replay: {other:?}"),
    }
}

/// `check` on a pool of `threads` rayon threads.
fn check_on(threads: usize, e: &Experiment, o: &CheckOptions) -> tlbsim::explore::CheckReport {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| check(e, o))
        .unwrap()
}

#[test]
fn parallel_searches_report_what_the_sequential_search_reports() {
    let pass = x86_experiment("x86-tlb-gen");
    let bug = x86_experiment("x86-tlb-gen-before-b956575");
    let cases = [
        // Whole bound-2 search; cut by the cap inside a subtree; tiny caps.
        (&pass, Strategy::Exhaustive(2), 100_000),
        (&pass, Strategy::Exhaustive(2), 1_234),
        (&pass, Strategy::Exhaustive(1), 1),
        (&pass, Strategy::Exhaustive(0), 10),
        // A failure deep in the search, exhaustive and random.
        (&bug, Strategy::Exhaustive(1), 100_000),
        (&bug, Strategy::Random, 500),
        (&pass, Strategy::Random, 300),
    ];
    for (e, s, n) in cases {
        let o = opts(s, n);
        let seq = check_on(1, e, &o);
        let par = check_on(3, e, &o);
        assert_eq!(seq, par, "{s:?}, {n} schedules");
    }
    // The cases are not trivial: the mutant fails past its first schedule.
    let r = check_on(3, &bug, &opts(Strategy::Exhaustive(1), 100_000));
    assert!(r.failure.as_ref().is_some_and(|f| f.index > 0), "{r:?}");
}

#[test]
fn the_explorer_passes_huge_page_faults_and_splits() {
    // will-it-scale tlb_flush1's loop on 128 MiB of anonymous memory with
    // THP: the first write maps a 2 MiB page, each MADV_DONTNEED of one
    // page splits it; x86 flush IPIs are taken.
    let text = "[experiment]\nname = \"t\"\nprofile = \"skylake-4c8t\"\n[machine]\ncpus = 3\n[kernel]\ntlb_policy = \"x86-tlb-gen\"\nasid_allocator = \"none\"\nthp = \"always\"\n[workload]\nname = \"tlb-flush\"\nvariant = 1\nanonymous = true\ntasks = 2\niterations = 2\n";
    let e: Experiment = parse_toml("thp.toml", text).unwrap();
    let r = check(&e, &opts(Strategy::Exhaustive(1), 100_000)).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert!(r.exhausted && r.interrupts > 0, "{r:?}");
}

#[test]
fn the_explorer_passes_the_huge_zero_page_and_its_copy_on_write() {
    // pthread-mmap reading each page before writing it, 2 threads with
    // 4 MiB each (one aligned 2 MiB or more per mapping): the read maps the
    // huge zero page, the write copies it with a 2 MiB flush (3.8-5.7) or
    // splits it (5.8+), under schedules the explorer picks.
    for mode in ["cow-alloc", "cow-split"] {
        let text = format!("[experiment]\nname = \"t\"\nprofile = \"skylake-4c8t\"\n[machine]\ncpus = 3\n[kernel]\ntlb_policy = \"x86-tlb-gen\"\nasid_allocator = \"none\"\nthp = \"always\"\nthp_huge_zero_page = \"{mode}\"\n[workload]\nname = \"pthread-mmap\"\nthreads = 2\nrounds = 1\ndata_mib = 8\nread_before_write = true\n");
        let e: Experiment = parse_toml("hzp.toml", &text).unwrap();
        let r = check(&e, &opts(Strategy::Random, 20)).unwrap();
        assert!(r.failure.is_none(), "{mode}: {:?}", r.failure);
        assert!(r.completed > 0 && r.interrupts > 0, "{mode}: {r:?}");
    }
}

#[test]
fn in_vms_dvmbm_leaves_a_window_after_a_mask_change_and_stock_kvm_has_none() {
    // experiments/seed003-vm-race.toml: two 2-vCPU VMs, mprotect vs a
    // hopping reader in each. Under kvm-dvmbm a vCPU that loads on a new
    // CPU widens the VM's mask and asks the other vCPU to reload its
    // register without waiting: until that vCPU exits, its broadcasts
    // miss the new CPU. Under kvm-stock every broadcast reaches everyone.
    let mut e = common::file("experiments/seed003-vm-race.toml");
    let r = check(&e, &opts(Strategy::Random, 2_000)).unwrap();
    let f = r.failure.expect("the window is found");
    let Finding::Violation(v) = &f.report else {
        panic!("{}", f.report)
    };
    assert_eq!(v.invariant, Invariant::NoStaleHold, "{v}");
    match check_replay(&e, None, &f.schedule).unwrap() {
        Outcome::Violation(again) => assert_eq!(&again, v),
        o => panic!("replay: {o:?}"),
    }
    e.vm.as_mut().unwrap().kvm_policy = "kvm-stock".into();
    let r = check(&e, &opts(Strategy::Random, 2_000)).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
}

#[test]
fn with_fb_clear_a_vcpu_that_moved_must_flush_its_vm_where_it_comes_back() {
    // experiments/seed003-vm-move.toml: two 2-vCPU VMs floating on 2
    // CPUs, guests flushing locally. The 2020 RFC (kvm-nofb) flushes a
    // vCPU's VM on load when it moved; without that flush (the mutant) a
    // vCPU comes back to a CPU whose TLB still holds what its guest
    // changed or freed after a local flush elsewhere. The file pins the
    // walk-cache reading its v2 guests were designed for
    // (`flush-on-ttbr-change`): the guest's TTBR0 writes drop the stale
    // walks, and the vCPU finds a stale leaf; under the default reading
    // v2's own teardown fails first (seed000.rs).
    let mut e = common::file("experiments/seed003-vm-move.toml");
    let r = check(&e, &opts(Strategy::Random, 2_000)).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    e.vm.as_mut().unwrap().kvm_policy = "mutant-kvm-nofb-no-move-flush".into();
    let r = check(&e, &opts(Strategy::Random, 2_000)).unwrap();
    let f = r.failure.expect("the mutant is caught");
    let Finding::Violation(v) = &f.report else {
        panic!("{}", f.report)
    };
    assert_eq!(v.invariant, Invariant::NoStaleHold, "{v}");
}

/// will-it-scale's tlb_flush`variant` on a 128 MiB file (kernel/mm/filemap.rs)
/// under x86 `policy`, 2 tasks as threads on 3 CPUs, `iterations` pages
/// each, with `[kernel] extra`.
fn file_flush(policy: &str, variant: u32, iterations: u32, extra: &str) -> Experiment {
    let text = format!("[experiment]\nname = \"t\"\nprofile = \"skylake-4c8t\"\n[machine]\ncpus = 3\n[kernel]\ntlb_policy = \"{policy}\"\nasid_allocator = \"none\"\n{extra}[workload]\nname = \"tlb-flush\"\nvariant = {variant}\ntasks = 2\niterations = {iterations}\n");
    parse_toml("file.toml", &text).unwrap()
}

/// Three complete bound-1 searches: about 3 minutes of CPU.
#[test]
#[ignore = "long: three complete bound-1 searches (~3 min CPU); .ci/run runs it"]
fn the_explorer_passes_file_mappings_with_fault_around_and_pmd_splits() {
    // tlb_flush1: the read-back's fault-around maps the next pages
    // read-only and the next write copies one (wp_page_copy's flush);
    // tlb_flush3 with PMD-sized folios: each write and each madvise split
    // the file PMD (pmdp_huge_clear_flush). Both under the schedules the
    // explorer picks, with x86 flush IPIs taken.
    for (variant, extra) in [
        (1, ""),
        (1, "file_large_folios = \"pmd\"\n"),
        (3, "file_large_folios = \"pmd\"\n"),
    ] {
        let e = file_flush("x86-tlb-gen", variant, 3, extra);
        let r = check(&e, &opts(Strategy::Exhaustive(1), 100_000)).unwrap();
        assert!(
            r.failure.is_none(),
            "tlb_flush{variant} {extra}: {:?}",
            r.failure
        );
        assert!(r.exhausted && r.interrupts > 0, "tlb_flush{variant}: {r:?}");
    }
}

/// One thread toggling a page with mprotect once, on 2 CPUs: small
/// enough for the unbounded searches to finish.
const ONE_MPROTECT: &str = "name = \"threads\"\nthreads = 1\niterations = 1\nop = \"mprotect\"";
const TWO_MPROTECT: &str = "name = \"threads\"\nthreads = 2\niterations = 1\nop = \"mprotect\"";

#[test]
fn dpor_completes_without_a_preemption_bound_and_runs_no_schedule_twice() {
    let e = experiment("arm64-stock", 2, ONE_MPROTECT);
    let mut o = opts(Strategy::Dpor, 100_000);
    o.speculation = 1;
    let r = check(&e, &o).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert!(r.exhausted, "DPOR finishes on {} schedules", r.schedules);
    // Steps of the two CPUs commute where their recorded footprints do:
    // DPOR runs fewer schedules than an unbounded delay search.
    let full = check(&e, &opts_with(Strategy::Exhaustive(u32::MAX), 100_000, 1)).unwrap();
    assert!(full.exhausted);
    assert!(
        r.schedules < full.schedules,
        "{} of {}",
        r.schedules,
        full.schedules
    );
    // Deterministic: the same report again.
    assert_eq!(check(&e, &o).unwrap(), r);
}

/// A chooser that keeps what another chose and the footprints recorded.
struct Keep<'a, C: Chooser> {
    inner: &'a mut C,
    fps: Vec<Footprint>,
}

impl<C: Chooser> Chooser for Keep<'_, C> {
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize {
        self.inner.choose(depth, enabled)
    }
    fn stop(&self) -> Option<tlbsim::explore::Stop> {
        self.inner.stop()
    }
    fn wants_footprints(&self) -> bool {
        true
    }
    fn executed(&mut self, f: &Footprint) {
        self.fps.push(f.clone());
        self.inner.executed(f);
    }
}

/// Runs one schedule of `e` with `c`: its actions, their footprints, what
/// was enabled where it stopped, and whether it ran to its end (not
/// stopped by a sleep set).
fn run_kept(
    e: &Experiment,
    c: &mut impl Chooser,
) -> (Vec<Action>, Vec<Footprint>, Vec<Action>, bool) {
    let b = tlbsim::sim::build(e, &tlbsim::sim::RunOptions::default()).unwrap();
    let done = b.done();
    let mut x = Explorer::new(std::rc::Rc::clone(&b.world), 1);
    x.add_vms(&b.guests);
    let mut k = Keep {
        inner: c,
        fps: Vec::new(),
    };
    let out = x.run(&mut k, 50_000, &done);
    let ended = x.enabled();
    b.teardown();
    (x.schedule.clone(), k.fps, ended, out != Outcome::Pruned)
}

/// A schedule, its class (normal form) and the state it ends in: the kernel's and the
/// hardware's, as their `Debug` forms show them.
fn run_to_state(
    e: &Experiment,
    c: &mut impl Chooser,
    speculation: u32,
) -> (Vec<Action>, Vec<Action>, String) {
    let b = tlbsim::sim::build(e, &tlbsim::sim::RunOptions::default()).unwrap();
    let done = b.done();
    let mut x = Explorer::new(std::rc::Rc::clone(&b.world), speculation);
    x.add_vms(&b.guests);
    let mut k = Keep {
        inner: c,
        fps: Vec::new(),
    };
    x.run(&mut k, 50_000, &done);
    let state = format!(
        "{:?}\n{:?}",
        b.world.k.borrow(),
        b.world.hw.untracked().borrow()
    );
    let class = class(&x.schedule, &k.fps);
    b.teardown();
    (x.schedule.clone(), class, state)
}

/// Soundness of the recorded footprints against brute force: schedules
/// the footprints call equivalent (one class: they differ only in the
/// order of actions recorded as independent) end in the same kernel and
/// hardware state. A footprint that missed an access would let two
/// schedules that order a conflicting pair differently share a class,
/// and their end states would differ.
/// Follows a given schedule, action by action.
struct Follow(std::vec::IntoIter<Action>);

impl Chooser for Follow {
    fn choose(&mut self, depth: usize, enabled: &[Action]) -> usize {
        let want = self.0.next().expect("the schedule is long enough");
        enabled
            .iter()
            .position(|a| *a == want)
            .unwrap_or_else(|| panic!("action {depth}, {want:?}, is not enabled: {enabled:?}"))
    }
}

/// Soundness of the recorded footprints: a schedule and its normal form
/// (the same actions with every pair recorded as independent put in a
/// canonical order) end in the same kernel and hardware state. A
/// footprint that missed an access would let the normal form swap a
/// conflicting pair, and the end states would differ. Random schedules,
/// with the checker off (its coarse footprint, by event kind, orders most
/// kernel steps and would hide a missed access).
#[test]
fn a_schedule_and_its_normal_form_end_in_one_state() {
    use tlbsim::engine::rng::Streams;
    use tlbsim::explore::RandomChooser;
    let mut reordered = 0;
    for workload in [ONE_MPROTECT, TWO_MPROTECT] {
        let mut e = experiment("arm64-stock", 2, workload);
        e.checker.enabled = false;
        for seed in 1..=100 {
            let rng = Streams::new(seed).stream("explore/random");
            let (schedule, class, state) = run_to_state(&e, &mut RandomChooser::new(rng, 0.3), 1);
            let follow = &mut Follow(class.clone().into_iter());
            let (_, _, again) = run_to_state(&e, follow, 1);
            assert!(
                state == again,
                "{workload}, seed {seed}: the normal form ends elsewhere:\n{}\nnormal form:\n{}",
                format_schedule(&schedule),
                format_schedule(&class)
            );
            reordered += usize::from(schedule != class);
        }
    }
    assert!(reordered > 100, "{reordered} of 200 schedules reordered");
}

/// The class of a schedule by the footprints recorded.
fn class(run: &[Action], fps: &[Footprint]) -> Vec<Action> {
    tlbsim::explore::races::normal_form(run, &fps.iter().collect::<Vec<_>>())
}

/// Completeness against brute force on a kernel experiment: every class
/// of the schedules an unbounded delay search runs (every schedule), by
/// the footprints the explorer records, is a class of a schedule DPOR
/// ran to its end.
#[test]
fn dpor_covers_every_class_of_the_unbounded_search() {
    let e = experiment("arm64-stock", 2, ONE_MPROTECT);
    let mut all = std::collections::BTreeSet::new();
    let mut dfs = DfsChooser::default();
    loop {
        let (run, fps, _, _) = run_kept(&e, &mut dfs);
        all.insert(class(&run, &fps));
        if !dfs.advance(u32::MAX) {
            break;
        }
    }
    let mut got = std::collections::BTreeSet::new();
    let mut dpor = DporChooser::new(&tlbsim::engine::rng::Streams::new(1), 1 << 20, usize::MAX);
    let (mut runs, mut whole_runs) = (0, 0);
    loop {
        let (run, fps, ended, whole) = run_kept(&e, &mut dpor);
        runs += 1;
        if whole {
            whole_runs += 1;
            got.insert(class(&run, &fps));
        }
        if !dpor.advance(&ended) {
            break;
        }
    }
    assert!(all.len() > 1, "{} classes", all.len());
    assert!(runs < 2079, "{runs} DPOR schedules");
    // Sleep sets: no class is run to its end twice.
    assert_eq!(
        whole_runs,
        got.len(),
        "{} classes of {all_n}",
        got.len(),
        all_n = all.len()
    );
    let missed: Vec<_> = all.difference(&got).collect();
    assert!(
        missed.is_empty(),
        "{} of {} classes missed, the first: {}",
        missed.len(),
        all.len(),
        missed.first().map_or(String::new(), |c| format_schedule(c))
    );
}

fn opts_with(strategy: Strategy, schedules: u64, speculation: u32) -> CheckOptions {
    CheckOptions {
        speculation,
        ..opts(strategy, schedules)
    }
}

#[test]
fn dpor_finds_the_range_and_free_mutants_and_the_report_replays() {
    finds_range_and_free_mutants_and_replays(Strategy::Dpor, 10_000);
    // The stock policy passes the same search.
    let r = check(
        &experiment("arm64-stock", 2, MPROTECT),
        &opts(Strategy::Dpor, 2_000),
    )
    .unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
}
