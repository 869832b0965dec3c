#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given budget each.
# Usage: scripts/fuzz.sh BUDGET   (a duration such as 10m for make fuzz, or an
#                                  execution count such as 20000x for make test)
#
# Go 1.26's fuzz coordinator can report "context deadline exceeded" and fail
# a target when a duration budget ends while a worker is mid-input
# (go.dev/issue/75804, fixed in Go 1.27); it writes no reproducer. A count
# budget (Nx) has no deadline and cannot hit it, so make test uses one. With
# a duration, a failure that says exactly that and left no new file in
# testdata/fuzz/<target>/ is reported as that race, not as a finding; any
# other failure, or a written reproducer, fails the run.
set -euo pipefail
t=${1:-10s}
cd "$(dirname "$0")/.."
status=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	corpus=$(dirname "$file")/testdata/fuzz/$name
	before=$(ls "$corpus" 2>/dev/null | sort || true)
	echo "== fuzz $pkg $name ($t)"
	out=$(mktemp)
	if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" "$pkg" >"$out" 2>&1; then
		tail -n 3 "$out"
	else
		after=$(ls "$corpus" 2>/dev/null | sort || true)
		if [[ $before == "$after" ]] && grep -q '^    context deadline exceeded$' "$out" && ! grep -q -e 'panic:' -e 'Failing input written' "$out"; then
			grep 'execs:' "$out" | tail -n 1
			echo "   (ended by the Go fuzz coordinator's deadline race, go.dev/issue/75804: no failing input, no reproducer written)"
		else
			tail -n 30 "$out"
			status=1
		fi
	fi
	rm -f "$out"
done < <(grep -rHo --include='*_test.go' -E '^func (Fuzz[A-Za-z0-9_]+)' . | sed -E 's/:func /:/' | sort)
exit $status
