//! Seed 003: what a CPU pays when broadcast DVM operations reach it.

use super::common::{file, run_ok};
use tlbsim::config::Experiment;

/// `experiments/seed003-victim-tx2.toml` with the policy `policy`.
fn tx2_victim(policy: &str) -> Experiment {
    let mut e = file("experiments/seed003-victim-tx2.toml");
    e.kernel.tlb_policy = policy.to_string();
    e
}

/// The victim's loss of throughput in percent (what MFLOPS show): 1 minus
/// its time alone over its time beside the loader.
fn loss_pct(e: &Experiment) -> f64 {
    let o = run_ok(e);
    let (alone, loaded) = (o.metrics["victim_alone_ns"], o.metrics["victim_loaded_ns"]);
    100.0 * (1.0 - alone / loaded)
}

#[test]
fn thunderx2_profile_still_reproduces_the_measurement_its_sync_stall_is_derived_from() {
    // thunderx2-2s derives dvm_sync_target_stall_ns from Takao Indoh's
    // 39 -> 49 ms with the model's own loader rate; a change that moves
    // that rate makes the derivation stale, and this fails.
    let time_pct = {
        let o = run_ok(&tx2_victim("arm64-stock"));
        o.metrics["victim_slowdown_pct"]
    };
    let published = (49.0 / 39.0 - 1.0) * 100.0;
    assert!(
        (time_pct - published).abs() < 1.0,
        "{time_pct:.2} % vs {published:.2} %: re-derive the profile value"
    );
}

#[test]
fn thunderx2_victim_loses_what_qi_fuli_measured_and_nothing_without_broadcasts() {
    // QI Fuli, ThunderX2: Himeno 1149.48 -> 860.24 MFLOPS (Feb 2020) and
    // 1614.44 -> 1153.00 (Mar 2020, v5.5.7) beside one mprotect() loop;
    // issue 15 asks for the published slowdown within 10 points.
    let stock = loss_pct(&tx2_victim("arm64-stock"));
    for published in [
        100.0 * (1.0 - 860.24 / 1149.48),
        100.0 * (1.0 - 1153.00 / 1614.44),
    ] {
        assert!(
            (stock - published).abs() <= 10.0,
            "{stock:.1} % vs published {published:.1} %"
        );
    }
    // With the skip-broadcast patch he measured no loss (1110.65 ->
    // 1110.45, 1613.90 -> 1614.91): the loader's flushes stay local.
    let v2 = loss_pct(&tx2_victim("arm64-skip-broadcast-v2"));
    assert!(v2.abs() < 0.1, "v2: {v2:.3} %");
}

#[test]
fn per_process_affinity_reaches_only_the_cpus_of_the_mm() {
    // Four CPUs of one die: thread 0 on CPU 0 mprotects, the reader hops
    // between CPUs 1 and 3; CPU 2 never runs the mm.
    let run = |policy: &str| {
        let mut e = file("experiments/seed003-affinity-race.toml");
        e.kernel.tlb_policy = policy.to_string();
        run_ok(&e)
    };
    let received = |o: &tlbsim::sim::RunOutput| -> Vec<u64> {
        o.stats.per_cpu.iter().map(|c| c.dvm_ops_received).collect()
    };
    let scoped = run("arm64-affinity-mm");
    let stock = run("arm64-stock");
    assert_eq!(scoped.checker.verdict, "pass");
    assert_eq!(received(&scoped)[2], 0, "{:?}", received(&scoped));
    assert!(received(&stock)[2] > 0, "{:?}", received(&stock));
    // The CPUs of the mm still get every broadcast.
    assert!(received(&scoped)[1] >= received(&stock)[1]);
}

#[test]
fn a_misc_node_per_die_serves_scoped_syncs_in_parallel_and_full_ones_as_one() {
    // 24 processes of 4 threads on 96 CPUs, each thread in an mprotect loop.
    let wl = "name = \"mprotect\"\nthreads = 4\nprocesses = 24\niterations = 100";
    let run = |die: bool, policy: &str| {
        let mut e = super::common::experiment("hisi-96-dvmbm", policy, 96, "", wl, "");
        if die {
            let mut p = tlbsim::config::builtin_profile("hisi-96-dvmbm").unwrap();
            p.arm64.as_mut().unwrap().dvm_sync_domain = tlbsim::config::SyncDomain::Die;
            e.profile_data = Some(p);
        }
        run_ok(&e)
    };
    // Stock broadcasts reach every die: each Sync needs every node, which
    // is one machine-wide queue.
    assert_eq!(
        run(false, "arm64-stock").elapsed_ns,
        run(true, "arm64-stock").elapsed_ns
    );
    // Scoped Syncs of processes on different dies no longer wait for
    // each other.
    let (a, b) = (
        run(false, "arm64-affinity-mm"),
        run(true, "arm64-affinity-mm"),
    );
    assert_eq!(b.checker.verdict, "pass");
    let wait = |o: &tlbsim::sim::RunOutput| o.stats.dvm_sync_queue_wait_ns.mean;
    assert!(wait(&b) < wait(&a) / 1.5, "{} vs {}", wait(&b), wait(&a));
    assert!(b.elapsed_ns < a.elapsed_ns);
}

