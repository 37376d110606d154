//! Per-CPU TLB: a set-associative array of leaf entries with LRU replacement,
//! and a fully associative walk cache of intermediate (table) entries. Both are
//! tagged by ASID; every entry also remembers, for the checker only, which
//! address space and which page-table value it was filled from (hardware does
//! not use those fields).

use super::mem::{Granule, Perms, Pfn, TableId};
use super::params::Arch;
use std::fmt;

/// Address-space identifier as programmed in TTBR0 (arm64: 8 or 16 bits).
pub type Asid = u16;
/// Virtual-machine identifier as programmed in `VTTBR_EL2.VMID`. 0 is
/// the host's (Linux reserves VMID 0, `arch/arm64/kvm/vmid.c`): the
/// model tags the host's EL2&0 entries with it, which is equivalent to
/// the separate translation regime VHE gives them, since no guest gets
/// VMID 0. Eight bits: the model has no `FEAT_VMID16`.
pub type Vmid = u8;
/// What a TLB entry is tagged with, and what a lookup must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tag {
    /// VMID (0: the host).
    pub vmid: Vmid,
    /// ASID.
    pub asid: Asid,
}

impl std::fmt::Display for Tag {
    /// The ASID, and the VMID when it is a guest's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.vmid {
            0 => write!(f, "{}", self.asid),
            v => write!(f, "{} (VMID {v})", self.asid),
        }
    }
}

/// The id of a kernel's `mm` (an address space; ground truth for
/// checkers). Inside a kernel it is the kernel's own number, an index in
/// its mm table from 0; in the event stream and in TLB entries it is
/// machine-wide ([`MmId::in_kernel`]): kernel `k`'s mm `i` is `k <<`
/// [`KERNEL_ID_SHIFT`]` | i`, so the host's ids (kernel 0) are the same in
/// both. Printed (`Display` and `Debug`) as the bare number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct MmId(u32);

/// The number of bits of a kernel's own task and mm numbers in their
/// machine-wide ids ([`MmId::in_kernel`]): kernel `k`'s ids start at
/// `k << KERNEL_ID_SHIFT`, so an [`MmId`] names its kernel (the host, or a
/// guest) in its upper bits.
pub const KERNEL_ID_SHIFT: u32 = 24;

/// The accessors, table index and printing shared by the kernel ids
/// ([`MmId`] here, `observe::TaskId`), each a `#[repr(transparent)]`
/// wrapper of an integer `$int` that indexes a `$kind` table (`PerMm`,
/// `PerTask`) whose element `i` is footprint part `$part(i)`: a kernel's
/// own number, or a machine-wide one ([`KERNEL_ID_SHIFT`]). `from_index`
/// takes indices below `$limit` (checked in debug builds). Printed
/// (`Display` and `Debug`) as the bare number.
macro_rules! kernel_id {
    ($id:ident, $int:ty, $kind:ty, $part:path, $what:literal, $limit:expr) => {
        impl $id {
            #[doc = concat!("The ", $what, " at index `i` of a kernel's table (or a machine-wide id written out whole).")]
            #[inline(always)]
            pub fn from_index(i: usize) -> $id {
                debug_assert!(i < $limit, "{} index {i}", $what);
                $id(i as $int)
            }

            #[doc = concat!("The number as an index: in its kernel's ", $what, " table, for a kernel's own id; in per-", $what, " state of the whole machine (the checker's), for a machine-wide id.")]
            #[inline(always)]
            pub const fn index(self) -> usize {
                self.0 as usize
            }

            #[doc = concat!("The machine-wide id of kernel `kernel`'s own ", $what, " `self` (kernel 0, the host, keeps its numbers).")]
            #[inline(always)]
            pub fn in_kernel(self, kernel: u32) -> $id {
                debug_assert!(
                    self.0 < 1 << $crate::hw::tlb::KERNEL_ID_SHIFT,
                    "{} {} is not a kernel's own",
                    $what,
                    self.0
                );
                $id(((kernel as $int) << $crate::hw::tlb::KERNEL_ID_SHIFT) | self.0)
            }

            /// The kernel (0: the host; a guest from 1) a machine-wide id
            /// names.
            #[inline(always)]
            pub const fn kernel(self) -> u32 {
                (self.0 >> $crate::hw::tlb::KERNEL_ID_SHIFT) as u32
            }

            /// The kernel's own number of a machine-wide id (the inverse of
            /// `in_kernel`).
            #[inline(always)]
            pub const fn local(self) -> $id {
                $id(self.0 & ((1 << $crate::hw::tlb::KERNEL_ID_SHIFT) - 1))
            }
        }

        impl $crate::engine::state::TableIndex for $id {
            #[inline(always)]
            fn index(self) -> usize {
                $id::index(self)
            }
            #[inline(always)]
            fn from_index(i: usize) -> Self {
                $id::from_index(i)
            }
        }

        #[doc = concat!("A kernel's ", $what, " table is indexed by its own [`", stringify!($id), "`]s.")]
        impl $crate::engine::state::PartKind for $kind {
            type Id = $id;
            #[inline(always)]
            fn part(i: usize) -> u32 {
                $part(i)
            }
        }

        impl std::fmt::Display for $id {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::fmt::Debug for $id {
            /// As `Display`: the bare number, as when the id was an integer.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}
pub(crate) use kernel_id;

kernel_id!(
    MmId,
    u32,
    crate::engine::state::ByMm,
    crate::engine::track::part::mm,
    "mm",
    1 << KERNEL_ID_SHIFT
);

impl MmId {
    /// The mm numbered `n` (a kernel's own number, or a machine-wide id
    /// written out whole).
    #[inline(always)]
    pub const fn new(n: u32) -> MmId {
        MmId(n)
    }

    /// The number, as the event stream and the reports print it.
    #[inline(always)]
    pub const fn get(self) -> u32 {
        self.0
    }
}

/// A cached leaf translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Zeroable)]
pub struct LeafEntry {
    /// VMID tag.
    pub vmid: Vmid,
    /// ASID tag.
    pub asid: Asid,
    /// Virtual page number.
    pub vpn: u64,
    /// Physical frame.
    pub pfn: Pfn,
    /// Permissions.
    pub perms: Perms,
    /// Version of the PTE it was filled from.
    pub version: u64,
    /// Address space whose tables were walked (checker-only).
    pub mm: MmId,
}

/// A cached intermediate descriptor: table at `level` for `va_prefix` points
/// to the next-level table `next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Zeroable)]
pub struct WalkEntry {
    /// VMID tag.
    pub vmid: Vmid,
    /// ASID tag.
    pub asid: Asid,
    /// Level (0..=2) of the table whose descriptor is cached.
    pub level: u8,
    /// `va >> g.level_shift(level)` in the machine's granule `g`.
    pub va_prefix: u64,
    /// Next-level table page.
    pub next: TableId,
    /// Instance of `next` when cached (checker-only).
    pub next_instance: u64,
    /// Address space whose tables were walked (checker-only).
    pub mm: MmId,
}

impl LeafEntry {
    /// The entry's tag.
    pub fn tag(&self) -> Tag {
        Tag {
            vmid: self.vmid,
            asid: self.asid,
        }
    }
}

impl LeafEntry {
    /// The virtual address of the page it translates (`vpn` counts base
    /// pages of granule `g`).
    pub fn va(&self, g: Granule) -> u64 {
        self.vpn << g.page_shift()
    }

    /// The entry printed in granule `g`: `va 0x7effffffe000 -> pfn 10 rw
    /// (asid 1, vmid 0, mm 0, v11)`, the translation, then its tags, the
    /// mm walked and the PTE version it was filled from.
    pub fn show(&self, g: Granule) -> impl fmt::Display + '_ {
        Shown(self, g)
    }
}

/// An entry with the granule that gives its numbers their sizes, for
/// printing ([`LeafEntry::show`], [`WalkEntry::show`]).
struct Shown<'a, T>(&'a T, Granule);

impl fmt::Display for Shown<'_, LeafEntry> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "va {:#x} -> pfn {} {} (asid {}, vmid {}, mm {}, v{})",
            e.va(self.1),
            e.pfn,
            e.perms,
            e.asid,
            e.vmid,
            e.mm,
            e.version
        )
    }
}

