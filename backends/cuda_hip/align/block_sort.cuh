// block_sort: <= 2048 ids, any expert count (up to the contract's 65536), one launch, no workspace.
#pragma once

#include "align/common.cuh"
#include "contract.hpp"

namespace moe {
namespace gpu {

constexpr int kSortThreads = AlignTuning::kSortThreads;
constexpr int kSortWarps = kSortThreads / kWarpSize;
constexpr int kSortSteps = AlignTuning::kSortMaxIds / kSortThreads;  // ids a thread, a warp step each
constexpr int kSortIndexBits = bits_for(AlignTuning::kSortMaxIds);
constexpr int kSortStride = kSortWarps + 1;  // counters of one digit value: a column per warp and a spare one
constexpr int kSortCounters = (1 << AlignTuning::kSortDigitBits) * kSortStride;
static_assert(AlignTuning::kSortMaxIds == kSortThreads * kSortSteps, "the block holds every id");
static_assert(kSortWarps <= kWarpSize, "one warp reduces the warps' values");
static_assert(bits_for(std::int64_t{detail::kMaxExperts} + 1) + kSortIndexBits <= 32,
              "a key (expert or the dropped value, then the index) fits 32 bits");

// Position of this thread's id j: warp-major, then step, then lane, so (warp, step, lane) order is position order
// and a warp ranking its steps in turn keeps it (stable).
MOE_DEVICE int sort_position(int j) { return (warp_id() * kSortSteps + j) * kWarpSize + lane_id(); }

// Exclusive prefix sum of one value a thread, in thread order, with one barrier: each warp sums the totals of the
// warps before it itself (a load a lane, one warp sum), not one warp scanning them between two barriers. `scratch`:
// kSortWarps values, read until the caller's next barrier.
__device__ inline std::int32_t block_exclusive_sum(std::int32_t v, std::int32_t* scratch) {
  const int lane = lane_id(), w = warp_id();
  const std::int32_t incl = warp_inclusive_scan(v);
  if (lane == kWarpSize - 1) scratch[w] = incl;
  __syncthreads();
  const std::int32_t s = lane < kSortWarps ? scratch[lane] : 0;
  return warp_sum(lane < w ? s : 0) + incl - v;
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

// Every block sorts ALL ids by expert in shared memory and derives the whole layout from the sorted keys; it then
// writes only its share of the outputs: positions [b * fill, (b + 1) * fill) of sorted_token_ids (sentinels first,
// then the ids that land there) and the expert_ids entries of the blocks that start there; the -1 tail of
// expert_ids over the grid. Blocks never talk to each other, so the expert count costs nothing but key bits: no
// table per expert anywhere (two_digit_radix's 3 x 65536-entry passes took 31-54 us at 256x8).
// Keys: the expert (or the all-ones value of bits_for(E + 1) bits for a dropped id, which sorts last) above
// kSortIndexBits bits of the id's index. LSD radix passes over the expert bits in digits of <= kSortDigitBits bits:
// each warp ranks its kSortSteps steps with match_bucket / rank_step_peers into its own column of counters (so
// the order within a digit is the positions' order: stable), one block scan over (digit, warp) gives every
// column's start, each key goes to start + rank. Layout from the sorted keys alone: a run of one expert starts
// where the expert changes (an inclusive max scan of the start positions gives each key its run's start); the
// run's last key adds its padding; an exclusive sum of (1 + padding) over positions gives each kept key its padded
// position and the total. A block of the layout starts with a kept id (padding is < block_size at a run's end), so
// the key at a position that is a multiple of block_size writes that block's expert id: no search, no loop.
template <bool kPow2, class Src>
__global__ void __launch_bounds__(kSortThreads) sort_kernel(Src src, std::int32_t fill, AlignOut out) {
  __shared__ std::uint32_t keys[AlignTuning::kSortMaxIds];
  __shared__ std::int32_t counts[kSortCounters];  // [digit][warp]: the scan's order
  __shared__ std::int32_t scan_scratch[kSortWarps];
  __shared__ std::int32_t starts_scratch[kSortWarps], padded_scratch[kSortWarps];
  const int n = static_cast<int>(src.size()), E = out.num_experts, w = warp_id();
  const int tid = static_cast<int>(threadIdx.x), lane = lane_id();
  const int field_bits = 32 - __clz(E);  // bits_for(E + 1): experts and the dropped value
  const std::uint32_t dropped = (1u << field_bits) - 1;  // >= E
  const int passes = (field_bits + AlignTuning::kSortDigitBits - 1) / AlignTuning::kSortDigitBits;
  const std::uint32_t lo = blockIdx.x * static_cast<std::uint32_t>(fill);
  const std::uint32_t hi = static_cast<std::uint32_t>(min(std::int64_t{lo} + fill, out.max_padded));
  bool valid[kSortSteps];
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) valid[j] = sort_position(j) < n;
  begin_after_prior_grid();
  fill_range(out.sorted, lo, hi, out.numel, tid, kSortThreads);  // before any id: barriers below order the two
  std::uint32_t key[kSortSteps];
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    const int p = sort_position(j);
    const std::int32_t e = valid[j] ? src.load(p).key : -1;
    key[j] = (e >= 0 ? static_cast<std::uint32_t>(e) : dropped) << kSortIndexBits | static_cast<std::uint32_t>(p);
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
#pragma unroll 1
    for (int d = lane; d < buckets; d += kWarpSize) {
      counts[d * kSortStride + w] = 0;
      if (w == 0) counts[d * kSortStride + kSortWarps] = 0;
    }
    sync_warp();
    int digit[kSortSteps];
    std::int32_t rank[kSortSteps];
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j) {
      digit[j] = static_cast<int>(key[j] >> shift) & (buckets - 1);
      rank[j] = rank_step_peers(match_bucket(digit[j], valid[j], bits), digit[j] * kSortStride, valid[j], counts + w);
    }
    __syncthreads();
    scan_counters(counts, buckets * kSortStride, scan_scratch);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kSortSteps; ++j)
      if (valid[j]) keys[counts[digit[j] * kSortStride + w] + rank[j]] = key[j];
    shift += bits;
  }
  __syncthreads();
  // the layout: kept keys are positions [0, kept), by expert then index
  std::uint32_t expert[kSortSteps];
  std::int32_t run[kSortSteps], slot[kSortSteps];
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    const int p = sort_position(j);
    key[j] = valid[j] ? keys[p] : dropped << kSortIndexBits;
    expert[j] = key[j] >> kSortIndexBits;
    const bool opens = expert[j] < static_cast<std::uint32_t>(E) && (p == 0 || keys[p - 1] >> kSortIndexBits != expert[j]);
    run[j] = opens ? p : -1;
  }
  block_scan_positions(run, -1, [](std::int32_t a, std::int32_t b) { return max(a, b); }, starts_scratch);
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    const int p = sort_position(j);
    const bool kept = expert[j] < static_cast<std::uint32_t>(E);
    const bool closes = kept && (p + 1 == n || keys[p + 1] >> kSortIndexBits != expert[j]);
    const std::int32_t length = p - run[j] + 1;
    slot[j] = kept ? 1 + (closes ? out.padded_as<kPow2>(length) - length : 0) : 0;
    run[j] = slot[j];  // kept for the exclusive form below
  }
  const std::int32_t total =
      block_scan_positions(slot, 0, [](std::int32_t a, std::int32_t b) { return a + b; }, padded_scratch);
#pragma unroll
  for (int j = 0; j < kSortSteps; ++j) {
    if (expert[j] >= static_cast<std::uint32_t>(E)) continue;
    const auto q = static_cast<std::uint32_t>(slot[j] - run[j]);  // the padded position
    if (q < lo || q >= hi) continue;
    out.sorted[q] = static_cast<std::int32_t>(key[j] & ((1u << kSortIndexBits) - 1));
    const std::int32_t b = out.blocks_as<kPow2>(static_cast<std::int32_t>(q));
    if (b * out.block_size == static_cast<std::int32_t>(q)) out.expert_ids[b] = static_cast<std::int32_t>(expert[j]);
  }
  if (blockIdx.x == 0 && tid == 0) *out.post_pad = total;
  const std::uint32_t thread = blockIdx.x * kSortThreads + tid, threads = gridDim.x * kSortThreads;
  const std::int32_t used_blocks = out.blocks_as<kPow2>(total);
  if (fills_any(used_blocks, out.max_blocks, thread))
    fill_range(out.expert_ids, used_blocks, out.max_blocks, -1, thread, threads);
}

}  // namespace gpu
}  // namespace moe
