//! The host's topology from sysfs
//! (`/sys/devices/system/cpu/cpuN/topology/` and `cache/indexK/`):
//! sockets, L3 groups (dies), L2 groups (clusters), SMT siblings.

use std::collections::BTreeSet;
use std::path::Path;

/// What sysfs says about one online CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    /// The CPU's number.
    pub cpu: usize,
    /// `topology/physical_package_id`.
    pub package: i64,
    /// `topology/thread_siblings_list` (the CPU's SMT siblings, itself included).
    pub threads: Vec<usize>,
    /// `shared_cpu_list` of its level-2 cache (empty if not reported).
    pub l2: Vec<usize>,
    /// `shared_cpu_list` of its level-3 cache (empty if not reported).
    pub l3: Vec<usize>,
}

/// The topology a profile takes, with what it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTopology {
    /// Online CPUs.
    pub cpus: u32,
    /// Distinct physical package ids.
    pub sockets: u32,
    /// CPUs sharing an L2 (SMT siblings where no L2 is reported).
    pub cpus_per_cluster: u32,
    /// What `cpus_per_cluster` was read from.
    pub cluster_source: &'static str,
    /// Distinct L3 groups per socket (1 where no L3 is reported).
    pub dies_per_socket: u32,
    /// SMT threads per core.
    pub threads_per_core: u32,
    /// The package of each CPU: (CPU, package id).
    pub packages: Vec<(usize, i64)>,
    /// The distinct SMT sibling sets.
    pub siblings: Vec<Vec<usize>>,
}

