//! Recorded traces (tests/fixtures/traces, recorded with `tlbsim record`
//! on an x86-64 host; docs/trace-format.md) replayed under the checker.

use crate::common::{experiment, run_ok, run_seed};
use tlbsim::config::Experiment;
use tlbsim::sim::SimError;
use tlbsim::trace::Trace;

const FIXTURES: &[&str] = &["sort", "xz", "sh"];

fn path(name: &str) -> String {
    format!(
        "{}/tests/fixtures/traces/{name}.trace",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn replay(profile: &str, policy: &str, trace: &str) -> Experiment {
    let kernel = if policy.starts_with("x86") {
        "asid_allocator = \"none\"\n"
    } else {
        ""
    };
    let wl = format!("name = \"replay\"\ntrace = \"{trace}\"");
    experiment(profile, policy, 2, kernel, &wl, "")
}

fn recorded(name: &str) -> Trace {
    let p = path(name);
    Trace::parse(&p, &std::fs::read_to_string(&p).unwrap()).unwrap()
}

#[test]
fn fixtures_read_back_byte_for_byte() {
    for f in FIXTURES {
        let p = path(f);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(Trace::parse(&p, &text).unwrap().to_text(), text, "{f}");
    }
}

#[test]
fn every_fixture_passes_the_checker_with_its_faults_and_flushes() {
    for f in FIXTURES {
        let t = recorded(f);
        let faults = t.counts().get("fault").copied().unwrap_or(0);
        assert!(faults > 0, "{f}: the fixture has faults");
        for (profile, policy) in [
            ("ampere-32", "arm64-stock"),
            ("skylake-4c8t", "x86-tlb-gen"),
        ] {
            let o = run_ok(&replay(profile, policy, &path(f)));
            let s = &o.stats.total;
            // Every recorded fault is an access; a fault the model does not
            // take again (a page already mapped) makes fewer, never more
            // than the faults plus the image windows' first touches.
            assert!(
                s.page_faults >= faults / 2 && s.page_faults <= faults * 2,
                "{f} {policy}: {} faults replayed, {faults} recorded",
                s.page_faults
            );
            assert!(
                s.flushes_broadcast + s.flushes_local > 0,
                "{f} {policy}: the trace's munmap/mprotect flush"
            );
        }
    }
}

#[test]
fn threads_of_xz_make_remote_flushes() {
    // xz -T2's threads share an mm: the x86 policy shoots down the other
    // CPU (the recorded trace has reason-4 "remote send IPI" flushes).
    let t = recorded("xz");
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e.kind, tlbsim::trace::EventKind::TlbFlush { reason: 4, .. })));
    let o = run_ok(&replay("skylake-4c8t", "x86-tlb-gen", &path("xz")));
    assert!(o.stats.total.flushes_broadcast > 0);
    let o = run_ok(&replay("ampere-32", "arm64-stock", &path("xz")));
    assert!(o.stats.total.tlbi_broadcast > 0);
}

#[test]
fn replay_is_deterministic() {
    for f in FIXTURES {
        let e = replay("ampere-32", "arm64-stock", &path(f));
        let a = format!("{:?}", run_seed(&e, 7).unwrap());
        let b = format!("{:?}", run_seed(&e, 7).unwrap());
        assert_eq!(a, b, "{f}");
    }
}

fn config_error(e: &Experiment) -> String {
    match run_ok_or_err(e) {
        Err(err) => err.to_string(),
        Ok(()) => panic!("the run should have been refused"),
    }
}

fn run_ok_or_err(e: &Experiment) -> Result<(), SimError> {
    run_seed(e, 1).map(|_| ())
}

#[test]
fn bad_traces_are_refused_naming_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("tlbsim-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(path("sort")).unwrap();
    let cases = [
        (
            "version",
            good.replacen("tlbsim-trace 1", "tlbsim-trace 2", 1),
            ":1: field `version`: format version 2",
        ),
        ("truncated", good[..good.len() / 2].to_string(), "truncated"),
        (
            "malformed",
            good.replacen("write=", "write=maybe", 1),
            "field `write`: `maybe",
        ),
    ];
    for (name, text, want) in cases {
        let p = dir.join(format!("{name}.trace"));
        std::fs::write(&p, text).unwrap();
        let p = p.display().to_string();
        let err = config_error(&replay("ampere-32", "arm64-stock", &p));
        assert!(err.contains(&p) && err.contains(want), "{name}: {err}");
    }
    let missing = config_error(&replay("ampere-32", "arm64-stock", "/nonexistent.trace"));
    assert!(
        missing.contains("/nonexistent.trace: cannot read"),
        "{missing}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
