#!/usr/bin/env bash
# What a GPU machine runs for a build made elsewhere (binaries carried in): the doctest suite, the
# compute-sanitizer checks, the consumer, and the benchmark. Logs and CSV go to $OUT (or ./gpu-check-out).
#   tools/gpu-check.sh BUILD_DIR [what...]
#   what: info tests tests-portable paths memcheck racecheck synccheck memcheck-reliability fuzz memcheck-fuzz
#         bench-<suite> consumer
# tests: the whole suite, each align case on every path that applies on this GPU (MOE_TEST_PATHS=policy in the
# environment: the policy's path only, e.g. for a slow sanitizer run); tests-portable: the same planning as a
# device without clusters and dependent launch does (the plan of HIP on AMD); paths: the path and policy tests.
set -uo pipefail
build=$1; shift
out=${OUT:-gpu-check-out}; mkdir -p "$out"
tag=$(basename "$build")
status=0
run() {  # name, command...: log to $out/$tag-name.log, print the tail
  local name=$1; shift
  echo "==== $tag $name: $*"
  local t0=$SECONDS
  "$@" > "$out/$tag-$name.log" 2>&1; local rc=$?
  tail -n 6 "$out/$tag-$name.log"
  echo "==== $tag $name rc=$rc ($((SECONDS - t0)) s)"
  [ $rc -eq 0 ] || status=1
}
for what in "$@"; do
  case $what in
    info) run info bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; uname -r' ;;
    tests) run tests "$build/tests/moe_tests" ;;
    tests-portable) run tests-portable "$build/tests/moe_tests" --caps=portable ;;
    paths) run paths "$build/tests/moe_tests" -tc='paths:*,policy:*,graph*,stream order*' ;;
    memcheck) run memcheck compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$build/tests/moe_tests" \
                -tce='large*,*million*,catalogue*' ;;
    racecheck) run racecheck compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 \
                "$build/tests/moe_tests" -tc='golden*,graph*,random: numel*,random: expert counts*,random: sizes*,adversarial*' ;;
    synccheck) run synccheck compute-sanitizer --tool synccheck --error-exitcode 9 "$build/tests/moe_tests" \
                -tc='golden*,graph*,router*,stream order*,random: expert counts*,random: sizes*' ;;
    memcheck-reliability) run memcheck-reliability compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
                "$build/tests/moe_tests" -tc='reliability*,types*,threads*' -tce='*GiB*' ;;  # issue 32's tests
    fuzz) run fuzz "$build/tests/moe_fuzz_c_api" 20000 ;;
    memcheck-fuzz) run memcheck-fuzz compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
                "$build/tests/moe_fuzz_c_api" 3000 ;;
    consumer) run consumer bash -c "$build/consumer/consumer_cxx && $build/consumer/consumer_c" ;;
    bench-*) run "${what}" "$build/perf/moe_bench" --suite "${what#bench-}" --csv "$out/$tag-${what#bench-}.csv" ;;
    *) echo "unknown step $what"; status=2 ;;
  esac
done
exit $status
