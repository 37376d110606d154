//! Engine: integer time, the event queue, named random streams and the
//! await-point executor that lets a driver decide when each step completes.

pub mod exec;
pub mod label;
pub mod queue;
pub mod rng;
pub mod state;
pub mod track;

/// Simulated time in nanoseconds since the start of a run.
pub type Ns = u64;
