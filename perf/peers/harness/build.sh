#!/usr/bin/env bash
# Builds bin/libpeers.so from src/*.cu (peer kernels, see BUILD.md) and copies bin/libmoe_routing.so from a
# shared CUDA build of the project. One nvcc at a time (-j1 machine).  Usage: bash build.sh [peers|proj|all]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=${PROJ_SRC:-$(git rev-parse --show-toplevel)}  # the project's checkout (this folder is copied into it)
what=${1:-all}
NVCC=${NVCC:-nvcc}
FLAGS="-O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -Xcompiler -fPIC -diag-suppress 177,20012"
OBJ=${OBJ_DIR:-/tmp/peers-obj}   # outside .peers: only bin/ and sources are carried
mkdir -p bin "$OBJ"
if [ "$what" = all ] || [ "$what" = peers ]; then
  objs=()
  for f in src/vllm_align_sum.cu src/vllm_topk_softmax.cu src/vllm_grouped_topk.cu src/vllm_permute.cu \
           src/sglang_align_sum.cu src/sglang_fused_gate.cu; do
    o=$OBJ/$(basename "${f%.cu}").o
    if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ src/peer_shims.h -nt "$o" ]; then
      echo "nvcc $f"; $NVCC $FLAGS -c "$f" -o "$o"
    fi
    objs+=("$o")
  done
  $NVCC -shared -arch=sm_90 "${objs[@]}" -o bin/libpeers.so
  strip bin/libpeers.so
  echo "bin/libpeers.so: $(stat -c %s bin/libpeers.so) bytes"
fi
if [ "$what" = all ] || [ "$what" = proj ]; then
  B=${PROJ_BUILD:-$ROOT/build-cuda-shared}
  if [ ! -f "$B/libmoe_routing.so" ]; then
    cmake -S "$ROOT" -B "$B" -G Ninja -DMOE_BACKEND=CUDA -DMOE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON \
      -DMOE_BUILD_TESTS=OFF -DMOE_BUILD_PERF=OFF -DMOE_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Release
    cmake --build "$B" -j1
  fi
  cp -L "$B/libmoe_routing.so" bin/libmoe_routing.so
  strip bin/libmoe_routing.so
  echo "bin/libmoe_routing.so: $(stat -c %s bin/libmoe_routing.so) bytes"
  # the project's doctest binary, for run.sh's `tests` step (from a CUDA build with tests, e.g. build-cuda)
  TB=${TESTS_BUILD:-$ROOT/build-cuda}
  if [ -x "$TB/tests/moe_tests" ]; then
    cp -L "$TB/tests/moe_tests" bin/moe_tests && strip bin/moe_tests
    echo "bin/moe_tests: $(stat -c %s bin/moe_tests) bytes (from $TB)"
  else
    echo "no $TB/tests/moe_tests: run.sh's tests step will be skipped"
  fi
fi
