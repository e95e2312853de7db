// one_cluster and cluster_grid: the cooperative grid's scheme in thread-block clusters. Cluster code exists in
// the CUDA sm_90+ device pass only (MOE_GPU_CLUSTER_CODE, gpu_runtime.hpp); elsewhere the kernel's body is a trap
// and the host never launches it (the policy takes these paths only where align/caps.cuh found them resident).
#pragma once

#include "align/resident.cuh"

namespace moe {
namespace gpu {

#if MOE_GPU_CLUSTER_CODE
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

// one_cluster and cluster_grid: cooperative_grid's scheme with its blocks in thread-block clusters of R (<= 8)
// consecutive blocks; block b owns blockDim * per consecutive ids. Each block's counts stay in its shared
// memory, where every block of its cluster can read them, so:
//   1. sentinels over the grid; rank_block                                             | cluster barrier
//   2. per expert: the counts of the cluster's blocks before this one, and of all of them
//   ONE cluster (one_cluster, a plain launch): that is all; one hardware cluster barrier in place of two
//      grid barriers and global table (its release/acquire orders every block's sentinel stores before the
//      id stores of any).
//   SEVERAL (cluster_grid, a cooperative launch of C clusters): block rank 0 writes its cluster's total per
//      expert to table[cluster * E + e]                                                 | grid barrier
//      every block adds the totals of the clusters before its own, read from that small table: only one
//      count per expert and cluster crosses the grid, and one grid barrier replaces cooperative_grid's two (and
//      its per-expert scan between them). (No barrier at all, every cluster counting all ids again instead, cost
//      as much as it saved: align_policy.hpp, [recount].)
//      With fewer experts than warps it writes no sentinels in 1: the padding and the tail go with expert_ids
//      in 3. Its ids are ranked with ballots (rank_block).
//   3. padded starts; place; expert_ids over the grid
// A block's counts must outlive the other blocks' reads: each block arrives at a second cluster barrier after
// its reads and waits on it last. Blocks past the ids (a grid of whole clusters) rank nothing. Shared memory:
// ResidentSmem, its count being this block's count per expert. kMany: several clusters, an instance of its
// own (align_policy.hpp, [many]).
template <int kMaxPer, bool kMany, class Src>
__global__ void __launch_bounds__(kThreads) cluster_kernel(Src src, int per, std::int32_t* table, AlignOut out) {
#if MOE_GPU_CLUSTER_CODE
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
  // cluster_grid with fewer experts than warps writes no sentinels before the ids: each expert's padding and the
  // tail go with expert_ids, after the layout (write_expert_ids), so every element is written once
  // (align_policy.hpp, [pad-after]). Else all of sorted_token_ids first, ordered before any id's store by the
  // cluster or grid barrier.
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
  // done reading the other blocks' counts: loads whose values are used are complete; no release needed, and one
  // delays the grid barrier (align_policy.hpp, [relaxed])
  cluster_arrive_relaxed();
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
  device_trap();  // never launched: the host takes these paths only for kernels built for sm_90+ (align/caps.cuh)
#endif
}

}  // namespace gpu
}  // namespace moe
