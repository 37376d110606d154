//! Stage 2 of a guest's translation (cost only). A guest's page tables
//! and pages live at intermediate physical addresses (IPAs): every table
//! read of a guest's walk, and the page it finds, need the IPA translated
//! by the VM's stage-2 tables first. The model's stage 2 maps each guest
//! page to the machine page of the same number and never changes (no
//! host unmaps guest memory), so only its cost is modelled: each CPU
//! caches recent stage-2 translations (by VMID and IPA page); a miss walks
//! the 4 levels of stage 2. A TLB hit needs none: its entries combine both
//! stages. So an uncached guest walk of 4 levels reads (4 + 1) x (4 + 1)
//! - 1 = 24 table entries.

use super::tlb::Vmid;

/// Stage-2 table levels a miss reads (4 KiB granule, 48-bit IPA).
pub const S2_LEVELS: u8 = 4;

/// An IPA page: a guest table page or a guest data page (the model
/// numbers them separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipa {
    /// A page-table page.
    Table(u32),
    /// A data page.
    Frame(u64),
}

/// One CPU's cache of stage-2 translations, fully associative with LRU
/// replacement.
#[derive(Debug, Clone, Default)]
pub struct S2Cache {
    slots: Vec<(Vmid, Ipa, u64)>,
    cap: usize,
    tick: u64,
}

impl S2Cache {
    /// A cache of `cap` translations.
    pub fn new(cap: usize) -> Self {
        Self {
            slots: Vec::with_capacity(cap),
            cap,
            tick: 0,
        }
    }

    /// Translates `ipa` of VM `vmid`: the stage-2 table reads it takes (0
    /// on a hit), caching it.
    pub fn translate(&mut self, vmid: Vmid, ipa: Ipa) -> u8 {
        self.tick += 1;
        if let Some(s) = self.slots.iter_mut().find(|s| s.0 == vmid && s.1 == ipa) {
            s.2 = self.tick;
            return 0;
        }
        if self.cap == 0 {
            return S2_LEVELS;
        }
        let e = (vmid, ipa, self.tick);
        if self.slots.len() < self.cap {
            self.slots.push(e);
        } else if let Some(lru) = self.slots.iter_mut().min_by_key(|s| s.2) {
            *lru = e;
        }
        S2_LEVELS
    }

    /// Drops the translations of the VMIDs `gone` says
    /// (`TLBI VMALLS12E1`, `ALLE1`).
    pub fn invalidate(&mut self, gone: impl Fn(Vmid) -> bool) {
        self.slots.retain(|s| !gone(s.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_walks_stage_2_a_hit_does_not_and_vmids_are_apart() {
        let mut c = S2Cache::new(2);
        assert_eq!(c.translate(1, Ipa::Table(5)), S2_LEVELS);
        assert_eq!(c.translate(1, Ipa::Table(5)), 0);
        assert_eq!(c.translate(2, Ipa::Table(5)), S2_LEVELS, "another VM");
        // Full: the least recently used, VM 1's table, makes room.
        assert_eq!(c.translate(1, Ipa::Frame(5)), S2_LEVELS);
        assert_eq!(c.translate(2, Ipa::Table(5)), 0);
        assert_eq!(c.translate(1, Ipa::Table(5)), S2_LEVELS);
        c.invalidate(|v| v == 1);
        assert_eq!(c.translate(2, Ipa::Table(5)), 0, "VM 2's stay");
        assert_eq!(c.translate(1, Ipa::Table(5)), S2_LEVELS);
    }
}
