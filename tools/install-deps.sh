#!/usr/bin/env bash
# Installs, by Debian package name, everything moe-routing builds and tests with.
#   doctest-dev                       test framework (header only)
#   libtrilinos-kokkos-dev            Kokkos 3.4 (Serial) for -DMOE_BACKEND=KOKKOS
#   hipcc libamdhip64-dev rocm-device-libs
#                                     HIP 5.2 / clang-15 for -DMOE_BACKEND=HIP (AMD targets)
#   python3-matplotlib                perf/plot_results.py (charts only)
#   libopenmpi-dev openmpi-bin        -DMOE_WITH_MPI=ON: expert-parallel dispatch/combine and its mpirun tests
# The CUDA toolkit (nvcc) is not a Debian package here; the CUDA build uses it when present.
# From PyPI, for python3 (the Python package in python/ and its tests): nanobind, scikit-build-core, numpy, pytest.
set -euo pipefail
pkgs=(cmake ninja-build g++ doctest-dev libtrilinos-kokkos-dev
      hipcc libamdhip64-dev rocm-device-libs python3-matplotlib libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if command -v python3 >/dev/null && ! python3 -c "import nanobind, scikit_build_core, numpy, pytest" 2>/dev/null; then
  python3 -m pip install --quiet "nanobind>=2" "scikit-build-core>=0.10" numpy pytest
fi
