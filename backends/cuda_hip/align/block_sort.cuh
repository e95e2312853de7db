// block_sort: <= 2048 ids, any expert count (up to the contract's 65536), one launch, no workspace.
#pragma once

#include <algorithm>

#include "align/common.cuh"
#include "contract.hpp"

namespace moe {
namespace gpu {

constexpr int kSortThreads = AlignTuning::kSortThreads;
constexpr int kSortWarps = kSortThreads / kWarpSize;
constexpr int kSortMaxIds = static_cast<int>(AlignTuning::kSortMaxIds);
constexpr int kSortSteps = kSortMaxIds / kSortThreads;  // ids a thread, a warp step each; ranks a thread
constexpr int kSortIndexBits = bits_for(kSortMaxIds);
constexpr int kSortStride = kSortWarps + 1;  // counters of one digit value: a column per warp and a spare one
constexpr int kSortCounters = (1 << AlignTuning::kSortDigitBits) * kSortStride;
constexpr int kSortWords = (detail::kMaxExperts + 31) / 32;  // the bitmap of the experts present
constexpr int kSortWordsPerThread = kSortWords / kSortThreads;
static_assert(kSortMaxIds == kSortThreads * kSortSteps, "the block holds every id");
static_assert(kSortWords == kSortThreads * kSortWordsPerThread, "the threads own the bitmap's words");
static_assert(kSortWarps <= kWarpSize, "one warp reduces the warps' values");
// the counters' memory holds first the bitmap and its words' prefixes, then each rank's two starts (64-lane
// warps: fewer counters than those)
constexpr int kSortShared = std::max({kSortCounters, 2 * kSortWords, 2 * kSortMaxIds});
static_assert(bits_for(kSortMaxIds + 1) + kSortIndexBits <= 32,
              "a key (rank among the experts present or the dropped value, then the index) fits 32 bits");

// Position of this thread's id j: warp-major, then step, then lane, so (warp, step, lane) order is position order
// and a warp ranking its steps in turn keeps it (stable).
MOE_DEVICE int sort_position(int j) { return (warp_id() * kSortSteps + j) * kWarpSize + lane_id(); }

// Exclusive prefix sums of N values a thread in thread order (N scans side by side), each scan's total to every
// thread, and (kAny) whether any thread's `flag` is set, with one barrier: each warp sums the totals of the warps
// before its own itself (a load a lane, one warp sum), not one warp scanning them between two barriers.
// `scratch`: N * kSortWarps values, read until the caller's next barrier.
template <int N, bool kAny>
__device__ inline bool block_exclusive_sums(std::int32_t (&v)[N], std::int32_t (&total)[N], bool flag,
                                            std::int32_t* scratch) {
  const int lane = lane_id(), w = warp_id();
  std::int32_t incl[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    incl[i] = warp_inclusive_scan(v[i]);
    if (lane == kWarpSize - 1) scratch[i * kSortWarps + w] = incl[i];
  }
  bool any = false;
  if constexpr (kAny) any = __syncthreads_or(flag) != 0;
  else __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const std::int32_t s = lane < kSortWarps ? scratch[i * kSortWarps + lane] : 0;
    v[i] = warp_sum(lane < w ? s : 0) + incl[i] - v[i];
    total[i] = warp_sum(s);
  }
  return any;
}
__device__ inline std::int32_t block_exclusive_sum(std::int32_t v, std::int32_t* scratch) {
  std::int32_t a[1] = {v}, total[1];
  block_exclusive_sums<1, false>(a, total, false, scratch);
  return a[0];
}

// Exclusive prefix sum of counts[0, n) in place, n <= kSortCounters: thread t sums a run of ceil(n / kSortThreads)
// consecutive counters (5 or 3 with 7- or 6-bit digits: odd, no bank conflict; 2 with 5-bit ones: 2-way), one
// block scan over the threads' sums, the run written back.
// (block_scan_owned, where every thread adds up the sums of the warps before its own for each row of the table,
// made 5 rows x 32 warps of shared loads per thread: ~2.6 us a pass, block_sort took 11-21 us; perf/NOTES.md step 71.)
// Reads end at the block scan's first barrier, so a thread writes only its own run after it; the caller's barrier
// publishes the prefixes.
constexpr int kSortRun = (kSortCounters + kSortThreads - 1) / kSortThreads;
__device__ inline void scan_counters(std::int32_t* counts, int n, std::int32_t* scratch) {
  const int run = (n + kSortThreads - 1) / kSortThreads, first = static_cast<int>(threadIdx.x) * run;
  std::int32_t v[kSortRun], sum = 0;
#pragma unroll
  for (int k = 0; k < kSortRun; ++k) {
    v[k] = k < run && first + k < n ? counts[first + k] : 0;
    sum += v[k];
  }
  std::int32_t before = block_exclusive_sum(sum, scratch);
#pragma unroll
  for (int k = 0; k < kSortRun; ++k) {
    if (k < run && first + k < n) counts[first + k] = before;
    before += v[k];
  }
}

// Inclusive scan of the block's values in position order under op (associative, `identity` its neutral value):
// each thread's kSortSteps values in place; returns the reduction of all to every thread. `scratch`: kSortWarps
// values, read until the caller's next barrier. One barrier: each warp reduces the totals of the warps before it.
template <class Op>
__device__ std::int32_t block_scan_positions(std::int32_t (&v)[kSortSteps], std::int32_t identity, Op op,
                                             std::int32_t* scratch) {
  const int lane = lane_id(), w = warp_id();
  std::int32_t carry = identity;
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    v[j] = op(carry, warp_inclusive_scan(v[j], op));
    carry = shfl(v[j], kWarpSize - 1);
  }
  if (lane == kWarpSize - 1) scratch[w] = carry;
  __syncthreads();
  const std::int32_t s = lane < kSortWarps ? scratch[lane] : identity;
  const std::int32_t before = warp_reduce(lane < w ? s : identity, op);
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) v[j] = op(before, v[j]);
  return warp_reduce(s, op);
}

