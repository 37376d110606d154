//! `tlbsim calibrate`: measures this host with built-in microbenchmarks
//! (Rust over libc: no C toolchain) and writes a machine profile for it
//! in the format of `profiles/*.toml`. What it cannot measure is copied
//! from the nearest built-in profile (same architecture, closest CPU
//! count) and said so. Derivations: docs/model.md, "Calibrate".

mod cache;
// The decoders serve x86 hosts (and the tests everywhere).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod cpuid;
mod derive;
mod emit;
pub(crate) mod filefault;
mod memops;
pub(crate) mod sample;
mod sched;
pub(crate) mod shootdown;
mod topology;

use crate::files::{check_output, write_atomic};
use derive::{Got, Results, Tag, Unmeasured};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tlbsim::config::{builtin_profile, parse_profile, Arch, Profile, BUILTIN_PROFILES};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The profile file to write (TOML); replaced whole or not at all.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// A few short repetitions (seconds, for tests): the values are
    /// noisier.
    #[arg(long)]
    quick: bool,
}

/// How long each benchmark runs.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Timed repetitions (after a warm-up).
    pub reps: usize,
    /// `--quick`.
    pub quick: bool,
}

impl Budget {
    /// Iterations per repetition: `full`, or a 20th of it with `--quick`.
    pub fn n(&self, full: u64) -> u64 {
        if self.quick {
            (full / 20).max(10)
        } else {
            full
        }
    }
}

/// Measures, derives, writes; exit code 2 for a bad output path, 1 when
/// a benchmark cannot run (pinning refused, no memory, ...).
pub fn run(args: Args) -> ExitCode {
    if let Err(e) = check_target(&args.output, args.force) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match calibrate(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: calibrate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The output must be writable and, without `--force`, new.
fn check_target(out: &Path, force: bool) -> Result<(), String> {
    if !force && std::fs::symlink_metadata(out).is_ok() {
        return Err(format!(
            "-o {}: exists (use --force to replace it)",
            out.display()
        ));
    }
    check_output("-o", out)
}

/// This host's name, kernel release and the UTC date and time.
fn host_tag() -> (String, String, Tag) {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    let host = read("/proc/sys/kernel/hostname").unwrap_or_else(|_| "unknown-host".into());
    let kernel = read("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".into());
    let date = utc_now();
    let tag = Tag(format!("{host} (Linux {kernel}, {date})"));
    (host, kernel, tag)
}

/// The current UTC time as `YYYY-MM-DDTHH:MMZ`.
fn utc_now() -> String {
    // SAFETY: time and gmtime_r fill the plain struct given.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::gmtime_r(&t, &mut tm);
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}Z",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min
        )
    }
}

/// The built-in profile of `arch` with the CPU count closest to `cpus`.
pub(crate) fn nearest(arch: Arch, cpus: u32) -> Result<(Profile, &'static str), String> {
    let mut best: Option<(u32, Profile, &'static str)> = None;
    for (name, text) in BUILTIN_PROFILES {
        let p = builtin_profile(name).map_err(|e| e.to_string())?;
        let d = p.topology.cpus.abs_diff(cpus);
        if p.arch == arch && best.as_ref().is_none_or(|(bd, _, _)| d < *bd) {
            best = Some((d, p, text));
        }
    }
    best.map(|(_, p, t)| (p, t))
        .ok_or_else(|| format!("no built-in {arch} profile to copy unmeasured values from"))
}

pub(crate) fn host_arch() -> Result<Arch, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(Arch::X86),
        "aarch64" => Ok(Arch::Arm64),
        a => Err(format!(
            "unsupported architecture {a} (x86_64 and aarch64 only)"
        )),
    }
}

/// Prints one progress line on standard error.
fn say(step: &str, t0: Instant) {
    eprintln!("calibrate [{:5.1}s] {step}", t0.elapsed().as_secs_f64());
}

