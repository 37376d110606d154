#!/bin/sh
# Seed 001's safety campaign (docs/validation.md, "Seed 001 ... Safety
# verdict"): every arm64 policy on experiments/seed001-explore.toml in its
# four variants (users are threads or forked children; they touch the
# pages, or touch and mprotect them), 3,000 random and 3,000 PCT-3
# schedules each, then 40 timing runs (seeds 1-20 x fork) of 20
# page-outs; part two (below) the kswapd, MADV_COLD, MADV_DONTNEED and
# mremap experiments; part three those on private anonymous memory.
# One line per search: schedules run and the verdict.
#   tools/seed001_safety.sh        (needs target/release/tlbsim; ~4 min)
T=${TLBSIM:-target/release/tlbsim}
EXP=experiments/seed001-explore.toml
for p in arm64-stock arm64-tlbbatch arm64-tlbbatch-6.6 arm64-skip-broadcast-v2 arm64-skip-broadcast-v1 arm64-cpumask-tracking; do
	for fork in true false; do
		for op in mprotect touch; do
			for strat in random "pct --depth 3"; do
				# shellcheck disable=SC2086
				out=$($T check $EXP --policy $p --set workload.fork=$fork --set "workload.op=\"$op\"" \
					--strategy $strat --schedules 3000 --seed 1 --max-actions 20000 2>&1)
				runs=$(echo "$out" | grep -E '^[0-9]+ schedules' | sed 's/ actions.*//')
				verdict=$(echo "$out" | grep -E '^checker: pass|^invariant' | head -1)
				echo "$p fork=$fork op=$op $strat: $runs | $verdict"
			done
		done
	done
	bad=0
	for s in $(seq 1 20); do
		for fork in true false; do
			$T run $EXP --policy $p --seed "$s" --set workload.fork=$fork \
				--set workload.iterations=20 >/dev/null 2>&1 || bad=$((bad + 1))
		done
	done
	echo "$p timing runs (20 seeds x 2, 20 page-outs each, speculative walks): $bad failed"
done

# One search of parts two and three: policy $1, variant $2 ("EXPERIMENT|
# key=value|..."; a key without a section is a [workload] key), extra
# --set options in $3. 3,000 random schedules; prints schedules, time and
# the verdict.
search() {
	exp=${2%%|*}
	sets=$3
	for kv in $(echo "${2#*|}" | tr '|' ' '); do
		case $kv in kernel.*) sets="$sets --set $kv" ;; *) sets="$sets --set workload.$kv" ;; esac
	done
	# shellcheck disable=SC2086
	out=$($T check $exp --policy $1 $sets --schedules 3000 --seed 1 --max-actions 50000 2>&1)
	runs=$(echo "$out" | grep -E '^[0-9]+ schedules' | sed 's/ actions[^,]*,/,/; s/:.*//')
	verdict=$(echo "$out" | grep -E '^checker: pass|^invariant' | head -1)
	echo "$1 $(basename "$exp" .toml)$sets: $runs | $verdict"
}

# Part two: reclaim by kswapd beside users that mprotect, MADV_COLD or
# MADV_DONTNEED their page, and mremap racing kswapd (Linux 4.19+'s flush
# order and 4.9-4.18's).
KS=experiments/seed001-kswapd.toml
MR=experiments/seed001-mremap.toml
for p in arm64-stock arm64-tlbbatch arm64-tlbbatch-6.6 arm64-skip-broadcast-v2 arm64-skip-broadcast-v1 arm64-cpumask-tracking; do
	for v in "$KS|fork=true" "$KS|fork=false" \
		"$KS|fork=true|madvise=true|advice=\"cold\"" "$KS|fork=false|madvise=true|advice=\"cold\"" \
		"$KS|fork=false|stride_pages=512|op=\"dontneed-page\"" \
		"$MR|" "$MR|kernel.mremap_flush_unlocked=true"; do
		search $p "$v" ""
	done
done

# Part three: the same experiments on private anonymous memory
# (workload.shared=false: swap entries in the PTEs, pages and swap entries
# shared with forked children), and MADV_FREE beside kswapd, with the
# batch's mutants
# (docs/validation.md, "Private anonymous memory").
EX=experiments/seed001-explore.toml
for p in arm64-stock arm64-tlbbatch arm64-tlbbatch-6.6 arm64-skip-broadcast-v2 arm64-cpumask-tracking \
	mutant-tlbbatch-no-pending-flush mutant-tlbbatch-no-batch-sync mutant-tlbbatch-clean-pte; do
	for v in "$EX|fork=true" "$EX|fork=false|op=\"touch\"" "$KS|fork=true" "$KS|fork=false|op=\"touch\"" \
		"$KS|fork=false|stride_pages=512|op=\"dontneed-page\"" \
		"$MR|" "$MR|kernel.mremap_flush_unlocked=true" \
		"$KS|madvise=true|advice=\"free\"|fork=true" "$KS|madvise=true|advice=\"free\"|fork=false|op=\"touch\"" \
		"$KS|madvise=true|advice=\"free\"|fork=false" \
		"$KS|madvise=true|advice=\"free\"|fork=false|op=\"dontneed-page\""; do
		search $p "$v" " --set workload.shared=false"
	done
done
