//! The misc nodes that serve DVM Syncs (AMBA CHI: one Sync outstanding
//! from a misc node to a requester, so one node serves one broadcast Sync
//! at a time). A machine has one node (`dvm_sync_domain = "machine"`) or
//! one per die (`"die"`, HiSilicon's misc node per CPU die; whether such
//! nodes serve Syncs in parallel is a labelled hypothesis:
//! docs/research/seed003-dvm-sync-service.md). A Sync queues at every node
//! whose CPUs it reaches and is served when it is first in all of their
//! queues and all are free; queues keep arrival order, so two Syncs never
//! wait for each other.

use crate::engine::Ns;
use crate::hw::cpumask::CpuMask;
use crate::hw::{CpuId, CpuVec};
use std::collections::VecDeque;

/// A DVM Sync that starts service now.
#[derive(Debug)]
pub struct Sync {
    /// The CPU whose `DSB ISH` sent it (one Sync per CPU at a time).
    pub cpu: CpuId,
    /// When it arrived.
    pub since: Ns,
    /// The CPUs it goes to (`None`: every CPU).
    pub reach: Option<CpuMask>,
}

/// A DVM Sync queued or in service: what it still needs.
#[derive(Debug, Clone)]
struct Queued {
    since: Ns,
    /// Moved out when it starts.
    reach: Option<CpuMask>,
}

/// Every misc node's queue.
#[derive(Debug)]
pub struct MiscNodes {
    /// Per node: the CPUs whose Syncs wait there, in arrival order.
    queues: Vec<VecDeque<CpuId>>,
    /// Per node: serving a Sync.
    busy: Vec<bool>,
    /// Per CPU: its Sync, if one is queued or in service.
    syncs: CpuVec<Option<Queued>>,
    /// Per CPU: the nodes its Sync needs, in increasing order (kept
    /// between Syncs, so that a Sync allocates nothing).
    nodes: CpuVec<Vec<usize>>,
}

impl MiscNodes {
    /// How many nodes there are.
    pub fn nodes(&self) -> usize {
        self.queues.len()
    }

    /// `nodes` idle nodes for `ncpus` CPUs.
    pub fn new(nodes: usize, ncpus: usize) -> Self {
        Self {
            queues: vec![VecDeque::new(); nodes],
            busy: vec![false; nodes],
            syncs: CpuVec::filled(ncpus, None),
            nodes: CpuVec::filled(ncpus, Vec::new()),
        }
    }

    /// The Sync of `cpu` (arrived at `since`, going to `reach`) queues at
    /// `nodes` (increasing, not empty); returns it if it starts now.
    pub fn arrive(
        &mut self,
        cpu: CpuId,
        since: Ns,
        reach: Option<CpuMask>,
        nodes: &[usize],
    ) -> Option<Sync> {
        debug_assert!(!nodes.is_empty() && self.syncs[cpu].is_none());
        for &n in nodes {
            self.queues[n].push_back(cpu);
        }
        self.syncs[cpu] = Some(Queued { since, reach });
        let mine = &mut self.nodes[cpu];
        mine.clear();
        mine.extend_from_slice(nodes);
        self.try_start(cpu)
    }

    /// The Sync of `cpu` is served: frees its nodes; appends the Syncs that
    /// start now to `started`, in node order.
    pub fn done(&mut self, cpu: CpuId, started: &mut Vec<Sync>) {
        self.syncs[cpu].take().expect("a Sync in service");
        let nodes = std::mem::take(&mut self.nodes[cpu]);
        for &n in &nodes {
            self.busy[n] = false;
        }
        for &n in &nodes {
            if let Some(&next) = self.queues[n].front() {
                started.extend(self.try_start(next));
            }
        }
        self.nodes[cpu] = nodes;
    }

    /// Starts the Sync of `cpu` if every node it needs is free and has it
    /// first.
    fn try_start(&mut self, cpu: CpuId) -> Option<Sync> {
        let (busy, queues) = (&mut self.busy, &mut self.queues);
        let nodes = &self.nodes[cpu];
        let ready = nodes
            .iter()
            .all(|&n| !busy[n] && queues[n].front() == Some(&cpu));
        if !ready {
            return None;
        }
        for &n in nodes {
            busy[n] = true;
            queues[n].pop_front();
        }
        let s = self.syncs[cpu].as_mut().expect("queued");
        Some(Sync {
            cpu,
            since: s.since,
            reach: s.reach.take(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{MiscNodes, Sync};
    use crate::hw::cpu::cpuid;

    /// The CPUs whose Syncs start when `cpu`'s is served.
    fn done(m: &mut MiscNodes, cpu: u32) -> Vec<u32> {
        let mut started: Vec<Sync> = Vec::new();
        m.done(cpuid(cpu), &mut started);
        started.into_iter().map(|s| s.cpu.get()).collect()
    }

    #[test]
    fn one_node_serves_in_arrival_order_and_disjoint_nodes_in_parallel() {
        // One node: the second Sync waits for the first.
        let mut m = MiscNodes::new(1, 4);
        assert!(m.arrive(cpuid(0), 0, None, &[0]).is_some());
        assert!(m.arrive(cpuid(1), 1, None, &[0]).is_none());
        let started = done(&mut m, 0);
        assert_eq!(started, &[1]);
        // Two nodes: Syncs of disjoint nodes run together; one needing
        // both waits for both, and one arriving after it waits behind it.
        let mut m = MiscNodes::new(2, 4);
        assert!(m.arrive(cpuid(0), 0, None, &[0]).is_some());
        assert!(m.arrive(cpuid(1), 0, None, &[1]).is_some());
        assert!(m.arrive(cpuid(2), 1, None, &[0, 1]).is_none());
        assert!(m.arrive(cpuid(3), 2, None, &[1]).is_none());
        assert!(done(&mut m, 0).is_empty(), "cpu2 still needs node 1");
        let started = done(&mut m, 1);
        assert_eq!(started, vec![2]);
        let started = done(&mut m, 2);
        assert_eq!(started, vec![3]);
    }
}
