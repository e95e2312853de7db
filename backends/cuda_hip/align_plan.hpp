// How align_block_size runs on a GPU for a given shape: which path, how the work is cut, where each scratch
// array sits in the workspace. A function of the shape alone (never of the device), so that the size the
// caller queried once stays valid. Plain host C++.
//
// The algorithm (every path): a stable counting sort. Work is cut into SEGMENTS of consecutive ids, each
// owned by one warp that walks it in order, kWarpSize ids per step; lanes with the same bucket find each
// other with ballots (match_bucket) and take consecutive ranks in lane order. So within a bucket, ids keep
// their input order without any sort:
//   rank:    each warp ranks its segment per bucket            -> rank[i], table[bucket][segment]
//   scan:    per bucket, exclusive prefix over segments        -> where each warp starts in each bucket
//            per bucket, padded exclusive prefix over buckets  -> where each bucket starts in the output
//   scatter: id i goes to bucket start + segment prefix + rank[i] (no order left to keep: fully parallel)
// Paths:
//   kTiny     up to 8 ids, and up to 32 with more than 256 experts (any number): every warp derives the whole
//             layout from the ids alone; the grid writes the sentinel tail.
//   kCluster  (CUDA, sm_90+) 2049 to 8192 ids, experts <= kDirectMaxExperts: the kGrid scheme in ONE
//             thread-block cluster of up to 8 blocks: each block reads the others' counts from their shared
//             memory, so one cluster barrier replaces kGrid's two grid barriers and its global table. Falls back
//             to kGrid (same workspace) where the device cannot run the cluster.
//   kClusterGrid  (CUDA, sm_90+) 8193 to 65536 ids, experts <= kDirectMaxExperts: kGrid's scheme with its blocks
//             in clusters of 8 (at most 8 clusters), one cooperative launch: the blocks of a cluster add their
//             counts through each other's shared memory, so only one count per expert and cluster crosses the
//             grid, and ONE grid barrier replaces kGrid's two. Falls back to kGrid (same workspace) where the
//             device cannot hold all the clusters at once.
//   kOwned    the rest up to 2048 ids, experts <= kDirectMaxExperts: one launch of a block per expert, or per
//             2-8 experts where so many blocks would crowd the SMs; every block reads all ids, counts all experts
//             in shared memory and ranks and places only its own experts' ids. No block waits for another.
//   kGrid     experts <= kDirectMaxExperts, up to kGridMaxBlocks blocks of kThreads x <= kGridItems ids: ONE
//             cooperative launch of co-resident blocks; each ranks its ids in registers with per-warp counts
//             in shared memory; two grid-wide barriers in place of launch boundaries. Falls back to kDirect
//             (same workspace) on a device that cannot hold all the blocks at once.
//   kDirect   experts <= kDirectMaxExperts: three launches over the whole GPU, bucket = expert.
//   kRadix    more experts: two stable passes (low digit, then high digit of the expert, <= 8 bits each,
//             same kernels), the second pass writing straight into the padded layout.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/align.hpp"
#include "padded_layout.hpp"

