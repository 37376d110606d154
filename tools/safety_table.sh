#!/bin/sh
# Regenerates the seed-000 safety table of docs/validation.md: every policy
# on experiments/seed000-safety.toml, seeds 1-N (default 100), 4 and 8 CPUs.
# Prints one markdown row per policy: violations per CPU count, the events
# the checker saw in passing runs, and the first violating seed.
# READING, if given, is the walk-cache reading after a TTBR0 write
# (arm64.walk_cache_after_ttbr_write: asid-tagged, the default;
# flush-on-ttbr-change; no-new-root-walks).
#   tools/safety_table.sh [N [READING]]      (needs target/release/tlbsim)
set -e
N=${1:-100}
if [ -n "$2" ]; then
	set -- --set "machine.walk_cache_after_ttbr_write=$2"
else
	set --
fi
T=${TLBSIM:-target/release/tlbsim}
EXP=experiments/seed000-safety.toml
for p in arm64-stock arm64-skip-broadcast-v2 arm64-skip-broadcast-v1 arm64-cpumask-tracking arm64-skip-broadcast-v2-posted; do
	row="| $p |"
	first="-"
	for c in 4 8; do
		bad=0
		events=0
		s=1
		while [ "$s" -le "$N" ]; do
			out=$($T run $EXP --policy $p --seed $s --cpus $c "$@" 2>&1 || true)
			if echo "$out" | grep -q "checker: pass"; then
				e=$(echo "$out" | sed -n 's/.*checker: pass (\([0-9,]*\) events checked).*/\1/p' | tr -d ,)
				events=$((events + e))
			else
				bad=$((bad + 1))
				if [ "$first" = "-" ]; then
					first="seed $s ($c CPUs): $(echo "$out" | sed -n 's/^invariant: //p' | head -1)"
				fi
			fi
			s=$((s + 1))
		done
		row="$row $bad / $N on $c CPUs, $(echo "scale=2; $events / 1000000" | bc) M events |"
	done
	echo "$row $first |"
done