/// Parses a sysfs CPU list such as `0-3,8,10-11`; `None` on bad text.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    if text.is_empty() {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// Reads the online CPUs' topology under `root` (normally
/// `/sys/devices/system/cpu`); the error names the file.
pub fn read(root: &Path) -> Result<Vec<CpuInfo>, String> {
    let online = read_list(&root.join("online"))?;
    online.into_iter().map(|cpu| read_cpu(root, cpu)).collect()
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn read_list(path: &Path) -> Result<Vec<usize>, String> {
    let t = read_text(path)?;
    parse_cpu_list(&t).ok_or_else(|| format!("{}: not a CPU list: {:?}", path.display(), t.trim()))
}

fn read_cpu(root: &Path, cpu: usize) -> Result<CpuInfo, String> {
    let dir = root.join(format!("cpu{cpu}"));
    let pkg_file = dir.join("topology/physical_package_id");
    let pkg = read_text(&pkg_file)?;
    let package = pkg
        .trim()
        .parse()
        .map_err(|_| format!("{}: not a number: {:?}", pkg_file.display(), pkg.trim()))?;
    let threads = read_list(&dir.join("topology/thread_siblings_list"))?;
    let (mut l2, mut l3) = (Vec::new(), Vec::new());
    for k in 0..16 {
        let idx = dir.join(format!("cache/index{k}"));
        let Ok(level) = std::fs::read_to_string(idx.join("level")) else {
            continue;
        };
        let shared = read_list(&idx.join("shared_cpu_list"))?;
        match level.trim() {
            "2" => l2 = shared,
            "3" => l3 = shared,
            _ => {}
        }
    }
    Ok(CpuInfo {
        cpu,
        package,
        threads,
        l2,
        l3,
    })
}

/// Counts sockets, L2 and L3 groups and SMT threads of `cpus`.
pub fn summarise(cpus: &[CpuInfo]) -> Result<HostTopology, String> {
    if cpus.is_empty() {
        return Err("sysfs lists no online CPU".into());
    }
    let packages: BTreeSet<i64> = cpus.iter().map(|c| c.package).collect();
    let l3_groups: BTreeSet<(i64, Vec<usize>)> = cpus
        .iter()
        .filter(|c| !c.l3.is_empty())
        .map(|c| (c.package, c.l3.clone()))
        .collect();
    let sockets = packages.len() as u32;
    let dies_per_socket = (l3_groups.len() as u32 / sockets).max(1);
    let threads_per_core = cpus.iter().map(|c| c.threads.len()).max().unwrap_or(1) as u32;
    let (cpus_per_cluster, cluster_source) = match cpus.iter().map(|c| c.l2.len()).max() {
        Some(n) if n > 0 => (
            n as u32,
            "CPUs sharing an L2 (cache/index*/shared_cpu_list)",
        ),
        _ => (threads_per_core, "SMT siblings (no L2 reported)"),
    };
    Ok(HostTopology {
        cpus: cpus.len() as u32,
        sockets,
        cpus_per_cluster,
        cluster_source,
        dies_per_socket,
        threads_per_core: threads_per_core.max(1),
        packages: cpus.iter().map(|c| (c.cpu, c.package)).collect(),
        siblings: cpus
            .iter()
            .map(|c| c.threads.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    /// A fixture tree: `cpus` as (package, siblings, l2, l3) lists.
    fn fixture(dir: &Path, online: &str, cpus: &[(i64, &str, &str, &str)]) {
        std::fs::write(dir.join("online"), online).unwrap();
        for (i, (pkg, thr, l2, l3)) in cpus.iter().enumerate() {
            let c = dir.join(format!("cpu{i}"));
            std::fs::create_dir_all(c.join("topology")).unwrap();
            std::fs::write(c.join("topology/physical_package_id"), format!("{pkg}\n")).unwrap();
            std::fs::write(c.join("topology/thread_siblings_list"), thr).unwrap();
            for (k, (level, list)) in [("1", *thr), ("2", *l2), ("3", *l3)].iter().enumerate() {
                if list.is_empty() {
                    continue;
                }
                let idx = c.join(format!("cache/index{k}"));
                std::fs::create_dir_all(&idx).unwrap();
                std::fs::write(idx.join("level"), format!("{level}\n")).unwrap();
                std::fs::write(idx.join("shared_cpu_list"), format!("{list}\n")).unwrap();
            }
        }
    }

    /// A new empty directory, removed when dropped.
    fn tmp(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("tlbsim-topo-{name}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn two_sockets_smt_two_l3_per_socket() {
        // 8 CPUs: 2 packages, 2 L3 groups each, SMT pairs sharing an L2.
        let dir = tmp("2s");
        let d = dir.path().to_path_buf();
        let pairs = ["0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"];
        let cpus: Vec<_> = (0..8)
            .map(|i| {
                (
                    i / 4,
                    pairs[i as usize],
                    pairs[i as usize],
                    pairs[i as usize],
                )
            })
            .collect();
        fixture(&d, "0-7\n", &cpus);
        let t = summarise(&read(&d).unwrap()).unwrap();
        assert_eq!(
            (t.cpus, t.sockets, t.cpus_per_cluster, t.dies_per_socket),
            (8, 2, 2, 2)
        );
        assert_eq!(t.threads_per_core, 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn one_socket_without_l2_falls_back_to_smt_siblings() {
        let dir = tmp("1s");
        let d = dir.path().to_path_buf();
        fixture(&d, "0-1", &[(0, "0", "", "0-1"), (0, "1", "", "0-1")]);
        let t = summarise(&read(&d).unwrap()).unwrap();
        assert_eq!(
            (t.cpus, t.sockets, t.cpus_per_cluster, t.dies_per_socket),
            (2, 1, 1, 1)
        );
        assert!(t.cluster_source.starts_with("SMT"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_bad_file_is_named() {
        let dir = tmp("bad");
        let d = dir.path().to_path_buf();
        fixture(&d, "0", &[(0, "0", "0", "0")]);
        std::fs::write(d.join("cpu0/topology/physical_package_id"), "zero").unwrap();
        let e = read(&d).unwrap_err();
        assert!(
            e.contains("physical_package_id") && e.contains("zero"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
