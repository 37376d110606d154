//! Physical memory as the page-table walker sees it: page-table pages (which
//! are allocated, freed and reused) and data page frames.

use serde::Serialize;
use std::collections::BTreeMap;

/// Index of a page-table page in [`PhysMem`].
pub type TableId = u32;
/// A physical page frame number.
pub type Pfn = u64;

/// Page size shift (4 KiB pages).
pub const PAGE_SHIFT: u32 = 12;
/// Page size in bytes.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// Entries per table page.
pub const PTRS_PER_TABLE: u64 = 512;
/// The shared zero page, mapped read-only by read faults.
pub const ZERO_PFN: Pfn = 0;
/// Number of translation levels (arm64 4 KiB granule, 48-bit VA: L0..L3).
pub const LEVELS: u8 = 4;
/// Level whose leaf descriptors map a huge page (PMD / arm64 L2 block).
pub const HUGE_LEVEL: u8 = 2;
/// Huge page shift (2 MiB).
pub const HPAGE_SHIFT: u32 = 21;
/// Huge page size in bytes.
pub const HPAGE_SIZE: u64 = 1 << HPAGE_SHIFT;
/// 4 KiB pages (and frames) in a huge page.
pub const HPAGE_PAGES: u64 = HPAGE_SIZE / PAGE_SIZE;

/// VA shift of the index of `level` (0 = PGD ... 3 = PTE).
pub const fn level_shift(level: u8) -> u32 {
    PAGE_SHIFT + 9 * (3 - level as u32)
}

/// Index of `va` in a table of `level`.
pub fn level_index(va: u64, level: u8) -> u16 {
    ((va >> level_shift(level)) & (PTRS_PER_TABLE - 1)) as u16
}

/// Access permissions of a leaf entry (user view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default, bytemuck::Zeroable)]
pub struct Perms(pub u8);

impl Perms {
    /// No access.
    pub const NONE: Perms = Perms(0);
    /// Readable.
    pub const R: Perms = Perms(1);
    /// Readable and writable.
    pub const RW: Perms = Perms(3);
    /// Does this permit a write?
    pub fn write(self) -> bool {
        self.0 & 2 != 0
    }
    /// Does this permit a read?
    pub fn read(self) -> bool {
        self.0 & 1 != 0
    }
    /// Is every permission of `self` also in `other`?
    pub fn subset_of(self, other: Perms) -> bool {
        self.0 & !other.0 == 0
    }
}

impl std::fmt::Display for Perms {
    /// `rw`, `r-`, `-w` or `--`, as `/proc/<pid>/maps` prints them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = if self.read() { 'r' } else { '-' };
        let w = if self.write() { 'w' } else { '-' };
        write!(f, "{r}{w}")
    }
}

/// A leaf page-table entry. `version` is unique per write, so a TLB entry
/// remembers exactly which PTE value it was filled from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pte {
    /// Mapped frame.
    pub pfn: Pfn,
    /// Permissions granted.
    pub perms: Perms,
    /// Global write counter value when this PTE was written.
    pub version: u64,
}

impl std::fmt::Display for Pte {
    /// `pfn 10 rw v11`: the frame, the permissions and the version.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pfn {} {} v{}", self.pfn, self.perms, self.version)
    }
}

/// Displays a PTE that may be absent: the [`Pte`], or `none` (a cleared
/// or never written entry), for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaybePte(pub Option<Pte>);

impl std::fmt::Display for MaybePte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(p) => p.fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// A descriptor in a table page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desc {
    /// Points at a next-level table page.
    Table(TableId),
    /// A leaf: a 4 KiB page at level 3, a 2 MiB huge page at
    /// [`HUGE_LEVEL`] (whose `pfn` is the first of 512 contiguous frames).
    Page(Pte),
    /// A non-present 4 KiB leaf whose other bits the kernel uses (a swap
    /// or migration entry, `is_swap_pte()`): the walker treats it as no
    /// translation and faults.
    NonPresent(SwpEntry),
}