fn calibrate(args: &Args) -> Result<(), String> {
    let t0 = Instant::now();
    if !cfg!(target_os = "linux") {
        return Err("calibrate runs on Linux only".into());
    }
    let arch = host_arch()?;
    let budget = Budget {
        reps: if args.quick { 3 } else { 7 },
        quick: args.quick,
    };
    let (host, kernel, tag) = host_tag();
    say(
        &format!("host {host}, Linux {kernel}, {}", std::env::consts::ARCH),
        t0,
    );
    let results = measure(&budget, t0)?;
    let topo = &results.topo;
    let (base, base_text) = nearest(arch, topo.cpus)?;
    say(
        &format!("unmeasured values come from built-in profile {}", base.name),
        t0,
    );
    let text = render(&results, &base, base_text, &tag, &host, &kernel)?;
    write_atomic(&args.output, text.as_bytes())?;
    say(&format!("wrote {}", args.output.display()), t0);
    Ok(())
}

/// Runs every benchmark, printing each result as it comes.
fn measure(b: &Budget, t0: Instant) -> Result<Results, String> {
    let cpus = topology::summarise(&topology::read(Path::new("/sys/devices/system/cpu"))?)?;
    say(
        &format!(
            "topology: {} CPUs, {} socket(s), {} per cluster ({}), {} L3 group(s) per socket",
            cpus.cpus,
            cpus.sockets,
            cpus.cpus_per_cluster,
            cpus.cluster_source,
            cpus.dies_per_socket
        ),
        t0,
    );
    let stlb = cpuid::host_stlb();
    match &stlb {
        Ok(g) => say(
            &format!(
                "second-level TLB: {} entries, {}-way ({})",
                g.entries, g.ways, g.source
            ),
            t0,
        ),
        Err(e) => say(&format!("TLB geometry: {e}"), t0),
    }
    let allowed = sample::allowed_cpus()?;
    let a = *allowed.first().ok_or("this process may run on no CPU")?;
    sample::pin(a)?;
    let one = OneCpu::measure(b, a, t0)?;
    let two = TwoCpus::measure(b, &allowed, &cpus, t0)?;
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mut r = assemble(cpus, stlb, one, two);
    r.cpu_flags = cpuid::cpu_flags(&info);
    Ok(r)
}

/// [`show`] of a measurement that may have been refused (`short` names
/// it then).
fn show_got(what: &str, short: &str, g: &Got<sample::Spread>, t0: Instant) {
    match g {
        Ok(s) => show(what, s, t0),
        Err(e) => say(&format!("{short}: not measured: {e}"), t0),
    }
}

fn show(what: &str, s: &sample::Spread, t0: Instant) {
    say(
        &format!("{what}: {:.0} ns ({})", s.median, s.describe()),
        t0,
    );
}

/// The benchmarks that run on one CPU.
struct OneCpu {
    syscall: sample::Spread,
    pipe: sample::Spread,
    madv_empty: sample::Spread,
    madv_touch: sample::Spread,
    mprotect: sample::Spread,
    mmap: (sample::Spread, sample::Spread),
    read_fault: sample::Spread,
    write_fault: sample::Spread,
    thp: Got<sample::Spread>,
    mkwrite: Got<filefault::SharedWrite>,
    cow: Got<sample::Spread>,
    fault_around: Got<sample::Spread>,
    atomic: sample::Spread,
    chase: (sample::Spread, sample::Spread),
    chase_pages: usize,
    ping_pong: sample::Spread,
}

