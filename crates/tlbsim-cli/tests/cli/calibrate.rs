//! `tlbsim calibrate`: a `--quick` run on the test host writes a profile
//! that loads and runs; the output path is checked before any work. No
//! assertion depends on timing beyond "positive and within loose bounds".

use crate::common;

use common::{s, scratch_dir, stderr, tlbsim};

const MADV_MIGRATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed004-madv-migrate.toml"
);

/// The value of `section.key` in a profile's TOML.
fn int(v: &toml::Value, section: &str, key: &str) -> i64 {
    v[section][key]
        .as_integer()
        .unwrap_or_else(|| panic!("{section}.{key} missing"))
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[test]
#[ignore = "measures this host (costs within bounds a loaded host may break); .ci/run runs it"]
fn quick_calibration_writes_a_profile_that_runs() {
    let dir = scratch_dir("calibrate", "quick");
    let out = dir.join("host.toml");
    let o = tlbsim(&["calibrate", "--quick", "-o", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("calibrate [") && err.contains("null syscall"),
        "no progress: {err}"
    );
    assert!(
        err.contains("copied from built-in"),
        "no list of unmeasured values: {err}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    // Topology as sysfs says.
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let last: i64 = online
        .trim()
        .rsplit(['-', ','])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(int(&v, "topology", "cpus") >= 1 && int(&v, "topology", "cpus") <= last + 1);
    // Measured costs are positive and of a sane order (ns).
    for (key, max) in [
        ("syscall_ns", 100_000),
        ("page_fault_ns", 1_000_000),
        ("page_alloc_ns", 1_000_000),
        ("madvise_ns", 1_000_000),
        ("mprotect_vma_ns", 1_000_000),
        ("mmap_ns", 1_000_000),
        ("munmap_ns", 1_000_000),
        ("pipe_rw_ns", 1_000_000),
        ("context_switch_ns", 1_000_000),
        ("atomic_ns", 10_000),
    ] {
        let x = int(&v, "kernel", key);
        assert!(x >= 1 && x <= max, "kernel.{key} = {x}");
    }
    let walk = int(&v, "tlb", "walk_level_ns");
    assert!((1..=100_000).contains(&walk), "tlb.walk_level_ns = {walk}");
    // Every value says where it comes from.
    for line in text.lines().filter(|l| l.contains(" = ")) {
        let tagged = [
            "measured by calibrate",
            "read by calibrate",
            "set by calibrate",
            "copied from built-in",
        ];
        assert!(tagged.iter().any(|t| line.contains(t)), "untagged: {line}");
    }
    assert!(text.contains("measured by calibrate on "), "{text}");
    assert!(text.contains(" / median "), "no spread: {text}");
    // It loads as a profile file and runs an experiment of its architecture.
    if v["arch"].as_str() == Some("x86") {
        let o = tlbsim(&[
            "run",
            MADV_MIGRATE,
            "--profile",
            s(&out),
            "--set",
            "workload.iterations=20",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // Without --force it refuses to replace the file.
    let o = tlbsim(&["calibrate", "--quick", "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Confined to one CPU, the two-CPU loops cannot run: the run still
/// succeeds, says why, and the values they would give are copied with
/// that reason.
#[cfg(target_os = "linux")]
#[test]
fn on_one_cpu_the_two_cpu_values_are_copied_and_say_why() {
    use std::os::unix::process::CommandExt;
    let dir = scratch_dir("calibrate", "one-cpu");
    let out = dir.join("one.toml");
    let mut cmd = std::process::Command::new(common::EXE);
    cmd.args(["calibrate", "--quick", "-o", s(&out)]);
    // SAFETY: sched_setaffinity is async-signal-safe; the set is plain data.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("may run on 1 CPU(s) only"),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    for key in ["cacheline_transfer_ns", "ipi_handler_ns", "migrate_ns"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{key} =")))
            .unwrap();
        assert!(
            line.contains("copied from built-in") && line.contains("1 CPU(s) only"),
            "{line}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The example in docs/data (a real run on the development host) still
/// loads as a profile and runs.
#[test]
fn the_shipped_example_profile_runs() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/data/calibrated-dev-host.toml"
    );
    let o = tlbsim(&[
        "run",
        MADV_MIGRATE,
        "--profile",
        example,
        "--set",
        "workload.iterations=20",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn an_unwritable_output_is_refused_before_measuring() {
    let dir = scratch_dir("calibrate", "unwritable");
    let out = dir.join("no-such-dir").join("host.toml");
    let o = tlbsim(&["calibrate", "--quick", "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("no-such-dir"), "{err}");
    assert!(
        !err.contains("null syscall"),
        "measured before checking: {err}"
    );
    assert!(!out.exists());
    let o = tlbsim(&["calibrate", "--quick", "-o", s(&dir)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
