//! TLBI by affinity: a per-CPU register that limits where the DVM
//! operations a CPU broadcasts go, as HiSilicon implements it
//! (`LSUDVMBM_EL2`, the openEuler kernel's `arch/arm64/kvm/hisilicon/
//! hisi_virt.c`; docs/research/seed003-kvm-dvmbm.md). Software asks for a
//! set of CPUs; the register can only say:
//! - within one die, one bit per core: exactly the CPUs asked for;
//! - across two dies, one bit per cluster: every cluster with a CPU asked
//!   for, whole;
//! - beyond two dies: everyone (no limit).
//!
//! The issuing CPU is always reached (its own TLB applies its TLBIs).

use super::cpumask::CpuMask;
use super::{CpuHw, CpuId, CpuVec};

/// The CPUs a register asked to reach `want` reaches when `cpu` broadcasts:
/// `want` and `cpu`, widened to what the encoding can say. `None`: every
/// CPU (more than two dies, or the whole machine anyway).
pub fn encode(cpus: &CpuVec<CpuHw>, cpu: CpuId, want: &CpuMask) -> Option<CpuMask> {
    let mut asked = want.clone();
    asked.set(cpu);
    let mut dies: Vec<u32> = asked.iter().map(|c| cpus[c].die).collect();
    dies.sort_unstable();
    dies.dedup();
    let reach = match dies.len() {
        1 => asked,
        2 => {
            let mut clusters: Vec<u32> = asked.iter().map(|c| cpus[c].cluster).collect();
            clusters.sort_unstable();
            clusters.dedup();
            let mut m = CpuMask::new(cpus.len());
            for (c, hw) in cpus.iter_cpus() {
                if clusters.binary_search(&hw.cluster).is_ok() {
                    m.set(c);
                }
            }
            m
        }
        _ => return None,
    };
    (!reach.is_full()).then_some(reach)
}

#[cfg(test)]
mod tests {
    use crate::config::builtin_profile;
    use crate::hw::cpumask::CpuMask;
    use crate::hw::{CpuId, Hw};

    /// kunpeng-920's topology: 2 sockets x 2 dies x 24 cores, clusters of 4.
    fn hw() -> Hw {
        let mut p = builtin_profile("kunpeng-920").unwrap();
        p.arm64.as_mut().unwrap().tlbi_affinity = true;
        Hw::new(&p.hw_params(crate::hw::mem::Granule::K4))
    }

    fn mask(n: usize, cpus: &[usize]) -> CpuMask {
        let mut m = CpuMask::new(n);
        for &c in cpus {
            m.set(CpuId::from_index(c));
        }
        m
    }

    #[test]
    fn one_die_is_exact_two_dies_round_to_clusters_more_reach_everyone() {
        let hw = hw();
        let n = hw.ncpus();
        let reach = |cpu, want: &[usize]| {
            let r = super::encode(&hw.cpus, CpuId::from_index(cpu), &mask(n, want));
            r.map(|m| m.iter().map(CpuId::index).collect::<Vec<_>>())
        };
        // Die 0 is CPUs 0-23: one bit per core, the issuer added.
        let r = reach(1, &[5, 9]).unwrap();
        assert_eq!(r, vec![1, 5, 9]);
        // CPUs 1 and 30 are on dies 0 and 1: their clusters, whole.
        let r = reach(1, &[30]).unwrap();
        assert_eq!(r, vec![0, 1, 2, 3, 28, 29, 30, 31]);
        // Three dies: no limit.
        assert!(reach(1, &[30, 50]).is_none());
    }
}
