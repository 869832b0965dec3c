#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each.
# Usage: scripts/fuzz.sh DURATION   (e.g. 3s for make test, 10m for make fuzz)
set -euo pipefail
t=${1:-10s}
cd "$(dirname "$0")/.."
status=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== fuzz $pkg $name ($t)"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$t" "$pkg" 2>&1 | tail -n 3; then
		status=1
	fi
done < <(grep -rHo --include='*_test.go' -E '^func (Fuzz[A-Za-z0-9_]+)' . | sed -E 's/:func /:/' | sort)
exit $status
