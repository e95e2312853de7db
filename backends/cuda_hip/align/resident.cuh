// The pieces of the block-resident paths (cooperative_grid, one_cluster, cluster_grid): a block ranks its ids
// in registers, and places them once their starts are known.
#pragma once

#include "align/common.cuh"

namespace moe {
namespace gpu {

// A ranked id in one register: its expert (or -1) and its rank among its warp's ids of that expert. The resident
// kernels hold kMaxPer of them across their barriers; as two registers each, the larger instances spill
// (align_policy.hpp, [packed]).
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
// match_bucket_ballots (cluster_grid only: a fixed cost, whatever the experts present; align_policy.hpp,
// [ballots]).
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
// before it (block_per_expert's way: align_policy.hpp, [clear-early]); rank_block's first barrier orders it
// before the counts.
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

// Shared memory of the block-resident kernels (cooperative_grid, cluster), carved from their dynamic shared
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
// placing: two block barriers and one warp scan, not a block scan over all of start[] with barriers around it
// (align_policy.hpp, [scan-owned]).
// counts: see write_expert_ids (cluster_grid without its sentinel fill), else nullptr.
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
  // expert_ids before the placing, whose scattered stores its few loads would otherwise queue behind
  // (align_policy.hpp, [ids-first]). Warps numbered across the blocks first: consecutive experts on different
  // blocks.
  const int B = static_cast<int>(gridDim.x);
  write_expert_ids(sm.start, E, total, out, warp_id() * B + static_cast<int>(blockIdx.x), B * warps_per_block(),
                   counts);
  probe_at(kProbeExpertIds);
  place_block(sm.rows, sm.base, E, first, per, ranked, out);
  if (block0 && threadIdx.x == 0) *out.post_pad = total;
  probe_at(kProbePlaced);
}

}  // namespace gpu
}  // namespace moe
