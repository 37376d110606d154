//! arm64 policies: the ASID allocator and the TLB-flush primitives.

pub mod asid;
pub mod asid_ipi;
pub mod cpumask_tracking;
pub mod mutants;
pub mod skip_v1;
pub mod skip_v2;
pub mod skip_v2_posted;
pub mod stock;