impl OneCpu {
    fn measure(b: &Budget, cpu: usize, t0: Instant) -> Result<OneCpu, String> {
        let syscall = memops::null_syscall(b);
        show("null syscall (getppid)", &syscall, t0);
        let pipe = memops::pipe_write_read(b)?;
        show("pipe write+read, 100 bytes", &pipe, t0);
        let madv_empty = memops::madvise_page(b, false)?;
        show("madvise(DONTNEED) of an unmapped page", &madv_empty, t0);
        let madv_touch = memops::madvise_page(b, true)?;
        show("madvise(DONTNEED) + touch", &madv_touch, t0);
        let mprotect = memops::mprotect_page(b)?;
        show("mprotect of one dirty page", &mprotect, t0);
        let mmap = memops::mmap_munmap(b)?;
        show("mmap of one page", &mmap.0, t0);
        show("munmap of one page", &mmap.1, t0);
        let read_fault = memops::fault_4k(b, false)?;
        show("4 KiB read fault (zero page)", &read_fault, t0);
        let write_fault = memops::fault_4k(b, true)?;
        show("4 KiB write fault (allocate + clear)", &write_fault, t0);
        let thp = memops::fault_thp(b)?;
        show_got("2 MiB THP write fault", "2 MiB THP fault", &thp, t0);
        let mkwrite = filefault::shared_write_fault(b);
        match &mkwrite {
            Ok(s) => show(
                &format!(
                    "write to a read-mapped page of a shared /tmp file (PMD-mapped {} of {} KiB)",
                    s.pmd_kib.0, s.pmd_kib.1
                ),
                &s.spread,
                t0,
            ),
            Err(e) => say(&format!("shared file write fault: not measured: {e}"), t0),
        }
        let cow = filefault::private_cow_fault(b);
        show_got(
            "write to a read-mapped page of a private /tmp file (copy-on-write)",
            "copy-on-write fault",
            &cow,
            t0,
        );
        let fault_around = filefault::fault_around_read(b);
        show_got(
            "read fault on a private /tmp file page, its fault-around window mapped",
            "fault-around read fault",
            &fault_around,
            t0,
        );
        let atomic = cache::atomic_rmw(b);
        show("uncontended atomic", &atomic, t0);
        let chase_pages = if b.quick { 8_192 } else { 16_384 };
        let chase = cache::tlb_chase(b, chase_pages)?;
        show(
            &format!("pointer chase, {chase_pages} pages, one line each"),
            &chase.0,
            t0,
        );
        show("pointer chase, the same lines packed", &chase.1, t0);
        let ping_pong = sched::pipe_ping_pong(b, cpu)?;
        show("pipe ping-pong on one CPU, round trip", &ping_pong, t0);
        Ok(OneCpu {
            syscall,
            pipe,
            madv_empty,
            madv_touch,
            mprotect,
            mmap,
            read_fault,
            write_fault,
            thp,
            mkwrite,
            cow,
            fault_around,
            atomic,
            chase,
            chase_pages,
            ping_pong,
        })
    }
}

/// The benchmarks that need two CPUs (or two sockets).
struct TwoCpus {
    hop: Got<sample::Spread>,
    line: Got<sample::Spread>,
    cross_line: Got<sample::Spread>,
    shootdown: Got<shootdown::Shootdown>,
}

impl TwoCpus {
    fn measure(
        b: &Budget,
        allowed: &[usize],
        topo: &topology::HostTopology,
        t0: Instant,
    ) -> Result<TwoCpus, String> {
        let Some((a, c)) = pair(allowed, topo, false) else {
            let why = format!(
                "this process may run on {} CPU(s) only (sched_getaffinity)",
                allowed.len()
            );
            say(&format!("two-CPU benchmarks: not measured: {why}"), t0);
            return Ok(TwoCpus {
                hop: Err(why.clone()),
                line: Err(why.clone()),
                cross_line: Err(why.clone()),
                shootdown: Err(why),
            });
        };
        say(&format!("two-CPU benchmarks on CPUs {a} and {c}"), t0);
        let line = cache::line_transfer(b, a, c)?;
        show("cache-line transfer between cores", &line, t0);
        let cross_line = match pair(allowed, topo, true) {
            Some((x, y)) => {
                let s = cache::line_transfer(b, x, y)?;
                show(
                    &format!("cache-line transfer between sockets (CPUs {x}, {y})"),
                    &s,
                    t0,
                );
                Ok(s)
            }
            None => Err("one socket".to_string()),
        };
        let hop = sched::affinity_hop(b, a, c)?;
        show("sched_setaffinity hop", &hop, t0);
        sample::pin(a)?;
        let shootdown = remote_shootdown(b, a, c, t0)?;
        Ok(TwoCpus {
            hop: Ok(hop),
            line: Ok(line),
            cross_line,
            shootdown,
        })
    }
}

