// Warp- and block-level building blocks of the routing kernels, written once for CUDA and HIP through
// gpu_runtime.hpp. Nothing here assumes a warp of 32 lanes.
#pragma once

#include "gpu_runtime.hpp"

namespace moe {
namespace gpu {

// The lanes of this warp whose `bucket` equals mine, among lanes with `valid` set (0 for an invalid lane).
// NVIDIA: match.any. AMD (no such instruction): one ballot per bit of the bucket number.
MOE_DEVICE lane_mask_t match_bucket(int bucket, bool valid, int bits) {
#if !defined(__HIP_PLATFORM_AMD__)
  (void)bits;  // every lane runs both intrinsics, valid or not
  const lane_mask_t peers = __match_any_sync(0xFFFFFFFFu, bucket) & ballot(valid);
#else
  lane_mask_t peers = ballot(valid);
  for (int k = 0; k < bits; ++k) {
    const bool bit = (bucket >> k) & 1;
    const lane_mask_t set = ballot(bit);
    peers &= bit ? set : ~set;
  }
#endif
  return valid ? peers : lane_mask_t{0};
}

// Inclusive prefix sum across the lanes of a warp.
template <class T>
MOE_DEVICE T warp_inclusive_scan(T v) {
  const int lane = lane_id();
  for (int d = 1; d < kWarpSize; d <<= 1) {
    const T up = shfl_up(v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// Sum across the lanes of a warp, in every lane. Integer addition, so the order does not matter. NVIDIA
// sm_80+: one redux instruction instead of a chain of shuffles.
MOE_DEVICE std::int32_t warp_sum(std::int32_t v) {
#if !defined(__HIP_PLATFORM_AMD__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xFFFFFFFFu, v);
#else
  for (int d = kWarpSize / 2; d > 0; d >>= 1) v += shfl_xor(v, d);
  return v;
#endif
}

// Exclusive prefix sum of data[0, n) in place (any memory the block can read and write), by the whole block;
// returns the total to every thread. `scratch` is shared memory of warps_per_block() + 1 values. Each thread
// owns a contiguous run of ceil(n / blockDim) values, so order is fixed and the result deterministic.
// Ends with a barrier: data is final for every thread on return.
template <class T>
__device__ T block_exclusive_scan(T* data, int n, T* scratch) {
  const int per = (n + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int begin = min(n, static_cast<int>(threadIdx.x) * per);
  const int end = min(n, begin + per);
  T local = 0;
#pragma unroll 4
  for (int i = begin; i < end; ++i) local += data[i];
  const T incl = warp_inclusive_scan(local);
  const int W = warps_per_block(), lane = lane_id();
  if (lane == kWarpSize - 1) scratch[warp_id()] = incl;
  __syncthreads();
  if (warp_id() == 0) {  // W <= kWarpSize: one warp scans the warps' totals
    const T v = lane < W ? scratch[lane] : T{0};
    const T inc = warp_inclusive_scan(v);
    if (lane < W) scratch[lane] = inc - v;
    if (lane == W - 1) scratch[W] = inc;
  }
  __syncthreads();
  T run = scratch[warp_id()] + incl - local;
  for (int i = begin; i < end; ++i) {
    const T v = data[i];
    data[i] = run;
    run += v;
  }
  const T total = scratch[W];
  __syncthreads();
  return total;
}

}  // namespace gpu
}  // namespace moe
