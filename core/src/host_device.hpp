// MOE_HD: a function every backend compiles for host and device alike (CUDA, HIP, Kokkos on either, or a
// plain host compiler).
#pragma once

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__ / __device__
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MOE_HD __host__ __device__ __forceinline__
#else
#define MOE_HD inline
#endif
