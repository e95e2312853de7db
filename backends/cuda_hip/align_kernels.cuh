// align_block_size kernels, one source for CUDA and HIP. The algorithm and the paths are described in
// align_plan.hpp. Sources say where ids come from (the caller's topk_ids, or the (expert, index) pairs of a
// first radix pass); sinks say where a ranked id goes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "align_plan.hpp"
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
// bucket(key) = (key >> shift) & mask, `bits` wide: the whole expert (every path but kRadix) or one radix digit.
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
    // one unsigned compare drops negative and too large ids alike (a negative id converts to a value past any
    // expert count), in 32 bits for ids of up to 32 bits: one instruction fewer per id than two signed tests
    using U = std::conditional_t<sizeof(IdT) <= 4, std::uint32_t, std::uint64_t>;
    const auto v = static_cast<U>(ids[i]);
    return {v < static_cast<U>(num_experts) ? static_cast<std::int32_t>(v) : -1, static_cast<std::int32_t>(i)};
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
  std::int32_t block_shift;  // log2(block_size) where it is a power of two, else -1
  std::int64_t max_padded;
  std::int64_t max_blocks;
  // x / block_size, and x rounded up to a multiple of it (x >= 0): a shift where block_size is a power of two.
  // An integer division is ~20 instructions, several of them on the chain of each small call: with shifts
  // kOwned took 0.86-0.98 of its time, kTiny 0.89-0.93 (perf/NOTES.md step 27).
  MOE_DEVICE std::int32_t blocks(std::int32_t x) const {
    return block_shift >= 0 ? blocks_as<true>(x) : blocks_as<false>(x);
  }
  MOE_DEVICE std::int32_t padded(std::int32_t x) const { return blocks(x + block_size - 1) * block_size; }
  // the same where the kernel is built for one form of block_size (a power of two or not): no branch at each
  // use. kOwned with the form as a template argument ran 311 instructions per warp instead of 337 and took
  // 0.91-0.97 of the time up to 512 experts (256x8: 2.04 -> 1.94 us), kTiny 0.91-0.96 (1x8: 1.42 -> 1.34 us;
  // perf/NOTES.md step 46)
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
// 64-bit ones on the tail of every small call (kTiny 0.96-0.97 of the time, kOwned 0.97-0.98: perf/NOTES.md
// step 37).
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
// no loop over experts. (A loop over the experts that have padding cost ~150 ns per expert per warp on the
// H200, serialised: perf/NOTES.md step 13.)
__device__ inline void fill_sentinels(const AlignOut& o, std::int64_t thread, std::int64_t threads) {
  fill_range(o.sorted, 0, o.max_padded, o.numel, thread, threads);
}

