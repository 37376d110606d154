//! Printers: the perf-stat-like table and the JSON document.

use serde_json::{json, Value};
use std::fmt::Write;
use tlbsim::config::Arch;
use tlbsim::sim::RunOutput;

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The table printed by `tlbsim run`: a header, the counters, the
/// latencies and locks, per-CPU interrupts and counters (on machines small
/// enough, or with `per_cpu`), and the elapsed times.
pub fn table(o: &RunOutput, host_s: f64, per_cpu: bool) -> String {
    let mut s = String::new();
    let n = o.stats.per_cpu.len() as u64;
    let _ = writeln!(
        s,
        "\n Performance counter stats for '{}' ({}, {} CPUs, {} + {}, seed {}):\n",
        o.experiment, o.profile.name, n, o.kernel.tlb_policy, o.kernel.asid_allocator, o.seed
    );
    counters(&mut s, o);
    latencies_and_locks(&mut s, o);
    workload_metrics(&mut s, o);
    cpu_time(&mut s, o);
    if per_cpu || n <= 16 {
        interrupts(&mut s, o);
    }
    if per_cpu || n <= 64 {
        per_cpu_counters(&mut s, o);
    }
    let _ = writeln!(
        s,
        "\n{:>18.6} seconds simulated time elapsed\n{:>18}      checker: {} ({} events checked)\n{:>18.3} seconds host time, {:.2} M events/s\n",
        o.elapsed_ns as f64 / 1e9,
        "",
        o.checker.verdict,
        thousands(o.checker.events_checked),
        host_s,
        o.stats.events as f64 / host_s.max(1e-9) / 1e6
    );
    s
}

/// One counter row: value, name, note.
fn row(s: &mut String, v: u64, name: &str, note: String) {
    let _ = writeln!(s, "{:>18}      {:<22} {}", thousands(v), name, note);
}

/// Is the run's machine x86 (else arm64)?
fn is_x86(o: &RunOutput) -> bool {
    o.profile.arch == Arch::X86
}

/// The TLB-maintenance rows in the architecture's own terms: TLBIs, DSBs
/// and DVM traffic on arm64; INVLPG, CR3 writes and (where the machine
/// has it) INVLPGB/TLBSYNC on x86.
fn maintenance_rows(o: &RunOutput) -> Vec<(u64, &'static str)> {
    let t = &o.stats.total;
    if !is_x86(o) {
        return vec![
            (t.tlbi_local, "tlbi.local"),
            (t.tlbi_broadcast, "tlbi.broadcast"),
            (t.dsb_ish, "dsb.ish"),
            (t.dvm_syncs, "dvm.syncs"),
            (t.dvm_ops_received, "dvm.ops_received"),
            (t.ttbr_writes, "ttbr0.writes"),
        ];
    }
    let mut v = vec![
        (t.tlbi_local, "invlpg"),
        (t.ttbr_writes, "cr3.writes"),
        (t.cr3_flushes, "cr3.writes_flushing"),
    ];
    if o.profile.x86.as_ref().is_some_and(|x| x.invlpgb) {
        v.push((t.tlbi_broadcast, "invlpgb"));
        v.push((t.dvm_syncs, "tlbsync"));
    }
    v
}

