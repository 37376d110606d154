#!/bin/sh
# Host cost of one sort-compute iteration (`/usr/bin/sort </usr/bin/sort
# >/dev/null` in a bash loop) in the C locale and in en_US.UTF-8, the
# default LANG of a RHEL 8 install (seed 000's eMAG ran RHEL 8). Alternates
# the two so host noise hits both alike; prints task-clock per iteration and
# the en_US.UTF-8 - C increment of each pair. Needs the en_US.UTF-8 locale:
# `localedef -i en_US -f UTF-8 en_US.UTF-8` (Debian: package locales).
set -e
N=${N:-300}
ROUNDS=${ROUNDS:-8}
if ! locale -a | grep -qi '^en_US\.utf-\?8$'; then
	echo "en_US.UTF-8 is not installed: run localedef -i en_US -f UTF-8 en_US.UTF-8" >&2
	exit 1
fi
per_iter() {
	env -u LC_ALL LANG="$1" perf stat -x, -e task-clock \
		bash -c "for i in \$(seq $N); do /usr/bin/sort </usr/bin/sort >/dev/null; done" 2>&1 |
		awk -F, -v n="$N" '/task-clock/ { printf "%.3f", $1 / n }'
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
	c=$(per_iter C)
	u=$(per_iter en_US.UTF-8)
	echo "round $r: C $c ms, en_US.UTF-8 $u ms, increment $(echo "$u - $c" | bc -l) ms"
	r=$((r + 1))
done
