//! Deliberately broken x86 policies, each beside what it breaks. Each entry
//! names the invariant the checker finds it breaking and the search that
//! finds it (tests/integration/mutants.rs runs them all).

crate::kernel::registry::entries! {
    /// Mutant x86 TLB policies.
    pub POLICIES: crate::kernel::registry::PolicyEntry = [gen_before_mask, invlpgb_no_transition];
}