// The strip [lo, hi) of sorted_token_ids a block writes, and the expert_ids entries of the blocks starting in it.
struct SortStrip {
  std::uint32_t lo, hi;
  // Id `index` of `expert` at padded position q. A block of the layout starts with a kept id (padding is
  // < block_size, at a run's end), so the id at a multiple of block_size writes that block's expert id: no search.
  template <bool kPow2>
  MOE_DEVICE void place(const AlignOut& out, std::uint32_t q, std::int32_t index, std::int32_t expert) const {
    if (q < lo || q >= hi) return;
    out.sorted[q] = index;
    const std::int32_t b = out.blocks_as<kPow2>(static_cast<std::int32_t>(q));
    if (b * out.block_size == static_cast<std::int32_t>(q)) out.expert_ids[b] = expert;
  }
};

// The layout where some expert holds more than kSortListMax ids: LSD radix sort of 32-bit keys, the id's rank
// (among the experts present, < D; or the all-ones value of bits_for(D + 1) bits for a dropped id, which sorts
// last) above kSortIndexBits bits of its index, in digits of <= kSortDigitBits bits (1 pass up to 127 experts
// present, 2 up to 2048): each warp ranks its kSortSteps steps with match_bucket / rank_step_peers into its own
// column of counters (so the order within a digit is the positions' order: stable), one block scan over
// (digit, warp) gives every column's start, each key goes to start + rank. Then the layout from the sorted keys
// alone: a run of one expert starts where the rank changes (an inclusive max scan of the start positions gives
// each key its run's start); the run's last key adds its padding; an exclusive sum of (1 + padding) over positions
// gives each kept key its padded position. `expert_of[r]`: rank r's expert, written by the caller before.
template <bool kPow2>
__device__ void sort_layout(const std::int32_t (&rank)[kSortSteps], int n, int D, const std::int32_t* expert_of,
                            std::uint32_t* keys, std::int32_t* counts, std::int32_t* scratch, const AlignOut& out,
                            SortStrip strip) {
  const int w = warp_id(), lane = lane_id();
  const int field_bits = 32 - __clz(D);  // bits_for(D + 1): ranks and the dropped value
  const std::uint32_t dropped = (1u << field_bits) - 1;  // >= D
  const int passes = (field_bits + AlignTuning::kSortDigitBits - 1) / AlignTuning::kSortDigitBits;
  bool valid[kSortSteps];
  std::uint32_t key[kSortSteps];
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    const int p = sort_position(j);
    valid[j] = p < n;
    key[j] = (rank[j] >= 0 ? static_cast<std::uint32_t>(rank[j]) : dropped) << kSortIndexBits |
             static_cast<std::uint32_t>(p);
  }
  int shift = kSortIndexBits;
