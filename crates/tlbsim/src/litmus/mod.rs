//! Litmus tests of the Arm architecture's VMSA (herd's AArch64 format)
//! run on tlbsim's hardware model: [`parse`] reads a test, [`machine`]
//! runs its threads as steps on [`crate::hw::Hw`], [`search`] enumerates
//! every run, [`classify`] compares the verdict with the architecture's
//! and sorts disagreements. The CLI's `tlbsim litmus` prints the result.

pub mod ast;
pub mod catalogue;
pub mod classify;
pub mod machine;
pub mod parse;
pub mod search;
