#!/usr/bin/env bash
# Runs CUDA/HIP kernels on the CPU against the reference (see gpu_runtime.hpp): the gating kernels
# (emulate_gating.cpp) or align's block_sort and align_ep's one-launch forms (emulate_align.cpp).
# Usage: tools/gpu_emulate/run.sh [gating|align] [BUILD_CPU_DIR [MAX_CASES]]   (a CPU build, default build-cpu;
# output in build-emulate/). MOE_EMULATE_MUTATE=1 (gating) first breaks the kernels' tie rule (a sanity check:
# mismatches expected).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
op=gating
if [[ "${1:-}" == gating || "${1:-}" == align ]]; then op=$1; shift; fi
lib=${1:-$here/build-cpu}
out=$here/build-emulate
mkdir -p "$out"
flags=(-std=c++20 -O2 -ffp-contract=off -fno-fast-math -pthread -Wno-unknown-pragmas -I"$here/core/include" -I"$here/core/src")
if [[ $op == align ]]; then
  # the kernel's headers beside the stand-in gpu_runtime.hpp (their quoted includes look there first)
  rm -rf "$out/cuda_hip" && cp -r "$here/backends/cuda_hip" "$out/cuda_hip"
  cp "$here/tools/gpu_emulate/gpu_runtime.hpp" "$out/cuda_hip/gpu_runtime.hpp"
  # dynamic shared memory: the block's buffer of the stand-in launch
  sed -i 's/extern __shared__ std::int32_t smem\[\];/std::int32_t* const smem = moe::gpu::dynamic_smem();/' \
    "$out/cuda_hip/align/block_per_expert.cuh"
  grep -q 'dynamic_smem()' "$out/cuda_hip/align/block_per_expert.cuh" || { echo "dynamic shared memory not rewritten"; exit 2; }
  for warp in 32 64; do  # NVIDIA's warps, AMD's CDNA wavefronts (kWarpSize: 16 warps a block_sort block)
    g++ "${flags[@]}" -DMOE_EMULATE_WARP=$warp -I"$out/cuda_hip" -c "$here/tools/gpu_emulate/emulate_align.cpp" \
      -o "$out/align$warp.o"
    g++ -pthread "$out/align$warp.o" "$lib/libmoe_routing.a" -o "$out/emulate_align$warp"
    echo "== $warp-lane warps"
    timeout 3600 "$out/emulate_align$warp" ${2:+"$2"}
  done
  exit
fi
cp "$here/tools/gpu_emulate/gpu_runtime.hpp" "$out/"
cp "$here/backends/cuda_hip/topk_gating.cu" "$out/topk_gating_emu.cpp"  # beside the stand-in gpu_runtime.hpp
if [[ "${MOE_EMULATE_MUTATE:-0}" == 1 ]]; then
  sed -i 's/if (v\[j\] > best) best = v\[j\], at = j;/if (v[j] >= best) best = v[j], at = j;/' "$out/topk_gating_emu.cpp"
  grep -q 'v\[j\] >= best' "$out/topk_gating_emu.cpp" || { echo "mutation not applied"; exit 2; }
fi
g++ "${flags[@]}" -Dtopk_gating=emu_topk_gating -Dtopk_gating_workspace_size=emu_topk_gating_workspace_size \
    -c "$out/topk_gating_emu.cpp" -o "$out/kernels.o"
g++ "${flags[@]}" -c "$here/tools/gpu_emulate/emulate_gating.cpp" -o "$out/driver.o"
g++ -pthread "$out/driver.o" "$out/kernels.o" "$lib/libmoe_routing.a" -o "$out/emulate_gating"
timeout 3600 "$out/emulate_gating" ${2:+"$2"}
