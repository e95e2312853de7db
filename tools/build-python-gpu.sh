#!/usr/bin/env bash
# On the GPU machine (no internet; PyTorch, CuPy, JAX, nanobind, scikit-build-core, cmake and ninja installed):
# build and install the CUDA backend of the Python package into the current Python, run the pytest suite on
# torch and CuPy (and JAX) arrays, then tools/python_gpu_check.py (overhead, no host sync, graphs, compile).
# Logs go to $OUT (or ./python-gpu-out).
#   tools/build-python-gpu.sh [extra pip -C options...]
#   WHEEL=path.whl tools/build-python-gpu.sh   installs a cp312 wheel built elsewhere (tools/gpu-session.sh pack
#                                              makes one) instead of building here: the device's minutes go to tests
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$PWD/python-gpu-out}; mkdir -p "$out"
PY=${PYTHON:-python3}
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX must not take the GPU's memory from torch and CuPy
status=0
step() {  # name, command...: log to $out/name.log, print the tail
  local name=$1; shift
  echo "==== $name: $*"
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1; local rc=$?
  tail -n 25 "$out/$name.log"
  echo "==== $name rc=$rc ($((SECONDS - t0)) s)"
  [ $rc -eq 0 ] || status=1
  return $rc
}
step versions bash -c "$PY --version; $PY -c 'import torch, nanobind, scikit_build_core; print(\"torch\", torch.__version__, \"nanobind\", nanobind.__version__, \"scikit-build-core\", scikit_build_core.__version__)'; $PY -c 'import cupy; print(\"cupy\", cupy.__version__)'; $PY -c 'import jax; print(\"jax\", jax.__version__)'; cmake --version | head -1; ninja --version; nvcc --version | tail -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader"
cd "$here"
if [ -n "${WHEEL:-}" ]; then
  step install "$PY" -m pip install --no-deps --force-reinstall "$WHEEL" || exit 1
else
  step build "$PY" -m pip install --no-build-isolation --no-deps -v . \
    -C cmake.define.MOE_BACKEND=CUDA -C cmake.define.MOE_CUDA_ARCHITECTURES=90 -C build-dir=build-pygpu "$@" \
    || exit 1
fi
cd /tmp
step backend "$PY" -c "import moe_routing as m; print(m.backend_name()); m.backend_check(); print([o for o in ('align_block_size_ep','permute','combine','topk_gating','route') if m.available(o)])"
step pytest "$PY" -m pytest -v -p no:cacheprovider -rs "$here/python/tests"
step example "$PY" "$here/examples/python/moe_layer.py"
step gpu-check "$PY" "$here/tools/python_gpu_check.py" --csv "$out/python_overhead.csv"
exit $status
