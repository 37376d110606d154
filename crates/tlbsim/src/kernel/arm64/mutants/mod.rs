//! Deliberately broken arm64 policies and ASID allocators, each beside what
//! it breaks. Each entry names the invariant the checker finds it breaking
//! and the search that finds it (tests/mutants.rs runs them all).

pub mod asid_forget_cpu;
pub mod asid_ignore_reserved;
pub mod asid_no_reserve;
pub mod asid_plain_store;
pub mod free_before_sync;
pub mod range_no_broadcast;
