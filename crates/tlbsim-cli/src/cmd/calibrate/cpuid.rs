//! The second-level (unified) TLB's geometry as an x86 CPU reports it:
//! CPUID leaf 0x18 (deterministic address translation parameters, Intel),
//! leaf 0x2's descriptor bytes (older Intel), leaf 0x80000006 (AMD).
//! Decoding is pure (tested on register values); only [`host_stlb`]
//! executes CPUID.

/// A TLB's size as reported, with the leaf it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlbGeometry {
    /// Entries for 4 KiB pages.
    pub entries: u32,
    /// Associativity (entries when fully associative).
    pub ways: u32,
    /// Which CPUID leaf said so.
    pub source: &'static str,
}

/// One sub-leaf of leaf 0x18 as (EBX, ECX, EDX); returns the level-2
/// unified or data TLB for 4 KiB pages, if this sub-leaf describes one.
pub fn decode_leaf18(ebx: u32, ecx: u32, edx: u32) -> Option<TlbGeometry> {
    let kind = edx & 0x1f; // 1 data, 2 instruction, 3 unified, 4 load, 5 store
    let level = (edx >> 5) & 0x7;
    let has_4k = ebx & 1 == 1;
    if level != 2 || !has_4k || !matches!(kind, 1 | 3 | 4) {
        return None;
    }
    let fully = (edx >> 8) & 1 == 1;
    let sets = ecx;
    let ways = ebx >> 16;
    let entries = if fully { ways } else { ways.checked_mul(sets)? };
    (entries > 0 && ways > 0).then_some(TlbGeometry {
        entries,
        ways,
        source: "CPUID leaf 0x18",
    })
}

/// The second-level TLB a leaf-0x2 descriptor byte names (Intel SDM
/// vol. 2A, table 3-12, "Shared 2nd-Level TLB" entries).
pub fn decode_leaf2_byte(b: u8) -> Option<TlbGeometry> {
    let (entries, ways) = match b {
        0xC1 => (1024, 8),
        0xC3 => (1536, 6),
        0xCA => (512, 4),
        _ => return None,
    };
    Some(TlbGeometry {
        entries,
        ways,
        source: "CPUID leaf 0x2 descriptor",
    })
}

/// Leaf 0x2's registers (EAX..EDX): the first second-level TLB among the
/// descriptor bytes of registers whose bit 31 is clear (AL is a count).
pub fn decode_leaf2(regs: [u32; 4]) -> Option<TlbGeometry> {
    regs.iter()
        .enumerate()
        .filter(|(_, r)| *r >> 31 == 0)
        .flat_map(|(i, r)| {
            let bytes = r.to_le_bytes();
            let skip = usize::from(i == 0); // AL is the iteration count
            bytes.into_iter().skip(skip)
        })
        .find_map(decode_leaf2_byte)
}

/// Leaf 0x80000006's EBX (AMD): the L2 data TLB for 4 KiB pages
/// (EBX\[27:16\] entries, EBX\[31:28\] associativity code).
pub fn decode_amd_l2_dtlb(ebx: u32) -> Option<TlbGeometry> {
    let entries = (ebx >> 16) & 0xfff;
    let ways = match ebx >> 28 {
        0 => return None,
        1 => 1,
        2 => 2,
        3 => 3,
        4 => 4,
        5 => 6,
        6 => 8,
        8 => 16,
        0xA => 32,
        0xB => 48,
        0xC => 64,
        0xD => 96,
        0xE => 128,
        0xF => entries,
        _ => return None,
    };
    (entries > 0).then_some(TlbGeometry {
        entries,
        ways,
        source: "CPUID leaf 0x80000006",
    })
}

