#!/bin/sh
# Host evidence for seed 002 (docs/validation.md): runs hackbench
# (`perf bench sched messaging`, 10 groups, 100 loops: the shape of
# experiments/seed002-hackbench.toml; over pipes, `-p`, unless
# TRANSPORT=socket, hackbench's default) ROUNDS times, records every context
# switch with perf, counts the host's rescheduling IPIs from
# /proc/interrupts, and replays the switches through Linux 3.5's ARM ASID
# allocator (asid35_replay.py, 8-bit ASIDs, 2 CPUs) to count the rollovers
# the old allocator would have made. Needs root (perf record -a).
set -e
ROUNDS=${ROUNDS:-5}
case ${TRANSPORT:-pipe} in
pipe) mode=-p ;;
socket) mode= ;;
*) echo "TRANSPORT must be pipe or socket" >&2; exit 2 ;;
esac
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
res() { awk '/RES:/ { s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; print s }' /proc/interrupts; }
r=1
while [ "$r" -le "$ROUNDS" ]; do
	{ echo 2; ps --ppid 2 -o pid=; } >"$tmp/kthreads"
	a=$(res)
	perf record -q -e sched:sched_switch -a -o "$tmp/hb.data" -- \
		perf bench sched messaging $mode -g 10 -l 100 >/dev/null 2>&1
	b=$(res)
	perf script -i "$tmp/hb.data" -F cpu,trace 2>/dev/null >"$tmp/hb.txt"
	echo "round $r: resched_ipis $((b - a)) $(python3 "$here/asid35_replay.py" "$tmp/hb.txt" 8 2 "$tmp/kthreads")"
	r=$((r + 1))
done
