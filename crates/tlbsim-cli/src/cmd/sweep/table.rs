//! The sweep's CSV: its columns and one line per point.

use super::points::{Job, SweptParam};
use tlbsim::sim::RunOutput;

/// The CSV's columns up to the workload's metrics (which the first run
/// names).
pub fn csv_header(param: Option<&SweptParam>) -> String {
    let mut out = String::from("profile,sockets,cpus,policy,");
    if let Some((name, _)) = param {
        out.push_str(name);
        out.push(',');
    }
    out.push_str(
        "elapsed_s,flushes_broadcast,flushes_local,flushes_skipped,dvm_syncs,dvm_ops_received,sync_queue_wait_mean_ns,flush_latency_median_ns,flush_latency_mean_ns,checker,function_call_ipis,tlbi_broadcast",
    );
    out
}

/// One CSV line: the point, its counts and the metrics `names` (empty
/// cells for those the run lacks).
pub fn csv_line(job: &Job, o: &RunOutput, names: &[String]) -> String {
    let t = &o.stats.total;
    let metrics: String = names
        .iter()
        .map(|m| match o.metrics.get(m) {
            Some(v) => format!(",{v:.3}"),
            None => ",".to_string(),
        })
        .collect();
    format!(
        "{},{},{},{},{}{:.6},{},{},{},{},{},{:.1},{},{:.1},{},{},{}{metrics}\n",
        job.profile,
        o.profile.topology.sockets,
        o.profile.topology.cpus,
        job.policy,
        job.param_cell,
        o.elapsed_ns as f64 / 1e9,
        t.flushes_broadcast,
        t.flushes_local,
        t.flushes_skipped,
        t.dvm_syncs,
        t.dvm_ops_received,
        o.stats.dvm_sync_queue_wait_ns.mean,
        o.stats.flush_latency_ns.median,
        o.stats.flush_latency_ns.mean,
        o.checker.verdict,
        t.ipi_call + t.ipi_call_single,
        t.tlbi_broadcast
    )
}
