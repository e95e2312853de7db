// align_block_size on the GPU, the pieces every path shares: where ids come from (sources: the caller's
// topk_ids, or the (expert, index) pairs of a first radix pass), where a ranked id goes (sinks), what every
// path writes besides the ranked ids (AlignOut, the sentinel and expert_ids fills), and one warp ranking its
// segment in order. The paths and their choice: align_policy.hpp.
#pragma once

#include <cstdint>
#include <type_traits>

#include "align_policy.hpp"
#include "padded_layout.hpp"
#include "phase_probe.cuh"
#include "primitives.cuh"

namespace moe {
namespace gpu {

struct Item {
  std::int32_t key;    // expert, or -1 for a dropped id
  std::int32_t value;  // flat index into topk_ids
};

// ---- sources ---------------------------------------------------------------------------------------------
// bucket(key) = (key >> shift) & mask, `bits` wide: the whole expert (every path but two_digit_radix) or one radix
// digit.
struct Digit {
  int shift, bits;
  MOE_DEVICE int operator()(std::int32_t key) const { return (key >> shift) & ((1 << bits) - 1); }
};

// Ids compared as unsigned: one compare drops negative and too large values alike (a negative one converts to a
// value past any limit), in 32 bits for ids of up to 32 bits: one instruction fewer per id than two signed tests.
template <class IdT>
using IdBits = std::conditional_t<sizeof(IdT) <= 4, std::uint32_t, std::uint64_t>;
// Whether v is in [0, limit).
template <class IdT>
MOE_DEVICE bool in_range(IdT v, std::int32_t limit) {
  return static_cast<IdBits<IdT>>(v) < static_cast<IdBits<IdT>>(limit);
}

template <class IdT>
struct IdSource {
  const IdT* ids;
  std::int64_t n;
  std::int32_t num_experts;
  Digit digit;
  MOE_DEVICE std::int64_t size() const { return n; }
  MOE_DEVICE Item load(std::int64_t i) const {
    const auto v = static_cast<IdBits<IdT>>(ids[i]);
    return {in_range(v, num_experts) ? static_cast<std::int32_t>(v) : -1, static_cast<std::int32_t>(i)};
  }
};

// align_block_size_ep: each id through expert_map (NULL: the identity) to its local expert, -1 when the id is out of
// [0, num_experts) or its entry out of [0, num_local) (the map read only at ids in range).
template <class IdT>
struct MappedSource {
  const IdT* ids;
  std::int64_t n;
  std::int32_t num_experts;
  const std::int32_t* map;
  std::int32_t num_local;
  Digit digit;
  MOE_DEVICE std::int64_t size() const { return n; }
  MOE_DEVICE Item load(std::int64_t i) const {
    const auto v = static_cast<IdBits<IdT>>(ids[i]);
    std::int32_t local = -1;
    if (in_range(v, num_experts)) {
      const std::int32_t m = map != nullptr ? map[v] : static_cast<std::int32_t>(v);
      local = in_range(m, num_local) ? m : -1;
    }
    return {local, static_cast<std::int32_t>(i)};
  }
};

// align_block_size_ep's outputs beside the layout, written by the same launch (warp_tiny and block_per_expert:
// align_ep.cu's one launch instead of map, align and finish kernels). NULL: not written.
struct EpExtras {
  std::int32_t* counts;     // [num_local]: each local expert's ids
  std::int32_t* positions;  // [numel]: each id's padded position, -1 when dropped
  std::int32_t num_local;
};
struct NoExtras {};  // align_block_size: the layout alone

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
  std::int32_t block_shift;  // log2(block_size) where it is a power of two, else -1
  std::int64_t max_padded;
  std::int64_t max_blocks;
  // x / block_size, and x rounded up to a multiple of it (x >= 0): a shift where block_size is a power of two.
  // An integer division is ~20 instructions, several of them on the chain of each small call (align_policy.hpp,
  // [shift]).
  MOE_DEVICE std::int32_t blocks(std::int32_t x) const {
    return block_shift >= 0 ? blocks_as<true>(x) : blocks_as<false>(x);
  }
  MOE_DEVICE std::int32_t padded(std::int32_t x) const { return blocks(x + block_size - 1) * block_size; }
  // the same where the kernel is built for one form of block_size (a power of two or not): no branch at each
  // use, fewer instructions on the chain (align_policy.hpp, [pow2])
  template <bool kPow2>
  MOE_DEVICE std::int32_t blocks_as(std::int32_t x) const {
    if constexpr (kPow2) return x >> block_shift;
    else return x / block_size;
  }
  template <bool kPow2>
  MOE_DEVICE std::int32_t padded_as(std::int32_t x) const {
    if constexpr (kPow2) return (x + block_size - 1) & -block_size;
    else return blocks_as<false>(x + block_size - 1) * block_size;
  }
};

using layout::round_up;

// dst[begin, end) = value, by threads `thread` of `threads`: 16-byte stores between the unaligned ends (the
// tails of sorted_token_ids and expert_ids are most of the bytes a small call writes). 32-bit unsigned: ends are
// <= INT32_MAX (the contract) and grids far below 2^31 threads, so no index wraps; half the instructions of
// 64-bit ones on the tail of every small call (align_policy.hpp, [fill32]).
__device__ inline void fill_range(std::int32_t* dst, std::uint32_t begin, std::uint32_t end, std::int32_t value,
                                  std::uint32_t thread, std::uint32_t threads) {
  if (begin >= end) return;
  const auto misalign = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(dst + begin) & 15) / 4;
  const std::uint32_t head = min(end - begin, (4 - misalign) & 3);
  if (thread < head) dst[begin + thread] = value;
  const std::uint32_t body = begin + head, vectors = (end - body) / 4;
  int4* v = reinterpret_cast<int4*>(dst + body);
  const int4 four = make_int4(value, value, value, value);
#pragma unroll 1
  for (std::uint32_t k = thread; k < vectors; k += threads) v[k] = four;
#pragma unroll 1
  for (std::uint32_t p = body + vectors * 4 + thread; p < end; p += threads) dst[p] = value;
}