#pragma unroll 1
  for (int pass = 0; pass < passes; ++pass) {
    const int bits = field_bits / passes + (pass < field_bits % passes ? 1 : 0), buckets = 1 << bits;
    if (pass > 0) {
      __syncthreads();  // the last pass's keys placed, its counters read
#pragma unroll
      for (int j = 0; j < kSortSteps; ++j)
        if (valid[j]) key[j] = keys[sort_position(j)];
    }
    // each warp clears its own column (only it ranks into it), warp 0 the spare one: no barrier before ranking
    // (the caller's last barrier ended every other use of counts[])
#pragma unroll 1
    for (int d = lane; d < buckets; d += kWarpSize) {
      counts[d * kSortStride + w] = 0;
      if (w == 0) counts[d * kSortStride + kSortWarps] = 0;
    }
    sync_warp();
    int digit[kSortSteps];
    std::int32_t r[kSortSteps];
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j) {
      digit[j] = static_cast<int>(key[j] >> shift) & (buckets - 1);
      r[j] = rank_step_peers(match_bucket(digit[j], valid[j], bits), digit[j] * kSortStride, valid[j], counts + w);
    }
    __syncthreads();
    scan_counters(counts, buckets * kSortStride, scratch);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j)
      if (valid[j]) keys[counts[digit[j] * kSortStride + w] + r[j]] = key[j];
    shift += bits;
  }
  __syncthreads();
  // kept keys are positions [0, kept), by rank then index
  std::uint32_t of[kSortSteps];
  std::int32_t run[kSortSteps], slot[kSortSteps];
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    const int p = sort_position(j);
    key[j] = valid[j] ? keys[p] : dropped << kSortIndexBits;
    of[j] = key[j] >> kSortIndexBits;
    const bool opens = of[j] < static_cast<std::uint32_t>(D) && (p == 0 || keys[p - 1] >> kSortIndexBits != of[j]);
    run[j] = opens ? p : -1;
  }
  block_scan_positions(run, -1, [](std::int32_t a, std::int32_t b) { return max(a, b); }, scratch);
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    const int p = sort_position(j);
    const bool kept = of[j] < static_cast<std::uint32_t>(D);
    const bool closes = kept && (p + 1 == n || keys[p + 1] >> kSortIndexBits != of[j]);
    const std::int32_t length = p - run[j] + 1;
    slot[j] = kept ? 1 + (closes ? out.padded_as<kPow2>(length) - length : 0) : 0;
    run[j] = slot[j];  // kept for the exclusive form below
  }
  block_scan_positions(slot, 0, [](std::int32_t a, std::int32_t b) { return a + b; }, scratch + kSortWarps);
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j)
    if (of[j] < static_cast<std::uint32_t>(D))
      strip.place<kPow2>(out, static_cast<std::uint32_t>(slot[j] - run[j]),
                         static_cast<std::int32_t>(key[j] & ((1u << kSortIndexBits) - 1)), expert_of[of[j]]);
}

// Every block derives the whole layout from ALL ids in shared memory; it then writes only its share of the
// outputs: positions [b * fill, (b + 1) * fill) of sorted_token_ids (sentinels first, then the ids that land there)
// and the expert_ids entries of the blocks that start there; the -1 tail of expert_ids over the grid. Blocks never
// talk to each other, and nothing is kept per expert but a bit (two_digit_radix's 3 x 65536-entry passes took
// 31-54 us at 256x8), so the expert count costs ~nothing.
// 1. The experts present, numbered in ascending order: a bitmap of ceil(E / 32) words set by atomicOr, its prefix
//    popcounts; an id's rank among the present experts (< D <= n) is its word's prefix plus the bits below its own.
// 2. Each rank's ids counted by atomicAdd (the counts are order-free; the slot each id gets is not, and is used
//    only to list a rank's ids, never as their order), one block scan of (count, padded count) over ranks: each
//    rank's start in a list of ids by rank and its padded start in the layout.
// 3. Where no rank holds more than kSortListMax ids (random ids over many experts: a few each), each id is listed
//    under its rank; its place in the layout is the rank's padded start plus the number of the rank's ids of lower
//    index: stable, from a walk of <= kSortListMax values. Else sort_layout: a radix sort on (rank, index).
// 8 barriers, against 3 radix passes of ~4 each over 17-bit experts before (perf/NOTES.md step 73).
template <bool kPow2, class Src>
__global__ void __launch_bounds__(kSortThreads) sort_kernel(Src src, std::int32_t fill, AlignOut out) {
  __shared__ std::uint32_t keys[kSortMaxIds];  // each rank's ids (listing); the keys (sort_layout)
  // the bitmap and its words' prefixes; then each rank's list start and padded start; sort_layout's counters
  __shared__ std::int32_t counts[kSortShared];
  __shared__ std::int32_t sizes[kSortMaxIds];  // ids a rank; then each rank's expert (sort_layout)
  __shared__ std::int32_t scratch[2 * kSortWarps];
  const int n = static_cast<int>(src.size()), E = out.num_experts, tid = static_cast<int>(threadIdx.x);
  const std::uint32_t lo = blockIdx.x * static_cast<std::uint32_t>(fill);
  const SortStrip strip{lo, static_cast<std::uint32_t>(min(std::int64_t{lo} + fill, out.max_padded))};
  std::uint32_t* const bitmap = reinterpret_cast<std::uint32_t*>(counts);
  std::int32_t* const word_base = counts + kSortWords;
  const int words = (E + 31) >> 5;
  begin_after_prior_grid();
  fill_range(out.sorted, strip.lo, strip.hi, out.numel, tid, kSortThreads);  // before any id: barriers order them
  std::int32_t expert[kSortSteps];
#pragma unroll
  for (int k = 0; k < kSortWordsPerThread; ++k)
    if (tid * kSortWordsPerThread + k < words) bitmap[tid * kSortWordsPerThread + k] = 0;
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    sizes[tid * kSortSteps + j] = 0;
    const int p = sort_position(j);
    expert[j] = p < n ? src.load(p).key : -1;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j)
    if (expert[j] >= 0) atomicOr(&bitmap[expert[j] >> 5], 1u << (expert[j] & 31));
  __syncthreads();
  std::uint32_t word[kSortWordsPerThread];
  std::int32_t before[1] = {0}, present[1];
