// two_digit_radix: more than 1024 experts. Two stable passes of three_launches' kernels (low, then high digit
// of the expert) and, between and after them, the kernels below.
#pragma once

#include "align/three_launches.cuh"

namespace moe {
namespace gpu {

// Between the passes: per-expert unpadded and padded starts, and the padded total, by one block, over groups of
// 4 consecutive experts: 16-byte loads and stores, a quarter of the warp scans, one row per batch
// (align_policy.hpp, [scan-groups]). Both scans in one: each value packs the count in its high 32 bits and
// the padded count in the low ones (both sums stay below 2^31, so no carry crosses).
__global__ void __launch_bounds__(kScanThreads) expert_scan_kernel(const std::int32_t* expert_count,
                                                                   std::int32_t* expert_start,
                                                                   std::int32_t* expert_padded_start,
                                                                   std::int32_t* scalars, AlignOut out) {
  begin_after_prior_grid();
  __shared__ std::int64_t scratch[kScanThreads / 32 + 1];
  const int E = out.num_experts;
  // group g: experts 4g .. 4g+3 (16-byte aligned: the workspace regions are); the last group may be short
  const auto counts = [&](int g, std::int32_t(&c)[4]) {
    if (4 * g + 4 <= E) {
      const int4 v = reinterpret_cast<const int4*>(expert_count)[g];
      c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) c[q] = 4 * g + q < E ? expert_count[4 * g + q] : 0;
    }
  };
  const std::int64_t total = block_scan_tiles<1>(
      (E + 3) / 4, scratch,
      [&](int g) {
        std::int32_t c[4], sum = 0, padded_sum = 0;
        counts(g, c);
#pragma unroll
        for (int q = 0; q < 4; ++q) sum += c[q], padded_sum += out.padded(c[q]);
        return std::int64_t{sum} << 32 | padded_sum;
      },
      [&](int g, std::int64_t prefix) {
        std::int32_t c[4], start[4], padded_start[4];
        counts(g, c);  // again: an L1 hit
        start[0] = static_cast<std::int32_t>(prefix >> 32);
        padded_start[0] = static_cast<std::int32_t>(prefix & 0xFFFFFFFF);
#pragma unroll
        for (int q = 1; q < 4; ++q) {
          start[q] = start[q - 1] + c[q - 1];
          padded_start[q] = padded_start[q - 1] + out.padded(c[q - 1]);
        }
        if (4 * g + 4 <= E) {
          reinterpret_cast<int4*>(expert_start)[g] = make_int4(start[0], start[1], start[2], start[3]);
          reinterpret_cast<int4*>(expert_padded_start)[g] =
              make_int4(padded_start[0], padded_start[1], padded_start[2], padded_start[3]);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q)
            if (4 * g + q < E) expert_start[4 * g + q] = start[q], expert_padded_start[4 * g + q] = padded_start[q];
        }
      });
  if (threadIdx.x == 0) {
    scalars[1] = static_cast<std::int32_t>(total & 0xFFFFFFFF);
    *out.post_pad = static_cast<std::int32_t>(total & 0xFFFFFFFF);
  }
}

// Last: expert_ids over the grid (write_expert_ids: more experts than warps, so a lane per expert).
__global__ void __launch_bounds__(kThreads) fill_kernel(const std::int32_t* expert_padded_start,
                                                        const std::int32_t* scalars, AlignOut out) {
  begin_after_prior_grid();
  write_expert_ids(expert_padded_start, out.num_experts, scalars[1], out,
                   static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / kWarpSize),
                   static_cast<int>(gridDim.x * blockDim.x / kWarpSize));
}

}  // namespace gpu
}  // namespace moe
