//! tlbsim: a laboratory for TLB maintenance on many-core machines.
//!
//! The library is the model (no I/O): a deterministic machine ([`hw`]), a
//! kernel whose architecture policies are chosen by name ([`kernel`]),
//! workloads ([`workload`]), a checker that observes the event stream
//! ([`check`]), and the timing driver ([`driver`]). [`sim::run`] ties them
//! together for one experiment.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod bugs;
pub mod check;
pub mod config;
pub mod driver;

pub mod engine;
pub mod explore;
pub mod hw;
pub mod kernel;
pub mod litmus;
pub mod observe;
pub mod progress;
pub mod reproduce;
pub mod sim;
pub mod stats;
pub mod step;
pub mod trace;
pub mod workload;
