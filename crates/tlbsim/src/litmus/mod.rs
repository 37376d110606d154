//! Litmus tests of the Arm architecture's VMSA (herd's AArch64 format)
//! run on tlbsim's hardware model: [`parse`] reads a test, [`machine`]
//! runs its threads as steps on [`crate::hw::Hw`], [`search`] enumerates
//! every run, [`classify`] compares the verdict with the architecture's
//! and sorts disagreements; [`print`](mod@print) writes a test back in herd's
//! format and [`export`] makes one from an explorer counterexample.
//! The CLI's `tlbsim litmus` prints the result.

pub mod ast;
pub mod catalogue;
pub mod classify;
pub mod export;
pub mod machine;
pub mod parse;
pub mod print;
pub mod search;