// expert_ids from the padded starts (start[e] of E experts, any memory; total: the padded total), by warp `warp` of
// `warps`. With fewer experts than warps: a warp per expert, its lanes over the expert's blocks, and the -1 tail
// over the warps left (no expert's blocks on the warps that write it). Otherwise a warp per 32 experts, a lane
// each: one load of its padded range, the lane writes the expert's first kFillOwn blocks itself and the whole warp
// the rest of each expert that has more (skewed ids), one such expert at a time; the tail over all warps. No search
// per block of expert_ids: with a binary search over the starts per block, 16 dependent loads at 65536 experts,
// kRadix's expert_ids took 8.9 us under ncu against 5.9 (perf/NOTES.md step 40), and in kClusterGrid at 4096x8
// the block that held most of the searches left 0.5 us after the others. A warp per 32 experts alone put up to 32
// experts' blocks on one warp (1.2-1.6x the time with 8-64 experts), a warp per expert alone put 8 experts on
// each warp of kCluster with 512 (1.15x); the tail on one warp took 1.03x with ids of 1 expert in 8 kept (step 47).
// counts (E < warps only; else nullptr): each expert's count, so that its warp also writes the expert's padding and
// the warps left the tail of sorted_token_ids, where the kernel wrote no sentinels before its ids (kClusterGrid).
constexpr int kFillOwn = 4;
__device__ inline void write_expert_ids(const std::int32_t* start, int E, std::int32_t total, const AlignOut& out,
                                        int warp, int warps, const std::int32_t* counts = nullptr) {
  const int lane = lane_id();
  const std::int32_t used = out.blocks(total);
  if (E < warps) {
    if (warp < E) {
      const std::int32_t begin = start[warp], end = warp + 1 < E ? start[warp + 1] : total;
      // unsigned counters here and below: a bound may be INT32_MAX itself (block_size near 2^31, or 2^31 - 1 ids
      // with block_size 1), and a signed i + kWarpSize past it would wrap to a negative index
      for (std::uint32_t i = out.blocks(begin) + lane, hi = out.blocks(end); i < hi; i += kWarpSize)
        out.expert_ids[i] = warp;
      if (counts != nullptr)
        for (std::uint32_t i = begin + counts[warp] + lane, hi = end; i < hi; i += kWarpSize) out.sorted[i] = out.numel;
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
      for (std::uint32_t q = kFillOwn + lane, hi = rest; q < hi; q += kWarpSize) out.expert_ids[first + q] = which;
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

// ---- kernels ---------------------------------------------------------------------------------------------
// Shared memory of the multi-block kernels: one row of counters per warp, stride buckets + 1 (odd: the
// transposed accesses below stay free of bank conflicts).
// block_scan_owned's scratch: a row of kThreads buckets (<= kDirectMaxExperts: experts, or a radix digit's <= 512
// values) per kThreads / kWarpSize values.
constexpr int kBucketScanRows = (kDirectMaxExperts + kThreads - 1) / kThreads;

// Phase 1: each warp ranks its segment; the rank of id i inside its segment and bucket goes to rank[i]
// (u16: segments are shorter than 65536), the segment's count per bucket to table[bucket][segment].
// expert_hist (kRadix pass 1): also counts per expert, global atomics aggregated per warp step.
// sentinels (the pass before the one that places ids): also fill_sentinels(out).
template <class Src>
__global__ void __launch_bounds__(kThreads) count_kernel(Src src, std::int64_t segment, std::int64_t segments,
                                                         int buckets, std::int32_t* table, std::uint16_t* rank,
                                                         std::int32_t* expert_hist, int key_bits,
                                                         bool sentinels, AlignOut out) {
  wait_prior_grid();  // no early allow_next_grid(): see "dependent launch" in gpu_runtime.hpp
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
  wait_prior_grid();  // no early allow_next_grid(): see "dependent launch" in gpu_runtime.hpp
  __shared__ std::int32_t scratch[kThreads / 32 + 1];
  std::int32_t* row = table + blockIdx.x * segments;
  const std::int32_t total = block_scan_tiles<kScanRows>(
      static_cast<int>(segments), scratch, [&](int i) { return row[i]; },
      [&](int i, std::int32_t prefix) { row[i] = prefix; });
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

// Phase 3: bucket starts from totals (padded to `pad`); per segment and bucket, start + prefix; then every id
// goes to that + its rank: no ordering left to respect, so all threads of the block take ids in turn.
// kFill: also expert_ids and post_pad (kDirect, bucket = expert). kept: the number of ids kept.
template <bool kFill, class Src, class Sink>
__global__ void __launch_bounds__(kThreads)
    scatter_kernel(Src src, std::int64_t segment, std::int64_t segments, int buckets, std::int32_t pad,
                   const std::int32_t* table, const std::int32_t* totals, const std::uint16_t* rank, Sink sink,
                   AlignOut out, std::int32_t* kept) {
  wait_prior_grid();  // no early allow_next_grid(): see "dependent launch" in gpu_runtime.hpp
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

// ---- the block-resident paths (kGrid, kCluster) ----------------------------------------------------------
// A ranked id in one register: its expert (or -1) and its rank among its warp's ids of that expert. The resident
// kernels hold kMaxPer of them across their barriers; as two registers each, kGrid's 16 spilled (perf/NOTES.md
// step 47).
static_assert(kDirectMaxExperts < (1 << 11), "a ranked id packs its expert in 11 bits");
MOE_DEVICE std::int32_t pack_ranked(std::int32_t key, std::int32_t rank) { return rank << 11 | (key + 1); }
MOE_DEVICE std::int32_t ranked_key(std::int32_t packed) { return (packed & ((1 << 11) - 1)) - 1; }
MOE_DEVICE std::int32_t ranked_rank(std::int32_t packed) { return packed >> 11; }

// A block ranks its ids in registers: warp w ranks `per` steps of kWarpSize consecutive ids from `first`
// (load_keys: one load per id, all in flight before the first rank, issued before the kernel's sentinel fill).
// Shared memory holds one row of counters per warp (stride E + 1, cleared by clear_rows); afterwards row w holds,
// per expert, the ids of that expert in warps before w (the block's exclusive prefix over warps), and
// block_count[e] the block's total, set by thread e % blockDim: other threads read them after the caller's next
// barrier (a cluster or grid barrier, each a block barrier too). Index math is 32-bit: numel < 2^31.
template <int kMaxPer, class Src>
MOE_DEVICE void load_keys(const Src& src, int first, int per, std::int32_t (&key)[kMaxPer]) {
  const int n = static_cast<int>(src.size());
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
    const int i = first + j * kWarpSize + lane_id();
    key[j] = (j < per && i < n) ? src.load(i).key : -1;
  }
}
// ranked: the keys of load_keys on entry, the ranked ids (pack_ranked) on return. kBallots: peers by
// match_bucket_ballots (kClusterGrid: 0.90-0.94 of its time with the padding after, step 50). Not in kGrid and
// kCluster: 0.95-0.97 of kGrid's time on uniform ids with 64-512 experts, but 1.06x with skewed ids, 1.21x with most
// ids dropped, 1.07-1.15x with 8 experts (perf/NOTES.md step 50).
template <int kMaxPer, bool kBallots = false, class Src>
__device__ void rank_block(const Src& src, int per, std::int32_t* rows, std::int32_t* block_count,
                           std::int32_t (&ranked)[kMaxPer]) {
  const int E = src.num_experts, stride = E + 1, W = warps_per_block();
  __syncthreads();  // the rows cleared (clear_rows) before any count
  probe_at(kProbeCleared);
  std::int32_t* row = rows + warp_id() * stride;
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
    if (j >= per) continue;  // warp-uniform (no break: it would stop unrolling)
    const std::int32_t key = ranked[j];  // bucket = expert here
    const bool valid = key >= 0;
    const int bucket = valid ? key : 0, bits = src.digit.bits;
    const std::int32_t rank = kBallots ? rank_step_peers(match_bucket_ballots(bucket, valid, bits), bucket, valid, row)
                                       : rank_step(bucket, valid, bits, row);
    ranked[j] = pack_ranked(key, rank);
  }
  __syncthreads();
  probe_at(kProbeRanked);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {  // per expert: prefix over the rows, in warp order
    constexpr int kMaxW = kThreads / kWarpSize;  // blocks of kThreads: W <= kMaxW
    std::int32_t c[kMaxW], run = 0;
#pragma unroll
    for (int w = 0; w < kMaxW; ++w) c[w] = w < W ? rows[w * stride + e] : 0;  // all loads before any store
#pragma unroll
    for (int w = 0; w < kMaxW; ++w) {
      if (w < W) rows[w * stride + e] = run;
      run += c[w];
    }
    block_count[e] = run;
  }
  probe_at(kProbePrefixed);
}

// rank_block's rows cleared: the block's own shared memory, so its kernel does it before waiting on the kernel
// before it (kOwned's way, perf/NOTES.md step 31); rank_block's first barrier orders it before the counts.
MOE_DEVICE void clear_rows(std::int32_t* rows, int E) {
  for (int t = threadIdx.x; t < warps_per_block() * (E + 1); t += blockDim.x) rows[t] = 0;
}

// The ranked ids of rank_block to their places: base[e] is where this block's ids of expert e begin.
template <int kMaxPer>
__device__ void place_block(const std::int32_t* rows, const std::int32_t* base, int E, int first, int per,
                            const std::int32_t (&ranked)[kMaxPer], const AlignOut& out) {
  const std::int32_t* row = rows + warp_id() * (E + 1);
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
    if (j >= per) continue;
    const std::int32_t key = ranked_key(ranked[j]);
    if (key >= 0) out.sorted[base[key] + row[key] + ranked_rank(ranked[j])] = first + j * kWarpSize + lane_id();
  }
}

// Shared memory of the block-resident kernels (kGrid, kCluster), carved from their dynamic shared
// memory: rows [W * (E + 1)], count [E] (the block's count per expert), start [E], base [E], scratch
// [kBucketScanRows * W].
struct ResidentSmem {
  std::int32_t *rows, *count, *start, *base, *scratch;
  MOE_DEVICE ResidentSmem(std::int32_t* smem, int W, int E)
      : rows(smem), count(smem + W * (E + 1)), start(count + E), base(start + E), scratch(base + E) {}
};
inline std::size_t resident_smem_bytes(int warps, std::int32_t experts) {
  return sizeof(std::int32_t) *
         (std::size_t(warps) * (experts + 1) + 3 * std::size_t(experts) + std::size_t(kBucketScanRows) * warps);
}

// The last phase of the block-resident kernels (blocks of kThreads). Each thread has set, for its experts e = t,
// t + kThreads, ..., start[e] = expert e's padded size and base[e] = the ids of e that blocks before this one hold;
// the block scan reads only those, so no barrier between the exchange and the scan. Then the padded starts,
// expert_ids, the block's ids placed and the padded total (block 0). From the grid or cluster barrier to the
// placing: two block barriers and one warp scan (a block scan over all of start[] and the barriers around it had
// taken 0.58 us of kClusterGrid's 5.4 after its wait at 4096x8, perf/NOTES.md step 47).
// counts: see write_expert_ids (kClusterGrid without its sentinel fill), else nullptr.
template <int kMaxPer>
__device__ void place_padded(const ResidentSmem& sm, int E, int first, int per, const std::int32_t (&ranked)[kMaxPer],
                             const AlignOut& out, bool block0, const std::int32_t* counts = nullptr) {
  probe_at(kProbeScanBegin);
  const auto set = [&](int e, std::int32_t at) {
    sm.start[e] = at;
    sm.base[e] += at;
  };
  const std::int32_t total = block_scan_owned<kThreads / kWarpSize>(sm.start, E, sm.scratch, set);
  __syncthreads();
  probe_at(kProbeScanned);
  // expert_ids before the placing, whose scattered stores its few loads would otherwise queue behind (0.45 us per
  // block in kClusterGrid at 4096x8, perf/NOTES.md step 47). Warps numbered across the blocks first: consecutive
  // experts on different blocks.
  const int B = static_cast<int>(gridDim.x);
  write_expert_ids(sm.start, E, total, out, warp_id() * B + static_cast<int>(blockIdx.x), B * warps_per_block(),
                   counts);
  probe_at(kProbeExpertIds);
  place_block(sm.rows, sm.base, E, first, per, ranked, out);
  if (block0 && threadIdx.x == 0) *out.post_pad = total;
  probe_at(kProbePlaced);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(MOE_GPU_HIP)
// Arrive at the cluster barrier without release semantics: cooperative_groups' barrier_arrive orders every earlier
// memory access of the block first, the table's global stores included, and kClusterGrid's grid barrier then
// waited 0.3-0.4 us longer (perf/NOTES.md step 47). The barrier's wait (barrier_wait) keeps its acquire.
MOE_DEVICE void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }

// cluster_kernel: expert e's count in the blocks of this cluster before this one, and in all of them,
// read from each block's shared memory (its count per expert at block_count), all loads in flight at once.
MOE_DEVICE void cluster_counts(const cooperative_groups::cluster_group& cluster, std::int32_t* block_count, int e,
                               std::int32_t& before, std::int32_t& total) {
  const int R = static_cast<int>(cluster.num_blocks()), r = static_cast<int>(cluster.block_rank());
  before = 0;
  total = 0;
#pragma unroll
  for (int q = 0; q < kClusterMaxBlocks; ++q) {
    const std::int32_t v = q < R ? *cluster.map_shared_rank(block_count + e, q) : 0;
    total += v;
    before += q < r ? v : 0;
  }
}
#endif

// kGrid: ONE cooperative launch of co-resident blocks, each owning blockDim * per consecutive ids (per ==
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

#if !defined(MOE_GPU_HIP)
// kCluster and kClusterGrid (CUDA, sm_90+): kGrid's scheme with its blocks in thread-block clusters of R (<= 8)
// consecutive blocks; block b owns blockDim * per consecutive ids. Each block's counts stay in its shared
// memory, where every block of its cluster can read them, so:
//   1. sentinels over the grid; rank_block                                             | cluster barrier
//   2. per expert: the counts of the cluster's blocks before this one, and of all of them
//   ONE cluster (kCluster, a plain launch): that is all; one hardware cluster barrier in place of kGrid's two
//      grid barriers and global table (its release/acquire orders every block's sentinel stores before the
//      id stores of any).
//   SEVERAL (kClusterGrid, a cooperative launch of C clusters): block rank 0 writes its cluster's total per
//      expert to table[cluster * E + e]                                                 | grid barrier
//      every block adds the totals of the clusters before its own, read from that small table: only one
//      count per expert and cluster crosses the grid, and one grid barrier replaces kGrid's two (and kGrid's
//      per-expert scan between them). (No barrier at all, every cluster counting all ids again instead, cost
//      as much as it saved: perf/NOTES.md step 35; loading the ids to count alone took 1 us more, step 50.)
//      With fewer experts than warps it writes no sentinels in 1: the padding and the tail go with expert_ids
//      in 3. Its ids are ranked with ballots (rank_block).
//   3. padded starts; place; expert_ids over the grid
// A block's counts must outlive the other blocks' reads: each block arrives at a second cluster barrier after
// its reads and waits on it last. Blocks past the ids (a grid of whole clusters) rank nothing. Shared memory:
// ResidentSmem, its count being this block's count per expert. kMany: several clusters, an instance of its
// own (the one kernel for both took 1.03-1.05x the time of two: perf/NOTES.md step 30).
template <int kMaxPer, bool kMany, class Src>
__global__ void __launch_bounds__(kThreads) cluster_kernel(Src src, int per, std::int32_t* table, AlignOut out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  probe_time(kProbeEntryTime);
  probe_at(kProbeEntry);
  extern __shared__ std::int32_t smem[];
  const cg::cluster_group cluster = cg::this_cluster();
  const int E = out.num_experts, W = warps_per_block(), B = gridDim.x, b = blockIdx.x;
  const int R = static_cast<int>(cluster.num_blocks()), r = static_cast<int>(cluster.block_rank());
  const int C = B / R, c = b / R;  // 1-D clusters are runs of R consecutive blocks
  const ResidentSmem sm(smem, W, E);
  clear_rows(sm.rows, E);
  begin_after_prior_grid();
  probe_at(kProbeWaited);
  std::int32_t* block_count = sm.count;  // read by the others
  const int first = (b * W + warp_id()) * per * kWarpSize;
  const std::int64_t thread = std::int64_t{b} * blockDim.x + threadIdx.x, threads = std::int64_t{B} * blockDim.x;
  std::int32_t ranked[kMaxPer];
  // kClusterGrid with fewer experts than warps writes no sentinels before the ids: each expert's padding and the
  // tail go with expert_ids, after the layout (write_expert_ids), so every element is written once; 0.97 of the
  // time at 4096x8 (perf/NOTES.md step 50). Else all of sorted_token_ids first, ordered before any id's store by
  // the cluster or grid barrier.
  const bool pad_after = kMany && E < B * W;
  load_keys(src, first, per, ranked);  // in flight during the fill
  if (!pad_after) fill_sentinels(out, thread, threads);
  probe_at(kProbeFilled);
  rank_block<kMaxPer, kMany>(src, per, sm.rows, block_count, ranked);
  cluster.sync();
  probe_at(kProbeClusterSynced);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {  // the experts place_padded's scan gives this thread
    std::int32_t before, total;
    cluster_counts(cluster, block_count, e, before, total);
    sm.base[e] = before;
    if constexpr (!kMany) sm.start[e] = out.padded(total);
    else if (r == 0) table[c * E + e] = total;  // cluster-major: coalesced here and where it is read
  }
  probe_at(kProbeClusterCounted);
  cluster_arrive_relaxed();  // done reading the other blocks' counts: loads whose values are used are complete
  if constexpr (kMany) {
    sync_grid();  // after it no block reads another's counts (each read before it arrived): block_count is free
    probe_at(kProbeGridSynced);
    constexpr int kMaxClusters = kClusterGridMaxBlocks / kClusterMaxBlocks;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      std::int32_t v[kMaxClusters], before = 0, total = 0;
#pragma unroll
      for (int q = 0; q < kMaxClusters; ++q) v[q] = q < C ? table[q * E + e] : 0;  // all loads in flight at once
#pragma unroll
      for (int q = 0; q < kMaxClusters; ++q) {
        total += v[q];
        before += q < c ? v[q] : 0;
      }
      sm.base[e] += before;
      sm.start[e] = out.padded(total);
      block_count[e] = total;  // each expert's count, for its padding (pad_after)
    }
    probe_at(kProbeTableRead);
  }
  place_padded(sm, E, first, per, ranked, out, b == 0, pad_after ? block_count : nullptr);
  cluster.barrier_wait();  // no block leaves while another may still read its counts
  probe_at(kProbeExit);
  probe_time(kProbeExitTime);
#else
  (void)src, (void)per, (void)table, (void)out;
  __trap();  // never launched: the host takes this path only for kernels built for sm_90+ (align.cu)
#endif
}
#endif

// Shared memory of kOwned: hist [E + kWarpSize] (past the experts a slot per lane for its dropped ids, never
// read), warp_count [experts per block][W], sums [2 W].
inline std::size_t owned_smem_bytes(int warps, std::int32_t experts, int experts_per_block) {
  return sizeof(std::int32_t) *
         (std::size_t(experts) + kWarpSize + std::size_t(experts_per_block + 2) * std::size_t(warps));
}

// kOwned: block b reads ALL ids and owns kK consecutive experts from b * kK. It counts every expert in shared memory
// (for its experts' padded starts and the padded total) and ranks only its own experts' ids, one ballot per owned
// expert and warp step. Warp w holds `per` (<= kMaxPer, the smallest power of two that covers it: align.cu,
// with_steps) steps of kWarpSize consecutive ids from w * per * kWarpSize in registers, so (warp, step, lane) order
// is index order and ranks are stable. Each owned id is ranked during the count (among its warp's ids of its
// expert); once the prefix over warps and its expert's start are known, placing it is one store. The whole kernel is
// one dependent chain per warp, so its time follows the instructions on that chain: ranking at the count,
// branch-free histogram atomics, a warp (not the block) per owned expert's padding and expert_ids, and the tail's
// stores spread over the blocks' last warps cut ~380 to ~337 per warp at 256x8 (0.83-0.92 of the time over kOwned's
// shapes, perf/NOTES.md step 45); kPow2, the block size's form fixed at compile time (padded_as), to 311 (step 46).
// The block-wide sums (the padded sizes before its first expert and of all, each owned expert's ids in the warps
// before each warp) are warp sums, one instruction on sm_80+, not prefix scans: 0.79-0.95 of the time of the scans
// (perf/NOTES.md step 25). The block writes its experts' part of both outputs (ids, padding, expert_ids) and a strip
// of the tails. Blocks never talk to each other: one launch, no grid barrier, no workspace, each output element
// written once; the price is that every block reads all ids (from L2 after the first). How the ids and experts are
// cut (align_plan.hpp, align.cu): about 4 ids per thread, and as many experts per block as keep the grid near 16
// warps per SM; more blocks than that made the call issue-bound (perf/NOTES.md step 37).
template <int kMaxPer, int kK, bool kPow2, class Src>
__global__ void __launch_bounds__(kOwnedMaxThreads) owned_kernel(Src src, int per, AlignOut out) {
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
  // its end (0.94-0.96 of the time, perf/NOTES.md step 31). The ids' bounds are written here too: ptxas then
  // loads `per` before the wait (0.98-0.99 of the time, step 45)
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
  }
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    // a warp per owned expert writes its padding and expert_ids (k % W, without the division where k < W)
    if (w != (k < W ? k : k % W)) continue;
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
  // experts' padding). Most threads hold no tail element: they skip fill_range's address arithmetic (0.91-0.94
  // of the time with >= 256 experts; the same test inside fill_range cost the cluster 1-3 %: NOTES step 27)
  const std::uint32_t thread = (blockDim.x - 1 - threadIdx.x) * gridDim.x + blockIdx.x,
                      threads = gridDim.x * blockDim.x;
  const std::int32_t used_blocks = out.blocks_as<kPow2>(total);
  if (fills_any(total, out.max_padded, thread))
    fill_range(out.sorted, total, out.max_padded, out.numel, thread, threads);
  if (fills_any(used_blocks, out.max_blocks, thread))
    fill_range(out.expert_ids, used_blocks, out.max_blocks, -1, thread, threads);
}

