//! The table-driven mutant test: every registered mutant and historical-bug
//! policy or allocator is run under the search its registry entry names, and
//! the checker must report the invariant the entry declares. The same
//! searches pass every real policy (or allocator) the experiment's profile
//! can run. Nothing here names a mutant: a new one is a file and a registry
//! line.

use super::common;
use std::collections::BTreeMap;
use tlbsim::bugs::search::run_search;
use tlbsim::config::{parse_toml, Experiment};
use tlbsim::explore::{check, CheckOptions, Finding, Strategy};
use tlbsim::kernel::registry::{
    self, asid_allocators, find_allocator, find_policy, tlb_policies, Breaks, Search, Source,
};
use tlbsim::sim::RunOptions;

/// Which `[kernel]` key an entry is chosen by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Policy,
    Allocator,
}

fn source(s: &Search) -> Source {
    s.experiment()
}

fn load(src: Source) -> Experiment {
    let (name, text) = src.text();
    parse_toml(name, text).expect("valid experiment")
}

fn with(e: &Experiment, kind: Kind, name: &str) -> Experiment {
    let mut e = e.clone();
    match kind {
        Kind::Policy => e.kernel.tlb_policy = name.into(),
        Kind::Allocator => e.kernel.asid_allocator = name.into(),
    }
    e
}

/// Runs `s` on `e`: the first violation (or deadlock), or `None` if it
/// passes.
fn search(e: &Experiment, s: &Search) -> Option<Finding> {
    let r = run_search(e, s).unwrap_or_else(|err| panic!("search: {err}"));
    r.failure.map(|(_, f)| f)
}

/// Every entry that declares what it breaks.
fn broken() -> Vec<(Kind, &'static str, Breaks)> {
    let policies = tlb_policies().filter_map(|p| Some((Kind::Policy, p.name, p.breaks?)));
    let allocators = asid_allocators().filter_map(|a| Some((Kind::Allocator, a.name, a.breaks?)));
    policies.chain(allocators).collect()
}

/// The real entries of `kind` that the experiment `e` can run.
fn real(kind: Kind, e: &Experiment) -> Vec<&'static str> {
    let profile = tlbsim::sim::resolve_profile(e, &RunOptions::default()).expect("profile");
    let fits = |p: &str, a: &str| {
        let (p, a) = (find_policy(p).unwrap(), find_allocator(a).unwrap());
        registry::check_combination(p, a, &profile).is_ok()
    };
    match kind {
        Kind::Policy => tlb_policies()
            .filter(|p| p.breaks.is_none() && fits(p.name, &e.kernel.asid_allocator))
            .map(|p| p.name)
            .collect(),
        Kind::Allocator => asid_allocators()
            .filter(|a| a.breaks.is_none() && fits(&e.kernel.tlb_policy, a.name))
            .map(|a| a.name)
            .collect(),
    }
}