impl WalkEntry {
    /// The entry's tag.
    pub fn tag(&self) -> Tag {
        Tag {
            vmid: self.vmid,
            asid: self.asid,
        }
    }

    /// The first virtual address the entry covers (its prefix shifted
    /// back) in granule `g`.
    pub fn va(&self, g: Granule) -> u64 {
        self.va_prefix << g.level_shift(self.level)
    }

    /// The entry printed in granule `g`: `L2 va 0x7effffe00000 (2 MiB)
    /// -> table 9 instance 1 (asid 1, vmid 0, mm 0)`, the level of the
    /// table whose descriptor is cached, the region it covers, the
    /// next-level table page it points at (and that page's instance when
    /// cached), then its tags and the mm walked.
    pub fn show(&self, g: Granule) -> impl fmt::Display + '_ {
        Shown(self, g)
    }
}

/// `bytes` (a power of two of at least 1 KiB) in the largest binary unit
/// that divides it: `2 MiB`, `1 GiB`, `512 GiB`.
fn size_name(bytes: u64) -> String {
    match bytes.trailing_zeros() {
        s if s >= 30 => format!("{} GiB", bytes >> 30),
        s if s >= 20 => format!("{} MiB", bytes >> 20),
        _ => format!("{} KiB", bytes >> 10),
    }
}

impl fmt::Display for Shown<'_, WalkEntry> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (e, g) = (self.0, self.1);
        write!(
            f,
            "L{} va {:#x} ({}) -> table {} instance {} (asid {}, vmid {}, mm {})",
            e.level,
            e.va(g),
            size_name(1 << g.level_shift(e.level)),
            e.next,
            e.next_instance,
            e.asid,
            e.vmid,
            e.mm
        )
    }
}

/// The scope of one invalidation. The EL1 scopes (`Va`, `Range`,
/// `Asid`, `All`) apply within one VMID: the issuing CPU's
/// (`VTTBR_EL2.VMID`, 0 on the host), which the hardware adds to the
/// operation ([`Tlb::invalidate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlbiScope {
    /// `TLBI VAE1`/`VALE1`: one page of one ASID; `last_level` leaves
    /// walk-cache entries alone.
    Va {
        /// ASID.
        asid: Asid,
        /// Virtual address.
        va: u64,
        /// Leaf only.
        last_level: bool,
    },
    /// `TLBI RVAE1`/`RVALE1` (FEAT_TLBIRANGE): `pages` pages from `va`.
    /// On arm64 it is made from the instruction's operand
    /// ([`TlbiScope::from_range_operand`]), so `pages` is what its SCALE
    /// and NUM fields encode; on x86 it is an `INVLPGB` of `pages` pages.
    Range {
        /// ASID.
        asid: Asid,
        /// First virtual address.
        va: u64,
        /// Number of pages of the kernel's granule.
        pages: u64,
        /// Leaf only.
        last_level: bool,
    },
    /// `TLBI ASIDE1`: everything tagged with the ASID.
    Asid(Asid),
    /// `TLBI VMALLE1`: everything of the VMID.
    All,
    /// `TLBI VMALLS12E1`: everything of the VMID, stage 1 and stage 2
    /// (KVM's `__kvm_tlb_flush_vmid`, from EL2).
    VmallS12,
    /// `TLBI ALLE1`: every entry of every guest (VMID other than 0),
    /// whatever the operation's VMID (KVM's `__kvm_flush_vm_context` at
    /// VMID rollover, from EL2).
    AllE1,
}