namespace moe {
namespace gpu {

constexpr int kThreads = 256;                       // block size of the multi-block kernels
constexpr std::int32_t kDirectMaxExperts = 1024;    // per-warp rows of counters fit shared memory up to here
constexpr int kItems = 8;                           // ids per lane held in registers (loaded ahead)
constexpr std::int64_t kMaxSegments = 1 << 16;      // bounds the count table at huge numel
constexpr std::size_t kAlign = 256;
constexpr std::int64_t kTinyMaxIds = 32;            // one warp step (NVIDIA and AMD)
// block_scan_tiles in kDirect's and kRadix's scans over segments: rows of a warp per batch of loads. 2 (then in
// the expert scan too) took 1.04-1.10x the time of 4 on kDirect and 1.07-1.11x at 65536 experts; 8 rows
// 0.96-0.99x on kDirect, for 1.6x the code (perf/NOTES.md step 40).
constexpr int kScanRows = 4;
constexpr int kGridItems = 16;                      // kGrid: ids per thread held in registers, at most
constexpr int kGridTargetBlocks = 128;              // kGrid: fewer ids per thread until about this many blocks
constexpr int kGridMaxBlocks = 512;                 // kGrid: bounds the per-expert scan over blocks (registers)
// kOwned: the ids it takes (at 8192 ids, reading all ids in every block cost more than the grid's barriers: 9.7
// against 6.6 us with 256 experts; perf/NOTES.md step 21). Its lower end is kTiny's upper one. About
// kOwnedItems ids per thread in blocks of 128 to kOwnedMaxThreads threads: at 1024-2048 ids with 8-256 experts,
// 4 per thread took 0.84-0.96 of the time of 8 (perf/NOTES.md step 37). Experts per block: align.cu,
// owned_experts_per_block.
constexpr std::int64_t kOwnedMaxIds = 2048;
constexpr int kOwnedItems = 4, kOwnedMaxThreads = 512;
static_assert(kOwnedMaxIds <= std::int64_t{kOwnedMaxThreads} * kOwnedItems, "kOwned: a block holds all ids");
// kCluster: CUDA only (HIP has no thread-block clusters); up to 8 blocks of kThreads (a portable cluster size),
// up to kClusterMaxPer ids per thread. 16 blocks were slower than 8 at every size tried (perf/NOTES.md step 22).
#if defined(MOE_GPU_HIP)
constexpr bool kClusterBackend = false;
#else
constexpr bool kClusterBackend = true;
#endif
constexpr int kClusterMaxBlocks = 8, kClusterMaxPer = 4;
constexpr std::int64_t kClusterMaxIds = std::int64_t{kClusterMaxBlocks} * kThreads * kClusterMaxPer;

// kClusterGrid: up to kClusterGridMaxBlocks blocks (8 clusters of kClusterMaxBlocks), up to kClusterMaxPer ids
// per thread. At 32768 ids, 16 clusters of 8 with 1 id per thread took 1.05-1.9x the time of 8 clusters with 2
// (the more, the more experts), with the default and the "spread" scheduling policy alike; 8 clusters of 16 (a
// non-portable size) up to 1.55x, 4 clusters up to 1.14x. At 131072 ids (8 per thread) kGrid's 128 blocks were
// faster (perf/NOTES.md step 30).
constexpr int kClusterGridMaxBlocks = 64;
constexpr std::int64_t kClusterGridMaxIds = std::int64_t{kClusterGridMaxBlocks} * kThreads * kClusterMaxPer;

enum class AlignPath { kEmpty, kTiny, kCluster, kClusterGrid, kOwned, kGrid, kDirect, kRadix };

inline const char* path_name(AlignPath p) {
  switch (p) {
    case AlignPath::kEmpty: return "empty";
    case AlignPath::kTiny: return "tiny";
    case AlignPath::kCluster: return "cluster";
    case AlignPath::kClusterGrid: return "clustergrid";
    case AlignPath::kOwned: return "owned";
    case AlignPath::kGrid: return "grid";
    case AlignPath::kDirect: return "direct";
    case AlignPath::kRadix: return "radix";
  }
  return "?";
}

struct AlignPlan {
  AlignPath path = AlignPath::kEmpty;
  AlignPath fallback = AlignPath::kEmpty;  // kCluster(Grid): the path taken where the device cannot run it
  int cluster_blocks = 0, cluster_per = 0;  // kCluster(Grid): blocks (of kThreads), ids per thread
  int owned_threads = 0, owned_per = 0;  // kOwned: block size, ids per thread
  int grid_per = 0, grid_blocks = 0;  // kGrid: ids per thread, blocks
  std::size_t grid_table = 0, grid_totals = 0;  // kGrid: workspace regions (kDirect's follow, for the fallback)
  std::int64_t segment = 0;  // kDirect/kRadix: ids per warp segment
  std::int64_t segments = 0;
  int lo_bits = 0, hi_bits = 0, key_bits = 0;  // kRadix: digit widths; bits of the largest expert id
  // workspace regions, byte offsets (kDirect: table, totals; kRadix: all but `table`/`totals`)
  std::size_t table = 0, totals = 0, rank = 0;  // rank: u16 per id (both multi-block paths)
  std::size_t table1 = 0, totals1 = 0, table2 = 0, totals2 = 0;
  std::size_t expert_count = 0, expert_start = 0, expert_padded_start = 0, pair_keys = 0, pair_values = 0,
              scalars = 0;  // scalars: [0] ids kept after dropping, [1] padded total
  std::size_t bytes = 0;
};

inline int bits_for(std::int64_t values) {  // bits to name values 0 .. values-1
  int b = 0;
  while ((std::int64_t{1} << b) < values) ++b;
  return b;
}

inline AlignPlan make_align_plan(const detail::AlignShape& s) {
  AlignPlan p;
  const std::int64_t n = s.numel;
  const std::int32_t E = s.num_experts;
  if (n == 0) return p;
  std::size_t cursor = 0;
  auto take = [&](std::int64_t count, std::size_t elem) {
    const std::size_t at = cursor;
    cursor += (static_cast<std::size_t>(count) * elem + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  auto segment_for = [&](std::int64_t buckets) {  // < 65536 always, so u16 ranks suffice
    return layout::segment_length(n, buckets, kMaxSegments);
  };
  // kTiny up to 8 ids, and up to 32 with more than 256 experts (kOwned launches a block per expert): kOwned
  // took 0.70-0.93 of kTiny's time at 16 and 32 ids with 8-256 experts, but 1.06-1.14x at 2-8 ids with 256
  // experts and 0.95-2.3x with 512-1024 (at 2-8 ids with <= 64 experts 0.90-0.99: left to kTiny, one rule
  // fewer; perf/NOTES.md step 27)
  if (n <= 8 || (n <= kTinyMaxIds && E > 256)) {
    p.path = AlignPath::kTiny;
  } else if (n <= kOwnedMaxIds && E <= kDirectMaxExperts) {
    // about kOwnedItems ids per thread, 128 to kOwnedMaxThreads threads. From 33 ids, one block for all ids (a
    // path of its own until then) took 1.03-1.96x kOwned's time (perf/NOTES.md step 26).
    p.path = AlignPath::kOwned;
    const std::int64_t threads =
        std::clamp<std::int64_t>(((n + kOwnedItems - 1) / kOwnedItems + 31) / 32 * 32, 128, kOwnedMaxThreads);
    p.owned_threads = static_cast<int>(threads);
    p.owned_per = static_cast<int>((n + threads - 1) / threads);
  } else if (E <= kDirectMaxExperts) {
    p.path = AlignPath::kDirect;
    int per = 1;
    while (per < kGridItems && n > std::int64_t{kThreads} * per * kGridTargetBlocks) per *= 2;
    const std::int64_t blocks = (n + std::int64_t{kThreads} * per - 1) / (std::int64_t{kThreads} * per);
    if (blocks <= kGridMaxBlocks) {
      p.path = AlignPath::kGrid;
      p.grid_per = per;
      p.grid_blocks = static_cast<int>(blocks);
      p.grid_table = take(blocks * E, sizeof(std::int32_t));
      p.grid_totals = take(E, sizeof(std::int32_t));
    }
    p.segment = segment_for(E);
    p.segments = (n + p.segment - 1) / p.segment;
    p.table = take(p.segments * E, sizeof(std::int32_t));
    p.totals = take(E, sizeof(std::int32_t));
    p.rank = take(n, sizeof(std::uint16_t));
  } else {
    p.path = AlignPath::kRadix;
    p.key_bits = bits_for(E);
    p.lo_bits = p.key_bits / 2;
    p.hi_bits = p.key_bits - p.lo_bits;
    p.segment = segment_for(std::int64_t{1} << p.hi_bits);
    p.segments = (n + p.segment - 1) / p.segment;
    p.table1 = take(p.segments << p.lo_bits, sizeof(std::int32_t));
    p.totals1 = take(std::int64_t{1} << p.lo_bits, sizeof(std::int32_t));
    p.table2 = take(p.segments << p.hi_bits, sizeof(std::int32_t));
    p.totals2 = take(std::int64_t{1} << p.hi_bits, sizeof(std::int32_t));
    p.expert_count = take(E, sizeof(std::int32_t));
    p.expert_start = take(E, sizeof(std::int32_t));
    p.expert_padded_start = take(E, sizeof(std::int32_t));
    p.pair_keys = take(n, sizeof(std::int32_t));
    p.pair_values = take(n, sizeof(std::int32_t));
    p.scalars = take(2, sizeof(std::int32_t));
    p.rank = take(n, sizeof(std::uint16_t));
  }
  p.bytes = cursor;
  // kCluster above kOwned's ids, up to 8192 (kGrid's two grid barriers cost more than 8 blocks' longer rank
  // chains: 0.68-0.85 of its time, H200, perf/NOTES.md steps 22 and 24). Not in kOwned's range: there kOwned
  // took 0.80-0.84 of its time even with 1024 experts, where every one of kOwned's blocks reads all ids (160-2048
  // ids, step 29).
  // kClusterGrid where kGrid's two barriers cost more than one cluster barrier and one grid barrier (8193 to
  // 65536 ids: 0.84-0.95 of kGrid's time, perf/NOTES.md step 30); kGrid's table region holds its smaller one.
  // Both take the fewest ids per thread that fit their blocks: shorter rank chains.
  auto to_clusters = [&](AlignPath path, int max_blocks, bool whole_clusters) {
    int per = 1;
    while (n > std::int64_t{max_blocks} * kThreads * per) per *= 2;
    std::int64_t blocks = (n + std::int64_t{kThreads} * per - 1) / (std::int64_t{kThreads} * per);
    if (whole_clusters) blocks = (blocks + kClusterMaxBlocks - 1) / kClusterMaxBlocks * kClusterMaxBlocks;  // some idle
    p.fallback = p.path;
    p.path = path;
    p.cluster_per = per;
    p.cluster_blocks = static_cast<int>(blocks);
  };
  if (kClusterBackend && n > kOwnedMaxIds && E <= kDirectMaxExperts) {
    if (n <= kClusterMaxIds) to_clusters(AlignPath::kCluster, kClusterMaxBlocks, false);
    else if (n <= kClusterGridMaxIds) to_clusters(AlignPath::kClusterGrid, kClusterGridMaxBlocks, true);
  }
  return p;
}

}  // namespace gpu
}  // namespace moe
