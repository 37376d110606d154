//! End-to-end tests of the `tlbsim` command: one test binary, one module
//! per area (each was its own binary, and each linked the whole crate
//! graph again). A module's tests are named after it, so
//! `cargo test --release -p tlbsim-cli --test cli -- bounds::` runs one
//! area; the long ones are `#[ignore]`d and `.ci/run` runs them by module.

mod bounds;
mod bugs;
mod calibrate;
mod cli;
mod common;
mod export_litmus;
mod fuzz;
mod golden;
mod litmus;
mod outputs;
mod plot;
mod readme;
mod sweep_resume;
