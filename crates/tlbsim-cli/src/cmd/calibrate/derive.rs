//! From measurements to profile values: the derivations of docs/model.md
//! ("Calibrate"), which reproduce those behind the host-derived values of
//! profiles/skylake-4c8t.toml. Constants calibrate cannot measure from
//! user space (INVLPG/TLBI, CR3/TTBR writes, one PTE update, a wake-up,
//! the split of an IPI's send and delivery) come from the base profile
//! and are named in the comments.

use super::cpuid::TlbGeometry;
use super::emit::{set, Values};
use super::sample::Spread;
use super::shootdown::Shootdown;
use super::topology::HostTopology;
use tlbsim::config::Profile;

/// A measurement, or why it was not taken on this host.
pub type Got<T> = Result<T, String>;

/// Everything calibrate measured.
#[derive(Debug)]
pub struct Results {
    /// sysfs topology.
    pub topo: HostTopology,
    /// The second-level TLB CPUID reports (x86).
    pub stlb: Got<TlbGeometry>,
    /// /proc/cpuinfo's flags (x86; empty elsewhere).
    pub cpu_flags: Vec<String>,
    /// `getppid()`.
    pub syscall: Spread,
    /// Pipe write + read of 100 bytes.
    pub pipe: Spread,
    /// madvise(DONTNEED) of an unmapped page.
    pub madv_empty: Spread,
    /// madvise(DONTNEED) + write of one page.
    pub madv_touch: Spread,
    /// One mprotect of a dirty page.
    pub mprotect: Spread,
    /// mmap of one page; munmap of one untouched page.
    pub mmap: Spread,
    /// munmap of one untouched page.
    pub munmap: Spread,
    /// Read fault on a fresh anonymous page (zero page).
    pub read_fault: Spread,
    /// Write fault on a fresh anonymous page.
    pub write_fault: Spread,
    /// Write fault on a fresh 2 MiB THP extent.
    pub thp: Got<Spread>,
    /// First write to a read-mapped page of a shared /tmp file.
    pub mkwrite: Got<super::filefault::SharedWrite>,
    /// Copy-on-write fault of a cached private file page, per write.
    pub cow: Got<Spread>,
    /// Read fault of a private file page whose fault-around window is
    /// mapped but for it.
    pub fault_around: Got<Spread>,
    /// Uncontended atomic.
    pub atomic: Spread,
    /// Pointer chase (one line per page, packed), ns per load.
    pub chase: (Spread, Spread),
    /// Pages of the chase.
    pub chase_pages: usize,
    /// Pipe ping-pong round trip on one CPU.
    pub ping_pong: Spread,
    /// sched_setaffinity hop between two CPUs.
    pub hop: Got<Spread>,
    /// Cache-line transfer between two cores.
    pub line: Got<Spread>,
    /// The same between sockets.
    pub cross_line: Got<Spread>,
    /// Remote shootdown loops.
    pub shootdown: Got<Shootdown>,
}

/// Where and when: "HOST (Linux K, DATE)".
pub struct Tag(pub String);

impl Tag {
    /// "measured by calibrate on HOST (Linux K, DATE)".
    pub fn measured(&self) -> String {
        format!("measured by calibrate on {}", self.0)
    }
}

fn ns(x: f64) -> i64 {
    x.round().max(1.0) as i64
}

