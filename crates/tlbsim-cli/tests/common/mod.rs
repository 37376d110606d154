//! Helpers shared by the end-to-end tests of the `tlbsim` command (each
//! test file is its own crate and uses what it needs).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `tlbsim` binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_tlbsim");

/// seed000-mprotect: with `workload.iterations=10`, a run of a few
/// milliseconds.
pub const MPROTECT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../experiments/seed000-mprotect.toml"
);

/// Runs `tlbsim ARGS` in `dir`.
pub fn tlbsim_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("tlbsim runs")
}

/// Runs `tlbsim ARGS` in the current directory.
pub fn tlbsim(args: &[&str]) -> Output {
    tlbsim_in(Path::new("."), args)
}

/// A new empty directory for one test, named after the test file
/// (`prefix`), the process and the test.
pub fn scratch_dir(prefix: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tlbsim-{prefix}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A path as the `&str` a command line takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Standard error, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output, lossily decoded.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
