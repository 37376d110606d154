//! The fair scheduling class's wake-up rules (kernel/sched/fair.c).

use crate::hw::CpuId;
use crate::kernel::{TaskId, World};

/// CFS's wake-up placement and preemption (kernel/sched/fair.c, equal
/// weights): a woken task's vruntime is raised to at least `min_vruntime -
/// sched_latency / 2` (GENTLE_FAIR_SLEEPERS); it preempts the running task
/// when that task's vruntime (including its current run) is ahead by more
/// than `wakeup_granularity`. Both tunables are Linux's defaults scaled by
/// `1 + ilog2(min(ncpus, 8))`.
pub(super) fn place_and_check_preempt(w: &World, t: TaskId, cpu: CpuId) -> bool {
    let mut k = w.k.borrow_mut();
    let now = w.now.get();
    let factor = 1 + (w.ncpus().clamp(1, 8) as u64).ilog2() as u64;
    let latency = w.profile.kernel.sched_latency_ns * factor;
    let gran = w.profile.kernel.wakeup_granularity_ns * factor;
    let floor = k.cpus[cpu].min_vruntime_ns.saturating_sub(latency / 2);
    let v = k.tasks[t].vruntime_ns.max(floor);
    k.tasks[t].vruntime_ns = v;
    let pc = &k.cpus[cpu];
    if pc.current == pc.idle {
        return false;
    }
    let cur = &k.tasks[pc.current];
    let cur_v = cur.vruntime_ns + now.saturating_sub(cur.slice_start_ns);
    cur_v > v + gran
}
