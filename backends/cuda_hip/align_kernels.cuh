// align_block_size kernels, one source for CUDA and HIP. The algorithm and the paths are described in
// align_plan.hpp. Sources say where ids come from (the caller's topk_ids, or the (expert, index) pairs of a
// first radix pass); sinks say where a ranked id goes.
#pragma once

#include <cstdint>

#include "align_plan.hpp"
#include "padded_layout.hpp"
#include "primitives.cuh"

namespace moe {
namespace gpu {

struct Item {
  std::int32_t key;    // expert, or -1 for a dropped id
  std::int32_t value;  // flat index into topk_ids
};

// ---- sources ---------------------------------------------------------------------------------------------
// bucket(key) = (key >> shift) & mask, `bits` wide: the whole expert (kDirect/kLatency) or one radix digit.
struct Digit {
  int shift, bits;
  MOE_DEVICE int operator()(std::int32_t key) const { return (key >> shift) & ((1 << bits) - 1); }
};

template <class IdT>
struct IdSource {
  const IdT* ids;
  std::int64_t n;
  std::int32_t num_experts;
  Digit digit;
  MOE_DEVICE std::int64_t size() const { return n; }
  MOE_DEVICE Item load(std::int64_t i) const {
    const auto v = static_cast<std::int64_t>(ids[i]);
    return {(v >= 0 && v < num_experts) ? static_cast<std::int32_t>(v) : -1, static_cast<std::int32_t>(i)};
  }
};

struct PairSource {  // output of the first radix pass: only kept ids, count known on the device
  const std::int32_t* keys;
  const std::int32_t* values;
  const std::int32_t* count;
  Digit digit;
  MOE_DEVICE std::int64_t size() const { return *count; }
  MOE_DEVICE Item load(std::int64_t i) const { return {keys[i], values[i]}; }
};

// ---- sinks -----------------------------------------------------------------------------------------------
struct SortedSink {  // final position known: write the index
  std::int32_t* sorted;
  MOE_DEVICE void write(std::int32_t pos, const Item& it) const { sorted[pos] = it.value; }
};

struct PairSink {  // first radix pass: keep (expert, index)
  std::int32_t* keys;
  std::int32_t* values;
  MOE_DEVICE void write(std::int32_t pos, const Item& it) const {
    keys[pos] = it.key;
    values[pos] = it.value;
  }
};

struct PaddedSink {  // second radix pass: from the unpadded sorted position to the padded one
  std::int32_t* sorted;
  const std::int32_t* expert_start;         // unpadded
  const std::int32_t* expert_padded_start;  // padded
  MOE_DEVICE void write(std::int32_t pos, const Item& it) const {
    sorted[expert_padded_start[it.key] + (pos - expert_start[it.key])] = it.value;
  }
};

// ---- what every path writes besides the ranked ids -------------------------------------------------------
struct AlignOut {
  std::int32_t* sorted;
  std::int32_t* expert_ids;
  std::int32_t* post_pad;
  std::int32_t numel;  // the sentinel
  std::int32_t num_experts;
  std::int32_t block_size;
  std::int64_t max_padded;
  std::int64_t max_blocks;
};

using layout::round_up;

// Padded start of each expert and its count, in any memory. expert_at(p): the expert whose padded range
// holds position p < total (the largest e with start[e] <= p; empty experts have zero width).
struct ExpertLayout {
  const std::int32_t* start;
  const std::int32_t* count;
  std::int32_t num_experts;
  MOE_DEVICE std::int32_t expert_at(std::int32_t p) const { return layout::expert_at(start, num_experts, p); }
};

// expert_ids (all of it), the sentinels that pad each expert's last block, and the tail; `thread`/`threads`
// spread the work over whatever threads the caller has (one block or a grid; whole warps).
//   expert_ids: one thread per output block, binary search of its expert.
//   padding:    each warp looks at 32 experts at once, and writes the padding of those that have some with
//               all lanes (coalesced): an expert without ids costs 1/32 of a step, one with ids a store or two.
//   tail:       one thread per position.
__device__ inline void fill_outputs(const ExpertLayout& lay, std::int32_t total, const AlignOut& o,
                                    std::int64_t thread, std::int64_t threads) {
  const std::int32_t used_blocks = total / o.block_size;
  for (std::int64_t b = thread; b < o.max_blocks; b += threads)
    o.expert_ids[b] = b < used_blocks ? lay.expert_at(static_cast<std::int32_t>(b) * o.block_size) : -1;
  const int lane = lane_id();
  const std::int64_t warp = thread / kWarpSize, warps = threads / kWarpSize;
  for (std::int64_t e0 = warp * kWarpSize; e0 < o.num_experts; e0 += warps * kWarpSize) {  // warp-uniform
    const std::int64_t e = e0 + lane;
    std::int32_t begin = 0, end = 0;  // padding of expert e: from its last id to where the next expert starts
    if (e < o.num_experts) {
      begin = lay.start[e] + lay.count[e];
      end = e + 1 < o.num_experts ? lay.start[e + 1] : total;
    }
    for (lane_mask_t todo = ballot(begin < end); todo != 0; todo &= todo - 1) {
      const int src = lowest_lane(todo);
      const std::int32_t first = shfl(begin, src), last = shfl(end, src);
      for (std::int32_t p = first + lane; p < last; p += kWarpSize) o.sorted[p] = o.numel;
    }
  }
  for (std::int64_t p = total + thread; p < o.max_padded; p += threads) o.sorted[p] = o.numel;
}

// ---- one warp ranking its segment in order ---------------------------------------------------------------
// One step of kWarpSize consecutive ids: each valid lane's rank among the ids of its bucket, counting the
// row[bucket] ids the warp has seen before this step; lanes with equal buckets rank in lane order (stable), and
// the lowest of them advances row[bucket]. All lanes call it together.
MOE_DEVICE std::int32_t rank_step(int bucket, bool valid, int bits, std::int32_t* row) {
  const lane_mask_t peers = match_bucket(bucket, valid, bits);
  const std::int32_t before = valid ? row[bucket] : 0;
  sync_warp();  // every lane has read row[bucket] before its leader advances it
  const lane_mask_t below = peers & lanes_below();
  if (valid && below == 0) row[bucket] = before + popc(peers);
  sync_warp();
  return before + popc(below);
}

// rank_step over [begin, end) in order, ids loaded kItems steps ahead; emit(i, rank) for each valid id.
template <class Src, class Emit>
MOE_DEVICE void warp_rank(const Src& src, std::int64_t begin, std::int64_t end, std::int32_t* row, Emit&& emit) {
  const int lane = lane_id();
  for (std::int64_t base = begin; base < end; base += std::int64_t{kItems} * kWarpSize) {
    Item items[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const std::int64_t i = base + j * kWarpSize + lane;
      items[j] = i < end ? src.load(i) : Item{-1, 0};
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (base + j * kWarpSize >= end) continue;  // warp-uniform (no break: it would stop unrolling)
      const bool valid = items[j].key >= 0;
      const std::int32_t r = rank_step(valid ? src.digit(items[j].key) : 0, valid, src.digit.bits, row);
      if (valid) emit(base + j * kWarpSize + lane, r);
    }
  }
}

// ---- kernels ---------------------------------------------------------------------------------------------
// Shared memory of the multi-block kernels: one row of counters per warp, stride buckets + 1 (odd: the
// transposed accesses below stay free of bank conflicts).

// Phase 1: each warp ranks its segment; the rank of id i inside its segment and bucket goes to rank[i]
// (u16: segments are shorter than 65536), the segment's count per bucket to table[bucket][segment].
// expert_hist (kRadix pass 1): also counts per expert, global atomics aggregated per warp step.
template <class Src>
__global__ void __launch_bounds__(kThreads) count_kernel(Src src, std::int64_t segment, std::int64_t segments,
                                                         int buckets, std::int32_t* table, std::uint16_t* rank,
                                                         std::int32_t* expert_hist, int key_bits) {
  extern __shared__ std::int32_t smem[];
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
  __shared__ std::int32_t scratch[kThreads / 32 + 1];
  const std::int32_t total =
      block_exclusive_scan(table + blockIdx.x * segments, static_cast<int>(segments), scratch);
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

// Phase 3: bucket starts from totals (padded to `pad`); per segment and bucket, start + prefix; then every id
// goes to that + its rank: no ordering left to respect, so all threads of the block take ids in turn.
// kFill: also expert_ids, sentinels and post_pad (kDirect, bucket = expert). kept: the number of ids kept.
template <bool kFill, class Src, class Sink>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(Src src, std::int64_t segment, std::int64_t segments, int buckets, std::int32_t pad,
                   const std::int32_t* table, const std::int32_t* totals, const std::uint16_t* rank, Sink sink,
                   AlignOut out, std::int32_t* kept) {
  extern __shared__ std::int32_t smem[];
  const int W = warps_per_block(), stride = buckets + 1;
  std::int32_t* start = smem + W * stride;  // [buckets]
  std::int32_t* count = start + buckets;    // [buckets]
  std::int32_t* scratch = count + buckets;  // [W + 1]
  for (int b = threadIdx.x; b < buckets; b += blockDim.x) {
    count[b] = totals[b];
    start[b] = round_up(count[b], pad);
  }
  __syncthreads();
  const std::int32_t total = block_exclusive_scan(start, buckets, scratch);
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
  const int first = static_cast<int>(min(n, seg0 * segment));
  const int end = static_cast<int>(min(n, (seg0 + W) * segment));  // 32-bit: numel < 2^31
  const int seg_len = static_cast<int>(segment), step = kItems * static_cast<int>(blockDim.x);
  for (int i0 = first + static_cast<int>(threadIdx.x); i0 < end; i0 += step) {
    Item it[kItems];
    std::int32_t r[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = i0 + j * static_cast<int>(blockDim.x);
      it[j] = i < end ? src.load(i) : Item{-1, 0};
      r[j] = i < end ? rank[i] : 0;
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int w = (i0 + j * static_cast<int>(blockDim.x) - first) / seg_len;
      if (it[j].key >= 0) sink.write(smem[w * stride + src.digit(it[j].key)] + r[j], it[j]);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (kept != nullptr) *kept = total;
    if (kFill) *out.post_pad = total;
  }
  if (kFill)
    fill_outputs(ExpertLayout{start, count, buckets}, total, out, std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x,
                 std::int64_t{gridDim.x} * blockDim.x);
}

// kLatency: all phases in one block, one load per id. The block has as many warps as the ids need (the host
// sizes it from numel); each ranks at most kItems steps of ids, kept in registers; one row of counters per
// warp. Index math is 32-bit: numel < 2^31.
template <class Src>
__global__ void __launch_bounds__(1024) latency_kernel(Src src, AlignOut out) {
  extern __shared__ std::int32_t smem[];
  const int E = out.num_experts, stride = E + 1, lane = lane_id(), warp = warp_id();
  const int n = static_cast<int>(src.size());
  const int W = warps_per_block();
  const int steps = (n + kWarpSize - 1) / kWarpSize;
  const int per = (steps + W - 1) / W;  // steps per warp, <= kItems
  std::int32_t* start = smem + W * stride;  // [E]
  std::int32_t* count = start + E;          // [E]
  std::int32_t* scratch = count + E;        // [W + 1]
  for (int t = threadIdx.x; t < W * stride; t += blockDim.x) smem[t] = 0;
  Item items[kItems];
  std::int32_t ranks[kItems];
  const int first = warp * per * kWarpSize;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = first + j * kWarpSize + lane;
    items[j] = (j < per && i < n) ? src.load(i) : Item{-1, 0};
  }
  __syncthreads();
  std::int32_t* row = smem + warp * stride;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j >= per) continue;  // warp-uniform (no break: it would stop unrolling)
    const bool valid = items[j].key >= 0;
    ranks[j] = rank_step(valid ? items[j].key : 0, valid, src.digit.bits, row);  // bucket = expert here
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {  // per expert: prefix over the rows, in warp order
    std::int32_t run = 0;
    for (int w = 0; w < W; ++w) {
      const std::int32_t c = smem[w * stride + e];
      smem[w * stride + e] = run;
      run += c;
    }
    count[e] = run;
    start[e] = round_up(run, out.block_size);
  }
  __syncthreads();
  const std::int32_t total = block_exclusive_scan(start, E, scratch);
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j >= per) continue;
    const Item& it = items[j];
    if (it.key >= 0) out.sorted[start[it.key] + row[it.key] + ranks[j]] = it.value;
  }
  if (threadIdx.x == 0) *out.post_pad = total;
  fill_outputs(ExpertLayout{start, count, E}, total, out, threadIdx.x, blockDim.x);
}

