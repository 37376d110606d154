//! arm64 policies: the ASID allocator and the TLB-flush primitives.

pub mod asid;
pub mod stock;
