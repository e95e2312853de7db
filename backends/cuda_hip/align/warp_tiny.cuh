// warp_tiny: up to 32 ids, any number of experts, the layout derived by every warp from the ids alone.
#pragma once

#include <type_traits>

#include "align/common.cuh"

namespace moe {
namespace gpu {

// At most 32 ids, any number of experts. Every warp holds all ids, one per lane, and derives the
// layout from them alone: the experts present and their counts (match_bucket), each one's padded start (the
// padded counts of present experts with smaller numbers). Nothing is kept per expert, so 65536 experts cost
// what 8 do. Block 0 writes the occupied part [0, total) of both outputs (and, for align_ep, the counts and
// positions: warp 0 knows each id's position and each present expert's count); the grid the rest.
template <bool kPow2, class Src, class Extras>
__global__ void __launch_bounds__(kThreads) tiny_kernel(Src src, AlignOut out, Extras extras) {
  constexpr bool kEp = std::is_same_v<Extras, EpExtras>;
  // The next call may be scheduled before this one even starts waiting (safe: that call's wait is for this
  // grid's completion). Not in block_per_expert, whose hundreds of waiting blocks would hold SM slots the running
  // call needs (align_policy.hpp, [early-allow]).
  allow_next_grid();
  wait_prior_grid();
  const int lane = lane_id(), n = static_cast<int>(src.size());
  const std::int32_t key = lane < n ? src.load(lane).key : -1;
  const bool valid = key >= 0;
  const lane_mask_t peers = match_bucket(valid ? key : 0, valid, src.digit.bits);
  const bool leader = valid && (peers & lanes_below()) == 0;
  const std::int32_t padded = leader ? out.padded_as<kPow2>(popc(peers)) : 0;
  std::int32_t start = 0, total = 0;  // start: of my expert
  for (int j = 0; j < n; ++j) {  // n <= 32: uniform
    const std::int32_t kj = shfl(key, j), pj = shfl(padded, j);
    total += pj;
    if (kj < key) start += pj;
  }
  const std::int64_t thread = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x,
                     threads = std::int64_t{gridDim.x} * blockDim.x;
  if (blockIdx.x == 0) {  // block-uniform
    fill_range(out.sorted, 0, total, out.numel, threadIdx.x, blockDim.x);
    if constexpr (kEp) {  // counts of absent experts 0, before the present ones' counts
      if (extras.counts != nullptr)
        for (std::int32_t e = threadIdx.x; e < extras.num_local; e += blockDim.x) extras.counts[e] = 0;
    }
    __syncthreads();  // sentinels first, ids over them
    if (warp_id() == 0) {
      const std::int32_t position = start + popc(peers & lanes_below());
      if (valid) out.sorted[position] = lane;
      if constexpr (kEp) {
        if (extras.positions != nullptr && lane < n) extras.positions[lane] = valid ? position : -1;
        if (extras.counts != nullptr && leader) extras.counts[key] = popc(peers);
      }
      if (leader) {
        for (std::int32_t q = out.blocks_as<kPow2>(start), end = out.blocks_as<kPow2>(start + padded); q < end; ++q)
          out.expert_ids[q] = key;
      }
      if (lane == 0) *out.post_pad = total;
    }
  }
  fill_range(out.sorted, total, out.max_padded, out.numel, thread, threads);
  fill_range(out.expert_ids, out.blocks_as<kPow2>(total), out.max_blocks, -1, thread, threads);
}

}  // namespace gpu
}  // namespace moe