// Whether fill_range(dst, begin, end, ...) has a store for `thread`: a test much cheaper than its address
// arithmetic, for grids far larger than the range.
MOE_DEVICE bool fills_any(std::uint32_t begin, std::uint32_t end, std::uint32_t thread) {
  return thread < 3 || thread * 4 < end - begin;
}

// Every position of sorted_token_ids starts as the sentinel, written before any id is placed (a barrier or a
// launch boundary orders the two): that covers each expert's padding and the tail in 16-byte stores, with
// no loop over experts: one over the experts that have padding serialises per expert (align_policy.hpp,
// [sentinels]).
__device__ inline void fill_sentinels(const AlignOut& o, std::int64_t thread, std::int64_t threads) {
  fill_range(o.sorted, 0, o.max_padded, o.numel, thread, threads);
}

// expert_ids from the padded starts (start[e] of E experts, any memory; total: the padded total), by warp `warp` of
// `warps`. With fewer experts than warps: a warp per expert, its lanes over the expert's blocks, and the -1 tail
// over the warps left (no expert's blocks on the warps that write it). Otherwise a warp per 32 experts, a lane
// each: one load of its padded range, the lane writes the expert's first kFillOwn blocks itself and the whole warp
// the rest of each expert that has more (skewed ids), one such expert at a time; the tail over all warps. No search
// per block of expert_ids (a binary search over the starts per block is 16 dependent loads at 65536 experts, and
// piles up on the blocks that hold most of them). A warp per 32 experts alone puts up to 32 experts' blocks on one
// warp where experts are few, a warp per expert alone several experts on each warp where they are many; the tail
// on one warp serialises it (align_policy.hpp, [expert-ids]).
// counts (E < warps only; else nullptr): each expert's count, so that its warp also writes the expert's padding and
// the warps left the tail of sorted_token_ids, where the kernel wrote no sentinels before its ids (cluster_grid).
constexpr int kFillOwn = 4;
__device__ inline void write_expert_ids(const std::int32_t* start, int E, std::int32_t total, const AlignOut& out,
                                        int warp, int warps, const std::int32_t* counts = nullptr) {
  const int lane = lane_id();
  const std::int32_t used = out.blocks(total);
  if (E < warps) {
    if (warp < E) {
      const std::int32_t begin = start[warp], end = warp + 1 < E ? start[warp + 1] : total;
      // 64-bit signed counters here and below: a bound may be INT32_MAX itself (block_size near 2^31, or 2^31 - 1
      // ids with block_size 1), where a 32-bit i + kWarpSize would wrap; unsigned 32-bit ones were safe too but
      // kept the compiler from unrolling these loops (cluster_grid 1.02x at 4096x8, perf/NOTES.md step 56)
      for (std::int64_t i = std::int64_t{out.blocks(begin)} + lane, hi = out.blocks(end); i < hi; i += kWarpSize)
        out.expert_ids[i] = warp;
      if (counts != nullptr)
        for (std::int64_t i = std::int64_t{begin} + counts[warp] + lane; i < end; i += kWarpSize)
          out.sorted[i] = out.numel;
    } else {
      const std::uint32_t thread = (warp - E) * kWarpSize + lane, threads = (warps - E) * kWarpSize;
      fill_range(out.expert_ids, used, out.max_blocks, -1, thread, threads);
      if (counts != nullptr) fill_range(out.sorted, total, out.max_padded, out.numel, thread, threads);
    }
    return;
  }
#pragma unroll 1
  for (int e = warp * kWarpSize + lane; e - lane < E; e += warps * kWarpSize) {  // warp-uniform
    const std::int32_t begin = e < E ? start[e] : total;
    const std::int32_t end = e + 1 < E ? start[e + 1] : total;
    const std::int32_t b0 = out.blocks(begin), count = out.blocks(end) - b0;
#pragma unroll
    for (int q = 0; q < kFillOwn; ++q)
      if (q < count) out.expert_ids[b0 + q] = e;
    lane_mask_t more = ballot(count > kFillOwn);
    while (more != 0) {  // warp-uniform
      const int k = lowest_lane(more);
      more &= more - 1;
      const std::int32_t first = shfl(b0, k), rest = shfl(count, k), which = shfl(e, k);
#pragma unroll 1
      for (std::int64_t q = kFillOwn + lane; q < rest; q += kWarpSize) out.expert_ids[first + q] = which;
    }
  }
  fill_range(out.expert_ids, used, out.max_blocks, -1, warp * kWarpSize + lane, warps * kWarpSize);
}

