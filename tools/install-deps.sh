#!/usr/bin/env bash
# Installs, by Debian package name, what moe-routing builds and tests with, for the backends named:
#   tools/install-deps.sh [BACKEND|charts ...]      (no argument: the CPU backend's packages)
# Always:   cmake ninja-build g++ gfortran      compilers (gfortran: the Fortran module, smoke test and consumer;
#                                                 g++ brings the ASan/UBSan/TSan runtimes of tools/sanitize.sh)
#           doctest-dev                         test framework (header only)
#           openmpi-bin libopenmpi-dev          MPI (multi-rank tests)
# KOKKOS:   libtrilinos-kokkos-dev              Kokkos 3.4 (Serial)
# HIP:      hipcc libamdhip64-dev rocm-device-libs   HIP 5.2 / clang-15 (AMD targets)
# CUDA:     nothing from Debian: the CUDA toolkit (nvcc) is installed separately; the build finds it
# From PyPI, for python3 (the Python package in python/ and its tests): nanobind, scikit-build-core, numpy, pytest,
#           mpi4py (moe_routing.ep's multi-rank tests, python_ep_mpi_np*; a wheel, on the Open MPI above).
# charts:   python3-matplotlib                  perf/plot_results.py only
set -euo pipefail
pkgs=(cmake ninja-build g++ gfortran doctest-dev openmpi-bin libopenmpi-dev)
for what in "${@:-CPU}"; do
  case ${what^^} in
    CPU|CUDA) ;;
    KOKKOS) pkgs+=(libtrilinos-kokkos-dev) ;;
    HIP) pkgs+=(hipcc libamdhip64-dev rocm-device-libs) ;;
    CHARTS) pkgs+=(python3-matplotlib) ;;
    *) echo "install-deps.sh: unknown '$what' (CPU, CUDA, HIP, KOKKOS or charts)" >&2; exit 2 ;;
  esac
done
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
if command -v python3 >/dev/null && ! python3 -c "import nanobind, scikit_build_core, numpy, pytest, mpi4py" 2>/dev/null; then
  python3 -m pip install --quiet "nanobind>=2" "scikit-build-core>=0.10" numpy pytest mpi4py
fi
