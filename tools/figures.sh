#!/bin/sh
# Draws the figures of docs/validation.md: one SVG per CSV in docs/data,
# with `tlbsim plot`, into docs/figures (or OUTDIR). Fails if a CSV has
# no figure, so a new CSV needs its line here. The CSVs themselves are
# not rerun (hours of sweeps; their commands are in docs/validation.md).
#   cargo build --release && tools/figures.sh [OUTDIR]
#   (TLBSIM=path/to/tlbsim to use another binary; run from the repository)
set -e
T=${TLBSIM:-target/release/tlbsim}
D=docs/data
F=${1:-docs/figures}
mkdir -p "$F"

# plot NAME ARGS...: docs/data/NAME.csv -> $F/NAME.svg
plot() {
	name=$1
	shift
	"$T" plot "$D/$name.csv" --out "$F/$name.svg" "$@"
}

plot seed000-scaling --x cpus --y elapsed_s --group profile,policy --log-x --log-y \
	--title "Seed 000: mprotect loops, one per CPU (elapsed s)"
for e in mprotect sort-compute; do
	plot seed003-affinity-mm-$e --x dvm_ops_received --y elapsed_s --group policy \
		--title "Seed 003: $e on hisi-96-dvmbm, DVM ops received vs elapsed s"
done
for p in stock dvmbm; do
	plot seed003-vms-kvm-$p --x vm.count --y index \
		--title "Seed 003: unixbench index per VM, pinned 4-vCPU VMs, kvm-$p"
	plot seed003-vms-floating-kvm-$p --x vm.count --y index \
		--title "Seed 003: unixbench index per VM, floating vCPUs, kvm-$p"
done
plot wis-tlb-flush2 --x tasks --y loops_per_s --group policy --log-x \
	--title "will-it-scale tlb_flush2, threads on epyc-2s (loops/s)"

for csv in "$D"/*.csv; do
	name=$(basename "$csv" .csv)
	if [ ! -f "$F/$name.svg" ]; then
		echo "tools/figures.sh: no figure for $csv: add its plot line" >&2
		exit 1
	fi
done