// ---- one warp ranking its segment in order ---------------------------------------------------------------
// One step of kWarpSize consecutive ids: each valid lane's rank among the ids of its bucket, counting the
// row[bucket] ids the warp has seen before this step; lanes with equal buckets rank in lane order (stable), and
// the lowest of them advances row[bucket]. All lanes call it together. peers: match_bucket's (rank_step_peers: found
// by the caller).
MOE_DEVICE std::int32_t rank_step_peers(lane_mask_t peers, int bucket, bool valid, std::int32_t* row) {
  const std::int32_t before = valid ? row[bucket] : 0;
  sync_warp();  // every lane has read row[bucket] before its leader advances it
  const lane_mask_t below = peers & lanes_below();
  if (valid && below == 0) row[bucket] = before + popc(peers);
  sync_warp();
  return before + popc(below);
}
MOE_DEVICE std::int32_t rank_step(int bucket, bool valid, int bits, std::int32_t* row) {
  return rank_step_peers(match_bucket(bucket, valid, bits), bucket, valid, row);
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

// Shared memory of the multi-block kernels: one row of counters per warp, stride buckets + 1 (odd: the
// transposed accesses of count_kernel and scatter_kernel stay free of bank conflicts).
// block_scan_owned's scratch: a row of kThreads buckets (<= kDirectMaxExperts: experts, or a radix digit's <= 512
// values) per kThreads / kWarpSize values.
constexpr int kBucketScanRows = (kDirectMaxExperts + kThreads - 1) / kThreads;

}  // namespace gpu
}  // namespace moe