impl TlbiScope {
    /// What an arm64 range TLBI (`RVAE1`, `RVALE1`) invalidates, read from
    /// its 64-bit operand as the architecture lays it out (Arm ARM, TLBI
    /// RVAE1: BaseADDR in bits 36:0 counted in granule pages, TTL 38:37,
    /// NUM 43:39, SCALE 45:44, TG 47:46, ASID 63:48): `(NUM + 1) << (5 *
    /// SCALE + 1)` pages from BaseADDR. Whatever the kernel computed, only
    /// what the fields hold counts (a SCALE or NUM out of range has
    /// spilled into its neighbours). TG is not checked: the model's
    /// kernels always encode their own granule. `page_shift` is the
    /// granule's.
    pub fn from_range_operand(op: u64, page_shift: u32, last_level: bool) -> TlbiScope {
        let field = |lo: u32, bits: u32| (op >> lo) & ((1u64 << bits) - 1);
        let (num, scale) = (field(39, 5), field(44, 2));
        TlbiScope::Range {
            asid: field(48, 16) as Asid,
            va: field(0, 37) << page_shift,
            pages: (num + 1) << (5 * scale + 1),
            last_level,
        }
    }

    /// Does this scope remove whole VMIDs rather than one ASID's entries?
    pub fn is_vmid_wide(self) -> bool {
        matches!(
            self,
            TlbiScope::All | TlbiScope::VmallS12 | TlbiScope::AllE1
        )
    }

    /// The arm64 operation, local form (`VAE1`, `VALE1`, `RVAE1`,
    /// `RVALE1`, `ASIDE1`, `VMALLE1`, `VMALLS12E1`, `ALLE1`); the
    /// broadcast form adds `IS`.
    pub fn arm_op(self) -> &'static str {
        match self {
            TlbiScope::Va {
                last_level: false, ..
            } => "VAE1",
            TlbiScope::Va {
                last_level: true, ..
            } => "VALE1",
            TlbiScope::Range {
                last_level: false, ..
            } => "RVAE1",
            TlbiScope::Range {
                last_level: true, ..
            } => "RVALE1",
            TlbiScope::Asid(_) => "ASIDE1",
            TlbiScope::All => "VMALLE1",
            TlbiScope::VmallS12 => "VMALLS12E1",
            TlbiScope::AllE1 => "ALLE1",
        }
    }

    /// The x86 instruction this scope stands for, where the scope says
    /// which (the mapping in [`crate::kernel::x86`]): a local by-VA
    /// invalidation is `INVLPG`, any broadcast one `INVLPGB`. A local
    /// flush of a whole PCID is `INVPCID` or a CR3 write without NOFLUSH,
    /// which the scope does not tell apart, and the other local scopes
    /// have no x86 instruction of their own: `None`.
    pub fn x86_op(self, broadcast: bool) -> Option<&'static str> {
        match self {
            _ if broadcast => Some("INVLPGB"),
            TlbiScope::Va { .. } => Some("INVLPG"),
            _ => None,
        }
    }

    /// The invalidation as issued on `arch`, `broadcast` (inner-shareable,
    /// or INVLPGB) or local, for reports.
    pub fn insn(self, broadcast: bool, arch: Arch) -> TlbiInsn {
        TlbiInsn {
            scope: self,
            broadcast,
            arch,
        }
    }
}

impl fmt::Display for TlbiScope {
    /// The local arm64 operation with its operands: `TLBI VAE1 asid 2 va
    /// 0x7f0000001000`, `TLBI ASIDE1 asid 2`, `TLBI VMALLE1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.insn(false, Arch::Arm64).fmt(f)
    }
}

/// A TLB invalidation as reports print it, in the terms of the machine's
/// architecture ([`TlbiScope::insn`]): `TLBI VAE1IS asid 2 va
/// 0x7f0000001000` or `TLBI VMALLS12E1IS` on arm64; `INVLPG pcid 2 va
/// 0x7f0000001000` or `INVLPGB pcid 2 va 0x7f0000001000 pages 16` on
/// x86, where a local scope no single instruction performs is a neutral
/// `flush` (`flush pcid 2`). The alternate form (`{:#}`) leaves out the
/// `TLBI` in front of arm64 operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlbiInsn {
    /// What it invalidates.
    pub scope: TlbiScope,
    /// Broadcast (inner-shareable) rather than local.
    pub broadcast: bool,
    /// The architecture whose names to use.
    pub arch: Arch,
}

impl TlbiInsn {
    /// The operation's name: `VAE1IS` (arm64), `INVLPG`, or the neutral
    /// name of an x86 local scope with no instruction of its own.
    fn op(&self) -> String {
        match self.arch {
            Arch::Arm64 if self.broadcast => format!("{}IS", self.scope.arm_op()),
            Arch::Arm64 => self.scope.arm_op().to_string(),
            Arch::X86 => match (self.scope.x86_op(self.broadcast), self.scope) {
                (Some(op), _) => op.to_string(),
                (None, TlbiScope::VmallS12) => "flush vmid".to_string(),
                (None, TlbiScope::AllE1) => "flush all guests".to_string(),
                (None, _) => "flush".to_string(),
            },
        }
    }