/// The counter rows, like `perf stat`'s: TLB maintenance, flushes (with
/// their share), scheduling and system calls, ASID rollovers, THP.
fn counters(s: &mut String, o: &RunOutput) {
    let t = &o.stats.total;
    let st = &o.stats;
    let n = st.per_cpu.len() as u64;
    let per = |v: u64| {
        let tenths = (v as f64 * 10.0 / n as f64).round() as u64;
        let mean = format!("{}.{}", thousands(tenths / 10), tenths % 10);
        format!("# {mean:>10} per CPU")
    };
    for (v, name) in maintenance_rows(o) {
        row(s, v, name, per(v));
    }
    row(s, t.tlb_misses, "tlb.misses", per(t.tlb_misses));
    let walk_hits = format!("# {} walk-cache hits", thousands(t.walk_cache_hits));
    row(s, t.page_walks, "page_walks", walk_hits);
    let flushes = t.flushes_broadcast + t.flushes_local + t.flushes_skipped;
    let share = |v: u64| {
        if flushes == 0 {
            String::new()
        } else {
            format!("# {:>9.1} % of flushes", v as f64 * 100.0 / flushes as f64)
        }
    };
    for (v, name) in [
        (t.flushes_broadcast, "flush.broadcast"),
        (t.flushes_local, "flush.local"),
        (t.flushes_skipped, "flush.skipped"),
    ] {
        row(s, v, name, share(v));
    }
    let stale = t.stale_switch_flushes;
    row(s, stale, "flush.stale_on_switch", per(stale));
    for (v, name) in [
        (t.context_switches, "context_switches"),
        (t.syscalls, "syscalls"),
        (t.page_faults, "page_faults"),
        (t.ipis_sent, "ipis.resched"),
    ] {
        row(s, v, name, per(v));
    }
    let ids = if is_x86(o) {
        "pcid.rollovers"
    } else {
        "asid.rollovers"
    };
    if o.kernel.asid_allocator != "none" {
        row(s, st.asid_rollovers, ids, String::new());
    }
    if st.vmid_rollovers > 0 {
        row(s, st.vmid_rollovers, "vmid.rollovers", String::new());
    }
    if st.thp_fault_alloc + st.thp_split_pmd > 0 {
        row(s, st.thp_fault_alloc, "thp.fault_alloc", String::new());
        row(s, st.thp_split_pmd, "thp.split_pmd", String::new());
    }
    reclaim_counters(s, &st.reclaim);
}

/// Reclaim's and swap's counters, when reclaim ran.
fn reclaim_counters(s: &mut String, r: &tlbsim::stats::ReclaimStats) {
    if r.is_empty() {
        return;
    }
    let note = |t: &str| format!("# {t}");
    row(s, r.pgsteal, "reclaim.freed", note("pgsteal"));
    row(s, r.kept, "reclaim.kept", note("isolated, then put back"));
    row(s, r.pswpout, "swap.out", note("pswpout"));
    row(s, r.pswpin, "swap.in", note("pswpin"));
    let deferred = note("unmaps flushed by a batch");
    row(s, r.flush_deferred, "flush.deferred", deferred);
    row(
        s,
        r.batch_flushes,
        "flush.batches",
        note("arch_tlbbatch_flush"),
    );
    row(
        s,
        r.pgmigrate_success,
        "migrate.pages",
        note("pgmigrate_success"),
    );
}

/// The workload's own results (`RunOutput::metrics`: `victim_slowdown_pct`,
/// `iteration_us`, `index`, ...), one row each: a time or a share with its
/// unit as the name gives it, a count as an integer. With VMs, only the
/// mean over VMs and its spread (`NAME.vm_min`/`NAME.vm_max`, shown as
/// "min .. max"); per-VM values are in the JSON.
fn workload_metrics(s: &mut String, o: &RunOutput) {
    let m = &o.metrics;
    let shown: Vec<(&String, &f64)> = m
        .iter()
        .filter(|(k, _)| !k.starts_with("vm") && !k.ends_with(".vm_min") && !k.ends_with(".vm_max"))
        .collect();
    if shown.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "
 Workload ({}):
",
        o.workload.name
    );
    for (k, &v) in shown {
        let spread = match (m.get(&format!("{k}.vm_min")), m.get(&format!("{k}.vm_max"))) {
            (Some(lo), Some(hi)) => format!("  # VMs {} .. {}", metric(k, *lo), metric(k, *hi)),
            _ => String::new(),
        };
        let _ = writeln!(s, "{:>18}      {k}{spread}", metric(k, v));
    }
}

/// A metric's value as its name says it is: a rate (`_per_s`, `_per_ms`,
/// ...) as a number with `/s`, a time (`_ns`, `_us`, `_ms`, `_s`) or a
/// percentage with its unit, a whole number as an integer, a large one
/// with one decimal, anything else with four decimals.
fn metric(name: &str, v: f64) -> String {
    if let Some(per) = ["_per_ns", "_per_us", "_per_ms", "_per_s"]
        .into_iter()
        .find(|u| name.ends_with(u))
    {
        let count = metric(&name[..name.len() - per.len()], v);
        return format!("{count} /{}", &per[5..]);
    }
    let unit = ["_pct", "_ns", "_us", "_ms", "_s"]
        .into_iter()
        .find(|u| name.ends_with(u))
        .map(|u| match u {
            "_pct" => " %",
            other => &other[1..],
        });
    match unit {
        Some(" %") => format!("{v:.2} %"),
        Some(u) => format!("{v:.3} {u}"),
        None if v.fract() == 0.0 && v.abs() < 1e15 => thousands_i(v as i64),
        None if v.abs() >= 1000.0 && v.abs() < 1e15 => {
            let tenths = (v * 10.0).round() as i64;
            format!("{}.{}", thousands_i(tenths / 10), (tenths % 10).abs())
        }
        None => format!("{v:.4}"),
    }
}