/// What a non-present leaf holds for the kernel (`swp_entry_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwpEntry {
    /// The page is in this swap slot.
    Swap(u32),
    /// The page is being migrated: the PTE it had (frame, permissions,
    /// version), put back or redirected to the new frame when the
    /// migration ends (`make_migration_entry()`).
    Migration(Pte),
}

/// One page-table page.
#[derive(Debug, Clone)]
pub struct TablePage {
    /// Level 0..=3.
    pub level: u8,
    /// Allocated (not on the free list).
    pub live: bool,
    /// Incremented at each allocation: (id, instance) names one lifetime.
    pub instance: u64,
    /// Non-empty descriptors by index.
    pub entries: BTreeMap<u16, Desc>,
}

/// Page-table pages and data frames.
#[derive(Debug, Default)]
pub struct PhysMem {
    tables: Vec<TablePage>,
    free_tables: Vec<TableId>,
    next_pfn: Pfn,
    free_pfns: Vec<Pfn>,
    /// First frames of freed huge pages (512 contiguous frames each).
    free_huge: Vec<Pfn>,
    /// Mappings of each frame (`page_mapcount`), indexed by pfn.
    frame_refs: Vec<u32>,
    /// First frame of the huge zero page, once allocated.
    huge_zero_pfn: Option<Pfn>,
    /// Live table pages.
    pub live_tables: usize,
    /// Live data frames.
    pub live_frames: usize,
}

impl PhysMem {
    /// Allocates a zeroed table page of `level`, reusing freed pages first
    /// (LIFO, like a per-CPU page list), which is what makes stale walks
    /// dangerous.
    pub fn alloc_table(&mut self, level: u8) -> TableId {
        self.live_tables += 1;
        if let Some(id) = self.free_tables.pop() {
            let t = &mut self.tables[id as usize];
            t.level = level;
            t.live = true;
            t.instance += 1;
            t.entries.clear();
            return id;
        }
        self.tables.push(TablePage {
            level,
            live: true,
            instance: 1,
            entries: BTreeMap::new(),
        });
        (self.tables.len() - 1) as TableId
    }

    /// Returns a table page to the free list.
    pub fn free_table(&mut self, id: TableId) {
        let t = &mut self.tables[id as usize];
        assert!(t.live, "double free of table page {id}");
        t.live = false;
        t.entries.clear();
        self.live_tables -= 1;
        self.free_tables.push(id);
    }

    /// The table page `id`.
    pub fn table(&self, id: TableId) -> &TablePage {
        &self.tables[id as usize]
    }

    /// The table page `id`, mutable.
    pub fn table_mut(&mut self, id: TableId) -> &mut TablePage {
        &mut self.tables[id as usize]
    }

    /// Allocates a data frame with one reference. Frame 0 is the shared
    /// zero page and is never handed out.
    pub fn alloc_frame(&mut self) -> Pfn {
        self.live_frames += 1;
        let p = match self.free_pfns.pop() {
            Some(p) => p,
            None => {
                self.next_pfn += 1;
                self.next_pfn
            }
        };
        if self.frame_refs.len() <= p as usize {
            self.frame_refs.resize(p as usize + 1, 0);
        }
        self.frame_refs[p as usize] = 1;
        p
    }

    /// Allocates a huge page: 512 contiguous frames with one reference
    /// each; returns the first.
    pub fn alloc_huge(&mut self) -> Pfn {
        self.live_frames += HPAGE_PAGES as usize;
        let base = match self.free_huge.pop() {
            Some(b) => b,
            None => {
                // Fresh frames, aligned like a real huge page.
                let base = (self.next_pfn + 1).div_ceil(HPAGE_PAGES) * HPAGE_PAGES;
                self.next_pfn = base + HPAGE_PAGES - 1;
                base
            }
        };
        let end = (base + HPAGE_PAGES) as usize;
        if self.frame_refs.len() < end {
            self.frame_refs.resize(end, 0);
        }
        for r in &mut self.frame_refs[base as usize..end] {
            *r = 1;
        }
        base
    }