    /// The operands after the name: ` asid 2 va 0x...` (with a leading
    /// space), or nothing for the scopes that take none.
    fn operands(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.arch {
            Arch::Arm64 => "asid",
            Arch::X86 => "pcid",
        };
        // x86 names no last-level form; say so after the operands.
        let leaf = self.arch == Arch::X86;
        match self.scope {
            TlbiScope::Va {
                asid,
                va,
                last_level,
            } => {
                write!(f, " {tag} {asid} va {va:#x}")?;
                if leaf && last_level {
                    f.write_str(" last-level")?;
                }
            }
            TlbiScope::Range {
                asid,
                va,
                pages,
                last_level,
            } => {
                write!(f, " {tag} {asid} va {va:#x} pages {pages}")?;
                if leaf && last_level {
                    f.write_str(" last-level")?;
                }
            }
            TlbiScope::Asid(asid) => write!(f, " {tag} {asid}")?,
            TlbiScope::All if self.arch == Arch::X86 => f.write_str(" all")?,
            TlbiScope::All | TlbiScope::VmallS12 | TlbiScope::AllE1 => {}
        }
        Ok(())
    }
}

impl fmt::Display for TlbiInsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.arch == Arch::Arm64 && !f.alternate() {
            f.write_str("TLBI ")?;
        }
        f.write_str(&self.op())?;
        self.operands(f)
    }
}

/// One way of a set. All-zero bytes are an empty slot, so that a TLB is
/// allocated zeroed ([`bytemuck::allocation::zeroed_vec`]): one `calloc`
/// instead of a loop writing every slot (a 4096-CPU machine has 200 MB
/// of them). Where the allocator hands out fresh pages, untouched sets
/// are never faulted in; glibc clears these heap blocks itself
/// (docs/performance.md).
#[derive(Debug, Clone, Copy, bytemuck::Zeroable)]
struct Slot<T> {
    /// The entry, meaningful when `valid`.
    e: T,
    lru: u64,
    valid: bool,
    /// A leaf entry for a 2 MiB page: `vpn` and `pfn` are its first 4 KiB
    /// page and frame, and it is indexed by `vpn / 512`.
    huge: bool,
}

// A slot stays 48 bytes with the VMID tag (it fits the entry's padding):
// the TLBs of a 4096-CPU machine are 200 MB of them (docs/performance.md).
const _: () = assert!(std::mem::size_of::<Slot<LeafEntry>>() == 48);

impl<T: Copy> Slot<T> {
    /// A slot holding `e`, last used at `lru`.
    fn full(e: T, lru: u64, huge: bool) -> Self {
        Self {
            e,
            lru,
            valid: true,
            huge,
        }
    }

    /// The entry, if the slot holds one.
    #[inline]
    fn entry(&self) -> Option<T> {
        self.valid.then_some(self.e)
    }

    /// Empties the slot; returns whether it held an entry. An empty slot
    /// is not written (its page may never have been touched).
    fn clear(&mut self) -> bool {
        let was = self.valid;
        if was {
            self.valid = false;
        }
        was
    }
}

/// Empties the slots whose entry's VMID `gone` says; ORs the ASID bits
/// of those left into `filter`. Returns how many it emptied.
fn drop_tagged<T: Copy>(
    slots: &mut [Slot<T>],
    tag: impl Fn(&T) -> Tag,
    gone: impl Fn(Vmid) -> bool,
    filter: &mut u64,
) -> usize {
    let mut n = 0;
    for s in slots {
        if let Some(t) = s.entry().map(|e| tag(&e)) {
            if gone(t.vmid) {
                s.clear();
                n += 1;
            } else {
                *filter |= asid_bit(t.asid);
            }
        }
    }
    n
}

/// The base-page view at `vpn` of a leaf entry (`huge`: it maps the
/// PMD-sized page starting at `e.vpn`).
fn view(e: LeafEntry, huge: bool, vpn: u64) -> LeafEntry {
    if huge {
        LeafEntry {
            vpn,
            pfn: e.pfn + (vpn - e.vpn),
            ..e
        }
    } else {
        e
    }
}

/// Does the leaf entry (a base page, or `hpage_pages` of them if `huge`)
/// translate `vpn`?
fn covers(e: &LeafEntry, huge: bool, vpn: u64, hpage_pages: u64) -> bool {
    if huge {
        e.vpn == vpn & !(hpage_pages - 1)
    } else {
        e.vpn == vpn
    }
}

/// One CPU's TLB and walk cache.
#[derive(Debug, Clone)]
pub struct Tlb {
    sets: usize,
    ways: usize,
    leaf: Vec<Slot<LeafEntry>>,
    walk: Vec<Slot<WalkEntry>>,
    tick: u64,
    /// Bit `asid % 64` is set if an entry with that ASID may be present
    /// (conservative; cleared by a full flush). Lets invalidations skip TLBs
    /// that cannot hold the ASID: a simulator shortcut, not hardware.
    asid_filter: u64,
    /// `sets - 1` when the set count is a power of two.
    set_mask: Option<u64>,
    /// The granule: `vpn`s count its base pages, huge entries span
    /// [`Granule::hpage_pmd_nr`] of them.
    g: Granule,
}

fn asid_bit(asid: Asid) -> u64 {
    1 << (asid % 64)
}

impl Tlb {
    /// A TLB of `entries` leaf entries in `ways` ways, and `walk_entries`
    /// walk-cache entries, for 4 KiB pages.
    pub fn new(entries: usize, ways: usize, walk_entries: usize) -> Self {
        Self::with_granule(entries, ways, walk_entries, Granule::K4)
    }

    /// [`Tlb::new`] for the pages of granule `g`.
    pub fn with_granule(entries: usize, ways: usize, walk_entries: usize, g: Granule) -> Self {
        Self {
            sets: entries / ways,
            ways,
            leaf: bytemuck::allocation::zeroed_vec(entries),
            walk: bytemuck::allocation::zeroed_vec(walk_entries),
            tick: 0,
            asid_filter: 0,
            set_mask: (entries / ways)
                .is_power_of_two()
                .then(|| (entries / ways) as u64 - 1),
            g,
        }
    }

