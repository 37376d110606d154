//! Deliberately broken x86 policies, each beside what it breaks. Each entry
//! names the invariant the checker finds it breaking and the search that
//! finds it (tests/integration/mutants.rs runs them all).

pub mod gen_before_mask;
pub mod invlpgb_no_transition;
