//! The `perf record` command line that `record` and its overhead probe
//! (`record_probe`) both run, so that the probe measures what the
//! recording costs.

use std::path::Path;
use std::process::Command;

/// `perf record` of `events` with switch records into `data`, up to and
/// including the `--` before the command (the recording and its overhead
/// probe run the same one).
pub(crate) fn perf_record(data: &Path, events: &[&str]) -> Command {
    let mut perf = Command::new("perf");
    perf.args(["record", "-q", "--switch-events", "-o"])
        .arg(data);
    for e in events {
        perf.args(["-e", e]);
    }
    perf.arg("--");
    perf
}
