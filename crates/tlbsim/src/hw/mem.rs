//! Physical memory as the page-table walker sees it: page-table pages (which
//! are allocated, freed and reused) and data page frames.

use serde::Serialize;
use std::collections::BTreeMap;

/// Index of a page-table page in [`PhysMem`].
pub type TableId = u32;
/// A physical page frame number.
pub type Pfn = u64;

/// The shared zero page, mapped read-only by read faults.
pub const ZERO_PFN: Pfn = 0;
/// The level of leaf page descriptors (arm64's level 3, Linux's PTE level)
/// in every granule: levels keep arm64's numbering, so a walk with 64 KiB
/// pages starts at level 1 and still ends here.
pub const LEAF_LEVEL: u8 = 3;
/// Level whose leaf descriptors map a huge page (Linux's PMD, arm64's
/// level-2 block) in every granule.
pub const HUGE_LEVEL: u8 = 2;
/// The 4 KiB page shift, for code whose page size is fixed at 4 KiB
/// whatever the kernel setting: x86 (which has no other base page size)
/// and tests of the 4 KiB geometry. Everything else asks the kernel's
/// [`Granule`].
pub const PAGE_SHIFT_4K: u32 = 12;
/// The 4 KiB page size in bytes (see [`PAGE_SHIFT_4K`]).
pub const PAGE_SIZE_4K: u64 = 1 << PAGE_SHIFT_4K;

/// The translation granule: the base page size the kernel was built with
/// (`CONFIG_ARM64_4K_PAGES` or `CONFIG_ARM64_64K_PAGES`; x86 has 4 KiB
/// only) and the page-table geometry that follows from it for a 48-bit
/// virtual address space (`CONFIG_ARM64_VA_BITS_48`, x86's 4-level
/// paging). One value per machine, chosen by `kernel.page_size_kib`;
/// the hardware walker, the TLBs and the kernel's page-table code all
/// read it. Source: Linux `arch/arm64/include/asm/pgtable-hwdef.h`
/// (`ARM64_HW_PGTABLE_LEVELS`, `PTRS_PER_PTE = 1 << (PAGE_SHIFT - 3)`),
/// the Arm ARM's VMSAv8-64 translation tables; docs/model.md, Kernel.
///
/// | granule | levels walked | bits per level | top table | huge (PMD) |
/// |---------|---------------|----------------|-----------|------------|
/// | 4 KiB   | 0, 1, 2, 3    | 9 (512)        | 512       | 2 MiB      |
/// | 64 KiB  | 1, 2, 3       | 13 (8192)      | 64        | 512 MiB    |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Granule {
    /// `PAGE_SHIFT`: 12 or 16.
    page_shift: u32,
}

/// Virtual address bits translated (`VA_BITS`): 48 in every kernel the
/// model runs.
pub const VA_BITS: u32 = 48;

impl Granule {
    /// 4 KiB pages: arm64 `CONFIG_ARM64_4K_PAGES`, and x86.
    pub const K4: Granule = Granule { page_shift: 12 };
    /// 64 KiB pages: arm64 `CONFIG_ARM64_64K_PAGES` (RHEL 8's aarch64
    /// kernel).
    pub const K64: Granule = Granule { page_shift: 16 };

    /// The granule of `kib` KiB pages: 4 or 64, else `None`.
    pub fn from_kib(kib: u32) -> Option<Granule> {
        match kib {
            4 => Some(Self::K4),
            64 => Some(Self::K64),
            _ => None,
        }
    }

    /// `PAGE_SHIFT`.
    pub const fn page_shift(self) -> u32 {
        self.page_shift
    }

    /// `PAGE_SIZE` in bytes.
    pub const fn page_size(self) -> u64 {
        1 << self.page_shift
    }

    /// The page size in KiB (4 or 64).
    pub const fn page_size_kib(self) -> u64 {
        self.page_size() >> 10
    }

    /// `PAGE_ALIGN(x)`: `x` rounded up to a page boundary.
    pub const fn page_align(self, x: u64) -> u64 {
        x.div_ceil(self.page_size()) * self.page_size()
    }

    /// `x & PAGE_MASK`: `x` rounded down to a page boundary.
    pub const fn page_down(self, x: u64) -> u64 {
        x & !(self.page_size() - 1)
    }

    /// Index bits resolved per level below the top (`PAGE_SHIFT - 3`: a
    /// table page holds 8-byte descriptors).
    pub const fn bits_per_level(self) -> u32 {
        self.page_shift - 3
    }

    /// `PTRS_PER_PTE` (= `PTRS_PER_PMD`): descriptors in a full table
    /// page, 512 or 8192.
    pub const fn ptrs_per_pte(self) -> u64 {
        1 << self.bits_per_level()
    }