#[test]
fn unixbench_runs_each_copy_on_its_own_cpu_and_scores_the_index() {
    let wl = "name = \"unixbench\"\ninstances = 2\ncopies = 2\ntest_ns = 1000000";
    let o = run_ok(&super::common::experiment(
        "hisi-96-dvmbm",
        "arm64-stock",
        8,
        "",
        wl,
        "",
    ));
    assert_eq!(o.checker.verdict, "pass");
    // 2 instances x 2 copies: CPUs 0-3 each ran a copy of every test.
    let busy: Vec<u64> = o.stats.per_cpu.iter().map(|c| c.busy_ns).collect();
    assert!(busy[..4].iter().all(|&b| b > 900_000), "{busy:?}");
    assert!(busy[4..].iter().all(|&b| b < 100_000), "{busy:?}");
    // dhry2reg: 2 copies of 1 us loops for 1 ms each, per instance.
    let dhry = o.metrics["score.dhry2reg"];
    assert!((dhry - 2.0e6).abs() < 2.0e4, "{dhry}");
    // The index is the geometric mean of score / baseline x 10.
    let index = o.metrics["index"];
    assert!(index > 0.0 && o.metrics["index_min"] <= index && index <= o.metrics["index_max"]);
    // An unknown test is an error naming the parameter (whetstone-single
    // is a unixbench test, but not one of the index's twelve).
    let bad = "name = \"unixbench\"\ntests = [\"whetstone-single\"]";
    let e = tlbsim::sim::run(
        &super::common::experiment("hisi-96-dvmbm", "arm64-stock", 8, "", bad, ""),
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("[workload] tests: unknown test \"whetstone-single\""),
        "{e}"
    );
}

#[test]
fn unixbench_file_copy_scores_kib_per_second_from_the_page_cache_costs() {
    // One copy of fstime (1 KiB buffers) for 2 ms: each KiB costs a read
    // and a write, each a syscall, its fixed work and a 1 KiB copy; the
    // rewinds (an empty read and two lseeks per 2000 KiB) add under 0.2 %.
    let wl =
        "name = \"unixbench\"\ncopies = 1\ntest_ns = 2000000\ntests = [\"fstime\", \"fsbuffer\"]";
    let e = super::common::experiment("kunpeng-920", "arm64-stock", 4, "", wl, "");
    let o = run_ok(&e);
    let p = tlbsim::config::builtin_profile("kunpeng-920").unwrap();
    let (k, f) = (&p.kernel, p.file.as_ref().unwrap());
    let per_call = |buf: u64| {
        let copy = f.copy_user_ns_per_kib * buf / 1024;
        (2 * k.syscall_ns + f.file_read_ns + f.file_write_ns + 2 * copy) as f64
    };
    let expect = |buf: u64| buf as f64 / 1024.0 / (per_call(buf) * 1e-9);
    for (test, buf) in [("fstime", 1024), ("fsbuffer", 256)] {
        let got = o.metrics[&format!("score.{test}")];
        let want = expect(buf);
        assert!(
            (got / want - 1.0).abs() < 0.005,
            "{test}: {got} KiB/s, expected {want}"
        );
    }
    // Smaller buffers pay the fixed costs more often.
    assert!(o.metrics["score.fsbuffer"] < o.metrics["score.fstime"] / 2.0);
    // A profile without page-cache costs is refused, naming the section.
    let mut p = p.clone();
    p.file = None;
    let mut e = e;
    e.profile_data = Some(p);
    let err = tlbsim::sim::run(&e, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no [file] section") && err.contains("\"fstime\""),
        "{err}"
    );
}

/// `experiments/seed003-vms.toml` with `count` VMs, short tests.
fn vms(count: u32) -> Experiment {
    let mut e = file("experiments/seed003-vms.toml");
    e.vm.as_mut().unwrap().count = count;
    e.workload
        .params
        .insert("test_ns".into(), toml::Value::Integer(300_000));
    e
}

#[test]
fn each_vm_runs_its_workload_in_its_guest_on_its_own_cpus() {
    let o = run_ok(&vms(2));
    for v in 1..=2 {
        let i = o.metrics[&format!("vm{v}.index")];
        assert!(i > 0.0, "vm{v} index {i}");
    }
    let mean = (o.metrics["vm1.index"] + o.metrics["vm2.index"]) / 2.0;
    assert!((o.metrics["index"] - mean).abs() < 1e-9);
    // VM 1 on CPUs 0-3, VM 2 on 4-7: the guests' syscalls happen there
    // and nowhere else.
    let cpus = &o.stats.per_cpu;
    for (c, s) in cpus.iter().enumerate() {
        assert_eq!(s.syscalls > 0, c < 8, "cpu{c}: {} syscalls", s.syscalls);
    }
}

