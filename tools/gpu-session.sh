#!/usr/bin/env bash
# A whole GPU session from binaries built here: pack them small (the device call carries at most 64 MiB), then run
# every check by priority inside the device's 10-minute call limit, logs in one tarball under $OUT.
#   here:   [VAR_BUILD=dir] tools/gpu-session.sh pack CUDA_BUILD|- [HIPNV_BUILD] [BASE_BUILD] [WHEEL]  -> .device/pkg/
#           CUDA_BUILD: -DMOE_BACKEND=CUDA -DMOE_CUDA_ARCHITECTURES=90 -DMOE_WITH_NCCL=ON; HIPNV_BUILD:
#           -DMOE_BACKEND=HIP -DMOE_HIP_PLATFORM=NVIDIA; BASE_BUILD: an older CUDA build's perf/moe_bench (A/B)
#   there:  BUDGET=570 bash tools/gpu-session.sh run PART...   (carry .device; .peers too for the peer harness)
#   PART: ONE  the checks by priority in one call (tests, A/B, memcheck, portable caps, racecheck, benches)
#         CORE what each open issue needs in one call, most needed first (device time short)
#         LAND before landing what an AB run measured: suite, EP, memcheck of the changed ops, benches
#         RACE racecheck of every align path (one step per test group), --caps=portable, HIP-on-NVIDIA
#         AB   an experiment's build (VAR_BUILD=dir at pack: var.tar.xz) against the current one and the base
#         TWO  an experiment's A/B (.device/pkg/gv.tar.xz) and ncu sections of gating and combine
#         PEERS the peer harness (.peers/harness/run.sh) with what is left of BUDGET
#         T    tests on every path, portable caps, HIP-on-NVIDIA, fuzz, NCCL EP, then T2's sanitizers (T1 / T2)
#         P    same-run A/B against the base build (targets, sum, twice interleaved), the new operations' benches
#         PY   the Python package on the GPU (tools/build-python-gpu.sh)
#         EP   ep_bench_nccl (dispatch + combine against NCCL send/recv), then torch's all_to_all_single on the
#              same bytes (perf/ep_torch_baseline.py), per shape
# Steps past BUDGET seconds are skipped, not cut; the tarball is rewritten after each group.
set -uo pipefail
cd "$(dirname "$0")/.."
D=.device
if [ "${1:-}" = pack ]; then
  shift
  stage=$(mktemp -d); mkdir -p $D/pkg
  put() {  # name, files...: strip into $stage/name/<tests|perf>/, then one xz tarball
    local name=$1; shift
    for f in "$@"; do
      [ -f "$f" ] || { echo "missing $f"; continue; }
      local sub; sub=$(basename "$(dirname "$f")"); [ "$sub" = ep ] && sub=tests
      mkdir -p "$stage/$name/$sub" && cp "$f" "$stage/$name/$sub/" && strip "$stage/$name/$sub/$(basename "$f")"
    done
    tar cJf "$D/pkg/$name.tar.xz" -C "$stage" "$name" && echo "$D/pkg/$name.tar.xz: $(stat -c %s "$D/pkg/$name.tar.xz") bytes"
  }
  c=$1  # "-": keep the packed cuda.tar.xz (e.g. packing only an experiment)
  [ "$c" != - ] && put cuda $c/tests/moe_tests $c/tests/moe_fuzz_c_api $c/tests/ep/test_ep_nccl $c/tests/moe_example_layer \
    $c/perf/moe_bench $c/perf/moe_bench_align_ep $c/perf/moe_bench_datapath $c/perf/moe_bench_gating \
    $c/perf/ep_bench_nccl
  [ -n "${2:-}" ] && put hipnv "$2/tests/moe_tests"
  [ -n "${3:-}" ] && put base "$3/perf/moe_bench"
  [ -n "${4:-}" ] && cp "$4" $D/pkg/ && echo "$D/pkg/$(basename "$4")"  # a cp312 wheel of the CUDA backend (PY)
  v=${VAR_BUILD:-}  # an experiment's CUDA build (part AB): the suite and the three benches
  [ -n "$v" ] && put var $v/tests/moe_tests $v/perf/moe_bench $v/perf/moe_bench_datapath $v/perf/moe_bench_gating \
    $v/tests/ep/test_ep_nccl $v/perf/ep_bench_nccl
  rm -rf "$stage"; exit 0