    /// The level a walk starts at (arm64 numbering): 0 with 4 KiB pages,
    /// 1 with 64 KiB pages (48 - 16 = 32 bits over 13-bit levels: 3
    /// levels, `ARM64_HW_PGTABLE_LEVELS(48)`).
    pub const fn start_level(self) -> u8 {
        let levels = (VA_BITS - self.page_shift).div_ceil(self.bits_per_level());
        (LEAF_LEVEL + 1) - levels as u8
    }

    /// Levels a walk reads (`CONFIG_PGTABLE_LEVELS`): 4 or 3.
    pub const fn levels(self) -> u8 {
        LEAF_LEVEL + 1 - self.start_level()
    }

    /// VA shift of the index of `level` (arm64 numbering, `LEAF_LEVEL`
    /// = the PTE level): `ARM64_HW_PGTABLE_LEVEL_SHIFT(level)`.
    pub const fn level_shift(self, level: u8) -> u32 {
        self.page_shift + self.bits_per_level() * (LEAF_LEVEL - level) as u32
    }

    /// Descriptors in a table of `level`: [`Self::ptrs_per_pte`] below the
    /// top, fewer at the top (`PTRS_PER_PGD`: 64 with 64 KiB pages, VA
    /// bits 47:42).
    pub const fn entries_at(self, level: u8) -> u64 {
        let bits = VA_BITS - self.level_shift(level);
        if bits < self.bits_per_level() {
            1 << bits
        } else {
            self.ptrs_per_pte()
        }
    }

    /// Index of `va` in a table of `level`.
    pub const fn level_index(self, va: u64, level: u8) -> u16 {
        ((va >> self.level_shift(level)) & (self.entries_at(level) - 1)) as u16
    }

    /// `PMD_SHIFT` (= `HPAGE_SHIFT`): 21 or 29.
    pub const fn pmd_shift(self) -> u32 {
        self.level_shift(HUGE_LEVEL)
    }

    /// `PMD_SIZE` (= `HPAGE_PMD_SIZE`) in bytes: 2 MiB or 512 MiB.
    pub const fn pmd_size(self) -> u64 {
        1 << self.pmd_shift()
    }

    /// `HPAGE_PMD_NR`: base pages (and frames) in a PMD-sized huge page,
    /// 512 or 8192.
    pub const fn hpage_pmd_nr(self) -> u64 {
        self.pmd_size() / self.page_size()
    }
}

