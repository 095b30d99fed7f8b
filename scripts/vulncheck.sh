#!/usr/bin/env bash
# vulncheck.sh GOVULNCHECK DB ACCEPTED: runs govulncheck over ./... against the local database DB
# and fails on any advisory the code reaches that ACCEPTED (one ID per line, # comments) does
# not list. Accepted advisories are printed, and an accepted one that is no longer reported is
# named so the list can shrink. docs/SECURITY.md holds the triage of every accepted ID.
set -euo pipefail
govulncheck=$1
db=$2
accepted=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$govulncheck" -db "file://$db" ./... >"$out" 2>&1 || rc=$?
# govulncheck exits 3 when it found vulnerabilities; anything else non-zero is a failure to run.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
	cat "$out" >&2
	echo "vulncheck: govulncheck failed (exit $rc)" >&2
	exit "$rc"
fi
found=$(grep -oE '^Vulnerability #[0-9]+: GO-[0-9]+-[0-9]+' "$out" | awk '{print $3}' | sort -u || true)
allowed=$(grep -vE '^\s*(#|$)' "$accepted" | awk '{print $1}' | sort -u)
new=$(comm -23 <(printf '%s\n' $found) <(printf '%s\n' $allowed) | grep . || true)
stale=$(comm -13 <(printf '%s\n' $found) <(printf '%s\n' $allowed) | grep . || true)
for id in $found; do
	if ! grep -qx "$id" <<<"$new"; then
		echo "vulncheck: accepted $id (docs/SECURITY.md)"
	fi
done
for id in $stale; do
	echo "vulncheck: $id is accepted but no longer reported: remove it from $accepted"
done
if [ -n "$new" ]; then
	cat "$out"
	echo "vulncheck: new advisories the code reaches: $(echo $new)" >&2
	exit 1
fi
echo "vulncheck: clean ($(echo $found | wc -w) accepted, 0 new)"
