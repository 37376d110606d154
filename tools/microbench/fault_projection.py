"""Projects a 4 KiB page-fault trace (perf: exceptions:page_fault_user,
sched:sched_process_fork, sched:sched_process_exec) onto 64 KiB pages:
a fault is absorbed when an earlier fault of the same address space since
its last fork or exec hit the same page with the same or a stronger kind."""
import re, sys, collections
rx_pf = re.compile(r'^\s*(.+?)\s+(\d+)\s+exceptions:page_fault_user:\s+address=0x([0-9a-f]+) ip=0x[0-9a-f]+ error_code=0x([0-9a-f]+)')
rx_fork = re.compile(r'sched_process_fork: comm=.* pid=(\d+) child_comm=.* child_pid=(\d+)')
rx_exec = re.compile(r'^\s*(.+?)\s+(\d+)\s+sched:sched_process_exec:')
def fresh(): return {12: set(), 16: set()}
st = collections.defaultdict(fresh)
tot = collections.Counter()
for line in open(sys.argv[1]):
    m = rx_fork.search(line)
    if m:
        parent, child = int(m.group(1)), int(m.group(2))
        st[parent] = fresh(); st[child] = fresh()   # both write-protected
        continue
    m = rx_exec.match(line)
    if m:
        st[int(m.group(2))] = fresh(); continue
    m = rx_pf.match(line)
    if not m: continue
    pid, addr, ec = int(m.group(2)), int(m.group(3), 16), int(m.group(4), 16)
    w = bool(ec & 2); kind = 'w' if w else 'r'
    for sh in (12, 16):
        s = st[pid][sh]; p = addr >> sh
        if not ((p, True) in s or (not w and (p, False) in s)):
            tot[(kind, sh)] += 1; s.add((p, w))
for kind in 'rw':
    print(kind, '4K', tot[(kind, 12)], '64K', tot[(kind, 16)], 'ratio %.3f' % (tot[(kind,16)]/max(1,tot[(kind,12)])))