/// The shootdown loops on CPUs `a` and `c`, or why they cannot run
/// (shootdowns are not IPIs here, or /proc/interrupts cannot say).
fn remote_shootdown(
    b: &Budget,
    a: usize,
    c: usize,
    t0: Instant,
) -> Result<Got<shootdown::Shootdown>, String> {
    let counter = shootdown::shootdown_label()
        .ok_or_else(|| "shootdowns are not IPIs on this architecture (broadcast TLBI)".to_string())
        .and_then(shootdown::check_counter);
    if let Err(why) = counter {
        say(&format!("remote shootdown: not measured: {why}"), t0);
        return Ok(Err(why));
    }
    let s = shootdown::measure(b, a, c)?;
    show("madvise+touch alone", &s.local, t0);
    let per = format!(
        "{:.2} per iteration over {} runs (alone: {:.2})",
        s.ipis_per_iter, s.tried, s.local_ipis_per_iter
    );
    say(
        &format!("shootdown IPIs counted in /proc/interrupts: {per}"),
        t0,
    );
    match &s.remote {
        Some(r) => show(
            "madvise+touch with a thread spinning on the other CPU, runs with IPIs",
            r,
            t0,
        ),
        None => say(
            "no run had a shootdown IPI in >= 90 % of its iterations (the other CPU is busy?)",
            t0,
        ),
    }
    if let Some((g, n)) = &s.gap {
        say(
            &format!(
                "interrupted thread's gaps: median {:.0} ns over {n}",
                g.median
            ),
            t0,
        );
    }
    Ok(Ok(s))
}

/// Two allowed CPUs on different cores (SMT siblings only if nothing
/// else), or on different sockets if `cross_socket`.
fn pair(
    allowed: &[usize],
    topo: &topology::HostTopology,
    cross_socket: bool,
) -> Option<(usize, usize)> {
    let pkg = |c: usize| topo.packages.iter().find(|(x, _)| *x == c).map(|(_, p)| *p);
    let a = *allowed.first()?;
    let others = allowed.iter().copied().filter(|&c| c != a);
    if cross_socket {
        return others.clone().find(|&c| pkg(c) != pkg(a)).map(|c| (a, c));
    }
    let same_pkg: Vec<usize> = others.filter(|&c| pkg(c) == pkg(a)).collect();
    let sibling = |c: usize| {
        topo.siblings
            .iter()
            .any(|s| s.contains(&a) && s.contains(&c))
    };
    same_pkg
        .iter()
        .copied()
        .find(|&c| !sibling(c))
        .or(same_pkg.first().copied())
        .map(|c| (a, c))
}

fn assemble(
    topo: topology::HostTopology,
    stlb: Got<cpuid::TlbGeometry>,
    o: OneCpu,
    t: TwoCpus,
) -> Results {
    Results {
        topo,
        stlb,
        cpu_flags: Vec::new(),
        syscall: o.syscall,
        pipe: o.pipe,
        madv_empty: o.madv_empty,
        madv_touch: o.madv_touch,
        mprotect: o.mprotect,
        mmap: o.mmap.0,
        munmap: o.mmap.1,
        read_fault: o.read_fault,
        write_fault: o.write_fault,
        thp: o.thp,
        mkwrite: o.mkwrite,
        cow: o.cow,
        fault_around: o.fault_around,
        atomic: o.atomic,
        chase: o.chase,
        chase_pages: o.chase_pages,
        ping_pong: o.ping_pong,
        hop: t.hop,
        line: t.line,
        cross_line: t.cross_line,
        shootdown: t.shootdown,
    }
}