#pragma unroll
  for (int k = 0; k < kSortWordsPerThread; ++k) {
    word[k] = tid * kSortWordsPerThread + k < words ? bitmap[tid * kSortWordsPerThread + k] : 0u;
    before[0] += popc(word[k]);
  }
  block_exclusive_sums<1, false>(before, present, false, scratch);
#pragma unroll
  for (int k = 0; k < kSortWordsPerThread; ++k) {
    if (tid * kSortWordsPerThread + k < words) word_base[tid * kSortWordsPerThread + k] = before[0];
    before[0] += popc(word[k]);
  }
  __syncthreads();
  std::int32_t rank[kSortSteps], slot[kSortSteps];
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    rank[j] = -1;
    slot[j] = 0;
    if (expert[j] < 0) continue;
    const int w = expert[j] >> 5;
    rank[j] = word_base[w] + popc(bitmap[w] & ((1u << (expert[j] & 31)) - 1));
    slot[j] = atomicAdd(&sizes[rank[j]], 1);
  }
  __syncthreads();
  // thread t owns ranks [t * kSortSteps, (t + 1) * kSortSteps): their list starts and padded starts
  std::int32_t size[kSortSteps], padded[kSortSteps], starts[2] = {0, 0}, totals[2];
  bool crowded = false;
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    size[j] = sizes[tid * kSortSteps + j];
    padded[j] = out.padded_as<kPow2>(size[j]);  // 0 for a rank past the last
    starts[0] += size[j];
    starts[1] += padded[j];
    crowded = crowded || size[j] > AlignTuning::kSortListMax;
  }
  crowded = block_exclusive_sums<2, true>(starts, totals, crowded, scratch);  // block-uniform
  if (!crowded) {
    std::int32_t* const list_start = counts;
    std::int32_t* const padded_start = counts + kSortMaxIds;
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j) {
      list_start[tid * kSortSteps + j] = starts[0];
      padded_start[tid * kSortSteps + j] = starts[1];
      starts[0] += size[j];
      starts[1] += padded[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j)
      if (rank[j] >= 0) keys[list_start[rank[j]] + slot[j]] = static_cast<std::uint32_t>(sort_position(j));
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j) {
      if (rank[j] < 0) continue;
      const auto p = static_cast<std::uint32_t>(sort_position(j));
      const std::uint32_t* const list = keys + list_start[rank[j]];
      std::int32_t lower = 0;
      for (int i = 0, m = sizes[rank[j]]; i < m; ++i) lower += list[i] < p ? 1 : 0;
      strip.place<kPow2>(out, static_cast<std::uint32_t>(padded_start[rank[j]] + lower), static_cast<std::int32_t>(p),
                         expert[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j)
      if (rank[j] >= 0) sizes[rank[j]] = expert[j];  // the ids of a rank write the same value
    sort_layout<kPow2>(rank, n, present[0], sizes, keys, counts, scratch, out, strip);
  }
  const std::int32_t total = totals[1];
  if (blockIdx.x == 0 && tid == 0) *out.post_pad = total;
  const std::uint32_t thread = blockIdx.x * kSortThreads + tid, threads = gridDim.x * kSortThreads;
  const std::int32_t used_blocks = out.blocks_as<kPow2>(total);
  if (fills_any(used_blocks, out.max_blocks, thread))
    fill_range(out.expert_ids, used_blocks, out.max_blocks, -1, thread, threads);
}

}  // namespace gpu
}  // namespace moe
