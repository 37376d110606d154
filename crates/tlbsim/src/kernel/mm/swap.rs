//! Swap space on a zram device: swap slots (`mm/swapfile.c`:
//! `folio_alloc_swap()`, `swap_free()`) and the device's store
//! (`drivers/block/zram/zram_drv.c`: a same-filled page is kept as its one
//! word, `ZRAM_SAME`, any other page compressed).
//!
//! The model has no page contents: what a page holds is its [`PageData`],
//! declared by whoever created the memory (docs/model.md "Reclaim and
//! swap").

use crate::hw::mem::Pfn;
use crate::kernel::Ctx;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A swap slot (the offset of a `swp_entry_t` on the one swap device).
pub type SwapSlot = u32;

/// What a page holds, as far as zram cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PageData {
    /// One word repeated (a `memset`, or zeroes): stored as that word.
    #[default]
    SameFilled,
    /// Anything else: compressed on write, decompressed on read.
    Compressible,
}

/// One slot in use.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// What was written to it (`None` until the write-out).
    data: Option<PageData>,
    /// References (`swap_map` count): each swap PTE holds one, the swap
    /// cache one while a folio of it is there, a shmem object's page-cache
    /// entry one.
    refs: u32,
}

/// The swap device's slots and what each holds.
#[derive(Debug, Default)]
pub struct SwapDevice {
    slots: Vec<Option<Slot>>,
    free: Vec<SwapSlot>,
    /// Slots in use.
    pub used: usize,
    /// The swap cache (mm/swap_state.c): the anonymous folio, if any, that
    /// holds each slot's page in memory, by slot.
    pub cache: BTreeMap<SwapSlot, Pfn>,
}

impl SwapDevice {
    /// `folio_alloc_swap()`: a slot with one reference, the caller's
    /// (lowest freed first, like the per-CPU slot cache handing back what
    /// was just freed).
    pub fn alloc(&mut self) -> SwapSlot {
        self.used += 1;
        let slot = Slot {
            data: None,
            refs: 1,
        };
        if let Some(s) = self.free.pop() {
            self.slots[s as usize] = Some(slot);
            return s;
        }
        // 2^32 slots of 4 KiB are 16 TiB of swapped memory: far beyond
        // any run the model's memory could hold.
        let s = u32::try_from(self.slots.len()).expect("fewer than 2^32 swap slots");
        self.slots.push(Some(slot));
        s
    }

    fn slot(&mut self, s: SwapSlot) -> &mut Slot {
        self.slots[s as usize]
            .as_mut()
            .unwrap_or_else(|| panic!("swap slot {s} is not in use"))
    }

    /// What slot `s` holds (written).
    pub fn data(&self, s: SwapSlot) -> PageData {
        self.slots[s as usize]
            .and_then(|x| x.data)
            .expect("a written swap slot")
    }

    /// Was slot `s` written?
    pub fn written(&self, s: SwapSlot) -> bool {
        self.slots[s as usize].is_some_and(|x| x.data.is_some())
    }

    /// References to slot `s` (0 when free).
    pub fn refs(&self, s: SwapSlot) -> u32 {
        self.slots[s as usize].map_or(0, |x| x.refs)
    }

    /// `swap_duplicate()`: one more reference (a copied swap PTE).
    pub fn dup(&mut self, s: SwapSlot) {
        self.slot(s).refs += 1;
    }

    /// `swap_free()`: drops a reference; the last frees the slot. Returns
    /// whether it did.
    pub fn put(&mut self, s: SwapSlot) -> bool {
        let x = self.slot(s);
        x.refs -= 1;
        if x.refs > 0 {
            return false;
        }
        self.slots[s as usize] = None;
        self.used -= 1;
        self.free.push(s);
        true
    }
}

/// `swap_writepage()` to zram (`zram_write_page()`): stores the page in
/// slot `s`, taking the device's time on this CPU (zram is synchronous:
/// the write completes before `pageout()` returns).
pub async fn zram_write(ctx: &Ctx, s: SwapSlot, data: PageData) {
    let _f = ctx.func(crate::label!("zram_write_page"));
    let c = ctx.w.swap_costs();
    let ns = c.zram_same_check_ns
        + match data {
            PageData::SameFilled => 0,
            PageData::Compressible => c.zram_compress_ns,
        };
    ctx.work(ns).await;
    ctx.w.stats.borrow_mut().reclaim.pswpout += 1;
    ctx.w.k.borrow_mut().swap.slot(s).data = Some(data);
}

/// `swap_read_folio()` from zram (`zram_read_page()`): fills the page from
/// slot `s` (the slot stays allocated until its last reference goes).
pub async fn zram_read(ctx: &Ctx, s: SwapSlot) {
    let _f = ctx.func(crate::label!("zram_read_page"));
    let c = ctx.w.swap_costs();
    let data = ctx.w.k.borrow().swap.data(s);
    let ns = match data {
        PageData::SameFilled => c.zram_same_fill_ns,
        PageData::Compressible => c.zram_decompress_ns,
    };
    ctx.work(ns).await;
    ctx.w.stats.borrow_mut().reclaim.pswpin += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_reused_last_freed_first() {
        let mut d = SwapDevice::default();
        let a = d.alloc();
        let b = d.alloc();
        assert_eq!((a, b, d.used), (0, 1, 2));
        assert!(!d.written(b));
        d.slot(b).data = Some(PageData::Compressible);
        assert_eq!(d.data(b), PageData::Compressible);
        d.dup(a);
        assert_eq!(d.refs(a), 2);
        assert!(!d.put(a), "one reference left");
        assert!(d.put(a));
        assert_eq!((d.used, d.refs(a)), (1, 0));
        assert_eq!(d.alloc(), a);
        assert!(!d.written(a), "a reused slot starts unwritten");
    }

    #[test]
    #[should_panic(expected = "not in use")]
    fn a_slot_freed_twice_is_a_model_bug() {
        let mut d = SwapDevice::default();
        let a = d.alloc();
        d.put(a);
        d.put(a);
    }
}
