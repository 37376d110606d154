//! arm64: the ASID allocators, the TLB policies built on Linux's flush
//! primitives (`tlbflush.rs`) and TTBR0 switching (`mmu_context.rs`).

pub mod asid;
pub mod asid_ipi;
pub mod cpumask_tracking;
pub mod mmu_context;
pub mod mutants;
pub mod skip_v1;
pub mod skip_v2;
pub mod skip_v2_posted;
pub mod stock;
pub mod tlbflush;
