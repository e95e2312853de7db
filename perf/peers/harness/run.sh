#!/usr/bin/env bash
# On the GPU machine, from the repo root (the folder is carried as .peers):
#   bash .peers/harness/run.sh info tests bench:gating,datapath,align_ep,route,align --quick
# Steps (in the order given):
#   info                 GPU, driver, clocks, torch/triton versions, the libraries load and list their symbols
#   tests                bin/moe_tests (the project's doctest binary, if carried), then bin/moe_fuzz_c_api if present
#   bench[:P1,P2,...]    bench.py, one process per part (default: floors,align,sum,gating,datapath,align_ep,route),
#                        results_<part>.json merged into results.json, then report.py -> report.md
#   clocks               nvidia-smi clocks/temperature line
#   memcheck, racecheck  compute-sanitizer on bin/moe_tests
# Options (anywhere): --quick (trimmed shapes, passed to bench.py).  Environment: BUDGET (s, whole run, default
# 470), BENCH_MAX, TESTS_MAX, SAN_MAX (s per step), BENCH_ARGS (extra bench.py arguments), OUT (default ./out).
# Every step logs to <step>.log in a work folder; after EVERY step the whole folder (logs, results.json,
# report.md, steps.txt) is packed into ONE tarball: $OUT/peers.tgz.
set -uo pipefail
cd "$(dirname "$0")"
D=$(pwd)
OUT=${OUT:-$D/out}; mkdir -p "$OUT"
W=$(mktemp -d)
export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
deadline=$(( SECONDS + ${BUDGET:-470} ))
QUICK=""
for a in "$@"; do [ "$a" = "--quick" ] && QUICK="--quick"; done
pack() { tar czf "$OUT/peers.tgz.tmp" -C "$W" . && mv -f "$OUT/peers.tgz.tmp" "$OUT/peers.tgz"; }
left() { echo $(( deadline - SECONDS - 10 )); }
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  local t=$(( max < l ? max : l ))
  if [ $t -lt 15 ]; then echo "==== $name SKIPPED (no time left)" | tee -a "$W/steps.txt"; pack; return; fi
  echo "==== $name (timeout $t s): $*"
  local t0=$SECONDS
  timeout -k 5 $t "$@" > "$W/$name.log" 2>&1; local rc=$?
  tail -n "${TAILN:-8}" "$W/$name.log"
  echo "==== $name rc=$rc $((SECONDS - t0)) s" | tee -a "$W/steps.txt"
  pack
}
Q='nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,persistence_mode --format=csv'
cat > "$W/info.py" <<'PYEOF'
import ctypes, os, sys
for n in ("libmoe_routing.so", "libpeers.so"):
    p = os.path.join("bin", n)
    try:
        l = ctypes.CDLL(p); print("loaded", p, os.path.getsize(p), "bytes")
    except OSError as e:
        print("CANNOT LOAD", p, e); sys.exit(1)
l = ctypes.CDLL("bin/libmoe_routing.so"); l.moe_backend_name.restype = ctypes.c_char_p
l.moe_last_error.restype = ctypes.c_char_p
print("project backend", l.moe_backend_name().decode(), "check", l.moe_backend_check(), l.moe_last_error().decode())
import torch, numpy
print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__,
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NONE")
try:
    import triton; print("triton", triton.__version__)
except Exception as e:
    print("triton import failed", e)
PYEOF
cat > "$W/merge.py" <<'PYEOF'
import glob, json, os, sys
W = sys.argv[1]
R = {"merged_from": []}
for f in sorted(glob.glob(os.path.join(W, "results_*.json"))):
    try:
        r = json.load(open(f))
    except Exception as e:
        R.setdefault("merge_errors", []).append("%s: %r" % (os.path.basename(f), e))
        continue
    R["merged_from"].append(os.path.basename(f))
    for k, v in r.items():
        if k == "part_status":
            R.setdefault(k, {}).update({kk: vv for kk, vv in v.items() if kk != "env"})
        elif k in ("skipped", "missing_symbols"):
            R.setdefault(k, [])
            R[k] += [x for x in v if x not in R[k]]
        elif k not in R:
            R[k] = v
        elif isinstance(v, dict) and isinstance(R[k], dict) and k not in ("env", "args"):
            R[k].update(v)
