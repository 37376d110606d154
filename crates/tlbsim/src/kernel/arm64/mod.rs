//! arm64: the ASID allocators, the TLB policies built on Linux's flush
//! primitives (`tlbflush.rs`) and TTBR0 switching (`mmu_context.rs`).

pub mod kvm;
pub mod mmu_context;
pub mod mutants;
pub mod tlbflush;

crate::kernel::registry::entries! {
    /// The arm64 TLB-flush policies (historical kernels included).
    pub POLICIES: crate::kernel::registry::PolicyEntry = [
        stock,
        skip_v2,
        skip_v1,
        cpumask_tracking,
        skip_v2_posted,
        tlbbatch,
        tlbbatch_6_6,
        affinity_mm,
    ];
    /// The arm64 (and 32-bit ARM) ASID allocators.
    pub ALLOCATORS: crate::kernel::registry::AllocatorEntry = [asid, asid_ipi, asid_3_8, asid_ae120d9, asid_40ee068, asid_4_14, asid_6_12];
}
