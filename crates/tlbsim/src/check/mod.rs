//! The checker: invariants over the model's event stream (DESIGN §3), and the
//! mutants that prove it catches what it claims to.

pub mod invariants;
pub mod mutants;

pub use invariants::Checker;