fi
[ "${1:-}" = run ] && shift
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
# logs in a scratch folder, one tarball per part in $OUT (the device returns at most 8 files)
final=${OUT:-/tmp/out}; out=$(mktemp -d); mkdir -p "$final" "$out/logs"
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${nccl_lib}:${LD_LIBRARY_PATH:-}
for f in $D/pkg/*.tar.xz; do tar xJf "$f" -C $D || echo "unpack $f failed"; done
pack() { tar czf "$final/run-$1.tgz" -C "$out" logs 2>/dev/null; }
step() {  # name timeout command...
  local name=$1 limit=$2; shift 2
  local left=$(( ${BUDGET:-570} - SECONDS ))  # the whole call stays inside the device's 10-minute limit
  [ $left -lt $limit ] && limit=$left
  if [ $limit -lt 5 ]; then echo "== $name skipped: no time left"; return; fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s :: $(tail -n 2 "$out/logs/$name.log" | tr '\n' ' ' | cut -c1-230)"
}
for part in "$@"; do
  case $part in
  ONE)  # the checks, by priority (tests, same-run A/B, sanitizers, the new operations' benches); then TWO
    mkdir -p "$out/logs/csv"
    step info 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo nccl=$LD_LIBRARY_PATH'
    step cuda-tests 120 $D/cuda/tests/moe_tests
    step hipnv-tests 90 $D/hipnv/tests/moe_tests
    step ep-nccl 30 $D/cuda/tests/test_ep_nccl
    step example-layer 20 $D/cuda/tests/moe_example_layer
    pack ONE
    step base-targets-1 40 $D/base/perf/moe_bench --suite targets --csv "$out/logs/csv/base-targets-1.csv"
    step new-targets-1 40 $D/cuda/perf/moe_bench --suite targets --csv "$out/logs/csv/new-targets-1.csv"
    step base-targets-2 40 $D/base/perf/moe_bench --suite targets --csv "$out/logs/csv/base-targets-2.csv"
    step new-targets-2 40 $D/cuda/perf/moe_bench --suite targets --csv "$out/logs/csv/new-targets-2.csv"
    pack ONE
    MOE_TEST_PATHS=policy step memcheck-new 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/moe_tests -tc='permute*,combine*,gating*,align_ep*,route*,reliability*,graph*,golden*' -tce='*GiB*,*large*'
    pack ONE
    step cuda-portable 60 $D/cuda/tests/moe_tests --caps=portable
    MOE_TEST_PATHS=policy step racecheck-new 75 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 $D/cuda/tests/moe_tests -tc='permute*,combine*,gating*,align_ep*,golden*'
    pack ONE
    step bench-align-ep 40 $D/cuda/perf/moe_bench_align_ep --csv "$out/logs/csv/align-ep.csv"
    step bench-datapath 60 $D/cuda/perf/moe_bench_datapath --quick --csv "$out/logs/csv/datapath.csv"
    step bench-gating 50 $D/cuda/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/gating.csv"
    pack ONE ;;
  CORE)  # one call when device time is short: what each open issue needs, most needed first
    mkdir -p "$out/logs/csv"
    step info 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; echo nccl=$LD_LIBRARY_PATH'
    step cuda-tests 90 $D/cuda/tests/moe_tests
    step base-targets-1 30 $D/base/perf/moe_bench --suite targets --csv "$out/logs/csv/base-targets-1.csv"
    step new-targets-1 30 $D/cuda/perf/moe_bench --suite targets --csv "$out/logs/csv/new-targets-1.csv"
    step base-targets-2 30 $D/base/perf/moe_bench --suite targets --csv "$out/logs/csv/base-targets-2.csv"
    step new-targets-2 30 $D/cuda/perf/moe_bench --suite targets --csv "$out/logs/csv/new-targets-2.csv"
    pack CORE
    MOE_TEST_PATHS=policy step memcheck-new 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/moe_tests -tc='permute*,combine*,gating*,align_ep*,route*,reliability*,graph*,golden*' -tce='*GiB*,*large*'
    step hipnv-tests 60 $D/hipnv/tests/moe_tests
    step ep-nccl 20 $D/cuda/tests/test_ep_nccl
    step example-layer 10 $D/cuda/tests/moe_example_layer
    pack CORE
    whl=$(ls $D/pkg/*.whl 2>/dev/null | head -1)
    step python 120 env WHEEL="${whl:+$PWD/$whl}" OUT="$out/logs/python" tools/build-python-gpu.sh
    pack CORE
    MOE_TEST_PATHS=policy step racecheck-new 60 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 $D/cuda/tests/moe_tests -tc='permute*,combine*,gating*,align_ep*,golden*'
    step ep-4096 30 $D/cuda/perf/ep_bench_nccl --tokens 4096 --hidden 7168 --experts 256 --topk 8 --dtype bf16
    bytes=$(grep -m1 '^EP_BYTES' "$out/logs/ep-4096.log" 2>/dev/null)
    disp=$(sed -n 's/.* dispatch=\([0-9,]*\).*/\1/p' <<< "$bytes"); comb=$(sed -n 's/.* combine=\([0-9,]*\).*/\1/p' <<< "$bytes")
    [ -n "$disp" ] && step ep-4096-torch 40 python3 perf/ep_torch_baseline.py --dispatch-bytes "$disp" --combine-bytes "$comb"
    step bench-align-ep 20 $D/cuda/perf/moe_bench_align_ep --csv "$out/logs/csv/align-ep.csv"
    step bench-datapath 30 $D/cuda/perf/moe_bench_datapath --quick --csv "$out/logs/csv/datapath.csv"
    step bench-gating 20 $D/cuda/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/gating.csv"
    pack CORE
    if [ -d $D/gv ]; then
      step gv-tests 40 $D/gv/tests/moe_tests -tc='gating*,topk*,route*'
      step gv-bench-gating 20 $D/gv/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/gv-gating.csv"
      step bench-gating-2 20 $D/cuda/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/gating-2.csv"
    fi
    step cuda-portable 40 $D/cuda/tests/moe_tests --caps=portable
    step ncu-combine-4096x8 30 ncu --clock-control none -k regex:combine --launch-count 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      $D/cuda/perf/moe_bench_datapath --filter "combine 4096x8x4096 bf16"
    step ncu-gating-1_E=256 30 ncu --clock-control none -k regex:gating --launch-count 1 --section SpeedOfLight \
      --section WarpStateStats --section InstructionStats $D/cuda/perf/moe_bench_gating --dtype bf16 --filter "1 E=256 "
    pack CORE ;;
  LAND)  # before landing kernels measured in an AB run: the suite, EP, memcheck of the changed ops, the benches
    mkdir -p "$out/logs/csv"
    step info 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv'
    step cuda-tests 90 $D/cuda/tests/moe_tests
    step ep-nccl 20 $D/cuda/tests/test_ep_nccl
    pack LAND
    MOE_TEST_PATHS=policy step memcheck-changed 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/moe_tests -tc='combine*,gating*,topk*,golden*,permute*' -tce='*GiB*,*large*'
    step memcheck-ep 40 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/test_ep_nccl
    step bench-combine 20 $D/cuda/perf/moe_bench_datapath --quick --filter combine --csv "$out/logs/csv/combine.csv"
    step ep-4096 20 $D/cuda/perf/ep_bench_nccl --tokens 4096 --hidden 7168 --experts 256 --topk 8 --dtype bf16
    pack LAND ;;
  RACE)  # issue 26: racecheck of the align paths (every path that applies, not only the policy's), portable caps, HIP-on-NVIDIA
    step cuda-portable 60 $D/cuda/tests/moe_tests --caps=portable
    step hipnv-tests 60 $D/hipnv/tests/moe_tests
    pack RACE
    i=0
    for tc in 'golden*' 'adversarial*' 'random: sizes*' 'random: expert counts*' 'align_ep golden*,align_ep random: every block*'; do
      i=$((i + 1)); step "racecheck-align-$i" 120 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 \
        $D/cuda/tests/moe_tests -tc="$tc"
      pack RACE
    done ;;
  AB)  # an experiment (.device/pkg/var.tar.xz) against the current build and the base, interleaved, best of 2
    mkdir -p "$out/logs/csv"
    step info 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv'
    step var-tests 120 $D/var/tests/moe_tests
    step var-ep-nccl 30 $D/var/tests/test_ep_nccl
    pack AB
    for r in 1 2; do  # the EP layer (DeepSeek-V3's shape, one rank): phases of both builds
      for b in cuda var; do
        step $b-ep-4096-$r 30 $D/$b/perf/ep_bench_nccl --tokens 4096 --hidden 7168 --experts 256 --topk 8 --dtype bf16
      done
    done
    for r in 1 2; do
      for b in base cuda var; do
        step $b-targets-$r 30 $D/$b/perf/moe_bench --suite targets --csv "$out/logs/csv/$b-targets-$r.csv"
      done
      for b in cuda var; do
        step $b-combine-$r 40 $D/$b/perf/moe_bench_datapath --quick --filter combine --csv "$out/logs/csv/$b-combine-$r.csv"
        step $b-gating-$r 30 $D/$b/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/$b-gating-$r.csv"
      done
      pack AB
    done
    for f in "combine 4096x8x4096 bf16" "combine 1x8x4096 bf16"; do
      step "ncu-var-${f// /_}" 30 ncu --clock-control none -k regex:combine --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats $D/var/perf/moe_bench_datapath --filter "$f"
    done
    pack AB ;;
  TWO)  # what ONE leaves: an experiment's same-run A/B (gv: a gating variant), where time goes (ncu)
    mkdir -p "$out/logs/csv"
    if [ -d $D/gv ]; then
      step gv-tests 60 $D/gv/tests/moe_tests -tc='gating*,topk*,route*'
      step gv-bench-gating 50 $D/gv/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/gv-gating.csv"
      step bench-gating-2 50 $D/cuda/perf/moe_bench_gating --dtype bf16 --csv "$out/logs/csv/gating-2.csv"
      pack TWO
    fi
    for f in "1 E=256 " "16384 E=128 "; do  # where gating's time goes (issue 28)
      step "ncu-gating-${f// /_}" 40 ncu --clock-control none -k regex:gating --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy \
        $D/cuda/perf/moe_bench_gating --dtype bf16 --filter "$f"
    done
    step ncu-combine-4096x8 40 ncu --clock-control none -k regex:combine --launch-count 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      $D/cuda/perf/moe_bench_datapath --filter "combine 4096x8x4096 bf16"
    pack TWO ;;
  PEERS)  # the peers' kernels and torch in the same process (perf/peers/harness), with the budget that is left
    left=$(( ${BUDGET:-570} - SECONDS - 15 ))
    if [ $left -gt 60 ]; then OUT="$out/logs" BUDGET=$left bash .peers/harness/run.sh bench:gating,datapath,align_ep,route --quick > "$out/logs/peers-run.log" 2>&1; echo "== peers rc=$? :: $(tail -n 3 "$out/logs/peers-run.log" | tr '\n' ' ' | cut -c1-200)"; fi
    pack PEERS ;;
  T|T1)
    step info 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; ls $D; echo nccl=$LD_LIBRARY_PATH'
    step cuda-tests 150 $D/cuda/tests/moe_tests
    step cuda-portable 120 $D/cuda/tests/moe_tests --caps=portable
    step cuda-fuzz 60 $D/cuda/tests/moe_fuzz_c_api 20000
    step ep-nccl 60 $D/cuda/tests/test_ep_nccl
    step hipnv-tests 120 $D/hipnv/tests/moe_tests
    step hipnv-portable 100 $D/hipnv/tests/moe_tests --caps=portable
    pack T ;;&
  T|T2)
    export MOE_TEST_PATHS=policy
    step memcheck 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/moe_tests -tce='large*,*million*,catalogue*'
    step memcheck-reliab 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/moe_tests -tc='reliability*,types*,threads*' -tce='*GiB*'
    step memcheck-fuzz 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $D/cuda/tests/moe_fuzz_c_api 2000
    pack T
    unset MOE_TEST_PATHS
    step racecheck 120 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 $D/cuda/tests/moe_tests -tc='golden*,graph*,random: numel*,random: expert counts*,random: sizes*,adversarial*,permute*,combine*,gating*,align_ep*'
    step synccheck 90 compute-sanitizer --tool synccheck --error-exitcode 9 $D/cuda/tests/moe_tests -tc='golden*,graph*,router*,stream order*,random: expert counts*,random: sizes*,gating*,topk*'
    pack T ;;
  P)
    mkdir -p "$out/logs/csv"
    for r in 1 2; do
      step base-targets-$r 90 $D/base/perf/moe_bench --suite targets --csv "$out/logs/csv/base-targets-$r.csv"
      step new-targets-$r 90 $D/cuda/perf/moe_bench --suite targets --csv "$out/logs/csv/new-targets-$r.csv"
      step base-sum-$r 90 $D/base/perf/moe_bench --suite sum --quick --csv "$out/logs/csv/base-sum-$r.csv"
      step new-sum-$r 90 $D/cuda/perf/moe_bench --suite sum --quick --csv "$out/logs/csv/new-sum-$r.csv"
      pack P
    done
    step bench-align-ep 90 $D/cuda/perf/moe_bench_align_ep --csv "$out/logs/csv/align-ep.csv"
    step bench-datapath 120 $D/cuda/perf/moe_bench_datapath --csv "$out/logs/csv/datapath.csv"
    step bench-gating 120 $D/cuda/perf/moe_bench_gating --dtype all --csv "$out/logs/csv/gating.csv"
    pack P
    pack P ;;
  EP)  # issue 30: the same bytes per pair through the handle, NCCL send/recv and torch, in one call
    for tokens in 4096 1024 128; do  # DeepSeek-V3's layer shape (hidden 7168, 256 experts, topk 8), bf16
      name=ep-$tokens
      step $name 90 $D/cuda/perf/ep_bench_nccl --tokens $tokens --hidden 7168 --experts 256 --topk 8 --dtype bf16
      bytes=$(grep -m1 '^EP_BYTES' "$out/logs/$name.log" 2>/dev/null)
      disp=$(sed -n 's/.* dispatch=\([0-9,]*\).*/\1/p' <<< "$bytes")
      comb=$(sed -n 's/.* combine=\([0-9,]*\).*/\1/p' <<< "$bytes")
      if [ -n "$disp" ] && [ -n "$comb" ]; then
        step $name-torch 120 python3 perf/ep_torch_baseline.py --dispatch-bytes "$disp" --combine-bytes "$comb"
      else echo "== $name-torch skipped: no EP_BYTES line in $name.log"; fi
      pack EP
    done ;;
  PY)
    whl=$(ls $D/pkg/*.whl 2>/dev/null | head -1)
    step python 400 env WHEEL="${whl:+$PWD/$whl}" OUT="$out/logs/python" tools/build-python-gpu.sh
    pack PY ;;
  esac
done
