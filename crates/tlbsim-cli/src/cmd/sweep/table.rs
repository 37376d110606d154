//! The sweep's CSV: its columns, one row per point, and the summary over
//! seeds. Both are written with the `csv` crate, so a cell holding a comma
//! or a quote is quoted.

use super::points::Job;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tlbsim::sim::RunOutput;

/// The first columns: what the point is. The swept parameter's column, if
/// any, follows them.
const LEAD: [&str; 8] = [
    "experiment",
    "version",
    "seed",
    "profile",
    "sockets",
    "cpus",
    "policy",
    "allocator",
];

/// Where `seed` is in [`LEAD`].
const SEED: usize = 2;

/// The run's counts and statistics, after the point's columns; the
/// workload's metrics follow them.
const STATS: [&str; 12] = [
    "elapsed_s",
    "flushes_broadcast",
    "flushes_local",
    "flushes_skipped",
    "dvm_syncs",
    "dvm_ops_received",
    "sync_queue_wait_mean_ns",
    "flush_latency_median_ns",
    "flush_latency_mean_ns",
    "checker",
    "function_call_ipis",
    "tlbi_broadcast",
];

/// The one column of [`STATS`] that is not a number.
const CHECKER: &str = "checker";

/// One finished point as the CSV shows it: all that its row (and the
/// summary) needs, and what a resume directory keeps of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The cells before the workload's metrics: [`LEAD`], the swept
    /// parameter's value if any, [`STATS`].
    pub cells: Vec<String>,
    /// Every metric the run reported, by name, as the CSV writes it.
    pub metrics: BTreeMap<String, String>,
}

impl Row {
    /// The row of `job`, which ran to `o`.
    pub fn new(job: &Job, o: &RunOutput) -> Row {
        let t = &o.stats.total;
        let mut cells = vec![
            o.experiment.clone(),
            o.version.clone(),
            o.seed.to_string(),
            job.profile.clone(),
            o.profile.topology.sockets.to_string(),
            o.profile.topology.cpus.to_string(),
            job.policy.clone(),
            o.kernel.asid_allocator.clone(),
        ];
        if let Some((_, v)) = &job.param {
            cells.push(v.clone());
        }
        cells.extend([
            format!("{:.6}", o.elapsed_ns as f64 / 1e9),
            t.flushes_broadcast.to_string(),
            t.flushes_local.to_string(),
            t.flushes_skipped.to_string(),
            t.dvm_syncs.to_string(),
            t.dvm_ops_received.to_string(),
            format!("{:.1}", o.stats.dvm_sync_queue_wait_ns.mean),
            o.stats.flush_latency_ns.median.to_string(),
            format!("{:.1}", o.stats.flush_latency_ns.mean),
            o.checker.verdict.clone(),
            (t.ipi_call + t.ipi_call_single).to_string(),
            t.tlbi_broadcast.to_string(),
        ]);
        let metrics = o
            .metrics
            .iter()
            .map(|(k, v)| (k.clone(), format!("{v:.3}")))
            .collect();
        Row { cells, metrics }
    }
}

/// The CSV's columns before the metrics: [`LEAD`], the swept parameter
/// `param` (by name) if any, [`STATS`].
fn columns(param: Option<&str>) -> Vec<String> {
    LEAD.iter()
        .copied()
        .chain(param)
        .chain(STATS.iter().copied())
        .map(String::from)
        .collect()
}

/// How many cells a [`Row`] has (before its metrics), with the swept
/// parameter `param` or without.
pub fn width(param: Option<&str>) -> usize {
    LEAD.len() + usize::from(param.is_some()) + STATS.len()
}

/// Checks that every row has the cells of [`columns`]`(param)`.
fn check_widths(param: Option<&str>, rows: &[Row]) -> Result<(), String> {
    let w = width(param);
    match rows.iter().position(|r| r.cells.len() != w) {
        Some(i) => Err(format!(
            "point {}: {} cells, not {w}",
            i + 1,
            rows[i].cells.len()
        )),
        None => Ok(()),
    }
}

