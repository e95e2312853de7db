// block_per_expert: one launch of a block per expert (or per 2-8 experts).
#pragma once

#include <type_traits>

#include "align/common.cuh"

namespace moe {
namespace gpu {

// Shared memory of block_per_expert: hist [E + kWarpSize] (past the experts a slot per lane for its dropped ids, never
// read), warp_count [experts per block][W], sums [2 W].
inline std::size_t owned_smem_bytes(int warps, std::int32_t experts, int experts_per_block) {
  return sizeof(std::int32_t) *
         (std::size_t(experts) + kWarpSize + std::size_t(experts_per_block + 2) * std::size_t(warps));
}

// Block b reads ALL ids and owns kK consecutive experts from b * kK. It counts every expert in shared memory (for
// its experts' padded starts and the padded total) and ranks only its own experts' ids, one ballot per owned expert
// and warp step. Warp w holds `per` (<= kMaxPer, the smallest power of two that covers it: align.cu, with_steps)
// steps of kWarpSize consecutive ids from w * per * kWarpSize in registers, so (warp, step, lane) order is index
// order and ranks are stable. Each owned id is ranked during the count (among its warp's ids of its expert); once
// the prefix over warps and its expert's start are known, placing it is one store. The whole kernel is one
// dependent chain per warp, so its time follows the instructions on that chain: ranking at the count, branch-free
// histogram atomics, a warp (not the block) per owned expert's padding and expert_ids, the tail's stores spread
// over the blocks' last warps (align_policy.hpp, [owned-chain]); kPow2, the block size's form fixed at compile time
// (padded_as, [pow2]). The block-wide sums (the padded sizes before its first expert and of all, each owned
// expert's ids in the warps before each warp) are warp sums, one instruction on sm_80+, not prefix scans
// ([warp-sums]). The block writes its experts' part of both outputs (ids, padding, expert_ids) and a strip of the
// tails. Blocks never talk to each other: one launch, no grid barrier, no workspace, each output element written
// once; the price is that every block reads all ids (from L2 after the first). How the ids and experts are cut
// (align_policy.hpp: about 4 ids per thread, and as many experts per block as keep the grid near 16 warps per SM):
// past that many blocks the SMs' issue slots, not latency, set the time.
// align_ep's form (Extras = EpExtras, Src = MappedSource): the ids mapped as they load; each placed id writes its
// position beside it, block 0 the -1 of each dropped id, and the warp of each owned expert its count.
template <int kMaxPer, int kK, bool kPow2, class Src, class Extras>
__global__ void __launch_bounds__(kOwnedMaxThreads) owned_kernel(Src src, int per, AlignOut out, Extras extras) {
  constexpr bool kEp = std::is_same_v<Extras, EpExtras>;
  extern __shared__ std::int32_t smem[];
  const int E = out.num_experts, W = warps_per_block(), w = warp_id(), lane = lane_id();
  const int n = static_cast<int>(src.size()), T = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  std::int32_t* hist = smem;
  std::int32_t* warp_count = hist + E + kWarpSize;  // [kK][W]
  std::int32_t* sums = warp_count + kK * W;
  const int mine = static_cast<int>(blockIdx.x) * kK, first = w * per * kWarpSize;  // mine: first owned expert
#pragma unroll 1
  for (int e = tid; e < E; e += T) hist[e] = 0;
  // only now wait for the call before: clearing this block's shared memory and the index arithmetic overlap
  // its end. The ids' bounds are written here too: ptxas then loads `per` before the wait (align_policy.hpp,
  // [clear-early]). No early allow_next_grid() ([early-allow]).
  bool in[kMaxPer];
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) in[j] = j < per && first + j * kWarpSize + lane < n;
  begin_after_prior_grid();
  std::int32_t key[kMaxPer];  // -1: dropped, or past this warp's steps
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) key[j] = in[j] ? src.load(first + j * kWarpSize + lane).key : -1;
  __syncthreads();
  std::int32_t run[kK] = {};  // this warp's ids of each owned expert so far (the same in every lane)
  std::int32_t rank[kMaxPer];  // an owned id: this warp's ids of its expert before it, later its position
  const auto sink = static_cast<std::uint32_t>(E + lane);  // a dropped id (-1, the largest unsigned) counts here
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
    atomicAdd(&hist[min(static_cast<std::uint32_t>(key[j]), sink)], 1);  // no branch: a test per id was ~9 instructions
    rank[j] = 0;
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const lane_mask_t hit = ballot(key[j] == mine + k);
      if (key[j] == mine + k) rank[j] = run[k] + popc(hit & lanes_below());
      run[k] += popc(hit);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < kK; ++k) warp_count[k * W + w] = run[k];
  }
  __syncthreads();
  // padded sizes of the experts before my first one, and of all: block sums (warp sums, then a sum over warps)
  std::int32_t before = 0, total = 0;
