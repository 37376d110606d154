#!/usr/bin/env bash
# Issue 18, item 4: replay validated on real programs.
#
# Records three real multi-threaded or multi-process programs with
# `tlbsim record`, measures each untraced RUNS times (elapsed time, page
# faults from perf stat; shootdowns: the program's own remote flushes,
# and the TLB line of /proc/interrupts summed over CPUs, whole machine),
# records it once (the trace has the traced run's own shootdowns, which
# vary less against the replay than untraced runs' do: same schedule),
# replays each trace on PROFILE (replay's default policy, the recorded
# kernel's; the recorded placement) and on ampere-32
# under arm64-stock and arm64-skip-broadcast-v2, and prints one markdown
# table of each.
#
#   xz      xz -1 -T2 on 8 MB of base64 text (a parallel compressor: two
#           worker threads and the main thread share an mm)
#   make    make -j2 of tools/microbench/*.c but tcmalloc_large_heap.c,
#           with gcc -O2 (a build:
#           make, sh, gcc, cc1 and as processes, fork/exec/wait)
#   gc      tools/replay/gc-churn, a Go program whose goroutines allocate
#           and drop buffers, so Go's collector and scavenger madvise
#           memory back while other threads run
#
# Usage: tools/replay_validation.sh [PROFILE] [RUNS]   (KEEP=DIR keeps the
# traces and outputs in DIR; as root: perf
# tracepoints; needs xz, make, gcc, go and perf). Run on a quiet machine:
# other work on the CPUs is in both the measured and the recorded times.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${1:-docs/data/calibrated-dev-host.toml}
RUNS=${2:-5}
T=$PWD/target/release/tlbsim
cargo build --release -q -p tlbsim-cli
if [ -n "${KEEP:-}" ]; then
    # KEEP=DIR: work in DIR and keep the traces and outputs there.
    W=$(mkdir -p "$KEEP" && cd "$KEEP" && pwd)
else
    W=$(mktemp -d /tmp/tlbsim-replay-val.XXXXXX)
    trap 'rm -rf "$W"' EXIT
fi

