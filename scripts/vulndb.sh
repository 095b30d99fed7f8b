#!/usr/bin/env bash
# vulndb.sh VERSION OUT: builds the Go vulnerability database (the JSON layout govulncheck reads
# with -db file://…) from golang.org/x/vulndb at VERSION, fetched through the Go module proxy.
# vuln.go.dev, govulncheck's default source, is not reachable from the build machines; the
# module carries the same OSV entries (data/osv) and the tool that publishes them (cmd/gendb).
# The database is as fresh as VERSION's date; bump VULNDB_VERSION in the Makefile to refresh it.
set -euo pipefail
version=$1
out=$2
dir=$(GOFLAGS= go mod download -json "golang.org/x/vulndb@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir/data/osv" ] || { echo "vulndb.sh: no data/osv in golang.org/x/vulndb@${version}" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# gendb reads the entries from a git repository's HEAD.
mkdir -p "$work/repo/data"
cp -r "$dir/data/osv" "$work/repo/data/"
chmod -R u+w "$work/repo"
git -C "$work/repo" init -q
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=omniserve -c user.email=build@omniserve.invalid commit -qm "golang.org/x/vulndb@${version} data/osv"
rm -rf "$out.tmp"
(cd "$work" && GOFLAGS= go run "golang.org/x/vulndb/cmd/gendb@${version}" -repo "$work/repo" -out "$out.tmp")
rm -rf "$out"
mv "$out.tmp" "$out"
echo "vulndb.sh: $(ls "$out/ID" | wc -l) entries of golang.org/x/vulndb@${version} in $out"