/// The second-level TLB this CPU reports, or why there is none.
#[cfg(target_arch = "x86_64")]
pub fn host_stlb() -> Result<TlbGeometry, String> {
    use std::arch::x86_64::__cpuid_count;
    // CPUID exists on every x86-64 CPU (safe to call since Rust 1.87).
    #[allow(unused_unsafe)]
    // SAFETY: as above, for older compilers that still mark it unsafe.
    let cpuid = |leaf: u32, sub: u32| unsafe { __cpuid_count(leaf, sub) };
    let l0 = cpuid(0, 0);
    let vendor: Vec<u8> = [l0.ebx, l0.edx, l0.ecx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    let vendor = String::from_utf8_lossy(&vendor).into_owned();
    if vendor == "AuthenticAMD" || vendor == "HygonGenuine" {
        let ext = cpuid(0x8000_0000, 0).eax;
        let g = (ext >= 0x8000_0006).then(|| decode_amd_l2_dtlb(cpuid(0x8000_0006, 0).ebx));
        return g.flatten().ok_or(format!(
            "{vendor}: CPUID leaf 0x80000006 reports no L2 data TLB"
        ));
    }
    if l0.eax >= 0x18 {
        let subs = cpuid(0x18, 0).eax;
        for s in 0..=subs.min(32) {
            let r = cpuid(0x18, s);
            if let Some(g) = decode_leaf18(r.ebx, r.ecx, r.edx) {
                return Ok(g);
            }
        }
    }
    if l0.eax >= 2 {
        let r = cpuid(2, 0);
        if let Some(g) = decode_leaf2([r.eax, r.ebx, r.ecx, r.edx]) {
            return Ok(g);
        }
    }
    Err(format!("{vendor}: neither CPUID leaf 0x18 nor leaf 0x2 describes a second-level TLB (a hypervisor may hide them)"))
}

/// Not x86: nothing is reported (the profile keeps documented defaults).
#[cfg(not(target_arch = "x86_64"))]
pub fn host_stlb() -> Result<TlbGeometry, String> {
    Err("no TLB geometry is read on this architecture (documented defaults of the base profile kept)".into())
}

/// The CPU flags of /proc/cpuinfo's first `flags` line (x86).
pub fn cpu_flags(cpuinfo: &str) -> Vec<String> {
    cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags").and_then(|r| r.split_once(':')))
        .map(|(_, f)| f.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf18_unified_stlb() {
        // Skylake-like: unified (3), level 2, 4K+2M, 12 ways x 128 sets.
        let ebx = (12 << 16) | 0b11;
        let edx = (2 << 5) | 3;
        let g = decode_leaf18(ebx, 128, edx).unwrap();
        assert_eq!((g.entries, g.ways), (1536, 12));
        // The level-1 data TLB is not the STLB.
        assert_eq!(decode_leaf18(ebx, 16, (1 << 5) | 1), None);
        // An instruction TLB is not either.
        assert_eq!(decode_leaf18(ebx, 128, (2 << 5) | 2), None);
        // Fully associative: entries = ways.
        let g = decode_leaf18((64 << 16) | 1, 1, (2 << 5) | 3 | (1 << 8)).unwrap();
        assert_eq!((g.entries, g.ways), (64, 64));
    }

    #[test]
    fn leaf2_descriptors() {
        // AL = 1 (count), then 0xC3 in EAX's second byte; EDX invalid (bit 31).
        let g = decode_leaf2([0x00ff_c301, 0, 0, 0x8000_00c1]).unwrap();
        assert_eq!((g.entries, g.ways), (1536, 6));
        assert_eq!(decode_leaf2([0x0000_0001, 0x8000_c1c1, 0, 0]), None);
        assert_eq!(
            decode_leaf2([0x01, 0, 0x00ca_0000, 0]).unwrap().entries,
            512
        );
    }

    #[test]
    fn flags_of_the_first_cpu() {
        let f = cpu_flags("processor\t: 0\nflags\t\t: fpu pcid invpcid\nflags : x\n");
        assert_eq!(f, vec!["fpu", "pcid", "invpcid"]);
        assert!(cpu_flags("processor: 0\n").is_empty());
    }

    #[test]
    fn amd_l2_dtlb() {
        // Zen 3: 2048 entries, 16-way (code 8).
        let g = decode_amd_l2_dtlb((8 << 28) | (2048 << 16)).unwrap();
        assert_eq!((g.entries, g.ways), (2048, 16));
        assert_eq!(decode_amd_l2_dtlb(2048 << 16), None);
    }
}
