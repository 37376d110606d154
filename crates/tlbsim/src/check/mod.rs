//! The checker: invariants over the model's event stream (DESIGN §3). It
//! depends on the event stream and the hardware types only, never on kernel/.

pub mod invariants;

pub use invariants::Checker;

/// An invariant the checker holds (DESIGN §3). A mutant's registry entry
/// names the one it breaks; a violation report names the one it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// A CPU used a translation retired by a completed kernel call.
    NoStaleUse,
    /// A CPU holds, with the address space loaded, a retired translation.
    NoStaleHold,
    /// A freed data frame is still mapped by a CPU running the mm.
    NoUseAfterFree,
    /// A walk went (or may go) through a cached entry to a freed or reused
    /// page-table page.
    NoStaleWalk,
    /// Two address spaces met under one ASID on one CPU.
    AsidIsolation,
}

impl Invariant {
    /// Every invariant, in a fixed order.
    pub const ALL: [Invariant; 5] = [
        Invariant::NoStaleUse,
        Invariant::NoStaleHold,
        Invariant::NoUseAfterFree,
        Invariant::NoStaleWalk,
        Invariant::AsidIsolation,
    ];

    /// The name reports print (`invariant: <name>`).
    pub fn name(self) -> &'static str {
        match self {
            Invariant::NoStaleUse => "no stale use",
            Invariant::NoStaleHold => "no stale hold",
            Invariant::NoUseAfterFree => "no use after free",
            Invariant::NoStaleWalk => "no stale walk",
            Invariant::AsidIsolation => "ASID isolation",
        }
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