/// Topology (sysfs), TLB geometry (CPUID) and the walk (pointer chase).
pub fn machine(v: &mut Values, r: &Results, tag: &Tag) {
    let t = &r.topo;
    let src = format!(
        "read by calibrate from /sys/devices/system/cpu on {}",
        tag.0
    );
    let tm = tag.measured();
    set(
        v,
        "topology",
        "cpus",
        t.cpus as i64,
        format!("{src}: online CPUs"),
    );
    let cl = format!(
        "{src}: {} ({} SMT threads per core)",
        t.cluster_source, t.threads_per_core
    );
    set(
        v,
        "topology",
        "cpus_per_cluster",
        t.cpus_per_cluster as i64,
        cl,
    );
    set(
        v,
        "topology",
        "sockets",
        t.sockets as i64,
        format!("{src}: distinct physical_package_id"),
    );
    let d = format!("{src}: distinct L3 groups (cache/index3/shared_cpu_list) per socket");
    set(
        v,
        "topology",
        "dies_per_socket",
        t.dies_per_socket as i64,
        d,
    );
    if let Ok(g) = &r.stlb {
        let c = format!(
            "read by calibrate from {} on {}: second-level TLB, 4 KiB pages",
            g.source, tag.0
        );
        set(v, "tlb", "tlb_entries", g.entries as i64, c.clone());
        set(v, "tlb", "tlb_ways", g.ways as i64, c);
    }
    if v.get(&("".to_string(), "arch".to_string()))
        .is_some_and(|e| e.value.as_str() == Some("x86"))
    {
        let has = |f: &str| r.cpu_flags.iter().any(|x| x == f);
        if !r.cpu_flags.is_empty() {
            let pcid = has("pcid") && has("invpcid");
            let c = format!(
                "read by calibrate from /proc/cpuinfo flags on {}: pcid {}, invpcid {}",
                tag.0,
                has("pcid"),
                has("invpcid")
            );
            set(v, "x86", "pcid", pcid, c);
        }
    }
    let (spread, packed) = r.chase;
    let miss = spread.median - packed.median;
    let c = format!(
        "{}: pointer chase over {} pages, one line each (a TLB miss per load, {}) minus the same lines packed ({}) = {miss:.1} ns per miss; the paging-structure caches hold the upper levels of this span, so one miss reads one level (docs/model.md, Calibrate)",
        tm, r.chase_pages, spread.describe(), packed.describe()
    );
    set(v, "tlb", "walk_level_ns", ns(miss), c);
}

/// The constants the derivations subtract that calibrate cannot
/// measure, from the base profile: (local flush of one page, switch_mm's
/// translation-base write, one PTE update, a wake-up).
pub struct Unmeasured {
    /// INVLPG / local TLBI of one page.
    pub flush_ns: f64,
    /// CR3 / TTBR0 write.
    pub switch_mm_ns: f64,
    /// `pte_update_ns`.
    pub pte_ns: f64,
    /// `resched_ipi_ns`.
    pub wakeup_ns: f64,
    /// The base profile's name.
    pub base: String,
}

impl Unmeasured {
    /// The base profile's constants.
    pub fn of(p: &Profile) -> Unmeasured {
        let s = p.step_costs();
        Unmeasured {
            flush_ns: s.inval_local_ns as f64,
            switch_mm_ns: s.ttbr_write_ns as f64,
            pte_ns: p.kernel.pte_update_ns as f64,
            wakeup_ns: p.kernel.resched_ipi_ns as f64,
            base: p.name.clone(),
        }
    }
}

/// The derived 4 KiB fault split: (page_fault_ns, page_alloc_ns).
pub fn fault_split(r: &Results) -> (f64, f64) {
    let fault = r.read_fault.median;
    (fault, (r.write_fault.median - fault).max(1.0))
}

/// Syscall, pipe, fault, THP, madvise, mprotect, mmap and munmap costs.
pub fn paths(v: &mut Values, r: &Results, u: &Unmeasured, tag: &Tag) {
    let t = &tag.measured();
    faults(v, r, t);
    file_faults(v, r, u, t);
    mm_calls(v, r, u, t);
}

/// syscall_ns, pipe_rw_ns, and the anonymous faults' page_fault_ns and
/// page_alloc_ns; `t` says where the values come from.
fn faults(v: &mut Values, r: &Results, t: &str) {
    let sys = r.syscall.median;
    set(
        v,
        "kernel",
        "syscall_ns",
        ns(sys),
        format!("{t}: getppid() loop, {}", r.syscall.describe()),
    );
    let pipe = r.pipe.median / 2.0 - sys;
    set(
        v,
        "kernel",
        "pipe_rw_ns",
        ns(pipe),
        format!(
            "{t}: 100-byte pipe write+read {} per pair, halved, minus syscall_ns",
            r.pipe.describe()
        ),
    );
    let (fault, alloc) = fault_split(r);
    set(v, "kernel", "page_fault_ns", ns(fault), format!("{t}: read fault on fresh anonymous 4 KiB pages (maps the zero page: entry, handling, exit, no allocation), {}", r.read_fault.describe()));
    set(v, "kernel", "page_alloc_ns", ns(alloc), format!("{t}: write fault on fresh anonymous 4 KiB pages {} minus the read fault (allocate, clear, charge)", r.write_fault.describe()));
}

