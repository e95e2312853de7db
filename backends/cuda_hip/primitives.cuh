// Warp- and block-level building blocks of the routing kernels, written once for CUDA and HIP through
// gpu_runtime.hpp. Nothing here assumes a warp of 32 lanes.
#pragma once

#include "gpu_runtime.hpp"

namespace moe {
namespace gpu {

// The lanes of this warp whose `bucket` (of `bits` bits) equals mine, among lanes with `valid` set (0 for an
// invalid lane), by one ballot per bit: a fixed cost, whatever the values. (Not unrolled to 10 bits with a test per
// bit: align_policy.hpp, [match-any].)
MOE_DEVICE lane_mask_t match_bucket_ballots(int bucket, bool valid, int bits) {
  lane_mask_t peers = ballot(valid);
  for (int k = 0; k < bits; ++k) {
    const bool bit = (bucket >> k) & 1;
    const lane_mask_t set = ballot(bit);
    peers &= bit ? set : ~set;
  }
  return valid ? peers : lane_mask_t{0};
}

// The same by match.any where the device has it (MOE_GPU_HAS_MATCH_ANY: NVIDIA), whose cost grows with the distinct
// values among the lanes: cheaper than the ballots where few experts are present (one token, skewed ids, most ids
// dropped), dearer where a warp step holds ~30 distinct experts (align_policy.hpp, [match-any]). AMD: ballots.
MOE_DEVICE lane_mask_t match_bucket(int bucket, bool valid, int bits) {
#if MOE_GPU_HAS_MATCH_ANY
  (void)bits;  // every lane runs both intrinsics, valid or not
  const lane_mask_t peers = match_any(bucket) & ballot(valid);
  return valid ? peers : lane_mask_t{0};
#else
  return match_bucket_ballots(bucket, valid, bits);
#endif
}

// 16 bytes of values (Traits::storage): the unit of the memory-bound kernels' loads and stores (moe_sum,
// moe_combine, the EP combine's reduction), over rows that are 16-byte aligned.
template <class Traits>
struct alignas(16) Vec16 {
  static constexpr int kCount = 16 / sizeof(typename Traits::storage);
  typename Traits::storage v[kCount];
};

// Inclusive scan across the lanes of a warp under an associative operation op(earlier, later) (block_sort's run
// starts by max), and the prefix sum every other kernel takes.
template <class T, class Op>
MOE_DEVICE T warp_inclusive_scan(T v, Op op) {
  const int lane = lane_id();
  for (int d = 1; d < kWarpSize; d <<= 1) {
    const T up = shfl_up(v, d);
    if (lane >= d) v = op(up, v);
  }
  return v;
}
template <class T>
MOE_DEVICE T warp_inclusive_scan(T v) {
  return warp_inclusive_scan(v, [](T up, T mine) { return up + mine; });
}
// The whole warp's reduction under op, in every lane.
template <class T, class Op>
MOE_DEVICE T warp_reduce(T v, Op op) {
  for (int d = kWarpSize / 2; d > 0; d >>= 1) v = op(v, shfl_xor(v, d));
  return v;
}

// Sum across the lanes of a warp, in every lane. Integer addition, so the order does not matter. Where the device
// has it (MOE_GPU_HAS_REDUX_ADD: NVIDIA sm_80+), one redux instruction instead of a chain of shuffles.
MOE_DEVICE std::int32_t warp_sum(std::int32_t v) {
#if MOE_GPU_HAS_REDUX_ADD
  return reduce_add(v);
#else
  for (int d = kWarpSize / 2; d > 0; d >>= 1) v += shfl_xor(v, d);
  return v;
#endif
}

// Exclusive prefix sum of one value per thread, in thread order, by the whole block; `total` gets the sum of
// all. `scratch` is shared memory of warps_per_block() + 1 values, read until the caller's next barrier.
template <class T>
__device__ T block_scan_values(T v, T* scratch, T& total) {
  const T incl = warp_inclusive_scan(v);
  const int W = warps_per_block(), lane = lane_id();
  if (lane == kWarpSize - 1) scratch[warp_id()] = incl;
  __syncthreads();
  if (warp_id() == 0) {  // W <= kWarpSize: one warp scans the warps' totals
    const T w = lane < W ? scratch[lane] : T{0};
    const T inc = warp_inclusive_scan(w);
    if (lane < W) scratch[lane] = inc - w;
    if (lane == W - 1) scratch[W] = inc;
  }
  __syncthreads();
  total = scratch[W];
  return scratch[warp_id()] + incl - v;
}

// Exclusive prefix sum of data[0, n) in shared memory, by a block of exactly kWarps warps in which thread t owns
// values t, t + blockDim, t + 2 blockDim, ... and reads only those: where each thread wrote its own, no barrier is
// needed between those writes and this scan. Calls set(i, prefix) for each owned i (after the one barrier inside)
// and returns the total to every thread; data[] itself is left as the warps' partial prefixes. Per row of blockDim
// values: a warp scan per warp, its sum to scratch; after the barrier every warp adds up the sums before its own
// itself, instead of one warp scanning them between two more barriers. Strided (not a run per thread) so that the
// owners' own loops over experts are coalesced (align_policy.hpp, [strided]). `scratch`: rows * kWarps values,
// read until the caller's next barrier.
template <int kWarps, class T, class Set>
__device__ T block_scan_owned(T* data, int n, T* scratch, Set&& set) {
  const int w = warp_id(), lane = lane_id(), threads = kWarps * kWarpSize;
  const int rows = (n + threads - 1) / threads;
#pragma unroll 1
  for (int j = 0; j < rows; ++j) {
    const int i = j * threads + static_cast<int>(threadIdx.x);
    const T v = i < n ? data[i] : T{0};
    const T incl = warp_inclusive_scan(v);
    if (i < n) data[i] = incl - v;
    if (lane == kWarpSize - 1) scratch[j * kWarps + w] = incl;
  }
  __syncthreads();
  T total = 0;
#pragma unroll 1
  for (int j = 0; j < rows; ++j) {
    T row = 0, before = 0;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) {
      const T s = scratch[j * kWarps + q];
      row += s;
      before += q < w ? s : T{0};
    }
    const int i = j * threads + static_cast<int>(threadIdx.x);
    if (i < n) set(i, total + before + data[i]);
    total += row;
  }
  return total;
}

// Exclusive prefix sum over n values in global memory, by the whole block, with one barrier pair however long
// the array: each warp takes a contiguous tile and walks it in rows of kWarpSize values (loads and stores
// coalesced), kRows rows at a time with their loads in flight. It sums its tile; the block scans the warps' sums;
// then each warp walks its tile again, from its start, with independent warp scans per row. load(i) gives
// value i (a T), store(i, prefix) takes its exclusive prefix; store may overwrite what load reads (a barrier
// separates the two walks). Returns the total to every thread; `scratch` as for block_scan_values. (Not a run of
// consecutive values per thread, a memory request per value, nor chunks of the whole block with a block scan
// each: align_policy.hpp, [tiles].)
template <int kRows, class T, class Load, class Store>
__device__ T block_scan_tiles(int n, T* scratch, Load&& load, Store&& store) {
  const int lane = lane_id(), W = warps_per_block(), step = kRows * kWarpSize;
  const int tile = ((n + W - 1) / W + kWarpSize - 1) / kWarpSize * kWarpSize;
  const int lo = min(n, warp_id() * tile), hi = min(n, lo + tile);
  const auto load_rows = [&](int r0, T(&v)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = r0 + r * kWarpSize + lane;
      v[r] = i < hi ? load(i) : T{0};
    }
  };
  T v[kRows], sum = 0;  // v: the tile's first rows, kept for the second walk (all of it for short arrays)
  load_rows(lo, v);
#pragma unroll
  for (int r = 0; r < kRows; ++r) sum += v[r];
#pragma unroll 1
  for (int r0 = lo + step; r0 < hi; r0 += step) {
    T u[kRows];
    load_rows(r0, u);
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum += u[r];
  }
  sum = warp_inclusive_scan(sum);  // the last lane holds the tile's sum
  T total;
  T run = block_scan_values(lane == kWarpSize - 1 ? sum : T{0}, scratch, total);  // the tiles before
#pragma unroll 1
  for (int r0 = lo; r0 < hi; r0 += step) {
    if (r0 != lo) load_rows(r0, v);
    T excl[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const T incl = warp_inclusive_scan(v[r]);
      excl[r] = run + incl - v[r];
      run += shfl(incl, kWarpSize - 1);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = r0 + r * kWarpSize + lane;
      if (i < hi) store(i, excl[r]);
    }
  }
  return total;
}

}  // namespace gpu
}  // namespace moe
