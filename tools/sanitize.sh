#!/usr/bin/env bash
# The sanitizer job of CI (issue 32): host backends built with sanitizers; any report fails (every sanitizer
# aborts at its first report: -fno-sanitize-recover=all, halt_on_error).
#   tools/sanitize.sh [JOB...]   JOB: asan-cpu asan-kokkos tsan-cpu tsan-kokkos (default: all four)
#   asan-*  -fsanitize=address,undefined: the whole suite (ctest: doctest suite, Fortran smoke test, and the
#           fuzz of every C entry point), then the fuzz again with more iterations and other seeds
#   tsan-*  -fsanitize=thread: the threaded test (8 threads calling align and sum at once)
# Build folders: build-<JOB> (MOE_SANITIZE, RelWithDebInfo, no benchmark). Packages: tools/install-deps.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(asan-cpu asan-kokkos tsan-cpu tsan-kokkos)


# allocator_may_return_null: moe_malloc of an impossible size must come back as MOE_ERROR_BACKEND, as it does
# without ASan, not as an ASan abort
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

configure() {  # backend, sanitizers, build dir
  cmake -S "$here" -B "$3" -G Ninja -DMOE_BACKEND="$1" -DMOE_SANITIZE="$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DMOE_BUILD_PERF=OFF -DMOE_BUILD_PYTHON=OFF -DMOE_WARNINGS_AS_ERRORS=ON >/dev/null
}

for job in "${jobs[@]}"; do
  case $job in
    asan-cpu|asan-kokkos) backend=${job#asan-} ;;
    tsan-cpu|tsan-kokkos) backend=${job#tsan-} ;;
    *) echo "unknown job $job (asan-cpu asan-kokkos tsan-cpu tsan-kokkos)"; exit 2 ;;
  esac
  backend=${backend^^}
  build="$here/build-$job"
  t0=$SECONDS
  echo "==== $job: build ($backend)"
  if [[ $job == asan-* ]]; then
    configure "$backend" address,undefined "$build"
    cmake --build "$build" --parallel ${CMAKE_BUILD_PARALLEL_LEVEL:-}
    echo "==== $job: the whole suite"
    ctest --test-dir "$build" --output-on-failure
    echo "==== $job: the fuzz, more seeds"
    for seed in 2 3; do "$build/tests/moe_fuzz_c_api" 20000 "$seed"; done
  else
    configure "$backend" thread "$build"
    cmake --build "$build" --parallel ${CMAKE_BUILD_PARALLEL_LEVEL:-} --target moe_tests
    echo "==== $job: the threaded test"
    "$build/tests/moe_tests" -tc='threads*'
  fi
  echo "==== $job: clean ($((SECONDS - t0)) s)"
done