    fn set_of(&self, vpn: u64) -> std::ops::Range<usize> {
        let s = match self.set_mask {
            Some(m) => (vpn & m) as usize,
            None => (vpn % self.sets as u64) as usize,
        };
        s * self.ways..(s + 1) * self.ways
    }

    /// The set a huge entry for the PMD-sized page of `vpn` lives in.
    fn huge_set_of(&self, vpn: u64) -> std::ops::Range<usize> {
        self.set_of(vpn / self.g.hpage_pmd_nr())
    }

    /// Looks up a leaf entry, refreshing its LRU age on a hit. A 2 MiB
    /// entry answers with its 4 KiB view at `vpn`.
    pub fn lookup(&mut self, vmid: Vmid, asid: Asid, vpn: u64) -> Option<LeafEntry> {
        self.tick += 1;
        let tick = self.tick;
        let hpage_pages = self.g.hpage_pmd_nr();
        for (r, huge) in [(self.set_of(vpn), false), (self.huge_set_of(vpn), true)] {
            for s in &mut self.leaf[r] {
                if let Some(e) = s.entry() {
                    if s.huge == huge
                        && e.asid == asid
                        && e.vmid == vmid
                        && covers(&e, huge, vpn, hpage_pages)
                    {
                        s.lru = tick;
                        return Some(view(e, huge, vpn));
                    }
                }
            }
        }
        None
    }

    /// Inserts a 4 KiB leaf entry, replacing a matching one, else an empty
    /// way, else the least recently used way.
    pub fn insert(&mut self, e: LeafEntry) {
        self.insert_slot(e, false);
    }

    /// Inserts a leaf entry for the 2 MiB page whose first 4 KiB page and
    /// frame are `e.vpn` and `e.pfn`.
    pub fn insert_huge(&mut self, e: LeafEntry) {
        debug_assert_eq!(e.vpn % self.g.hpage_pmd_nr(), 0);
        self.insert_slot(e, true);
    }

    fn insert_slot(&mut self, e: LeafEntry, huge: bool) {
        self.asid_filter |= asid_bit(e.asid);
        self.tick += 1;
        let tick = self.tick;
        let r = if huge {
            self.huge_set_of(e.vpn)
        } else {
            self.set_of(e.vpn)
        };
        let set = &mut self.leaf[r];
        let idx = set
            .iter()
            .position(|s| {
                s.huge == huge
                    && matches!(s.entry(), Some(x) if x.asid == e.asid && x.vmid == e.vmid && x.vpn == e.vpn)
            })
            .or_else(|| set.iter().position(|s| !s.valid))
            .unwrap_or_else(|| {
                let mut best = 0;
                for (i, s) in set.iter().enumerate() {
                    if s.lru < set[best].lru {
                        best = i;
                    }
                }
                best
            });
        set[idx] = Slot::full(e, tick, huge);
    }

    /// Removes the leaf entries translating `(vmid, asid, vpn)` (used when
    /// an access faults on one).
    pub fn remove(&mut self, vmid: Vmid, asid: Asid, vpn: u64) {
        self.drop_covering(vmid, asid, vpn);
    }

    /// Drops every leaf entry (4 KiB or 2 MiB) of `(vmid, asid)`
    /// translating `vpn`.
    fn drop_covering(&mut self, vmid: Vmid, asid: Asid, vpn: u64) -> usize {
        let mut n = 0;
        let hpage_pages = self.g.hpage_pmd_nr();
        for (r, huge) in [(self.set_of(vpn), false), (self.huge_set_of(vpn), true)] {
            for s in &mut self.leaf[r] {
                if s.huge == huge
                    && matches!(s.entry(), Some(x) if x.asid == asid && x.vmid == vmid && covers(&x, huge, vpn, hpage_pages))
                {
                    s.clear();
                    n += 1;
                }
            }
        }
        n
    }

    /// The deepest walk-cache entry usable for `va` under `(vmid, asid)`.
    pub fn walk_lookup(&mut self, vmid: Vmid, asid: Asid, va: u64) -> Option<WalkEntry> {
        let g = self.g;
        self.tick += 1;
        let tick = self.tick;
        let mut best: Option<usize> = None;
        for (i, s) in self.walk.iter().enumerate() {
            if let Some(e) = s.entry() {
                if e.asid == asid
                    && e.vmid == vmid
                    && e.va_prefix == va >> g.level_shift(e.level)
                    && best.is_none_or(|b| self.walk[b].entry().is_some_and(|x| x.level < e.level))
                {
                    best = Some(i);
                }
            }
        }
        best.map(|i| {
            self.walk[i].lru = tick;
            self.walk[i].e
        })
    }

    /// Is there a walk-cache entry usable for `va` under `(vmid, asid)`?
    /// Unlike [`Tlb::walk_lookup`], does not touch the LRU order.
    pub fn has_walk(&self, vmid: Vmid, asid: Asid, va: u64) -> bool {
        let g = self.g;
        self.walk_entries().any(|e| {
            e.asid == asid && e.vmid == vmid && e.va_prefix == va >> g.level_shift(e.level)
        })
    }

    /// Drops every walk-cache entry of `vmid` (leaf entries stay): a TTBR
    /// write of that VMID's regime under the `flush-on-ttbr-change`
    /// reading. Returns how many entries it removed.
    pub fn drop_walk_cache(&mut self, vmid: Vmid) -> usize {
        self.invalidate_walk(|e| e.vmid == vmid)
    }

