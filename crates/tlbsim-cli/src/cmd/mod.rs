//! One module per command: its `Args` (the clap definition) and its `run`.

pub mod bench;
pub mod bugs;
pub mod bugs_page;
pub mod calibrate;
pub mod check;
pub mod export_litmus;
pub mod litmus;
pub mod merge;
pub mod perf;
pub mod plot;
pub mod policies;
pub mod profiles;
pub mod record;
pub mod record_probe;
pub mod replay;
pub mod report_page;
pub mod reproduce;
pub mod rerun;
pub mod run;
pub mod sweep;
pub mod validate_host;