#pragma unroll 1
  for (int e = tid; e < E; e += T) {
    const std::int32_t padded = out.padded_as<kPow2>(hist[e]);
    total += padded;
    if (e < mine) before += padded;
  }
  before = warp_sum(before);
  total = warp_sum(total);
  if (lane == 0) {
    sums[w] = before;
    sums[W + w] = total;
  }
  std::int32_t at[kK];  // where this warp's ids of each owned expert go: first the ids in the warps before
#pragma unroll
  for (int k = 0; k < kK; ++k) at[k] = warp_sum(lane < w ? warp_count[k * W + lane] : 0);
  __syncthreads();  // W <= kWarpSize
  before = warp_sum(lane < W ? sums[lane] : 0);
  total = warp_sum(lane < W ? sums[W + lane] : 0);
  std::int32_t count[kK], start[kK];  // each owned expert's ids and padded start; none past the last expert
#pragma unroll
  for (int k = 0; k < kK; ++k) count[k] = mine + k < E ? hist[mine + k] : 0;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    start[k] = before;
    before += out.padded_as<kPow2>(count[k]);
  }
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
#pragma unroll
    for (int k = 0; k < kK; ++k) rank[j] += key[j] == mine + k ? at[k] + start[k] : 0;
    if (static_cast<std::uint32_t>(key[j] - mine) < kK) out.sorted[rank[j]] = first + j * kWarpSize + lane;
    if constexpr (kEp) {
      if (extras.positions != nullptr) {
        if (static_cast<std::uint32_t>(key[j] - mine) < kK) extras.positions[first + j * kWarpSize + lane] = rank[j];
        else if (blockIdx.x == 0 && in[j] && key[j] < 0) extras.positions[first + j * kWarpSize + lane] = -1;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    // a warp per owned expert writes its padding and expert_ids (k % W, without the division where k < W)
    if (w != (k < W ? k : k % W)) continue;
    if constexpr (kEp) {
      if (extras.counts != nullptr && lane == 0 && mine + k < E) extras.counts[mine + k] = count[k];
    }
    const std::int32_t end = start[k] + out.padded_as<kPow2>(count[k]);
#pragma unroll 1
    for (std::uint32_t p = start[k] + count[k] + lane, hi = end; p < hi; p += kWarpSize)  // unsigned: see
      out.sorted[p] = out.numel;                                                            // write_expert_ids
#pragma unroll 1
    for (std::uint32_t b = out.blocks_as<kPow2>(start[k]) + lane, last = out.blocks_as<kPow2>(end); b < last;
         b += kWarpSize)
      out.expert_ids[b] = mine + k;
  }
  if (blockIdx.x == 0 && tid == 0) *out.post_pad = total;
  // the tail's threads are numbered across the blocks from each block's last lane, so its few stores fall on
  // the last warp of each block (not on every warp of the first blocks, nor on the warps that write the owned
  // experts' padding). Most threads hold no tail element: they skip fill_range's address arithmetic (here, not
  // inside fill_range, where the test cost other kernels: align_policy.hpp, [tail-warps])
  const std::uint32_t thread = (blockDim.x - 1 - threadIdx.x) * gridDim.x + blockIdx.x,
                      threads = gridDim.x * blockDim.x;
  const std::int32_t used_blocks = out.blocks_as<kPow2>(total);
  if (fills_any(total, out.max_padded, thread))
    fill_range(out.sorted, total, out.max_padded, out.numel, thread, threads);
  if (fills_any(used_blocks, out.max_blocks, thread))
    fill_range(out.expert_ids, used_blocks, out.max_blocks, -1, thread, threads);
}

}  // namespace gpu
}  // namespace moe