#[test]
fn hcr_el2_fb_turns_a_guests_local_flushes_into_broadcasts() {
    // In the guests, arm64-skip-broadcast-v2 flushes a single-threaded
    // process's TLB locally. With FB set (kvm-stock), each of those TLBIs
    // goes to the inner-shareable domain; the only local TLBIs left are
    // the host's (KVM's flush when a vCPU first loads on a CPU). The 2020
    // RFC (kvm-nofb) clears FB.
    let run = |fb: bool| {
        let mut e = vms(1);
        e.kernel.tlb_policy = "arm64-skip-broadcast-v2".into();
        e.vm.as_mut().unwrap().kvm_policy = if fb { "kvm-stock" } else { "kvm-nofb" }.into();
        let o = run_ok(&e);
        let t = &o.stats.total;
        (t.tlbi_local, t.tlbi_broadcast)
    };
    let (local_fb, bcast_fb) = run(true);
    let (local, bcast) = run(false);
    assert_eq!(local_fb, 4, "one host flush per vCPU");
    assert!(
        local > 100 * bcast.max(1),
        "FB clear: {local} local, {bcast} broadcast"
    );
    // Within 1 %: each exec's random stack depth decides whether it frees
    // a table, and the two runs interleave the guests' execs differently.
    assert!(
        bcast_fb * 100 >= (local - 4) * 99,
        "FB set: {bcast_fb} broadcasts for {local} local TLBIs"
    );
}

#[test]
fn dvmbm_limits_each_guests_broadcasts_to_its_vms_cpus() {
    // Two VMs on CPUs 0-3 and 4-7. Under kvm-dvmbm a guest's TLBIs reach
    // only its VM's CPUs; CPUs 8-95 see only KVM's own EL2 flushes (one
    // per change of a VM's mask while its vCPUs first load, at most 4 per
    // VM). Under kvm-stock every CPU receives every guest's.
    let received = |policy: &str| {
        let mut e = vms(2);
        e.vm.as_mut().unwrap().kvm_policy = policy.into();
        let o = run_ok(&e);
        let c = &o.stats.per_cpu;
        let inside = c[..8].iter().map(|s| s.dvm_ops_received).min().unwrap();
        let outside = c[8..].iter().map(|s| s.dvm_ops_received).max().unwrap();
        (inside, outside)
    };
    let (inside, outside) = received("kvm-dvmbm");
    assert!(
        inside > 100 && outside <= 8,
        "dvmbm: {inside} inside, {outside} outside"
    );
    let (inside, outside) = received("kvm-stock");
    assert!(
        outside >= inside && inside > 100,
        "stock: {inside} inside, {outside} outside"
    );
}

#[test]
fn dvmbm_refuses_a_machine_without_tlbi_by_affinity() {
    let mut e = vms(1);
    e.vm.as_mut().unwrap().kvm_policy = "kvm-dvmbm".into();
    let mut p = tlbsim::config::builtin_profile("hisi-96-dvmbm").unwrap();
    p.arm64.as_mut().unwrap().tlbi_affinity = false;
    e.profile_data = Some(p);
    let err = super::common::run_seed(&e, 1).unwrap_err().to_string();
    assert!(
        err.contains("kvm_policy") && err.contains("TLBI by affinity"),
        "{err}"
    );
}

#[test]
fn floating_vcpus_share_cpus_by_time_slices() {
    // 4 VMs of 4 vCPUs on 8 CPUs: two vCPU threads per CPU. Every VM
    // gets its share (no index 0: each runs in every test; context1 is the
    // test whose stop protocol raced when a vCPU was descheduled), and the
    // checker passes.
    let mut e = vms(4);
    let v = e.vm.as_mut().unwrap();
    v.placement = tlbsim::config::Placement::Floating;
    e.machine.cpus = Some(8);
    e.machine.sockets = Some(1);
    e.machine.dies_per_socket = Some(1);
    e.workload
        .params
        .insert("test_ns".into(), toml::Value::Integer(20_000_000));
    e.workload.params.insert(
        "tests".into(),
        toml::Value::Array(vec!["spawn".into(), "context1".into()]),
    );
    let o = run_ok(&e);
    for v in 1..=4 {
        let i = o.metrics[&format!("vm{v}.index")];
        assert!(i > 0.0, "vm{v} index {i}");
    }
    let switches: u64 = o.stats.per_cpu.iter().map(|s| s.context_switches).sum();
    assert!(switches > 100, "{switches} context switches");
}