    /// Caches an intermediate descriptor.
    pub fn walk_insert(&mut self, e: WalkEntry) {
        self.asid_filter |= asid_bit(e.asid);
        self.tick += 1;
        let tick = self.tick;
        let idx = self
            .walk
            .iter()
            .position(|s| {
                matches!(s.entry(), Some(x) if x.asid == e.asid && x.vmid == e.vmid && x.level == e.level && x.va_prefix == e.va_prefix)
            })
            .or_else(|| self.walk.iter().position(|s| !s.valid))
            .unwrap_or_else(|| {
                let mut best = 0;
                for (i, s) in self.walk.iter().enumerate() {
                    if s.lru < self.walk[best].lru {
                        best = i;
                    }
                }
                best
            });
        self.walk[idx] = Slot::full(e, tick, false);
    }

    /// Applies one invalidation issued under `vmid` (the issuing CPU's
    /// `VTTBR_EL2.VMID`; `AllE1` ignores it); returns how many entries it
    /// removed.
    pub fn invalidate(&mut self, vmid: Vmid, scope: TlbiScope) -> usize {
        let g = self.g;
        match scope {
            TlbiScope::Va { asid, .. } | TlbiScope::Range { asid, .. } | TlbiScope::Asid(asid)
                if self.asid_filter & asid_bit(asid) == 0 =>
            {
                0
            }
            TlbiScope::Va {
                asid,
                va,
                last_level,
            } => {
                let mut n = self.drop_covering(vmid, asid, va >> g.page_shift());
                if !last_level {
                    n += self.invalidate_walk(|e| {
                        e.asid == asid
                            && e.vmid == vmid
                            && e.va_prefix == va >> g.level_shift(e.level)
                    });
                }
                n
            }
            TlbiScope::Range {
                asid,
                va,
                pages,
                last_level,
            } => self.invalidate_range(vmid, asid, va, pages, last_level),
            TlbiScope::Asid(asid) => {
                let mut n = 0;
                for s in &mut self.leaf {
                    if matches!(s.entry(), Some(x) if x.asid == asid && x.vmid == vmid) {
                        s.clear();
                        n += 1;
                    }
                }
                n + self.invalidate_walk(|e| e.asid == asid && e.vmid == vmid)
            }
            TlbiScope::All | TlbiScope::VmallS12 => self.invalidate_where(|v| v == vmid),
            TlbiScope::AllE1 => self.invalidate_where(|v| v != 0),
        }
    }

    /// `Range` of [`Tlb::invalidate`].
    fn invalidate_range(
        &mut self,
        vmid: Vmid,
        asid: Asid,
        va: u64,
        pages: u64,
        last_level: bool,
    ) -> usize {
        let mut n = 0;
        let g = self.g;
        let lo = va >> g.page_shift();
        let hi = lo + pages;
        if pages as usize <= self.sets {
            for vpn in lo..hi {
                n += self.drop_covering(vmid, asid, vpn);
            }
        } else {
            for s in &mut self.leaf {
                if let Some(x) = s.entry() {
                    // The pages the entry translates overlap the range.
                    let span = if s.huge { g.hpage_pmd_nr() } else { 1 };
                    if x.asid == asid && x.vmid == vmid && x.vpn < hi && lo < x.vpn + span {
                        s.clear();
                        n += 1;
                    }
                }
            }
        }
        if !last_level {
            let end = va + (pages << g.page_shift());
            n += self.invalidate_walk(|e| {
                // The region the cached descriptor translates overlaps the range.
                let sh = g.level_shift(e.level);
                let r_lo = e.va_prefix << sh;
                let r_hi = r_lo + (1u64 << sh);
                e.asid == asid && e.vmid == vmid && r_lo < end && va < r_hi
            });
        }
        n
    }

    /// Drops every entry whose VMID `gone` says, and rebuilds the ASID
    /// filter from the entries left.
    fn invalidate_where(&mut self, gone: impl Fn(Vmid) -> bool) -> usize {
        let mut filter = 0;
        let leaf = drop_tagged(&mut self.leaf, |e| e.tag(), &gone, &mut filter);
        let walk = drop_tagged(&mut self.walk, |e| e.tag(), &gone, &mut filter);
        self.asid_filter = filter;
        leaf + walk
    }

    fn invalidate_walk(&mut self, pred: impl Fn(&WalkEntry) -> bool) -> usize {
        let mut n = 0;
        for s in &mut self.walk {
            if s.entry().as_ref().is_some_and(&pred) {
                s.clear();
                n += 1;
            }
        }
        n
    }

    /// Every valid leaf entry (for checkers), as base-page views: a huge
    /// entry appears once per base page it translates.
    pub fn leaf_entries(&self) -> impl Iterator<Item = LeafEntry> + '_ {
        let hpage_pages = self.g.hpage_pmd_nr();
        self.leaf.iter().flat_map(move |s| {
            let pages = if s.huge { hpage_pages } else { 1 };
            s.entry()
                .into_iter()
                .flat_map(move |e| (e.vpn..e.vpn + pages).map(move |v| view(e, s.huge, v)))
        })
    }

    /// Leaf entries that could match `vpn` (its sets), for cheap checks; a
    /// 2 MiB entry that translates `vpn` appears as its view at `vpn`.
    pub fn leaf_entries_for(&self, vpn: u64) -> impl Iterator<Item = LeafEntry> + '_ {
        let hpage_pages = self.g.hpage_pmd_nr();
        let small = self.leaf[self.set_of(vpn)]
            .iter()
            .filter(|s| !s.huge)
            .filter_map(|s| s.entry());
        let huge = self.leaf[self.huge_set_of(vpn)]
            .iter()
            .filter(|s| s.huge)
            .filter_map(move |s| {
                s.entry()
                    .filter(|e| covers(e, true, vpn, hpage_pages))
                    .map(|e| view(e, true, vpn))
            });
        small.chain(huge)
    }

    /// Every valid walk-cache entry (for checkers).
    pub fn walk_entries(&self) -> impl Iterator<Item = &WalkEntry> {
        self.walk.iter().filter(|s| s.valid).map(|s| &s.e)
    }
}