/// The faults measured on a THP extent and on /tmp files: thp_fault_ns,
/// page_mkwrite_ns, page_copy_ns, fault_around_page_ns (each when its
/// measurement succeeded).
fn file_faults(v: &mut Values, r: &Results, u: &Unmeasured, t: &str) {
    let (fault, _) = fault_split(r);
    if let Ok(s) = &r.thp {
        set(v, "kernel", "thp_fault_ns", ns(s.median - fault), format!("{t}: first write to a 2 MiB MADV_HUGEPAGE extent (AnonHugePages checked), {}, minus page_fault_ns", s.describe()));
    }
    if let Ok(w) = &r.mkwrite {
        let mk = w.spread.median - fault - u.pte_ns;
        let (pmd, of) = w.pmd_kib;
        set(v, "kernel", "page_mkwrite_ns", ns(mk), format!("{t}: first write to a read-mapped page of a MAP_SHARED /tmp file (the last 2 MiB of a 64 MiB file read through first, cached and dirty, mapped afresh each time: {pmd} of {of} KiB PMD-mapped, whose split is included) {} minus page_fault_ns and the base's pte_update {}", w.spread.describe(), u.pte_ns));
    }
    if let Ok(c) = &r.cow {
        let copy = c.median - fault - u.flush_ns - 2.0 * u.pte_ns;
        set(v, "kernel", "page_copy_ns", ns(copy), format!("{t}: first write to a read-mapped page of a cached MAP_PRIVATE /tmp file (16 pages of a 1 MiB file, read first, then written: wp_page_copy) {} minus page_fault_ns, the base's local flush {} and two pte_updates {}", c.describe(), u.flush_ns, u.pte_ns));
    }
    if let Ok(f) = &r.fault_around {
        let (pages, whence) = super::filefault::fault_around_pages();
        let per = (f.median - fault - u.pte_ns) / pages as f64;
        set(v, "kernel", "fault_around_page_ns", ns(per), format!("{t}: read fault on a dropped page of a cached MAP_PRIVATE /tmp file whose fault-around window is mapped but for it {} minus page_fault_ns and the base's pte_update {}, over the window's {pages} pages ({whence})", f.describe(), u.pte_ns));
    }
}

/// madvise_ns, mprotect_vma_ns, mmap_ns, munmap_ns and atomic_ns.
fn mm_calls(v: &mut Values, r: &Results, u: &Unmeasured, t: &str) {
    let sys = r.syscall.median;
    let (fault, alloc) = fault_split(r);
    let fixed = r.madv_empty.median - sys;
    let madv = r.madv_touch.median - sys - fault - alloc - u.flush_ns - u.pte_ns;
    let (value, how) = if madv >= fixed {
        (madv, "kept")
    } else {
        (
            fixed,
            "below the empty call's, so the empty call's is taken",
        )
    };
    set(v, "kernel", "madvise_ns", ns(value), format!(
        "{t}: madvise(DONTNEED)+touch of one page {} minus syscall_ns, page_fault_ns, page_alloc_ns and the base's INVLPG {} and pte_update {} ({how}; madvise of an unmapped page alone {})",
        r.madv_touch.describe(), u.flush_ns, u.pte_ns, r.madv_empty.describe()));
    let mp = r.mprotect.median - sys - u.flush_ns - u.pte_ns;
    set(v, "kernel", "mprotect_vma_ns", ns(mp), format!(
        "{t}: mprotect RO<->RW of one dirty page {} per call, minus syscall_ns, the base's local flush {} and pte_update {}",
        r.mprotect.describe(), u.flush_ns, u.pte_ns));
    set(
        v,
        "kernel",
        "mmap_ns",
        ns(r.mmap.median - sys),
        format!(
            "{t}: mmap of one anonymous page {}, minus syscall_ns",
            r.mmap.describe()
        ),
    );
    set(
        v,
        "kernel",
        "munmap_ns",
        ns(r.munmap.median - sys),
        format!(
            "{t}: munmap of one untouched page (its own VMA) {}, minus syscall_ns",
            r.munmap.describe()
        ),
    );
    let a = &r.atomic;
    set(
        v,
        "kernel",
        "atomic_ns",
        ns(a.median),
        format!("{t}: uncontended atomic fetch_add, {}", a.describe()),
    );
}

