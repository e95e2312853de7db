// cooperative_grid: one cooperative launch of co-resident blocks (the policy takes it where the device holds them
// all at once: align_policy.hpp).
#pragma once

#include "align/resident.cuh"

namespace moe {
namespace gpu {

// ONE cooperative launch of co-resident blocks, each owning blockDim * per consecutive ids (per ==
// kMaxPer, instantiated for each power of two up to kGridItems); two grid-wide barriers take the place of two
// launch boundaries, and ranks stay in registers across them. Global memory holds only each block's count per
// expert, table[e * gridDim + block].
//   1. sentinels over the grid; rank_block; its counts -> table                    | grid barrier
//   2. one warp per expert: exclusive prefix over the blocks in place, total      | grid barrier
//   3. every block: padded starts from the totals; base = start + its block prefix; place; fill over the grid
template <int kMaxPer, class Src>
__global__ void __launch_bounds__(kThreads) grid_kernel(Src src, int per, std::int32_t* table,
                                                        std::int32_t* totals, AlignOut out) {
  probe_time(kProbeEntryTime);
  probe_at(kProbeEntry);
  extern __shared__ std::int32_t smem[];
  const int E = out.num_experts, W = warps_per_block(), B = gridDim.x, b = blockIdx.x;
  const ResidentSmem sm(smem, W, E);
  clear_rows(sm.rows, E);
  begin_after_prior_grid();
  probe_at(kProbeWaited);
  std::int32_t* count = sm.count;
  const int first = (b * W + warp_id()) * per * kWarpSize;
  const std::int64_t thread = std::int64_t{b} * blockDim.x + threadIdx.x, threads = std::int64_t{B} * blockDim.x;
  std::int32_t ranked[kMaxPer];
  load_keys(src, first, per, ranked);    // in flight during the fill
  fill_sentinels(out, thread, threads);  // ordered before place_block by the grid barriers
  probe_at(kProbeFilled);
  rank_block(src, per, sm.rows, count, ranked);
  for (int e = threadIdx.x; e < E; e += blockDim.x) table[e * B + b] = count[e];
  sync_grid();
  const int warps = B * W;
  for (int e = b * W + warp_id(); e < E; e += warps) {  // warp-uniform
    // B <= kGridMaxBlocks: each lane holds a run of <= kGridMaxBlocks / kWarpSize values, all loaded at once
    std::int32_t* col = table + e * B;
    const int run = (B + kWarpSize - 1) / kWarpSize, lo = lane_id() * run, hi = min(B, lo + run);
    std::int32_t v[kGridMaxBlocks / 32], local = 0;
#pragma unroll
    for (int k = 0; k < kGridMaxBlocks / 32; ++k) {
      v[k] = lo + k < hi ? col[lo + k] : 0;
      local += v[k];
    }
    const std::int32_t incl = warp_inclusive_scan(local);
    std::int32_t at = incl - local;
#pragma unroll
    for (int k = 0; k < kGridMaxBlocks / 32; ++k) {
      if (lo + k < hi) col[lo + k] = at;
      at += v[k];
    }
    if (lane_id() == kWarpSize - 1) totals[e] = incl;
  }
  sync_grid();
  probe_at(kProbeGridSynced);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {  // the experts place_padded's scan gives this thread
    sm.start[e] = out.padded(totals[e]);
    sm.base[e] = table[e * B + b];
  }
  probe_at(kProbeTableRead);
  place_padded(sm, E, first, per, ranked, out, b == 0);
  probe_at(kProbeExit);
  probe_time(kProbeExitTime);
}

}  // namespace gpu
}  // namespace moe
