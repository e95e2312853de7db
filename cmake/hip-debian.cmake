# Initial cache (cmake -C) for -DMOE_BACKEND=HIP with Debian 12's ROCm 5.2 packages (hipcc, libamdhip64-dev,
# rocm-device-libs): clang-15 as the HIP compiler, Debian's device-library and cmake locations. A real ROCm
# install (/opt/rocm) needs none of this: configure with -DMOE_BACKEND=HIP alone.
set(CMAKE_HIP_COMPILER /usr/bin/clang++-15 CACHE FILEPATH "")
set(CMAKE_HIP_FLAGS_INIT "--rocm-path=/usr --rocm-device-lib-path=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode" CACHE STRING "")
set(MOE_HIP_DEBIAN_LAYOUT ON CACHE BOOL "Debian's ROCm layout: make a ROCm root for CMake's HIP language")