# Inputs: deterministic, so that every run compresses the same bytes.
python3 -c "
import base64, random
r = random.Random(18)
open('$W/big.txt', 'wb').write(base64.encodebytes(bytes(r.getrandbits(8) for _ in range(6_000_000))))"
mkdir -p "$W/mk"
cp tools/microbench/*.c "$W/mk/"
# (tcmalloc_large_heap.c needs gperftools' headers: left out.)
rm "$W/mk/tcmalloc_large_heap.c"
printf 'SRCS := $(wildcard *.c)\nall: $(SRCS:.c=.o)\n%%.o: %%.c\n\tgcc -O2 -c $< -o $@\n' > "$W/mk/Makefile"
(cd tools/replay/gc-churn && go build -o "$W/gc-churn" .)

cmd_of() {
    case $1 in
        xz) echo "xz -1 -T2 -k -f big.txt" ;;
        make) echo "make -s -C mk -j2" ;;
        gc) echo "./gc-churn" ;;
    esac
}
prep() { # state each run starts from
    case $1 in
        make) rm -f "$W"/mk/*.o ;;
        *) ;;
    esac
}
# The program's own remote flushes: the flush_tlb_func calls its tasks
# queued on other CPUs (csd:csd_queue_cpu, one per target CPU, each a
# flush_tlb_func run there that /proc/interrupts counts as a TLB
# shootdown), whole machine recorded, kept if the sending task descends
# from the command (sched:sched_process_fork). Other work on the machine
# is left out, which /proc/interrupts cannot do.
own_flushes() { # CMD...
    rm -f "$W/root.pid"
    (cd "$W" && perf record -q -a -o "$W/csd.data" -e csd:csd_queue_cpu -e sched:sched_process_fork \
        -- sh -c 'echo $$ > root.pid; exec "$@"' sh "$@" >/dev/null 2>"$W/csd.err") || { cat "$W/csd.err"; exit 1; }
    perf script -i "$W/csd.data" -F tid,event,trace 2>/dev/null | python3 -c "
import re, sys
tree = {int(open('$W/root.pid').read())}
n = 0
for line in sys.stdin:
    m = re.match(r'\s*(\d+)\s+(\S+):\s*(.*)', line)
    if not m:
        continue
    tid, ev, rest = int(m.group(1)), m.group(2), m.group(3)
    if ev == 'sched:sched_process_fork':
        f = re.search(r'(?<!_)pid=(\d+).*child_pid=(\d+)', rest)
        if f and int(f.group(1)) in tree:
            tree.add(int(f.group(2)))
    elif tid in tree and 'func=flush_tlb_func' in rest:
        n += 1
print(n)"
}
tlb() { awk '/^ *TLB:/{s=0; for(i=2;i<=NF;i++) if($i ~ /^[0-9]+$/) s+=$i; print s}' /proc/interrupts; }
median() { sort -n | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
json() { python3 -c "
import json, sys
d = json.load(open('$1'))['run']
s = d['stats']['total']
m = d['metrics']
print(d['elapsed_ns'], s['ipi_call'] + s['ipi_call_single'], s['page_faults'], s['tlbi_broadcast'], s['flushes_broadcast'], int(m['trace_elapsed_ns']), int(m['trace_faults']), int(m.get('trace_shootdowns', 0)))"; }

echo "| program | measured elapsed (median of $RUNS) | replayed | error | shootdowns of the traced run | replayed IPIs | error | untraced runs' shootdowns: the program's, median (range); whole machine, median | measured faults | replayed faults | traced run: span, faults |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
AMPERE=""
for p in xz make gc; do
    c=$(cmd_of $p)
    : > "$W/$p.el"; : > "$W/$p.sd"; : > "$W/$p.pf"
    for _ in $(seq "$RUNS"); do
        prep $p
        a=$(tlb)
        s=$(date +%s%N)
        (cd "$W" && perf stat -x, -e page-faults -o "$W/stat" -- $c >/dev/null 2>"$W/$p.err") || { cat "$W/$p.err"; exit 1; }
        e=$(date +%s%N)
        b=$(tlb)
        echo $((e - s)) >> "$W/$p.el"
        echo $((b - a)) >> "$W/$p.sd"
        grep page-faults "$W/stat" | cut -d, -f1 >> "$W/$p.pf"
    done
    : > "$W/$p.own"
    for _ in $(seq "$RUNS"); do
        prep $p
        own_flushes $c >> "$W/$p.own"
    done
    el=$(median < "$W/$p.el"); sd=$(median < "$W/$p.sd"); pf=$(median < "$W/$p.pf")
    own=$(median < "$W/$p.own")
    prep $p
    (cd "$W" && "$T" record -o "$W/$p.trace" -- $c >/dev/null 2>"$W/$p.rec") || { cat "$W/$p.rec"; exit 1; }
    "$T" replay "$W/$p.trace" --profile "$PROFILE" --json "$W/$p.json" >"$W/$p.out" 2>&1 || { cat "$W/$p.out"; exit 1; }
    read -r rel ripi rpf _ _ tspan tpf tsd < <(json "$W/$p.json")
    lo=$(sort -n "$W/$p.own" | head -1); hi=$(sort -n "$W/$p.own" | tail -1)
    python3 -c "
el, rel, tsd, ripi = $el, $rel, $tsd, $ripi
e = lambda m, p: f'{100 * (p - m) / m:+.1f} %' if m else '-'
print(f'| $p | {el/1e6:.1f} ms | {rel/1e6:.1f} ms | {e(el, rel)} | {tsd} | {ripi} | {e(tsd, ripi)} | {$own:g} ($lo-$hi); $sd | $pf | $rpf | {$tspan/1e6:.1f} ms, $tpf |')"
    verdict=""
    for pol in arm64-stock arm64-skip-broadcast-v2; do
        # The checker's verdict under the default walk-cache reading
        # (asid-tagged), then the costs under flush-on-ttbr-change, the
        # reading under which v2 is safe (docs/validation.md, seed 000).
        if "$T" replay "$W/$p.trace" --profile ampere-32 --policy $pol >"$W/$p.$pol.out" 2>&1; then
            verdict+="$pol pass; "
        else
            verdict+="$pol $(grep -m1 '^invariant:' "$W/$p.$pol.out" || echo 'error'); "
        fi
        "$T" replay "$W/$p.trace" --profile ampere-32 --policy $pol \
            --set 'machine.walk_cache_after_ttbr_write="flush-on-ttbr-change"' \
            --json "$W/$p.$pol.json" >"$W/$p.$pol.out2" 2>&1 || { cat "$W/$p.$pol.out2"; exit 1; }
    done
    read -r s_el _ _ s_tlbi s_b _ _ < <(json "$W/$p.arm64-stock.json")
    read -r v_el _ _ v_tlbi v_b _ _ < <(json "$W/$p.arm64-skip-broadcast-v2.json")
    AMPERE+=$(python3 -c "
s, v = $s_el, $v_el
print(f'| $p | {s/1e6:.2f} ms | $s_b | $s_tlbi | {v/1e6:.2f} ms | $v_b | $v_tlbi | {100 * (s - v) / s:+.2f} % | $verdict |')")$'\n'
done
echo
echo "Replayed on $PROFILE under $(sed -n "s/.*'replay' ([^,]*, [0-9]* CPUs, \([^ ]*\) .*/\1/p" "$W/xz.out") (replay's default: the recorded kernel's policy; the host runs $(uname -r))."
echo
echo "On ampere-32 (recorded placement: the tasks keep the host's CPUs; costs under the flush-on-ttbr-change walk-cache reading):"
echo
echo "| program | stock elapsed | stock broadcast flushes | stock broadcast TLBIs | v2 elapsed | v2 broadcast flushes | v2 broadcast TLBIs | v2 saves | checker, default walk-cache reading |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s' "$AMPERE"