json.dump(R, open(os.path.join(W, "results.json"), "w"), indent=1)
print("merged", R["merged_from"])
PYEOF
echo "steps: $* (budget ${BUDGET:-470} s) -> $OUT/peers.tgz" | tee "$W/steps.txt"
for s in "$@"; do
  case $s in
    --quick) ;;
    info) step info 60 bash -c "nvidia-smi; $Q; uname -r; nproc; ldd bin/libpeers.so bin/libmoe_routing.so; $PY $W/info.py; nvcc --version 2>/dev/null | tail -2; compute-sanitizer --version 2>/dev/null | head -3; cat BUILD.md 2>/dev/null | head -40" ;;
    clocks) step clocks_$SECONDS 20 bash -c "$Q" ;;
    tests)
      # moe_tests links libnccl.so.2 (the project's EP part): take it from the Python env's nvidia-nccl wheel
      NCCL_DIR=$($PY -c "
import glob, os, site, sys
c = [os.path.dirname(p) for d in site.getsitepackages() + [site.getusersitepackages()] + sys.path
     for p in glob.glob(os.path.join(d, 'nvidia', 'nccl', 'lib', 'libnccl.so*'))]
print(c[0] if c else '')" 2>/dev/null || true)
      echo "libnccl for moe_tests: ${NCCL_DIR:-not found in the Python env (moe_tests may not start)}" | tee -a "$W/steps.txt"
      [ -n "$NCCL_DIR" ] && export LD_LIBRARY_PATH=$NCCL_DIR:$LD_LIBRARY_PATH
      if [ -x bin/moe_tests ]; then step tests ${TESTS_MAX:-150} bin/moe_tests
      else echo "==== tests SKIPPED (bin/moe_tests not carried)" | tee -a "$W/steps.txt"; fi
;;
    bench|bench:*)
      # one process per part: a crash (segfault, sticky CUDA error) in one part cannot take the others with it;
      # each part gets a share of the time left, in proportion to its usual cost (unused time flows on).
      parts=${s#bench}; parts=${parts#:}; [ -z "$parts" ] && parts=floors,align,sum,gating,datapath,align_ep,route
      IFS=, read -ra PL <<< "$parts"
      declare -A WGT=([floors]=3 [align]=10 [sum]=6 [gating]=12 [datapath]=30 [align_ep]=6 [route]=10 [client]=10)
      n=${#PL[@]}
      for ((j=0; j<n; j++)); do
        p=${PL[$j]}; wsum=0
        for ((q=j; q<n; q++)); do wsum=$(( wsum + ${WGT[${PL[$q]}]:-10} )); done
        l=$(left); cap=$(( l * ${WGT[$p]:-10} / wsum )); [ $cap -lt 40 ] && cap=40; [ $cap -gt $l ] && cap=$l
        step bench_$p $cap $PY bench.py $p $QUICK --budget $(( cap > 30 ? cap - 15 : cap / 2 )) --out "$W" --json results_$p.json ${BENCH_ARGS:-}
      done
      $PY "$W/merge.py" "$W" > "$W/merge.log" 2>&1 || cat "$W/merge.log"
      if [ -f "$W/results.json" ]; then
        $PY report.py "$W/results.json" > "$W/report.md" 2> "$W/report.err"; rrc=$?
        echo "report.md: $(wc -l < "$W/report.md") lines (report.py rc=$rrc)" | tee -a "$W/steps.txt"
      fi
      pack ;;
    memcheck) step memcheck ${SAN_MAX:-200} compute-sanitizer --tool memcheck --error-exitcode 9 bin/moe_tests -tce='large*,*million*' ;;
    racecheck) step racecheck ${SAN_MAX:-200} compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 bin/moe_tests -tc='golden*,graph*,random: numel*,random: expert counts*,random: sizes*,adversarial*' ;;
    *) echo "unknown step $s (known: info tests bench[:parts] clocks memcheck racecheck --quick)" | tee -a "$W/steps.txt" ;;
  esac
done
pack
ls -la "$OUT"
