//! Helpers shared by the integration tests: the one way a test builds an
//! experiment, and the runs it checks.
#![allow(dead_code)]

use std::rc::Rc;
use tlbsim::check::{Checker, Violation};
use tlbsim::config::{builtin_profile, parse_toml, Experiment, KernelConfig};
use tlbsim::driver::{RunError, TimingDriver};
use tlbsim::hw::CpuId;
use tlbsim::kernel::fork::spawn_user;
use tlbsim::kernel::policy::{asid_allocator, tlb_policy};
use tlbsim::kernel::{TaskState, World};
use tlbsim::sim::{RunOptions, RunOutput, SimError};

/// CPU `i`: a test's literal CPU number.
pub fn cpuid(i: usize) -> CpuId {
    CpuId::from_index(i)
}

/// A world on built-in profile `profile` cut to `cpus` CPUs, running the
/// kernel `k` (its policy and allocator by name), with the checker:
/// for scenarios written directly on the library API.
pub fn world_with(profile: &str, cpus: u32, k: KernelConfig) -> Rc<World> {
    world_with_profile(builtin_profile(profile).unwrap(), cpus, k)
}

/// [`world_with`] on a profile the caller built (or changed).
pub fn world_with_profile(mut p: tlbsim::config::Profile, cpus: u32, k: KernelConfig) -> Rc<World> {
    p.topology.cpus = cpus;
    tlbsim::engine::state::new_machine();
    let alloc = asid_allocator(&k.asid_allocator, &k, p.tlb.asid_bits).unwrap();
    let w = World::new(p, k.clone(), tlb_policy(&k.tlb_policy).unwrap(), alloc);
    *w.observer.borrow_mut() = Some(Box::new(Checker::new(w.ncpus(), 16)));
    w
}

/// Runs `program` as a user process on CPU 0 of `w` until it exits, and
/// asserts the checker found nothing.
pub fn run_process(w: &Rc<World>, program: tlbsim::kernel::Program) {
    let t = spawn_user(w, "test", CpuId::BOOT, program);
    let mut d = TimingDriver::new(Rc::clone(w), 1_000_000_000);
    d.run_until(|w| w.k.borrow().tasks[t].state == TaskState::Zombie)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(w.failure().is_none(), "{:?}", w.failure());
}

/// [`run_process`] of `body`, returning what `body` returned.
pub fn run_process_for<T, F, Fut>(w: &Rc<World>, body: F) -> T
where
    T: Copy + Default + 'static,
    F: FnOnce(tlbsim::kernel::Ctx) -> Fut + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    let seen: Rc<std::cell::Cell<T>> = Rc::default();
    let out = Rc::clone(&seen);
    run_process(
        w,
        Box::new(move |ctx| Box::pin(async move { out.set(body(ctx).await) })),
    );
    seen.get()
}

/// A test experiment on `cpus` CPUs of `profile` with `policy`;
/// `kernel_extra` adds `[kernel]` lines, `workload` is the `[workload]`
/// body and `extra` follows it (e.g. a `[checker]` section).
pub fn experiment(
    profile: &str,
    policy: &str,
    cpus: u32,
    kernel_extra: &str,
    workload: &str,
    extra: &str,
) -> Experiment {
    let text = format!(
        "[experiment]\nname = \"t\"\nprofile = \"{profile}\"\n[machine]\ncpus = {cpus}\n[kernel]\ntlb_policy = \"{policy}\"\n{kernel_extra}[workload]\n{workload}\n{extra}"
    );
    parse_toml("test.toml", &text).expect("valid test config")
}

/// An arm64 test experiment: `cpus` CPUs of ampere-32 running `policy`.
pub fn arm64(policy: &str, cpus: u32, workload: &str) -> Experiment {
    experiment("ampere-32", policy, cpus, "", workload, "")
}

/// An experiment file of the repository (`experiments/...`).
pub fn file(path: &str) -> Experiment {
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    parse_toml(path, &text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// [`tlbsim::sim::run`] on `e`, with the files its workload names read
/// first ([`read_files`]).
fn run(e: &Experiment, o: &RunOptions) -> Result<RunOutput, SimError> {
    tlbsim::sim::run(&read_files(e), o)
}

/// `e` with the files its workload names (a replay's trace) read, as the
/// CLI reads them (the library does no I/O).
pub fn read_files(e: &Experiment) -> Experiment {
    let mut e = e.clone();
    for p in e.workload.file_paths() {
        let text = std::fs::File::open(&p)
            .map_err(|err| format!("{p}: cannot read: {err}"))
            .and_then(|f| {
                let max = tlbsim::config::limits::MAX_TRACE_FILE_BYTES;
                tlbsim::trace::read_text(&p, std::io::BufReader::new(f), max)
                    .map(Into::into)
                    .map_err(|err| err.to_string())
            });
        e.workload.files.insert(p, text);
    }
    e
}

/// Runs `e` with root seed `seed`.
pub fn run_seed(e: &Experiment, seed: u64) -> Result<RunOutput, SimError> {
    run(
        e,
        &RunOptions {
            seed: Some(seed),
            cpus: None,
        },
    )
}

/// Runs `e`, which must pass.
pub fn run_ok(e: &Experiment) -> RunOutput {
    match run(e, &RunOptions::default()) {
        Ok(o) => o,
        Err(err) => panic!("run failed: {err}"),
    }
}

/// Runs `e`, which the checker must stop: its violation.
pub fn violation(e: &Experiment) -> Violation {
    match run(e, &RunOptions::default()) {
        Err(SimError::Run(RunError::Violation(r))) => r,
        Ok(_) => panic!("the checker missed the mutant"),
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// What keeps a violation report `text` from reading like a kernel log, if
/// anything: a Rust debug struct (`{ `, `}`, `Some(`, `None`), a virtual
/// address not in hex (`va 0x...`), a long decimal number (a VA or page
/// number printed in decimal), or no `last events:` history.
pub fn kernel_log_flaw(text: &str) -> Option<String> {
    for debug in ["{", "}", "Some(", "None", "Perms(", "Pte {"] {
        if text.contains(debug) {
            return Some(format!("{debug:?} in the report"));
        }
    }
    let vas: Vec<&str> = text.split("va ").skip(1).collect();
    if vas.is_empty() {
        return Some("no va in the report".into());
    }
    if let Some(after) = vas.iter().find(|a| !a.starts_with("0x")) {
        return Some(format!("a va not in hex: va {after}"));
    }
    let long_decimal = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|w| w.len() >= 10 && w.chars().all(|c| c.is_ascii_digit()));
    if let Some(n) = long_decimal {
        return Some(format!("a long decimal number, {n}"));
    }
    (!text.contains("\nlast events")).then(|| "no last events".into())
}

/// Asserts that a violation report `text` reads like a kernel log
/// ([`kernel_log_flaw`]).
pub fn assert_reads_like_a_kernel_log(text: &str) {
    if let Some(flaw) = kernel_log_flaw(text) {
        panic!("{flaw}:\n{text}");
    }
}
