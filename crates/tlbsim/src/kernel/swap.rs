//! Swap space on a zram device: swap slots (`mm/swapfile.c`:
//! `folio_alloc_swap()`, `swap_free()`) and the device's store
//! (`drivers/block/zram/zram_drv.c`: a same-filled page is kept as its one
//! word, `ZRAM_SAME`, any other page compressed).
//!
//! The model has no page contents: what a page holds is its [`PageData`],
//! declared by whoever created the memory (docs/model.md "Reclaim and
//! swap").

use super::Ctx;
use serde::{Deserialize, Serialize};

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

/// The swap device's slots and what each holds.
#[derive(Debug, Default)]
pub struct SwapDevice {
    slots: Vec<Option<PageData>>,
    free: Vec<SwapSlot>,
    /// Slots in use.
    pub used: usize,
}

impl SwapDevice {
    /// Allocates a slot holding `data` (lowest freed first, like the
    /// per-CPU slot cache handing back what was just freed).
    fn alloc(&mut self, data: PageData) -> SwapSlot {
        self.used += 1;
        if let Some(s) = self.free.pop() {
            self.slots[s as usize] = Some(data);
            return s;
        }
        // 2^32 slots of 4 KiB are 16 TiB of swapped memory: far beyond
        // any run the model's memory could hold.
        let s = u32::try_from(self.slots.len()).expect("fewer than 2^32 swap slots");
        self.slots.push(Some(data));
        s
    }

    /// What slot `s` holds.
    pub fn data(&self, s: SwapSlot) -> PageData {
        self.slots[s as usize].expect("a swap slot in use")
    }

    /// `swap_free()`: the slot's last reference is gone.
    pub fn free(&mut self, s: SwapSlot) {
        assert!(
            self.slots[s as usize].take().is_some(),
            "double free of swap slot {s}"
        );
        self.used -= 1;
        self.free.push(s);
    }
}

/// `swap_writepage()` to zram (`zram_write_page()`): allocates a slot and
/// stores the page, taking the device's time on this CPU (zram is
/// synchronous: the write completes before `pageout()` returns).
pub async fn zram_write(ctx: &Ctx, data: PageData) -> SwapSlot {
    let _f = ctx.func(crate::label!("zram_write_page"));
    let c = ctx.w.swap_costs();
    let ns = c.zram_same_check_ns
        + match data {
            PageData::SameFilled => 0,
            PageData::Compressible => c.zram_compress_ns,
        };
    ctx.work(ns).await;
    ctx.w.stats.borrow_mut().reclaim.pswpout += 1;
    ctx.w.k.borrow_mut().swap.alloc(data)
}

/// `swap_read_folio()` from zram (`zram_read_page()`): fills the page from
/// slot `s` (the slot stays allocated until [`SwapDevice::free`]).
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
    fn slots_are_reused_last_freed_first_and_remember_their_data() {
        let mut d = SwapDevice::default();
        let a = d.alloc(PageData::SameFilled);
        let b = d.alloc(PageData::Compressible);
        assert_eq!((a, b, d.used), (0, 1, 2));
        assert_eq!(d.data(b), PageData::Compressible);
        d.free(a);
        assert_eq!(d.used, 1);
        assert_eq!(d.alloc(PageData::Compressible), a);
        assert_eq!(d.data(a), PageData::Compressible);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn a_slot_freed_twice_is_a_model_bug() {
        let mut d = SwapDevice::default();
        let a = d.alloc(PageData::SameFilled);
        d.free(a);
        d.free(a);
    }
}