    /// `get_huge_zero_page()`: the huge zero page (512 zeroed frames),
    /// allocated on first use and kept for the rest of the run. Linux
    /// counts its users (`huge_zero_refcount`, one per mm that mapped it)
    /// and a shrinker frees it when none is left; the model keeps it, so
    /// its frames are never freed and never reused while mapped. Mappings
    /// of it take no frame reference (`release_pages()` skips it).
    pub fn get_huge_zero_page(&mut self) -> Pfn {
        match self.huge_zero_pfn {
            Some(p) => p,
            None => {
                let p = self.alloc_huge();
                self.huge_zero_pfn = Some(p);
                p
            }
        }
    }

    /// `is_huge_zero_page()`: is `pfn` the first frame of the huge zero
    /// page?
    pub fn is_huge_zero_pfn(&self, pfn: Pfn) -> bool {
        self.huge_zero_pfn == Some(pfn)
    }

    /// Drops the references a huge mapping holds on its 512 frames
    /// (`zap_huge_pmd`); returns true if the huge page was freed whole.
    /// A frame that another mapping still holds keeps it alive, and the
    /// others are then freed one by one.
    pub fn put_huge(&mut self, base: Pfn) -> bool {
        let mut freed = 0;
        for pfn in base..base + HPAGE_PAGES {
            let r = &mut self.frame_refs[pfn as usize];
            *r -= 1;
            if *r == 0 {
                freed += 1;
            }
        }
        self.live_frames -= freed;
        if freed as u64 == HPAGE_PAGES {
            self.free_huge.push(base);
            true
        } else {
            for pfn in base..base + HPAGE_PAGES {
                if self.frame_refs[pfn as usize] == 0 {
                    self.free_pfns.push(pfn);
                }
            }
            false
        }
    }

    /// Takes another reference on a frame (a second mapping after fork).
    pub fn get_frame(&mut self, pfn: Pfn) {
        if pfn != ZERO_PFN {
            self.frame_refs[pfn as usize] += 1;
        }
    }

    /// References on a frame.
    pub fn frame_refs(&self, pfn: Pfn) -> u32 {
        self.frame_refs.get(pfn as usize).copied().unwrap_or(0)
    }

    /// Drops a reference; the frame is freed with the last one (returns
    /// true then).
    pub fn put_frame(&mut self, pfn: Pfn) -> bool {
        if pfn == ZERO_PFN {
            return false;
        }
        let r = &mut self.frame_refs[pfn as usize];
        *r -= 1;
        if *r == 0 {
            self.live_frames -= 1;
            self.free_pfns.push(pfn);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_tables_are_reused_with_a_new_instance() {
        let mut m = PhysMem::default();
        let a = m.alloc_table(3);
        m.free_table(a);
        let b = m.alloc_table(2);
        assert_eq!(a, b);
        assert_eq!(m.table(b).instance, 2);
        assert_eq!(level_index(0x7fff_ffff_f000, 3), 511);
        assert_eq!(level_shift(0), 39);
    }

    #[test]
    fn permissions_and_ptes_print_as_a_kernel_log_would() {
        let p = |perms| Pte {
            pfn: 10,
            perms,
            version: 11,
        };
        assert_eq!(p(Perms::RW).to_string(), "pfn 10 rw v11");
        assert_eq!(p(Perms::R).to_string(), "pfn 10 r- v11");
        assert_eq!(p(Perms::NONE).to_string(), "pfn 10 -- v11");
        assert_eq!(Perms(2).to_string(), "-w");
        assert_eq!(MaybePte(Some(p(Perms::R))).to_string(), "pfn 10 r- v11");
        assert_eq!(MaybePte(None).to_string(), "none");
    }
}
