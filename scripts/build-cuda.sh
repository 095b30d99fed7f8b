#!/usr/bin/env bash
# Builds the CUDA backend of ggml (libggml-cuda.so and the libggml-base.so it links) from the
# sources inside the pinned github.com/ollama/ollama module, for Hopper (sm_90) by default, and
# installs them into lib/ollama at the repository root, i.e. <bin>/../lib/ollama for the
# binaries in bin/. At start-up ggml loads every libggml-*.so found there; `--device auto`
# then uses the GPU. Needs: CUDA toolkit 12.x (nvcc), cmake >= 3.21, a C++17 compiler; ninja
# is used when present.
#
#   CUDA_ARCHITECTURES=90 ./scripts/build-cuda.sh       # default 90 (H100/H200)
#   CUDA_ARCHITECTURES="80;90" ./scripts/build-cuda.sh  # A100 + H100
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARCHS=${CUDA_ARCHITECTURES:-90}
BUILD=${CUDA_BUILD_DIR:-$ROOT/.build/cuda}
DEST=$ROOT/lib/ollama

need() { command -v "$1" >/dev/null 2>&1 || { echo "build-cuda: $1 not found: $2" >&2; exit 2; }; }
need go "install Go"
need cmake "apt-get install -y cmake"
if ! command -v nvcc >/dev/null 2>&1; then
	for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
		[ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
	done
fi
need nvcc "install the CUDA toolkit (12.x) or put its bin/ on PATH"

MOD=$(cd "$ROOT" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' github.com/ollama/ollama)
if [ -z "$MOD" ] || [ ! -f "$MOD/CMakeLists.txt" ]; then
	(cd "$ROOT" && GOFLAGS=-mod=mod go mod download github.com/ollama/ollama)
	MOD=$(cd "$ROOT" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' github.com/ollama/ollama)
fi
echo "build-cuda: sources $MOD, architectures $ARCHS, build dir $BUILD"

GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
# The module cache is read-only; cmake builds out of tree, so that is fine.
cmake -S "$MOD" -B "$BUILD" "${GEN[@]}" \
	-DCMAKE_BUILD_TYPE=Release \
	-DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
	-DGGML_CCACHE=OFF
cmake --build "$BUILD" --target ggml-cuda -j"$(nproc)"

mkdir -p "$DEST"
found=0
for lib in "$BUILD"/lib/ollama/libggml-cuda.so* "$BUILD"/lib/ollama/libggml-base.so*; do
	[ -e "$lib" ] || continue
	cp -P "$lib" "$DEST/"
	found=1
done
[ "$found" = 1 ] || { echo "build-cuda: no libraries under $BUILD/lib/ollama" >&2; exit 1; }
ls -l "$DEST"
echo "build-cuda: installed into $DEST; run with --device cuda (or auto)"
