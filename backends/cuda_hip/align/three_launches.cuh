// three_launches (and the passes of two_digit_radix): rank, scan and scatter as three kernels over the whole
// GPU, on any source and sink (align/common.cuh).
#pragma once

#include "align/common.cuh"

namespace moe {
namespace gpu {

// Phase 1: each warp ranks its segment; the rank of id i inside its segment and bucket goes to rank[i]
// (u16: segments are shorter than 65536), the segment's count per bucket to table[bucket][segment].
// expert_hist (two_digit_radix's pass 1): also counts per expert, global atomics aggregated per warp step.
// sentinels (the pass before the one that places ids): also fill_sentinels(out).
template <class Src>
__global__ void __launch_bounds__(kThreads) count_kernel(Src src, std::int64_t segment, std::int64_t segments,
                                                         int buckets, std::int32_t* table, std::uint16_t* rank,
                                                         std::int32_t* expert_hist, int key_bits,
                                                         bool sentinels, AlignOut out) {
  wait_prior_grid();  // no early allow_next_grid(): align_policy.hpp, [early-allow]
  extern __shared__ std::int32_t smem[];
  if (sentinels)
    fill_sentinels(out, std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x, std::int64_t{gridDim.x} * blockDim.x);
  const int W = warps_per_block(), stride = buckets + 1;
  std::int32_t* row = smem + warp_id() * stride;
  for (int b = lane_id(); b < buckets; b += kWarpSize) row[b] = 0;
  sync_warp();
  const std::int64_t seg0 = std::int64_t{blockIdx.x} * W, seg = seg0 + warp_id();
  const std::int64_t n = src.size();
  if (seg < segments)
    warp_rank(src, seg * segment, min(n, (seg + 1) * segment), row,
              [&](std::int64_t i, std::int32_t r) { rank[i] = static_cast<std::uint16_t>(r); });
  if (expert_hist != nullptr && seg < segments) {  // per-expert counts: one more match, on the whole key
    for (std::int64_t base = seg * segment; base < min(n, (seg + 1) * segment); base += kWarpSize) {
      const std::int64_t i = base + lane_id();
      const Item it = i < n && i < (seg + 1) * segment ? src.load(i) : Item{-1, 0};
      const lane_mask_t same = match_bucket(it.key, it.key >= 0, key_bits);
      if (it.key >= 0 && lane_id() == lowest_lane(same)) atomicAdd(&expert_hist[it.key], popc(same));
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < W * buckets; t += blockDim.x) {  // table[bucket][segment], coalesced
    const int w = t % W, b = t / W;
    if (seg0 + w < segments) table[b * segments + seg0 + w] = smem[w * stride + b];
  }
}

// Phase 2, per bucket (one block each): exclusive prefix over segments in place; the bucket's total.
__global__ void __launch_bounds__(kThreads) row_scan_kernel(std::int32_t* table, std::int64_t segments,
                                                            std::int32_t* totals) {
  wait_prior_grid();  // no early allow_next_grid(): align_policy.hpp, [early-allow]
  __shared__ std::int32_t scratch[kThreads / 32 + 1];
  std::int32_t* row = table + blockIdx.x * segments;
  const std::int32_t total = block_scan_tiles<kScanRows>(
      static_cast<int>(segments), scratch, [&](int i) { return row[i]; },
      [&](int i, std::int32_t prefix) { row[i] = prefix; });
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

// Phase 3: bucket starts from totals (padded to `pad`); per segment and bucket, start + prefix; then every id
// goes to that + its rank: no ordering left to respect, so all threads of the block take ids in turn.
// kFill: also expert_ids and post_pad (three_launches, bucket = expert). kept: the number of ids kept.
template <bool kFill, class Src, class Sink>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(Src src, std::int64_t segment, std::int64_t segments, int buckets, std::int32_t pad,
                   const std::int32_t* table, const std::int32_t* totals, const std::uint16_t* rank, Sink sink,
                   AlignOut out, std::int32_t* kept) {
  wait_prior_grid();  // no early allow_next_grid(): align_policy.hpp, [early-allow]
  extern __shared__ std::int32_t smem[];
  const int W = warps_per_block(), stride = buckets + 1;
  std::int32_t* start = smem + W * stride;  // [buckets]
  std::int32_t* scratch = start + buckets;  // [kBucketScanRows * W]
  for (int b = threadIdx.x; b < buckets; b += blockDim.x) start[b] = round_up(totals[b], pad);
  const std::int32_t total = block_scan_owned<kThreads / kWarpSize>(start, buckets, scratch,
                                                                    [&](int b, std::int32_t at) { start[b] = at; });
  __syncthreads();
  const std::int64_t seg0 = std::int64_t{blockIdx.x} * W;
  const int cells = W * buckets;
  for (int t0 = threadIdx.x; t0 < cells; t0 += kItems * static_cast<int>(blockDim.x)) {
    std::int32_t v[kItems];  // all loads of the batch in flight before the first use
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int t = t0 + j * static_cast<int>(blockDim.x), w = t % W, b = t / W;
      v[j] = t < cells && seg0 + w < segments ? table[b * segments + seg0 + w] : 0;
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int t = t0 + j * static_cast<int>(blockDim.x), w = t % W, b = t / W;
      if (t < cells) smem[w * stride + b] = start[b] + v[j];
    }
  }
  __syncthreads();
  // The block's W segments are one contiguous range: walk it as one, kItems ids per thread per batch, every
  // load of a batch in flight before the first use (one round trip per batch, not one per segment).
  const std::int64_t n = src.size();
  // 32-bit unsigned: numel < 2^31, and i0 + step, which passes INT32_MAX for numel near 2^31, does not wrap
  const auto first = static_cast<std::uint32_t>(min(n, seg0 * segment));
  const auto end = static_cast<std::uint32_t>(min(n, (seg0 + W) * segment));
  const auto seg_len = static_cast<std::uint32_t>(segment);
  const std::uint32_t step = kItems * blockDim.x;
  for (std::uint32_t i0 = first + threadIdx.x; i0 < end; i0 += step) {
    Item it[kItems];
    std::int32_t r[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const std::uint32_t i = i0 + j * blockDim.x;
      it[j] = i < end ? src.load(i) : Item{-1, 0};
      r[j] = i < end ? rank[i] : 0;
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const auto w = static_cast<int>((i0 + j * blockDim.x - first) / seg_len);
      if (it[j].key >= 0) sink.write(smem[w * stride + src.digit(it[j].key)] + r[j], it[j]);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (kept != nullptr) *kept = total;
    if (kFill) *out.post_pad = total;
  }
  if (kFill) {  // warps numbered across the blocks first, as in place_padded
    const int B = static_cast<int>(gridDim.x);
    write_expert_ids(start, buckets, total, out, warp_id() * B + static_cast<int>(blockIdx.x), B * W);
  }
}

}  // namespace gpu
}  // namespace moe
