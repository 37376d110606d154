//! Every experiment of the repository gives the result recorded in
//! `tests/golden/` (its `run --json` output without the host's timing):
//! a change that should only change speed (issue 13) is byte-for-byte
//! checked against the outputs of the version before it.
//!
//! The runs take about 2.5 minutes of CPU, so they are `#[ignore]`d in the
//! default test run; `.ci/run` runs them:
//!
//! ```sh
//! cargo test --release -p tlbsim-cli --test cli -- --ignored golden::
//! ```
//!
//! After a change that is meant to change results, re-record them with
//! `TLBSIM_BLESS=1` set, and say in the commit why they changed.
//!
//! Re-recorded twice since 81d2ad5, each time to add one field (issue 14):
//! `stats.cpu_time_by_function`, then `stats.cpu_time_by_task`; every
//! other field was checked unchanged (`jq -S 'del(.run.stats.<field>)'` on
//! both versions).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `experiments/{name}.toml` with `--json` and returns the output
/// without `host` (host seconds and events/s differ from run to run).
fn run_json(name: &str) -> serde_json::Value {
    let exp = root().join(format!("experiments/{name}.toml"));
    let dir = tempfile::Builder::new()
        .prefix("tlbsim-golden-")
        .tempdir()
        .unwrap();
    let json = dir.path().join(format!("{name}.json"));
    let o = Command::new(env!("CARGO_BIN_EXE_tlbsim"))
        .args([
            "run",
            exp.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .expect("tlbsim runs");
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("host");
    v
}

/// The first path (`a.b[3].c`) where `got` and `want` differ.
fn first_difference(got: &serde_json::Value, want: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value::{Array, Object};
    match (got, want) {
        (Object(g), Object(w)) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            keys.into_iter().find_map(|k| match (g.get(k), w.get(k)) {
                (Some(a), Some(b)) => first_difference(a, b, &format!("{at}.{k}")),
                _ => Some(format!("{at}.{k}: present in only one")),
            })
        }
        (Array(g), Array(w)) if g.len() == w.len() => g
            .iter()
            .zip(w)
            .enumerate()
            .find_map(|(i, (a, b))| first_difference(a, b, &format!("{at}[{i}]"))),
        _ if got == want => None,
        _ => Some(format!("{at}: got {got}, recorded {want}")),
    }
}

fn check(name: &str) {
    let got = run_json(name);
    let path = root().join(format!("crates/tlbsim-cli/tests/golden/{name}.json"));
    if std::env::var_os("TLBSIM_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (record it with TLBSIM_BLESS=1)", path.display()));
    let want: serde_json::Value = serde_json::from_str(&text).unwrap();
    if let Some(d) = first_difference(&got, &want, name) {
        panic!("{name} no longer gives its recorded result: {d}");
    }
}

/// One test per experiment file (so the harness runs them in parallel).
macro_rules! golden {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            #[ignore = "long: about 2.5 minutes of CPU for all; .ci/run runs them"]
            fn $test() {
                check($name);
            }
        )*

        #[test]
        fn every_experiment_file_has_a_golden_test() {
            let mut files: Vec<String> = std::fs::read_dir(root().join("experiments"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter_map(|f| f.strip_suffix(".toml").map(str::to_string))
                .collect();
            files.sort();
            let mut tested = vec![$($name.to_string()),*];
            tested.sort();
            assert_eq!(files, tested, "add the new experiment to the golden! list");
        }
    };
}

golden! {
    seed000_mprotect => "seed000-mprotect",
    seed000_safety => "seed000-safety",
    seed000_scaling => "seed000-scaling",
    seed000_sort_compute => "seed000-sort-compute",
    seed000_switch_race => "seed000-switch-race",
    seed000_tcmalloc => "seed000-tcmalloc",
    seed000_victim => "seed000-victim",
    seed001_explore => "seed001-explore",
    seed001_explore_x86 => "seed001-explore-x86",
    seed001_kswapd => "seed001-kswapd",
    seed001_migrate => "seed001-migrate",
    seed001_mremap => "seed001-mremap",
    seed001_pageout => "seed001-pageout",
    seed001_pageout_kunpeng => "seed001-pageout-kunpeng",
    seed002_explore => "seed002-explore",
    seed002_hackbench => "seed002-hackbench",
    seed003_affinity_race => "seed003-affinity-race",
    seed003_unixbench_host => "seed003-unixbench-host",
    seed003_victim_tx2 => "seed003-victim-tx2",
    seed003_vm_move => "seed003-vm-move",
    seed003_vm_race => "seed003-vm-race",
    seed003_vms => "seed003-vms",
    seed004_explore_ipis => "seed004-explore-ipis",
    seed004_explore_switch => "seed004-explore-switch",
    seed004_explore => "seed004-explore",
    seed004_madv_migrate => "seed004-madv-migrate",
    seed004_pthread_mmap => "seed004-pthread-mmap",
    seed004_safety => "seed004-safety",
    wis_tlb_flush2 => "wis-tlb-flush2",
}
