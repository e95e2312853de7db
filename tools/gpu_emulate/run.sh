#!/usr/bin/env bash
# Runs the CUDA/HIP gating kernels on the CPU against the reference (see gpu_runtime.hpp, emulate_gating.cpp).
# Usage: tools/gpu_emulate/run.sh [BUILD_CPU_DIR [MAX_CASES]]   (a CPU build, default build-cpu; output in
# build-emulate/). MOE_EMULATE_MUTATE=1 first breaks the kernels' tie rule (a sanity check: mismatches expected).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
lib=${1:-$here/build-cpu}
out=$here/build-emulate
mkdir -p "$out"
cp "$here/tools/gpu_emulate/gpu_runtime.hpp" "$out/"
cp "$here/backends/cuda_hip/topk_gating.cu" "$out/topk_gating_emu.cpp"  # beside the stand-in gpu_runtime.hpp
if [[ "${MOE_EMULATE_MUTATE:-0}" == 1 ]]; then
  sed -i 's/if (v\[j\] > best) best = v\[j\], at = j;/if (v[j] >= best) best = v[j], at = j;/' "$out/topk_gating_emu.cpp"
  grep -q 'v\[j\] >= best' "$out/topk_gating_emu.cpp" || { echo "mutation not applied"; exit 2; }
fi
flags=(-std=c++20 -O2 -ffp-contract=off -fno-fast-math -pthread -Wno-unknown-pragmas -I"$here/core/include" -I"$here/core/src")
g++ "${flags[@]}" -Dtopk_gating=emu_topk_gating -Dtopk_gating_workspace_size=emu_topk_gating_workspace_size \
    -c "$out/topk_gating_emu.cpp" -o "$out/kernels.o"
g++ "${flags[@]}" -c "$here/tools/gpu_emulate/emulate_gating.cpp" -o "$out/driver.o"
g++ -pthread "$out/driver.o" "$out/kernels.o" "$lib/libmoe_routing.a" -o "$out/emulate_gating"
timeout 3600 "$out/emulate_gating" ${2:+"$2"}