/// The sweep's CSV: a header, then `rows` in order. The metrics columns
/// are named after the first row's metrics (every run of a sweep runs the
/// same workload); a row lacking one has an empty cell, a metric the first
/// row lacks is left out. A row without the cells of [`columns`] is an
/// error.
pub fn csv_bytes(param: Option<&str>, rows: &[Row]) -> Result<Vec<u8>, String> {
    check_widths(param, rows)?;
    let names: Vec<&String> = rows
        .first()
        .map(|r| r.metrics.keys().collect())
        .unwrap_or_default();
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = columns(param);
    let header = header.iter().chain(names.iter().copied());
    w.write_record(header).map_err(|e| e.to_string())?;
    for r in rows {
        let metrics = names
            .iter()
            .map(|n| r.metrics.get(*n).map_or("", String::as_str));
        w.write_record(r.cells.iter().map(String::as_str).chain(metrics))
            .map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// The rows of [`csv_bytes`] as a JSON array of objects keyed by column
/// (keys sorted by name); a cell that parses as a finite number is a number,
/// an empty cell `null`, anything else a string.
pub fn json_bytes(param: Option<&str>, rows: &[Row]) -> Result<Vec<u8>, String> {
    let csv = csv_bytes(param, rows)?;
    let mut r = csv::Reader::from_reader(csv.as_slice());
    let header: Vec<String> = r
        .headers()
        .map_err(|e| e.to_string())?
        .iter()
        .map(String::from)
        .collect();
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| e.to_string())?;
        let obj: serde_json::Map<String, serde_json::Value> = header
            .iter()
            .zip(rec.iter())
            .map(|(k, v)| (k.clone(), json_cell(v)))
            .collect();
        out.push(serde_json::Value::Object(obj));
    }
    serde_json::to_vec_pretty(&out).map_err(|e| e.to_string())
}

/// A CSV cell as a JSON value.
fn json_cell(v: &str) -> serde_json::Value {
    if v.is_empty() {
        return serde_json::Value::Null;
    }
    match v.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        Some(n) if v.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) => v
            .parse::<i64>()
            .map_or(serde_json::Value::Number(n), |i| i.into()),
        _ => serde_json::Value::String(v.to_string()),
    }
}

