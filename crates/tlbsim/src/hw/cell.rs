//! The machine's hardware as the model shares it: a [`Tracked`] cell named
//! `Space::Hw`, whose parts the step machinery and the explorer name by
//! CPU ([`part::tlb`], [`part::regs`], [`part::dvm_pending`]), and whose
//! page tables kernel code reaches through [`HwCell::page_tables`] without
//! naming an explorer location.

use super::mem::PhysMem;
use super::Hw;
use crate::engine::track::{part, Loc, Space, Tracked, TrackedCell};
use std::cell::{Ref, RefMut};
use std::ops::Deref;

/// The hardware, and the sequence of PTE versions (one for every kernel,
/// so that versions order all writes).
pub struct HwCell {
    hw: Tracked<Hw>,
    pte_version: TrackedCell<u64>,
}

impl HwCell {
    /// `hw`, named `Space::Hw` as a whole.
    pub fn new(hw: Hw) -> Self {
        HwCell {
            hw: Tracked::new(Loc::all(Space::Hw), hw),
            pte_version: TrackedCell::new(Loc::part(Space::Hw, part::PAGE_TABLES), 0),
        }
    }

    /// Reads the page tables only (records [`part::PAGE_TABLES`]): the
    /// caller's contract is that it reads tables and their entries, not
    /// frames' reference counts.
    #[inline]
    pub fn page_tables(&self) -> Ref<'_, PhysMem> {
        Ref::map(self.hw.read_at(part::PAGE_TABLES), |h| &h.mem)
    }

    /// Writes the page tables only (same contract as
    /// [`HwCell::page_tables`]).
    #[inline]
    pub fn page_tables_mut(&self) -> RefMut<'_, PhysMem> {
        RefMut::map(self.hw.write_at(part::PAGE_TABLES), |h| &mut h.mem)
    }

    /// The next PTE version (unique, increasing; a write of the page
    /// tables' part).
    pub fn next_pte_version(&self) -> u64 {
        let v = self.pte_version.get() + 1;
        self.pte_version.set(v);
        v
    }
}

impl Deref for HwCell {
    type Target = Tracked<Hw>;
    fn deref(&self) -> &Tracked<Hw> {
        &self.hw
    }
}