// kTiny: at most 32 ids, any number of experts. Every warp holds all ids, one per lane, and derives the
// layout from them alone: the experts present and their counts (match_bucket), each one's padded start (the
// padded counts of present experts with smaller numbers). Nothing is kept per expert, so 65536 experts cost
// what 8 do. Block 0 writes the occupied part [0, total) of both outputs; the grid the rest.
template <bool kPow2, class Src>
__global__ void __launch_bounds__(kThreads) tiny_kernel(Src src, AlignOut out) {
  // The next call may be scheduled before this one even starts waiting (safe: that call's wait is for this
  // grid's completion): 0.94-0.96 of the time. Not in kOwned, whose hundreds of waiting blocks then held SM
  // slots the running call needed (1.07-1.21 with >= 256 experts): perf/NOTES.md step 28.
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
    __syncthreads();  // sentinels first, ids over them
    if (warp_id() == 0) {
      if (valid) out.sorted[start + popc(peers & lanes_below())] = lane;
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

// kRadix, between the passes: per-expert unpadded and padded starts, and the padded total, by one block, over
// groups of 4 consecutive experts: 16-byte loads and stores, a quarter of the warp scans (one expert per value
// took 1.01-1.15x the time of the whole call, 1.15 at 65536 experts), one row per batch (two: the same time,
// 1.6x the code; perf/NOTES.md step 43). Both scans in one: each value packs the count in its high 32 bits and
// the padded count in the low ones (both sums stay below 2^31, so no carry crosses).
constexpr int kScanThreads = 1024;
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

// kRadix, last: expert_ids over the grid (write_expert_ids: more experts than warps, so a lane per expert).
__global__ void __launch_bounds__(kThreads) fill_kernel(const std::int32_t* expert_padded_start,
                                                        const std::int32_t* scalars, AlignOut out) {
  begin_after_prior_grid();
  write_expert_ids(expert_padded_start, out.num_experts, scalars[1], out,
                   static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / kWarpSize),
                   static_cast<int>(gridDim.x * blockDim.x / kWarpSize));
}

}  // namespace gpu
}  // namespace moe