/// Read-only queries for checkers.
impl Tlb {
    /// Every valid leaf entry as stored, in the order of
    /// [`Tlb::leaf_entries`], with whether it maps a 2 MiB page (then `vpn`
    /// and `pfn` are its first 4 KiB page and frame, and its views are
    /// the pages `vpn..vpn + 512` in increasing order).
    pub fn leaf_slots(&self) -> impl Iterator<Item = (LeafEntry, bool)> + '_ {
        self.leaf
            .iter()
            .filter_map(|s| s.entry().map(|e| (e, s.huge)))
    }

    /// The granule whose base pages the entries' `vpn`s count.
    pub fn granule(&self) -> Granule {
        self.g
    }

    /// A counter that advances at every insertion into the TLB or the walk
    /// cache (and at every lookup): while it stays the same, both only
    /// lose entries.
    pub fn tick(&self) -> u64 {
        self.tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_wide_mm_id_names_its_kernel_and_prints_as_its_number() {
        let own = MmId::from_index(3);
        let guest = own.in_kernel(2);
        assert_eq!((guest.kernel(), guest.local()), (2, own));
        assert_eq!(guest.get(), (2 << KERNEL_ID_SHIFT) | 3);
        // The host's ids are its own.
        assert_eq!(own.in_kernel(0), own);
        assert_eq!((own.kernel(), own.index()), (0, 3));
        // As the bare `u32` printed: `mm3`, `Some(3)`, padded.
        assert_eq!(
            format!("mm{own} {:?} [{guest:>9}]", Some(own)),
            "mm3 Some(3) [ 33554435]"
        );
    }

    fn leaf(asid: Asid, vpn: u64) -> LeafEntry {
        LeafEntry {
            vmid: 0,
            asid,
            vpn,
            pfn: vpn + 100,
            perms: Perms::RW,
            version: 1,
            mm: MmId::new(0),
        }
    }

    #[test]
    fn capacity_and_lru_replacement() {
        let mut t = Tlb::new(8, 2, 4);
        // vpns 0, 4, 8 map to set 0 of 4 sets.
        t.insert(leaf(1, 0));
        t.insert(leaf(1, 4));
        assert!(t.lookup(0, 1, 0).is_some()); // 0 is now most recent
        t.insert(leaf(1, 8)); // evicts 4
        assert!(t.lookup(0, 1, 4).is_none());
        assert!(t.lookup(0, 1, 0).is_some());
        assert!(t.lookup(0, 2, 0).is_none(), "ASID-tagged");
    }

    #[test]
    fn a_huge_entry_translates_512_pages_and_any_of_them_invalidates_it() {
        let mut t = Tlb::new(16, 4, 4);
        let base = 512 * 3;
        t.insert_huge(LeafEntry {
            vmid: 0,
            pfn: 10_240,
            ..leaf(1, base)
        });
        // Each 4 KiB page of it answers with its own frame.
        let e = t.lookup(0, 1, base + 7).expect("hit");
        assert_eq!((e.vpn, e.pfn), (base + 7, 10_247));
        assert!(t.lookup(0, 1, base + 512).is_none() && t.lookup(0, 2, base).is_none());
        // Checkers see 4 KiB views.
        assert_eq!(t.leaf_entries().count(), 512);
        assert_eq!(
            t.leaf_entries_for(base + 9)
                .find(|e| e.vpn == base + 9)
                .map(|e| e.pfn),
            Some(10_249)
        );
        // A by-VA invalidation of any page inside drops it.
        assert_eq!(
            t.invalidate(
                0,
                TlbiScope::Va {
                    asid: 1,
                    va: (base + 300) << 12,
                    last_level: true
                }
            ),
            1
        );
        assert!(t.lookup(0, 1, base).is_none());
        // A range that overlaps its last page drops it too (both paths).
        for pages in [2, 64] {
            t.insert_huge(leaf(1, base));
            let va = (base + 511) << 12;
            let n = t.invalidate(
                0,
                TlbiScope::Range {
                    asid: 1,
                    va,
                    pages,
                    last_level: true,
                },
            );
            assert_eq!(n, 1, "{pages} pages");
        }
    }

    #[test]
    fn a_64k_tlb_fills_and_invalidates_by_va_in_64k_pages() {
        let g = Granule::K64;
        let mut t = Tlb::with_granule(16, 4, 4, g);
        let va: u64 = 0x7f00_0003_0000;
        let vpn = va >> 16;
        t.insert(leaf(1, vpn));
        assert_eq!(leaf(1, vpn).va(g), va);
        // Every 4 KiB inside the 64 KiB page is the same entry, the
        // next 64 KiB page is not.
        assert_eq!(
            t.invalidate(
                0,
                TlbiScope::Va {
                    asid: 1,
                    va: va + 0x1000,
                    last_level: true
                }
            ),
            1
        );
        t.insert(leaf(1, vpn));
        assert_eq!(
            t.invalidate(
                0,
                TlbiScope::Va {
                    asid: 1,
                    va: va + 0x1_0000,
                    last_level: true
                }
            ),
            0
        );
        // A range counts 64 KiB pages: two from the page before covers it.
        let n = t.invalidate(
            0,
            TlbiScope::Range {
                asid: 1,
                va: va - 0x1_0000,
                pages: 2,
                last_level: true,
            },
        );
        assert_eq!(n, 1);
        // A huge (PMD) entry spans 8192 pages, 512 MiB.
        let base = 8192 * 3;
        t.insert_huge(leaf(1, base));
        let e = t.lookup(0, 1, base + 8191).expect("hit");
        assert_eq!(e.pfn, base + 100 + 8191);
        assert!(t.lookup(0, 1, base + 8192).is_none());
        // Walk-cache entries are tagged by 13-bit level prefixes: the
        // level-2 descriptor covers 512 MiB.
        t.walk_insert(WalkEntry {
            vmid: 0,
            asid: 1,
            level: 2,
            va_prefix: va >> 29,
            next: 7,
            next_instance: 1,
            mm: MmId::new(0),
        });
        assert!(t
            .walk_lookup(0, 1, (va & !((1 << 29) - 1)) + (1 << 29) - 1)
            .is_some());
        assert!(t
            .walk_lookup(0, 1, (va & !((1 << 29) - 1)) + (1 << 29))
            .is_none());
        assert_eq!(
            t.walk_entries().next().unwrap().show(g).to_string(),
            "L2 va 0x7f0000000000 (512 MiB) -> table 7 instance 1 (asid 1, vmid 0, mm 0)"
        );
    }

    #[test]
    fn invalidation_scopes() {
        let mut t = Tlb::new(16, 4, 4);
        for v in 0..4 {
            t.insert(leaf(1, v));
        }
        t.insert(leaf(2, 0));
        let w = WalkEntry {
            vmid: 0,
            asid: 1,
            level: 2,
            va_prefix: 0,
            next: 7,
            next_instance: 1,
            mm: MmId::new(0),
        };
        t.walk_insert(w);
        assert_eq!(
            t.invalidate(
                0,
                TlbiScope::Va {
                    asid: 1,
                    va: 0,
                    last_level: true
                }
            ),
            1
        );
        assert!(
            t.walk_lookup(0, 1, 0x1000).is_some(),
            "last-level keeps walk entries"
        );
        assert_eq!(
            t.invalidate(
                0,
                TlbiScope::Range {
                    asid: 1,
                    va: 0x1000,
                    pages: 2,
                    last_level: false
                }
            ),
            3
        );
        assert!(t.walk_lookup(0, 1, 0x1000).is_none());
        assert_eq!(t.invalidate(0, TlbiScope::Asid(1)), 1);
        assert_eq!(t.invalidate(0, TlbiScope::All), 1);
    }

    #[test]
    fn entries_print_their_addresses_in_hex() {
        let e = LeafEntry {
            vmid: 0,
            asid: 1,
            vpn: 0x7eff_ffff_e000 >> 12,
            pfn: 10,
            perms: Perms::RW,
            version: 11,
            mm: MmId::new(0),
        };
        let g = Granule::K4;
        assert_eq!(
            e.show(g).to_string(),
            "va 0x7effffffe000 -> pfn 10 rw (asid 1, vmid 0, mm 0, v11)"
        );
        let w = WalkEntry {
            vmid: 2,
            asid: 1,
            level: 2,
            va_prefix: 66_584_574,
            next: 9,
            next_instance: 1,
            mm: MmId::new(0),
        };
        assert_eq!(
            w.show(g).to_string(),
            "L2 va 0x7effffc00000 (2 MiB) -> table 9 instance 1 (asid 1, vmid 2, mm 0)"
        );
        assert_eq!(
            WalkEntry {
                level: 0,
                va_prefix: 1,
                ..w
            }
            .show(g)
            .to_string(),
            "L0 va 0x8000000000 (512 GiB) -> table 9 instance 1 (asid 1, vmid 2, mm 0)"
        );
    }

    #[test]
    fn invalidations_print_in_the_architecture_s_terms() {
        let va = |last_level| TlbiScope::Va {
            asid: 2,
            va: 0x7f00_0000_1000,
            last_level,
        };
        let range = TlbiScope::Range {
            asid: 2,
            va: 0x7f00_0000_1000,
            pages: 16,
            last_level: false,
        };
        let arm = |s: TlbiScope, b| s.insn(b, Arch::Arm64).to_string();
        assert_eq!(arm(va(false), true), "TLBI VAE1IS asid 2 va 0x7f0000001000");
        assert_eq!(arm(va(true), false), "TLBI VALE1 asid 2 va 0x7f0000001000");
        assert_eq!(
            arm(range, true),
            "TLBI RVAE1IS asid 2 va 0x7f0000001000 pages 16"
        );
        assert_eq!(arm(TlbiScope::Asid(2), true), "TLBI ASIDE1IS asid 2");
        assert_eq!(arm(TlbiScope::All, true), "TLBI VMALLE1IS");
        assert_eq!(arm(TlbiScope::VmallS12, true), "TLBI VMALLS12E1IS");
        assert_eq!(arm(TlbiScope::AllE1, false), "TLBI ALLE1");
        assert_eq!(va(true).to_string(), "TLBI VALE1 asid 2 va 0x7f0000001000");
        assert_eq!(
            format!("{:#}", va(false).insn(true, Arch::Arm64)),
            "VAE1IS asid 2 va 0x7f0000001000"
        );
        let x86 = |s: TlbiScope, b| s.insn(b, Arch::X86).to_string();
        assert_eq!(x86(va(false), false), "INVLPG pcid 2 va 0x7f0000001000");
        assert_eq!(
            x86(va(true), false),
            "INVLPG pcid 2 va 0x7f0000001000 last-level"
        );
        assert_eq!(
            x86(range, true),
            "INVLPGB pcid 2 va 0x7f0000001000 pages 16"
        );
        assert_eq!(x86(TlbiScope::Asid(2), true), "INVLPGB pcid 2");
        assert_eq!(x86(TlbiScope::All, true), "INVLPGB all");
        // INVPCID or a CR3 write: the scope does not say which.
        assert_eq!(x86(TlbiScope::Asid(2), false), "flush pcid 2");
    }
}