/// `thousands` for a signed whole number.
fn thousands_i(n: i64) -> String {
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{}", thousands(n.unsigned_abs()))
}

/// The latency rows (count and min / median / max) and one row per lock
/// (acquisitions, contended waits and hold times).
fn latencies_and_locks(s: &mut String, o: &RunOutput) {
    let st = &o.stats;
    let mut rows = vec![("flush.latency", &st.flush_latency_ns)];
    match (is_x86(o), o.profile.x86.as_ref().is_some_and(|x| x.invlpgb)) {
        (false, _) => rows.insert(0, ("dvm.sync_queue_wait", &st.dvm_sync_queue_wait_ns)),
        (true, true) => rows.insert(0, ("tlbsync.queue_wait", &st.dvm_sync_queue_wait_ns)),
        (true, false) => {}
    }
    for (name, q) in rows {
        let _ = writeln!(
            s,
            "{:>18}      {:<22} # min {} / median {} / max {} ns",
            thousands(q.count),
            name,
            thousands(q.min),
            thousands(q.median),
            thousands(q.max)
        );
    }
    for (name, l) in &st.locks {
        let q = &l.contended_wait_ns;
        let h = &l.hold_ns;
        let _ = writeln!(
            s,
            "{:>18}      {:<22} # {} contended, wait min {} / median {} / max {} ns; hold min {} / median {} / max {} ns",
            thousands(l.acquisitions),
            format!("lock.{name}"),
            thousands(q.count),
            thousands(q.min),
            thousands(q.median),
            thousands(q.max),
            thousands(h.min),
            thousands(h.median),
            thousands(h.max)
        );
    }
}

/// Rows of `cpu_time` printed; the rest are summed in one line.
const CPU_TIME_ROWS: usize = 12;

/// Where the CPUs' time went, like `perf report --no-children`: share,
/// time and the innermost kernel function (or `[user]`, `[idle]`,
/// `[kernel]`), largest first.
fn cpu_time(s: &mut String, o: &RunOutput) {
    let rows = &o.stats.cpu_time_by_function;
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "
 CPU time by function (self, all CPUs):
"
    );
    for r in rows.iter().take(CPU_TIME_ROWS) {
        let _ = writeln!(
            s,
            "{:>11.2} %  {:>15} ns  {}",
            r.share_pct,
            thousands(r.ns),
            r.function
        );
    }
    if rows.len() > CPU_TIME_ROWS {
        let rest = &rows[CPU_TIME_ROWS..];
        let share: f64 = rest.iter().map(|r| r.share_pct).sum();
        let ns: u64 = rest.iter().map(|r| r.ns).sum();
        let n = rest.len();
        let _ = writeln!(s, "{share:>11.2} %  {:>15} ns  ({n} more)", thousands(ns));
    }
    let tasks = &o.stats.cpu_time_by_task;
    let shown: Vec<String> = tasks
        .iter()
        .take(CPU_TIME_TASKS)
        .map(|t| format!("{} {:.2} %", t.comm, t.share_pct))
        .collect();
    let more = tasks.len().saturating_sub(CPU_TIME_TASKS);
    let more = if more > 0 {
        format!(" (+{more} more; per task in --json)")
    } else {
        " (per task in --json)".into()
    };
    let _ = writeln!(s, "\n   by task: {}{more}", shown.join(", "));
}

/// Task names listed after the function rows.
const CPU_TIME_TASKS: usize = 5;

