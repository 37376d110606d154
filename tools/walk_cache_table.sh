#!/bin/sh
# Regenerates the table "Walk cache after the reserved TTBR0" of
# docs/validation.md: seed 000's policies and the arm64 flush mutants under
# each walk-cache reading (arm64.walk_cache_after_ttbr_write), on the two
# seed-000 explore experiments:
#   switch-race: tlbsim check experiments/seed000-switch-race.toml --policy P
#                --strategy pct --depth 4 --seed 4 --schedules 1000 --max-actions 20000
#   safety:      tlbsim check experiments/seed000-safety.toml --policy P
#                --schedules 1000
# each with --set machine.walk_cache_after_ttbr_write=R (which overrides the
# reading switch-race pins). Prints one markdown row per policy and reading:
# the verdict of each search, and for a failure the schedule index and the
# invariant.
#   tools/walk_cache_table.sh        (needs target/release/tlbsim and jq)
set -e
T=${TLBSIM:-target/release/tlbsim}
verdict() {
	out=$($T check "$@" --json - 2>/dev/null || true)
	# printf, not echo: dash's echo expands the \n inside JSON strings.
	n=$(printf '%s\n' "$out" | jq -r '.schedules')
	case $(printf '%s\n' "$out" | jq -r '.verdict') in
	pass) echo "pass ($n schedules)" ;;
	fail)
		i=$(printf '%s\n' "$out" | jq -r '.failure.index')
		inv=$(printf '%s\n' "$out" | jq -r '.failure.report' | sed -n 's/^invariant: //p' | head -1)
		echo "**fail** at schedule $i: $inv"
		;;
	*) echo "error: $(printf '%s\n' "$out" | head -c 200)" ;;
	esac
}
for p in ${POLICIES:-arm64-stock arm64-skip-broadcast-v2 arm64-skip-broadcast-v2-posted arm64-skip-broadcast-v1 \
	mutant-range-no-broadcast mutant-free-before-sync}; do
	for r in asid-tagged no-new-root-walks flush-on-ttbr-change; do
		set_r="machine.walk_cache_after_ttbr_write=$r"
		race=$(verdict experiments/seed000-switch-race.toml --policy $p --set "$set_r" \
			--strategy pct --depth 4 --seed 4 --schedules 1000 --max-actions 20000)
		safety=$(verdict experiments/seed000-safety.toml --policy $p --set "$set_r" --schedules 1000)
		echo "| $p | $r | $race | $safety |"
	done
done