/// context_switch_ns (one-CPU ping-pong) and migrate_ns (affinity hop);
/// returns context_switch_ns.
pub fn scheduling(v: &mut Values, r: &Results, u: &Unmeasured, tag: &Tag) -> f64 {
    let t = &tag.measured();
    let sys = r.syscall.median;
    let pipe = (r.pipe.median / 2.0 - sys).max(0.0);
    let cs = (r.ping_pong.median / 2.0 - 2.0 * (sys + pipe) - u.switch_mm_ns).max(1.0);
    set(v, "kernel", "context_switch_ns", ns(cs), format!(
        "{t}: pipe ping-pong between two processes pinned to one CPU {} per round trip = 2 switches + 4 syscalls + 4 pipe reads/writes; halved, minus those and the base's switch_mm write {} ns",
        r.ping_pong.describe(), u.switch_mm_ns));
    if let Ok(h) = &r.hop {
        let m = h.median - sys - 2.0 * cs - u.wakeup_ns;
        set(v, "kernel", "migrate_ns", ns(m), format!(
            "{t}: sched_setaffinity hop between two CPUs {} minus syscall_ns, two context switches and the base's wake-up {} ns ({})",
            h.describe(), u.wakeup_ns, "the host's idle loop included"));
    }
    cs
}

/// Cache-line transfers and the IPI round trip's parts.
pub fn interconnect(v: &mut Values, r: &Results, u: &Unmeasured, base: &Profile, tag: &Tag) {
    let t = &tag.measured();
    let Ok(line) = &r.line else { return };
    let ack = line.median;
    set(v, "kernel", "cacheline_transfer_ns", ns(ack), format!("{t}: counter ping-ponged between two pinned threads on different cores, half a round trip, {}", line.describe()));
    if let Ok(x) = &r.cross_line {
        set(
            v,
            "kernel",
            "cacheline_cross_socket_ns",
            ns(x.median),
            format!("{t}: the same between sockets, {}", x.describe()),
        );
    }
    set(
        v,
        "kernel",
        "ipi_ack_ns",
        ns(ack),
        format!("{t}: the csd flag's cache line, = cacheline_transfer_ns"),
    );
    let Ok(s) = &r.shootdown else { return };
    let (Some((gap, gaps)), Some(remote)) = (&s.gap, &s.remote) else {
        return;
    };
    let round = remote.median - s.local.median;
    let handler = (gap.median - u.flush_ns).max(1.0);
    let rest = (round - gap.median - ack).max(2.0);
    let k = &base.kernel;
    let share = k.ipi_send_ns as f64 / (k.ipi_send_ns + k.ipi_latency_ns).max(1) as f64;
    let head = format!(
        "{t}: flush IPI round trip {round:.0} ns = madvise+touch with a thread spinning on another CPU ({}, the runs with a shootdown IPI in >= 90 % of iterations in /proc/interrupts, {} of {} tried) minus alone ({}, {:.2} IPIs/iteration)",
        remote.describe(), remote.reps, s.tried, s.local.describe(), s.local_ipis_per_iter);
    set(v, "kernel", "ipi_handler_ns", ns(handler), format!(
        "{t}: median gap the interrupted spinning thread saw, {:.0} ns ({gaps} gaps > 300 ns, min {:.0} / max {:.0}), minus the base's INVLPG {} ns", gap.median, gap.min, gap.max, u.flush_ns));
    set(v, "kernel", "ipi_send_ns", ns(rest * share), format!(
        "{head}; minus the handler gap and ipi_ack_ns leaves {rest:.0} ns of send + delivery, split {:.0}:{:.0} as {}'s ipi_send_ns:ipi_latency_ns (not separable from user space)", share * 100.0, (1.0 - share) * 100.0, u.base));
    set(
        v,
        "kernel",
        "ipi_latency_ns",
        ns(rest * (1.0 - share)),
        format!("{head}; the delivery share of the {rest:.0} ns (see ipi_send_ns)"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlbsim::config::builtin_profile;

    fn one(x: f64) -> Spread {
        Spread::of(&[x]).unwrap()
    }

    /// Round numbers for every measurement (ns), two CPUs, one socket.
    fn results() -> Results {
        let topo = crate::cmd::calibrate::topology::HostTopology {
            cpus: 2,
            sockets: 1,
            cpus_per_cluster: 1,
            cluster_source: "test",
            dies_per_socket: 1,
            threads_per_core: 1,
            packages: vec![(0, 0), (1, 0)],
            siblings: vec![vec![0], vec![1]],
        };
        let shootdown = Shootdown {
            local: one(2_000.0),
            remote: Some(one(7_000.0)),
            tried: 1,
            ipis_per_iter: 1.0,
            local_ipis_per_iter: 0.0,
            gap: Some((one(1_100.0), 10)),
        };
        Results {
            topo,
            stlb: Err("none".into()),
            cpu_flags: vec!["pcid".into()],
            syscall: one(100.0),
            pipe: one(500.0),
            madv_empty: one(300.0),
            madv_touch: one(3_000.0),
            mprotect: one(1_000.0),
            mmap: one(600.0),
            munmap: one(700.0),
            read_fault: one(500.0),
            write_fault: one(1_200.0),
            thp: Err("off".into()),
            mkwrite: Ok(super::super::filefault::SharedWrite {
                spread: one(4_000.0),
                pmd_kib: (32_768, 32_768),
            }),
            cow: Ok(one(2_000.0)),
            fault_around: Ok(one(1_330.0)),
            atomic: one(5.0),
            chase: (one(25.0), one(5.0)),
            chase_pages: 8,
            ping_pong: one(2_000.0),
            hop: Ok(one(10_000.0)),
            line: Ok(one(60.0)),
            cross_line: Err("one socket".into()),
            shootdown: Ok(shootdown),
        }
    }

    fn get(v: &Values, s: &str, k: &str) -> Option<i64> {
        v.get(&(s.to_string(), k.to_string()))
            .and_then(|e| e.value.as_integer())
    }

    #[test]
    fn derivations_follow_docs_model() {
        let base = builtin_profile("skylake-4c8t").unwrap();
        let (r, u, tag) = (results(), Unmeasured::of(&base), Tag("h".into()));
        let mut v = Values::new();
        machine(&mut v, &r, &tag);
        paths(&mut v, &r, &u, &tag);
        let cs = scheduling(&mut v, &r, &u, &tag);
        interconnect(&mut v, &r, &u, &base, &tag);
        let k = |key| get(&v, "kernel", key).unwrap_or_else(|| panic!("{key}"));
        assert_eq!(get(&v, "tlb", "walk_level_ns"), Some(20));
        assert_eq!(
            (k("page_fault_ns"), k("page_alloc_ns"), k("pipe_rw_ns")),
            (500, 700, 150)
        );
        // 3000 - syscall 100 - fault 500 - alloc 700 - INVLPG 100 - PTE 30.
        assert_eq!(k("madvise_ns"), 1570);
        assert_eq!(k("mprotect_vma_ns"), 1000 - 100 - 100 - 30);
        assert_eq!((k("mmap_ns"), k("munmap_ns")), (500, 600));
        // 2000 / 2 - 2 x (100 + 150) - CR3 42.
        assert_eq!(cs, 458.0);
        assert_eq!(k("migrate_ns"), 10_000 - 100 - 2 * 458 - 200);
        // Round trip 5000 - gap 1100 - ack 60 = 3840, split 1500:2000.
        assert_eq!((k("ipi_ack_ns"), k("ipi_handler_ns")), (60, 1000));
        assert_eq!((k("ipi_send_ns"), k("ipi_latency_ns")), (1646, 2194));
        assert!(get(&v, "kernel", "thp_fault_ns").is_none());
        // 4000 - fault 500 - PTE 30.
        assert_eq!(k("page_mkwrite_ns"), 3470);
        // 2000 - fault 500 - INVLPG 100 - 2 x PTE 30.
        assert_eq!(k("page_copy_ns"), 1340);
        // (1330 - fault 500 - PTE 30) / the window's pages.
        let (pages, _) = super::super::filefault::fault_around_pages();
        assert_eq!(k("fault_around_page_ns"), (800 / pages) as i64);
        assert!(get(&v, "kernel", "cacheline_cross_socket_ns").is_none());
    }

    #[test]
    fn madvise_never_falls_below_the_empty_call() {
        let base = builtin_profile("skylake-4c8t").unwrap();
        let mut r = results();
        r.madv_touch = one(1_500.0);
        let mut v = Values::new();
        paths(&mut v, &r, &Unmeasured::of(&base), &Tag("h".into()));
        assert_eq!(get(&v, "kernel", "madvise_ns"), Some(200));
    }

    #[test]
    fn unconfirmed_ipis_leave_the_ipi_costs_unset() {
        let base = builtin_profile("skylake-4c8t").unwrap();
        let mut r = results();
        if let Ok(s) = r.shootdown.as_mut() {
            s.remote = None;
        }
        let mut v = Values::new();
        interconnect(&mut v, &r, &Unmeasured::of(&base), &base, &Tag("h".into()));
        assert!(get(&v, "kernel", "ipi_send_ns").is_none());
        assert_eq!(get(&v, "kernel", "ipi_ack_ns"), Some(60));
    }
}
