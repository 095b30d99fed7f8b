#!/usr/bin/env bash
# Prepares build-only C headers that the ollama module zip leaves out (its vendor/ folders
# are stripped): miniaudio.h comes from the public-domain header shipped in the Go module
# github.com/gen2brain/malgo. Nothing here is committed; the output lives under .build/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.build/include"
if [ -f "$out/miniaudio/miniaudio.h" ]; then
  echo "$out"
  exit 0
fi
dir=$(cd "$root" && GOFLAGS=-mod=mod go mod download -json github.com/gen2brain/malgo@v0.11.24 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -f "$dir/miniaudio.h" ]; then
  echo "cgo-headers: could not fetch miniaudio.h from github.com/gen2brain/malgo" >&2
  exit 1
fi
mkdir -p "$out/miniaudio"
cp "$dir/miniaudio.h" "$out/miniaudio/miniaudio.h"
chmod u+w "$out/miniaudio/miniaudio.h"
echo "$out"
