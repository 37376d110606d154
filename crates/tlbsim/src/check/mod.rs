//! The checker: invariants over the model's event stream (DESIGN §3). It
//! depends on the event stream and the hardware types only, never on kernel/.

pub mod invariants;
mod shadow;

pub use invariants::Checker;

pub use crate::observe::violation::{Clock, Invariant, Violation};