// kRadix, between the passes: per-expert unpadded and padded starts, and the padded total.
__global__ void __launch_bounds__(1024) expert_scan_kernel(const std::int32_t* expert_count, std::int32_t* expert_start,
                                                           std::int32_t* expert_padded_start, std::int32_t* scalars,
                                                           AlignOut out) {
  __shared__ std::int32_t scratch[1024 / 32 + 1];
  for (int e = threadIdx.x; e < out.num_experts; e += blockDim.x) {
    expert_start[e] = expert_count[e];
    expert_padded_start[e] = round_up(expert_count[e], out.block_size);
  }
  __syncthreads();
  block_exclusive_scan(expert_start, out.num_experts, scratch);
  const std::int32_t total = block_exclusive_scan(expert_padded_start, out.num_experts, scratch);
  if (threadIdx.x == 0) {
    scalars[1] = total;
    *out.post_pad = total;
  }
}

// kRadix, last: expert_ids, sentinels, tail.
__global__ void __launch_bounds__(kThreads) fill_kernel(const std::int32_t* expert_padded_start,
                                                        const std::int32_t* expert_count,
                                                        const std::int32_t* scalars, AlignOut out) {
  fill_outputs(ExpertLayout{expert_padded_start, expert_count, out.num_experts}, scalars[1], out,
               std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x, std::int64_t{gridDim.x} * blockDim.x);
}

}  // namespace gpu
}  // namespace moe