/// The profile text: measured values, the rest copied from `base`; the
/// text is parsed and validated as a profile before it is returned.
fn render(
    r: &Results,
    base: &Profile,
    base_text: &str,
    tag: &Tag,
    host: &str,
    kernel: &str,
) -> Result<String, String> {
    let mut v = emit::Values::new();
    let u = Unmeasured::of(base);
    let name: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    emit::set(
        &mut v,
        "",
        "name",
        format!("calibrated-{name}"),
        "set by calibrate".into(),
    );
    let model = cpu_model();
    let desc = format!(
        "{model}, {} CPUs, as measured by tlbsim calibrate on {host} (Linux {kernel})",
        r.topo.cpus
    );
    emit::set(&mut v, "", "description", desc, "set by calibrate".into());
    emit::set(
        &mut v,
        "",
        "arch",
        base.arch.to_string(),
        format!("{}: the host's architecture", tag.measured()),
    );
    derive::machine(&mut v, r, tag);
    derive::paths(&mut v, r, &u, tag);
    derive::scheduling(&mut v, r, &u, tag);
    derive::interconnect(&mut v, r, &u, base, tag);
    let head = format!(
        "# Machine profile of {host}, written by `tlbsim calibrate` on {}.\n# Every value says where it comes from: \"measured by calibrate\" (host,\n# kernel, date, and min / median / max over the repetitions; the median is\n# taken) or \"copied from built-in {}\" with the reason calibrate could\n# not measure it. Derivations: docs/model.md, \"Calibrate\".\n\n",
        tag.0, base.name
    );
    let (text, copied) = emit::render(&head, &base.name, base_text, &v, |s, k| why_not(r, s, k));
    eprintln!(
        "calibrate: not measured on this host, copied from built-in {}: {}",
        base.name,
        copied.join(", ")
    );
    let p = parse_profile("<calibrated profile>", &text)
        .map_err(|e| format!("internal error: the written profile does not parse: {e}"))?;
    p.validate()
        .map_err(|e| format!("the measured values make no valid profile: {e}"))?;
    Ok(text)
}

/// `model name` from /proc/cpuinfo (x86) or the architecture.
fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Why calibrate did not measure `section.key` on this host.
fn why_not(r: &Results, section: &str, key: &str) -> String {
    let reason = match (section, key) {
        ("arm64", _) => Some("arm64 DVM and TLBI costs: no user-space benchmark, and on x86 no such hardware".to_string()),
        ("x86", _) => Some("INVLPG, INVPCID, CR3 writes and INVLPGB run only in the kernel: no user-space benchmark".to_string()),
        ("tlb", "tlb_entries" | "tlb_ways") => r.stlb.as_ref().err().cloned(),
        ("tlb", _) => Some("the CPU does not report it".to_string()),
        ("kernel", "thp_fault_ns") => r.thp.as_ref().err().cloned(),
        ("kernel", "page_mkwrite_ns") => r.mkwrite.as_ref().err().cloned(),
        ("kernel", "page_copy_ns") => r.cow.as_ref().err().cloned(),
        ("kernel", "fault_around_page_ns") => r.fault_around.as_ref().err().cloned(),
        ("kernel", "migrate_ns") => r.hop.as_ref().err().cloned(),
        ("kernel", "cacheline_transfer_ns" | "ipi_ack_ns") => r.line.as_ref().err().cloned(),
        ("kernel", k) if k.starts_with("ipi_") && k != "ipi_cpus_per_send" => match &r.shootdown {
            Err(e) => Some(e.clone()),
            Ok(s) if s.remote.is_none() => Some(format!("shootdown IPIs not confirmed: no run of {} had one in >= 90 % of its iterations ({:.2} per iteration in /proc/interrupts; another task on the other CPU?)", s.tried, s.ipis_per_iter)),
            Ok(_) => Some("the interrupted thread saw no gaps, or the cache-line transfer was not measured".into()),
        },
        ("kernel", "time_slice_ns" | "sched_latency_ns" | "wakeup_granularity_ns" | "hz") => Some("kernel configuration, not a cost".to_string()),
        _ => None,
    };
    match reason {
        Some(r) if !r.is_empty() => format!("not measured: {r}"),
        _ => "not measured: calibrate has no benchmark for it".to_string(),
    }
}