/// The summary over seeds: one row per configuration, whose runs are the
/// `per_point` consecutive `rows` that differ only in their seed. Columns:
/// those of [`LEAD`] with `seed` replaced by `seeds` (the seeds, runs of
/// consecutive ones as `A..B`) and `runs`, the swept parameter if any, then
/// for each number column of the CSV (in its order, metrics included)
/// `NAME_mean` and `NAME_sd`: the mean and the sample standard deviation
/// (n - 1; empty for a single run) of the cells as the CSV shows them,
/// with two more decimals than the column. Empty cells (a metric a run
/// lacks) are left out. `checker` is the verdict, or each verdict with
/// its count (`pass:4 violation:1`) when the runs differ. A row without
/// the cells of [`columns`] is an error.
pub fn summary_bytes(
    param: Option<&str>,
    rows: &[Row],
    per_point: usize,
) -> Result<Vec<u8>, String> {
    check_widths(param, rows)?;
    let cols = columns(param);
    let names: Vec<&String> = rows
        .first()
        .map(|r| r.metrics.keys().collect())
        .unwrap_or_default();
    let lead = LEAD.len() + usize::from(param.is_some());
    let mut header: Vec<String> = cols[..lead].to_vec();
    header.splice(SEED..=SEED, ["seeds".to_string(), "runs".to_string()]);
    for name in cols[lead..].iter().chain(names.iter().copied()) {
        if name == CHECKER {
            header.push(name.clone());
        } else {
            header.push(format!("{name}_mean"));
            header.push(format!("{name}_sd"));
        }
    }
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).map_err(|e| e.to_string())?;
    for group in rows.chunks(per_point.max(1)) {
        w.write_record(summary_row(group, lead, &names))
            .map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// The summary row of the runs `group` (see [`summary_bytes`]); `lead`
/// cells identify the configuration, `names` are the metrics' columns.
fn summary_row(group: &[Row], lead: usize, names: &[&String]) -> Vec<String> {
    let Some(first) = group.first() else {
        return Vec::new();
    };
    let mut out: Vec<String> = first.cells.iter().take(lead).cloned().collect();
    let seeds: Vec<&str> = group.iter().map(|r| r.cells[SEED].as_str()).collect();
    out.splice(SEED..=SEED, [seed_ranges(&seeds), group.len().to_string()]);
    let stats = (lead..first.cells.len()).map(|i| {
        let cells: Vec<&str> = group.iter().map(|r| r.cells[i].as_str()).collect();
        (STATS.get(i - lead) == Some(&CHECKER), cells)
    });
    let metrics = names.iter().map(|n| {
        let cells: Vec<&str> = group
            .iter()
            .map(|r| r.metrics.get(*n).map_or("", String::as_str))
            .collect();
        (false, cells)
    });
    for (is_checker, cells) in stats.chain(metrics) {
        if is_checker {
            out.push(verdicts(&cells));
        } else {
            let (mean, sd) = mean_sd(&cells);
            out.push(mean);
            out.push(sd);
        }
    }
    out
}

/// `seeds` with runs of consecutive numbers as `A..B`, separated by
/// spaces: `1..5 9`.
fn seed_ranges(seeds: &[&str]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    let flush = |parts: &mut Vec<String>, run: Option<(u64, u64)>| match run {
        Some((a, b)) if a == b => parts.push(a.to_string()),
        Some((a, b)) => parts.push(format!("{a}..{b}")),
        None => {}
    };
    for s in seeds {
        match (s.parse::<u64>().ok(), run) {
            (Some(v), Some((a, b))) if b.checked_add(1) == Some(v) => run = Some((a, v)),
            (Some(v), r) => {
                flush(&mut parts, r);
                run = Some((v, v));
            }
            (None, r) => {
                flush(&mut parts, r);
                run = None;
                parts.push(s.to_string());
            }
        }
    }
    flush(&mut parts, run);
    parts.join(" ")
}

/// The verdicts `cells`: the one verdict, or each with its count in order
/// of first appearance (`pass:4 violation:1`).
fn verdicts(cells: &[&str]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in cells {
        match counts.iter_mut().find(|(v, _)| v == c) {
            Some((_, n)) => *n += 1,
            None => counts.push((c, 1)),
        }
    }
    match counts.as_slice() {
        [(v, _)] => v.to_string(),
        _ => counts
            .iter()
            .map(|(v, n)| format!("{v}:{n}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// Mean and sample standard deviation of the number `cells` (empty ones
/// left out), with two more decimals than the first non-empty cell; empty
/// strings when there are no numbers (the deviation: fewer than two).
fn mean_sd(cells: &[&str]) -> (String, String) {
    let present: Vec<&str> = cells.iter().copied().filter(|c| !c.is_empty()).collect();
    let xs: Vec<f64> = present.iter().filter_map(|c| c.parse().ok()).collect();
    let Some(first) = present.first() else {
        return (String::new(), String::new());
    };
    if xs.is_empty() {
        return (String::new(), String::new());
    }
    let decimals = first.split_once('.').map_or(0, |(_, f)| f.len()) + 2;
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let sd = if xs.len() < 2 {
        String::new()
    } else {
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        format!("{:.*}", decimals, var.sqrt())
    };
    (format!("{:.*}", decimals, mean), sd)
}

#[cfg(test)]
mod tests {
    use super::{mean_sd, seed_ranges, summary_bytes, verdicts, Row};

    fn row(seed: &str, elapsed: &str, checker: &str, metric: Option<&str>) -> Row {
        let mut cells: Vec<String> = ["e", "0.1.0", seed, "p", "1", "2", "pol", "alloc"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        cells.push(elapsed.into());
        cells.extend(["1", "2", "3", "4", "5", "6.0", "7", "8.0"].map(String::from));
        cells.push(checker.into());
        cells.extend(["9", "10"].map(String::from));
        let metrics = metric
            .map(|m| [("m".to_string(), m.to_string())].into())
            .unwrap_or_default();
        Row { cells, metrics }
    }

    #[test]
    fn seeds_collapse_into_ranges() {
        assert_eq!(
            seed_ranges(&["1", "2", "3", "7", "9", "10"]),
            "1..3 7 9..10"
        );
        assert_eq!(seed_ranges(&["5", "3"]), "5 3");
        assert_eq!(seed_ranges(&[]), "");
    }

    #[test]
    fn mean_and_sample_deviation_keep_two_more_decimals() {
        assert_eq!(
            mean_sd(&["1.0", "2.0", "3.0"]),
            ("2.000".into(), "1.000".into())
        );
        assert_eq!(mean_sd(&["4"]), ("4.00".into(), String::new()));
        assert_eq!(mean_sd(&["", ""]), (String::new(), String::new()));
        assert_eq!(verdicts(&["pass", "pass"]), "pass");
        assert_eq!(
            verdicts(&["pass", "violation", "pass"]),
            "pass:2 violation:1"
        );
    }

    #[test]
    fn the_summary_has_one_row_per_configuration() {
        let rows = [
            row("1", "0.000010", "pass", Some("1.000")),
            row("2", "0.000020", "pass", None),
            row("1", "0.000030", "pass", Some("3.000")),
            row("2", "0.000030", "violation", Some("5.000")),
        ];
        let out = String::from_utf8(summary_bytes(None, &rows, 2).unwrap()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with(
            "experiment,version,seeds,runs,profile,sockets,cpus,policy,allocator,elapsed_s_mean,elapsed_s_sd,"
        ));
        assert!(lines[0].ends_with(",checker,function_call_ipis_mean,function_call_ipis_sd,tlbi_broadcast_mean,tlbi_broadcast_sd,m_mean,m_sd"));
        assert!(lines[1].starts_with("e,0.1.0,1..2,2,p,1,2,pol,alloc,0.00001500,0.00000707,"));
        assert!(
            lines[1].ends_with(",pass,9.00,0.00,10.00,0.00,1.00000,"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains(",pass:1 violation:1,"), "{}", lines[2]);
        assert!(lines[2].ends_with(",4.00000,1.41421"), "{}", lines[2]);
    }
}
