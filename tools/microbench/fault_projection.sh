#!/bin/bash
# Projects the host's page faults onto 64 KiB pages (issue 17; docs/research/
# seed000-64k-projection.md): records exceptions:page_fault_user with forks
# and execs, then replays the trace with 4 KiB and 64 KiB pages
# (fault_projection.py) and prints read and write faults at each size.
#   tools/microbench/fault_projection.sh [GPERFTOOLS_TREE]
# Without a tree only sort-compute's loop (32 x sort in en_US.UTF-8) runs;
# with a gperftools build tree (docs/research/seed000-libtool-launch.md) the
# libtool wrapper's launch of exit0_unittest and its direct launch run too.
# Needs root (perf tracepoints).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trace() { # NAME CMD...
	local name=$1
	shift
	perf record -q -o "$tmp/$name.data" -e exceptions:page_fault_user \
		-e sched:sched_process_fork -e sched:sched_process_exec -- "$@" >/dev/null 2>&1
	perf script -i "$tmp/$name.data" -F comm,pid,event,trace 2>/dev/null >"$tmp/$name.txt"
	echo "== $name"
	python3 "$here/fault_projection.py" "$tmp/$name.txt"
}
cat >"$tmp/sort-loop.sh" <<'LOOP'
#!/bin/bash
export LANG=en_US.UTF-8
for i in $(seq 32); do /usr/bin/sort </usr/bin/sort >/dev/null; done
LOOP
chmod +x "$tmp/sort-loop.sh"
trace sort-loop "$tmp/sort-loop.sh"
if [ $# -ge 1 ]; then
	cd "$1"
	./exit0_unittest >/dev/null 2>&1 || true # creates .libs/lt-exit0_unittest
	trace wrapper ./exit0_unittest
	trace direct .libs/lt-exit0_unittest
fi
