#!/usr/bin/env python3
"""Replay a recorded context-switch sequence through Linux 3.5's ARM ASID
allocator (arch/arm/mm/context.c before Will Deacon's 2012 rework, i.e.
tlbsim's `arm-asid-ipi-rollover`) and count ASID allocations, rollovers
and the rollover IPIs each CPU would receive.

Input: `perf script -F cpu,trace` of `sched:sched_switch` events.
Usage: asid35_replay.py TRACE [ASID_BITS=8] [NR_CPUS=2] [KTHREAD_PIDS_FILE]

Host evidence for docs/validation.md (seed 002), not part of the model:
it asks how often a real scheduler's switch order makes the old allocator
roll over. Rules (Linux 3.5):
- kernel threads borrow the previous mm (lazy TLB), so switching to one
  changes no ASID; they are recognised by the pid list (children of
  kthreadd, written by hackbench_asid_trace.sh) or, failing that, by name;
- switch_mm() to another mm checks the mm's generation against
  cpu_last_asid; a stale one takes a new ASID (++cpu_last_asid);
- when the low ASID_BITS wrap to zero, the CPU flushes and IPIs every
  other CPU (reset_context gives that CPU's current mm a fresh ASID), and
  cpu_last_asid advances by NR_CPUS;
- a forked mm starts with context.id 0, i.e. stale.
"""
import re
import sys

KERNEL_NAME = re.compile(
    r"^(swapper|kworker|ksoftirqd|rcu_|migration|kcompactd|khugepaged|kswapd|"
    r"watchdog|cpuhp|idle_inject|irq/|kthreadd)"
)
SWITCH = re.compile(r"\[(\d+)\].*next_comm=(.*) next_pid=(\d+)")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    bits = int(argv[2]) if len(argv) > 2 else 8
    nr_cpus = int(argv[3]) if len(argv) > 3 else 2
    kthreads = set()
    if len(argv) > 4:
        with open(argv[4]) as f:
            kthreads = {int(x) for x in f.read().split()}
    mask = (1 << bits) - 1
    last = 1 << bits  # ASID_FIRST_VERSION
    ctx = {}  # mm (pid) -> context.id
    active = {}  # cpu -> mm loaded in TTBR0
    switches = mm_switches = allocations = rollovers = 0
    ipis = {}
    with open(argv[1]) as f:
        for lineno, line in enumerate(f, 1):
            m = SWITCH.search(line)
            if not m:
                continue
            cpu, comm, pid = int(m.group(1)), m.group(2), int(m.group(3))
            switches += 1
            if pid == 0 or pid in kthreads or KERNEL_NAME.match(comm):
                continue
            if active.get(cpu) == pid:
                continue
            mm_switches += 1
            active[cpu] = pid
            if (ctx.get(pid, 0) ^ last) >> bits == 0:
                continue
            allocations += 1
            last += 1
            asid = last
            if asid & mask == 0:
                rollovers += 1
                asid = last + cpu + 1
                for other, omm in active.items():
                    if other != cpu:
                        ipis[other] = ipis.get(other, 0) + 1
                        ctx[omm] = last + other + 1
                last += nr_cpus
            ctx[pid] = asid
    if switches == 0:
        sys.exit(f"{argv[1]}: no sched_switch events (want `perf script -F cpu,trace`)")
    per_cpu = " ".join(f"cpu{c}={n}" for c, n in sorted(ipis.items())) or "none"
    print(
        f"switches {switches} mm_switches {mm_switches} allocations {allocations} "
        f"rollovers {rollovers} rollover_ipis_received {per_cpu}"
    )


if __name__ == "__main__":
    main(sys.argv)