/// Interrupts per CPU, like /proc/interrupts: arm64's IPI numbers, or
/// x86's RES/CAL/TLB rows. On x86 every function-call IPI the model sends
/// is a TLB shootdown (`flush_tlb_func`, its only IPI handler), which
/// Linux counts in both CAL and TLB.
fn interrupts(s: &mut String, o: &RunOutput) {
    let mut head = String::from("\n      ");
    for i in 0..o.stats.per_cpu.len() {
        head.push_str(&format!("{:>11}", format!("CPU{i}")));
    }
    let _ = writeln!(s, "{head}");
    type Get = fn(&tlbsim::stats::CpuStats) -> u64;
    let rows: [(&str, Get, &str); 3] = if is_x86(o) {
        [
            ("RES", |c| c.ipi_resched, "Rescheduling interrupts"),
            (
                "CAL",
                |c| c.ipi_call + c.ipi_call_single,
                "Function call interrupts",
            ),
            ("TLB", |c| c.ipi_call + c.ipi_call_single, "TLB shootdowns"),
        ]
    } else {
        [
            ("IPI1", |c| c.ipi_resched, "Rescheduling interrupts"),
            ("IPI2", |c| c.ipi_call, "Function call interrupts"),
            (
                "IPI3",
                |c| c.ipi_call_single,
                "Single function call interrupts",
            ),
        ]
    };
    for (irq, get, what) in rows {
        let mut line = format!("{irq:>5}:");
        for c in &o.stats.per_cpu {
            line.push_str(&format!("{:>11}", get(c)));
        }
        let _ = writeln!(s, "{line}  {what}");
    }
    if o.stats.per_cpu.iter().any(|c| c.timer_ticks > 0) {
        // Only with the periodic tick on (`kernel.hz`).
        let mut line = String::from("  LOC:");
        for c in &o.stats.per_cpu {
            line.push_str(&format!("{:>11}", c.timer_ticks));
        }
        let _ = writeln!(s, "{line}  Local timer interrupts");
    }
}

/// One row of counters per CPU, with the architecture's names.
fn per_cpu_counters(s: &mut String, o: &RunOutput) {
    type Get = fn(&tlbsim::stats::CpuStats) -> u64;
    let mut cols: Vec<(&str, Get)> = if is_x86(o) {
        vec![
            ("invlpg", |c| c.tlbi_local),
            ("cr3.wr", |c| c.ttbr_writes),
            ("tlb.misses", |c| c.tlb_misses),
            ("ctx.sw", |c| c.context_switches),
            ("syscalls", |c| c.syscalls),
        ]
    } else {
        vec![
            ("tlbi.local", |c| c.tlbi_local),
            ("tlbi.bcast", |c| c.tlbi_broadcast),
            ("dsb.ish", |c| c.dsb_ish),
            ("dvm.syncs", |c| c.dvm_syncs),
            ("tlb.misses", |c| c.tlb_misses),
            ("ctx.sw", |c| c.context_switches),
            ("syscalls", |c| c.syscalls),
        ]
    };
    if o.profile.x86.as_ref().is_some_and(|x| x.invlpgb) {
        cols.insert(2, ("invlpgb", |c| c.tlbi_broadcast));
    }
    let mut head = String::from("\n  cpu");
    for (name, _) in &cols {
        head.push_str(&format!(" {name:>11}"));
    }
    let _ = writeln!(s, "{head}");
    for (i, c) in o.stats.per_cpu.iter().enumerate() {
        let mut line = format!("{i:>5}");
        for (_, get) in &cols {
            line.push_str(&format!(" {:>11}", thousands(get(c))));
        }
        let _ = writeln!(s, "{line}");
    }
}

/// The JSON document written by `tlbsim run --json`: the run (deterministic)
/// plus a separate `host` object (not deterministic).
pub fn json(o: &RunOutput, host_s: f64) -> Value {
    json!({
        "run": o,
        "elapsed_s": o.elapsed_ns as f64 / 1e9,
        "host": {
            "seconds": host_s,
            "events_per_second": o.stats.events as f64 / host_s.max(1e-9),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::metric;

    #[test]
    fn metrics_print_as_their_names_say() {
        assert_eq!(metric("victim_slowdown_pct", 25.26), "25.26 %");
        assert_eq!(metric("iteration_us", 15.55), "15.550 us");
        assert_eq!(metric("score.dhry2reg", 4e6), "4,000,000");
        assert_eq!(metric("index", 5872.5154), "5,872.5");
        assert_eq!(metric("ratio", 0.84689), "0.8469");
        assert_eq!(metric("delta", -1234.0), "-1,234");
        // A rate is a count per second, not a time.
        assert_eq!(metric("loops_per_s", 962840.611), "962,840.6 /s");
        assert_eq!(metric("faults_per_ms", 12.0), "12 /ms");
    }
}