impl Default for Granule {
    /// 4 KiB pages.
    fn default() -> Self {
        Self::K4
    }
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
    /// The same without write permission (`pte_wrprotect()`).
    pub fn wrprotect(self) -> Perms {
        Perms(self.0 & !2)
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
    /// A leaf: a base page at [`LEAF_LEVEL`], a PMD-sized huge page at
    /// [`HUGE_LEVEL`] (whose `pfn` is the first of
    /// [`Granule::hpage_pmd_nr`] contiguous frames).
    Page(Pte),
    /// A non-present base-page leaf whose other bits the kernel uses (a swap
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
#[derive(Debug, Default, Clone)]
pub struct PhysMem {
    tables: Vec<TablePage>,
    free_tables: Vec<TableId>,
    next_pfn: Pfn,
    free_pfns: Vec<Pfn>,
    /// First frames of freed huge pages (`hpage_pmd_nr` contiguous frames each).
    free_huge: Vec<Pfn>,
    /// Mappings of each frame (`page_mapcount`), indexed by pfn.
    frame_refs: Vec<u32>,
    /// First frame of the huge zero page, once allocated.
    huge_zero_pfn: Option<Pfn>,
    /// `huge_zero_refcount`: 1 for the page while it exists, plus one per
    /// mapping of it; 0 when there is none.
    huge_zero_refcount: u64,
    /// Live table pages.
    pub live_tables: usize,
    /// Live data frames.
    pub live_frames: usize,
    /// The granule: a frame is one base page, a huge page
    /// [`Granule::hpage_pmd_nr`] frames.
    g: Granule,
}

impl PhysMem {
    /// Empty memory of granule `g`'s frames.
    pub fn new(g: Granule) -> Self {
        Self {
            g,
            ..Self::default()
        }
    }

    /// The granule of the frames and table pages.
    pub fn granule(&self) -> Granule {
        self.g
    }

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

    /// Allocates a huge page: `hpage_pmd_nr()` contiguous frames with one reference
    /// each; returns the first.
    pub fn alloc_huge(&mut self) -> Pfn {
        let hpage_pages = self.g.hpage_pmd_nr();
        self.live_frames += hpage_pages as usize;
        let base = match self.free_huge.pop() {
            Some(b) => b,
            None => {
                // Fresh frames, aligned like a real huge page.
                let base = (self.next_pfn + 1).div_ceil(hpage_pages) * hpage_pages;
                self.next_pfn = base + hpage_pages - 1;
                base
            }
        };
        let end = (base + hpage_pages) as usize;
        if self.frame_refs.len() < end {
            self.frame_refs.resize(end, 0);
        }
        for r in &mut self.frame_refs[base as usize..end] {
            *r = 1;
        }
        base
    }

    /// `get_huge_zero_page()`: the huge zero page (`hpage_pmd_nr()` zeroed
    /// frames), allocated on first use, with a reference for the caller's
    /// mapping (`huge_zero_refcount`: 2 after the allocation, one being the
    /// page's own, which its shrinker drops). Without `[kernel]
    /// huge_zero_shrinker` nothing frees it: its frames are never reused
    /// while mapped. Mappings of it take no frame reference
    /// (`release_pages()` skips it).
    pub fn get_huge_zero_page(&mut self) -> Pfn {
        match self.huge_zero_pfn {
            Some(p) => {
                self.huge_zero_refcount += 1;
                p
            }
            None => {
                let p = self.alloc_huge();
                self.huge_zero_pfn = Some(p);
                self.huge_zero_refcount = 2;
                p
            }
        }
    }

    /// `put_huge_zero_page()`: a mapping of the huge zero page is gone.
    pub fn put_huge_zero_page(&mut self) {
        debug_assert!(
            self.huge_zero_refcount > 1,
            "put of an unmapped huge zero page"
        );
        self.huge_zero_refcount = self.huge_zero_refcount.saturating_sub(1);
    }

    /// `shrink_huge_zero_page_scan()`'s `atomic_cmpxchg(&huge_zero_refcount,
    /// 1, 0)`: takes the huge zero page if nothing maps it, returning its
    /// first frame for the caller to free.
    pub fn shrink_huge_zero_page(&mut self) -> Option<Pfn> {
        if self.huge_zero_refcount != 1 {
            return None;
        }
        self.huge_zero_refcount = 0;
        self.huge_zero_pfn.take()
    }

    /// `is_huge_zero_page()`: is `pfn` the first frame of the huge zero
    /// page?
    pub fn is_huge_zero_pfn(&self, pfn: Pfn) -> bool {
        self.huge_zero_pfn == Some(pfn)
    }

    /// Drops the references a huge mapping holds on its `hpage_pmd_nr()` frames
    /// (`zap_huge_pmd`); returns true if the huge page was freed whole.
    /// A frame that another mapping still holds keeps it alive, and the
    /// others are then freed one by one.
    pub fn put_huge(&mut self, base: Pfn) -> bool {
        let hpage_pages = self.g.hpage_pmd_nr();
        let mut freed = 0;
        for pfn in base..base + hpage_pages {
            let r = &mut self.frame_refs[pfn as usize];
            *r -= 1;
            if *r == 0 {
                freed += 1;
            }
        }
        self.live_frames -= freed;
        if freed as u64 == hpage_pages {
            self.free_huge.push(base);
            true
        } else {
            for pfn in base..base + hpage_pages {
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
        let g = Granule::K4;
        assert_eq!(g.level_index(0x7fff_ffff_f000, 3), 511);
        assert_eq!(g.level_shift(0), 39);
    }

    #[test]
    fn the_64k_granule_walks_three_levels_of_8192_entries_under_a_64_entry_top() {
        let g = Granule::K64;
        assert_eq!((g.start_level(), g.levels()), (1, 3));
        assert_eq!(
            (g.level_shift(1), g.level_shift(2), g.level_shift(3)),
            (42, 29, 16)
        );
        assert_eq!(
            (g.entries_at(1), g.entries_at(2), g.entries_at(3)),
            (64, 8192, 8192)
        );
        let va = 0x7fff_ffff_0000;
        assert_eq!(g.level_index(va, 1), 31, "bits 47:42");
        assert_eq!(g.level_index(va, 2), 8191, "bits 41:29");
        assert_eq!(g.level_index(va, 3), 8191, "bits 28:16");
        assert_eq!(g.pmd_size(), 512 << 20);
        assert_eq!(g.hpage_pmd_nr(), 8192);
        assert_eq!(g.page_align(1), 65536);
        let k4 = Granule::K4;
        assert_eq!(
            (k4.start_level(), k4.levels(), k4.entries_at(0)),
            (0, 4, 512)
        );
        assert_eq!((k4.pmd_size(), k4.hpage_pmd_nr()), (2 << 20, 512));
        assert_eq!(k4.page_align(1), 4096);
        assert_eq!(Granule::from_kib(16), None);
    }

    #[test]
    fn a_64k_huge_page_takes_8192_frames() {
        let mut m = PhysMem::new(Granule::K64);
        let base = m.alloc_huge();
        assert_eq!(base % 8192, 0);
        assert_eq!(m.live_frames, 8192);
        assert!(m.put_huge(base));
        assert_eq!(m.live_frames, 0);
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
