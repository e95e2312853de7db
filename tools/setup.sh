#!/usr/bin/env bash
# One command from a fresh Debian machine to a built tree:
#   tools/setup.sh [BACKEND] [BUILD_DIR] [extra cmake arguments...]
# BACKEND: CPU (default), CUDA, HIP or KOKKOS. BUILD_DIR: build (default). Installs the Debian packages that
# backend needs (tools/install-deps.sh BACKEND), configures, builds (CMAKE_BUILD_PARALLEL_LEVEL jobs if set,
# else all cores), and installs into BUILD_DIR/install.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
backend=${1:-CPU}
build=${2:-build}
shift $(( $# > 2 ? 2 : $# ))
"$here/tools/install-deps.sh" "$backend"
args=(-DMOE_BACKEND="$backend")
case "$backend" in
  HIP) args+=(-C "$here/cmake/hip-debian.cmake") ;;  # Debian's ROCm layout (see that file)
esac
cmake -S "$here" -B "$build" -G Ninja "${args[@]}" "$@"
cmake --build "$build" --parallel ${CMAKE_BUILD_PARALLEL_LEVEL:-}  # a bare --parallel would ignore the variable
cmake --install "$build" --prefix "$build/install" >/dev/null
echo "built $backend in $build (installed to $build/install)"