/// Each distinct search, with the kind of entry it varies.
fn searches(cases: &[(Kind, &'static str, Breaks)]) -> BTreeMap<String, (Kind, Search)> {
    let mut searches = BTreeMap::new();
    for &(kind, _, b) in cases {
        searches.insert(format!("{kind:?} {:?}", b.search), (kind, b.search));
    }
    searches
}

/// Runs each search on the real entries `pick` chooses; the failures.
fn real_failures(pick: impl Fn(Kind, &Experiment) -> Vec<String>) -> Vec<String> {
    let mut failures = Vec::new();
    for (kind, s) in searches(&broken()).values() {
        let e = load(source(s));
        for name in pick(*kind, &e) {
            if let Some(r) = search(&with(&e, *kind, &name), s) {
                failures.push(format!("real {name} failed {s:?}:\n{r}"));
            }
        }
    }
    failures
}

/// Each entry that declares a bug, under its search: the entries whose
/// search did not find the invariant declared, or whose report does not
/// read like a kernel log.
fn mutant_failures() -> Vec<String> {
    let cases = broken();
    assert!(cases.len() >= 10, "{} entries declare a bug", cases.len());
    let mut failures = Vec::new();
    for (kind, name, b) in cases {
        let e = with(&load(source(&b.search)), kind, name);
        match search(&e, &b.search) {
            Some(f) if f.invariant() == Some(b.invariant) => {
                // Every invariant's report reads like a kernel log.
                if let Some(flaw) = common::kernel_log_flaw(&f.to_string()) {
                    failures.push(format!("{name}: {flaw}:\n{f}"));
                }
            }
            Some(f) => failures.push(format!("{name}: expected {}, got:\n{f}", b.invariant)),
            None => failures.push(format!("{name}: not found by {:?}", b.search)),
        }
    }
    failures
}

/// The mutants alone (a few seconds: each search stops at its first
/// violation). The real counterparts' half, whose searches must run to
/// their end, is the next test.
#[test]
fn every_registered_mutant_is_caught() {
    let failures = mutant_failures();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// About 85 s of CPU, most of it arm64-stock through the two
/// exhaustive bound-2 searches and seed000-safety.
#[test]
#[ignore = "long: each real counterpart runs its search to the end (~85 s CPU); .ci/run runs it"]
fn every_registered_mutant_is_caught_and_its_real_counterpart_passes() {
    // The experiment's own policy and allocator are real ones and pass.
    let mut failures = real_failures(|kind, e| {
        let own = match kind {
            Kind::Policy => e.kernel.tlb_policy.clone(),
            Kind::Allocator => e.kernel.asid_allocator.clone(),
        };
        let declared = match kind {
            Kind::Policy => find_policy(&own).unwrap().breaks,
            Kind::Allocator => find_allocator(&own).unwrap().breaks,
        };
        assert!(declared.is_none(), "{own} is not a real entry");
        vec![own]
    });
    failures.extend(mutant_failures());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// About 3 minutes on 2 cores: every real policy (or allocator) the
/// profile can run, under every mutant's search.
#[test]
#[ignore = "long: every real policy under every mutant search (about 3 min)"]
fn every_real_policy_passes_every_mutant_search() {
    // v2 runs under the walk-cache reading it was designed for
    // (`flush-on-ttbr-change`): under the default (`asid-tagged`) its idle
    // CPUs keep cached walks into tables a local-only flush freed, which
    // `churn_stress_shows_v2_safe_only_where_the_reserved_ttbr0_drops_cached_walks`
    // shows (docs/validation.md, "Walk cache after the reserved TTBR0").
    let mut failures = Vec::new();
    for (kind, s) in searches(&broken()).values() {
        let e = load(source(s));
        for name in real(*kind, &e) {
            let mut run = with(&e, *kind, name);
            if name == "arm64-skip-broadcast-v2" {
                run.machine.walk_cache_after_ttbr_write =
                    Some(tlbsim::config::WalkCacheAfterTtbrWrite::FlushOnTtbrChange);
            }
            if let Some(r) = search(&run, s) {
                failures.push(format!("real {name} failed {s:?}:\n{r}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The DPOR search (no preemption bound) on `e`, at most `schedules`
/// schedules of at most `max_actions` actions, seed `seed`: its report.
fn dpor(
    e: &Experiment,
    schedules: u64,
    max_actions: u64,
    seed: u64,
) -> tlbsim::explore::CheckReport {
    let o = CheckOptions {
        strategy: Strategy::Dpor,
        schedules,
        seed,
        max_actions: max_actions as usize,
        max_spin: tlbsim::explore::DEFAULT_MAX_SPIN,
        speculation: 2,
        cpus: None,
    };
    check(e, &o).unwrap_or_else(|err| panic!("check: {err}"))
}

/// The DPOR search (no preemption bound; issue 19 item 3;
/// docs/validation.md, "DPOR") finds every registered mutant the explorer
/// catches, on the mutant's own experiment and with its `max_actions`,
/// within one budget of schedules for all of them, with seed 1 or, if not,
/// seed 2 or 3 (the search is incomplete on these experiments: where it
/// goes first depends on the seed): a checker violation, not a deadlock
/// (each the invariant its entry declares, or another the schedule breaks
/// first). Prints, per mutant, the seed, in how many schedules and how
/// long. `TLBSIM_DPOR_SCHEDULES` sets the budget (default 50,000) and
/// `TLBSIM_DPOR_SEED` the first seed, for measurements. About 20 s of
/// CPU, most of it arm64-skip-broadcast-v2-posted (seed 1 finds it in
/// 3,017 schedules; docs/validation.md, "DPOR", gives seeds 1-8).
#[test]
#[ignore = "long: DPOR on every mutant (~20 s CPU); .ci/run runs it"]
fn dpor_finds_every_mutant_on_its_experiment() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let cap = env("TLBSIM_DPOR_SCHEDULES", 50_000);
    let first = env("TLBSIM_DPOR_SEED", 1);
    let mut failures = Vec::new();
    for (kind, name, b) in broken() {
        let Search::Explore { max_actions, .. } = b.search else {
            println!("{name}: its search is timing runs, not the explorer");
            continue;
        };
        let e = with(&load(source(&b.search)), kind, name);
        let mut found = None;
        for seed in first..first + 3 {
            let t0 = std::time::Instant::now();
            let r = dpor(&e, cap, max_actions, seed);
            let inv = r.failure.as_ref().and_then(|f| f.report.invariant());
            println!(
                "{name} (seed {seed}): {} in {} schedules ({} pruned, complete {}, tree peak {} states), {:.1} s",
                match inv {
                    Some(i) => format!("found {i}"),
                    None => "not found".to_string(),
                },
                r.schedules,
                r.pruned,
                r.exhausted,
                r.dpor_peak_states,
                t0.elapsed().as_secs_f64()
            );
            if let Some(f) = &r.failure {
                found = Some((inv, f.report.to_string()));
                break;
            }
        }
        match found {
            None => failures.push(format!("{name}: not found in {cap} schedules with 3 seeds")),
            Some((None, report)) => failures.push(format!("{name}: deadlock:\n{report}")),
            // A mutant may break more than one invariant; which the search
            // meets first depends on the schedule.
            Some((Some(i), _)) if i != b.invariant => {
                println!(
                    "  (the entry declares {}; this schedule breaks {i} first)",
                    b.invariant
                )
            }
            Some(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
