// How align_block_size runs on a GPU, decided in one place: select_align_policy(shape, caps), a pure function of
// the shape and of the device's capabilities (asked once per device: align/caps.cuh), gives the path that really
// runs, fallbacks included, with its launch geometry; align.cu launches what it says. Every threshold is in
// AlignTuning with the measurement behind it, and so are the measured choices inside the kernels (whose comments
// keep the invariant and the why). Plain host C++: tests/test_align_policy.cpp pins it on every build, on made-up
// devices. The workspace depends on the shape alone: align_workspace.hpp.
//
// The algorithm (every path): a stable counting sort. Ids are cut into SEGMENTS, each ranked in order by one warp,
// kWarpSize ids a step; lanes with the same bucket (expert, or radix digit) find each other (match_bucket) and take
// consecutive ranks in lane order, so ids keep their input order within a bucket. A prefix over segments per
// bucket, a padded prefix over buckets, then each id goes to its bucket's start + its segment's prefix + its rank.
// Paths (name: what it does; its kernels, in backends/cuda_hip/align/):
//   warp_tiny         <= 32 ids, any expert count: each warp derives the layout from the ids alone. warp_tiny.cuh
//   block_per_expert  <= 2048 ids, <= 1024 experts: one launch, a block per expert (or per 2-8); each reads all
//                     ids and places its own experts' ids; no block waits for another. block_per_expert.cuh
//   block_sort        <= 2048 ids, any expert count: one launch; every block lists all ids by expert in shared
//                     memory (radix-sorts them where an expert holds more than 16) and writes its strip of the
//                     layout; no block waits for another. block_sort.cuh
//   one_cluster       (clusters) <= 8192 ids: ONE thread-block cluster of <= 8 blocks reading each other's counts
//                     from shared memory: one cluster barrier, no workspace. cluster.cuh (kMany false)
//   cluster_grid      (clusters, cooperative) 2049-65536 ids: <= 8 such clusters in one cooperative launch, one
//                     count per expert and cluster across ONE grid barrier. cluster.cuh (kMany true)
//   cooperative_grid  (cooperative) > 2048 ids: co-resident blocks ranking in registers, two grid barriers in
//                     place of launch boundaries. cooperative_grid.cuh
//   three_launches    > 2048 ids: rank, scan, scatter as three launches over the GPU, bucket = expert.
//                     three_launches.cuh
//   two_digit_radix   > 2048 ids, > 1024 experts: three_launches' kernels in two stable passes (low, then high digit of the
//                     expert), the second writing the padded layout. two_digit_radix.cuh
//   empty             numel 0: num_tokens_post_pad = 0
// Shared: align/common.cuh (sources, sinks, outputs, warp ranking), align/resident.cuh (ranking and placing of
// the block-resident paths: one_cluster, cluster_grid, cooperative_grid), primitives.cuh (warp and block scans).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/align.hpp"
#include "device_caps.hpp"
#include "padded_layout.hpp"

namespace moe {
namespace gpu {

// ---- the table ---------------------------------------------------------------------------------------------
// Each row: the constant, and above it the measurement behind it (perf/NOTES.md step N; H200 unless said).
struct AlignTuning {
  // -- the kernels' shapes (a why, not a measurement)
  static constexpr int kThreads = 256;                   // block of the multi-block kernels: 8 warps, 4 wavefronts
  static constexpr std::int32_t kMaxExperts = 1024;      // per-warp rows of counters fit shared memory; more: radix
  static constexpr int kItems = 8;                       // ids per lane loaded ahead in the segment walks
  static constexpr std::int64_t kMaxSegments = 1 << 16;  // bounds the count table at huge numel (u16 ranks)
  static constexpr std::size_t kAlign = 256;             // workspace regions
  static constexpr std::int64_t kTinyMaxIds = 32;        // warp_tiny: one warp step, NVIDIA and AMD alike
  static constexpr int kOwnedMaxThreads = 512;           // block_per_expert: its largest block (2048 ids)
  static constexpr int kGridItems = 16;                  // cooperative_grid: ids per thread in registers, at most
  static constexpr int kGridMaxBlocks = 512;             // cooperative_grid: bounds its scan over blocks (registers)
  static constexpr int kClusterMaxBlocks = 8;            // a portable cluster size
  static constexpr int kClusterMaxPer = 4;               // one_cluster, cluster_grid: ids per thread, at most
  static constexpr int kScanThreads = 1024;              // two_digit_radix: the one block of its expert scan
  static constexpr int kSortThreads = 1024;              // block_sort: one block holds every id ...
  static constexpr std::int64_t kSortMaxIds = 2048;      // ... 2 a thread
  static constexpr int kSortDigitBits = 7;               // block_sort: 128 digit values x (warps + 1) columns
  static constexpr int kSortListMax = 16;                // block_sort lists <= 16 ids an expert, else sorts (not tuned)
  // -- thresholds and cuts
  // warp_tiny up to 8 ids: block_per_expert took 1.06-1.14x there with 256 experts (0.90-0.99 with <= 64: one
  // rule fewer; step 27)
  static constexpr std::int64_t kTinyIds = 8;
  // ... and to kTinyMaxIds above 256 experts: block_per_expert 0.95-2.3x with 512-1024 experts (step 27)
  static constexpr std::int32_t kTinyManyExperts = 256;
  // block_per_expert up to 2048 ids: at 8192, every block reading all ids took 9.7 us, the grid 6.6 (step 21)
  static constexpr std::int64_t kOwnedMaxIds = 2048;
  // block_per_expert: ~4 ids a thread, 0.84-0.96 of the time of 8 at 1024-2048 ids, 8-256 experts (step 37)
  static constexpr int kOwnedItems = 4;
  static constexpr int kOwnedMinThreads = 128;  // (step 37's sweep of 128-512 threads)
  // block_per_expert: the fewest experts per block that keep <= 16 warps per SM: 256 / 512 / 1024 experts in
  // 128 blocks took 0.92 / 0.78 / 0.57 of a block per expert at 2048 ids (step 37)
  static constexpr int kOwnedWarpsPerSm = 16;
  // ... at most 8: with 8-64 experts 2 per block took 1.08-1.10 (step 37)
  static constexpr int kOwnedMaxExpertsPerBlock = 8;
  // one_cluster for 2049-8192 ids: 0.68-0.85 of cooperative_grid's time (steps 22, 24); not below, where
  // block_per_expert took 0.80-0.84 of its time (step 29); 16 blocks slower than 8 everywhere (step 22)
  static constexpr std::int64_t kClusterMaxIds = std::int64_t{kClusterMaxBlocks} * kThreads * kClusterMaxPer;
  // cluster_grid, <= 8 clusters of 8 to 65536 ids: 0.84-0.95 of cooperative_grid's time; 16 clusters took
  // 1.05-1.9x, 4 up to 1.14x, 8 clusters at 131072 ids 1.04-1.05x (step 30)
  static constexpr int kClusterGridMaxBlocks = 64;
  static constexpr std::int64_t kClusterGridMaxIds = std::int64_t{kClusterGridMaxBlocks} * kThreads * kClusterMaxPer;
  // one_cluster, cluster_grid: the fewest ids a thread that fit (short rank chains); 4 a thread not kept (step 52)
  static constexpr int kClusterPerStart = 1;
  // cooperative_grid: fewer ids per thread until ~128 blocks; ~256 blocks took 1.05-1.16x (step 14)
  static constexpr int kGridTargetBlocks = 128;
  // cooperative_grid where <= 3 blocks per SM hold it, else three_launches: 4 per SM took 1.07x (step 47)
  static constexpr int kGridMaxBlocksPerSm = 3;
  // dependent launch for cooperative grids of <= 1 block per SM: 216-320 blocks ran 1.03-1.25x with it (step 18)
  static constexpr int kCooperativeOverlapBlocksPerSm = 1;
  // row_scan_kernel: 4 rows of a warp per batch of loads; 2 took 1.04-1.11x, 8 0.96-0.99 for 1.6x code (step 40)
  static constexpr int kScanRows = 4;
  // count_kernel: a block per <= 16384 sentinels: one block writing 512 KB took 23 us (ncu), 8 blocks 14 (step 40)
  static constexpr std::int64_t kCountFillIds = std::int64_t{kThreads} * 64;
  // warp_tiny: a block per 16384 tail values (16 16-byte stores a thread); 4x more blocks 1.04x at 1x8 (step 15)
  static constexpr std::int64_t kTinyFillIds = std::int64_t{kThreads} * 64;
  static constexpr unsigned kTinyMaxGrid = 2048;
  // fill_kernel: 16 values of the -1 tail a thread, and a lane per expert (two_digit_radix, step 40)
  static constexpr std::int64_t kRadixFillIds = std::int64_t{kThreads} * 16;
  // block_sort above 1024 experts and <= 2048 ids: 256x8 3.8-4.2 us against two_digit_radix's 27.9-51.9 on the H100
  // (steps 71, 73; 256 experts on block_per_expert: 2.01); below 1024 experts block_per_expert is faster (256x8/256:
  // 2.01 against 6.66, where block_sort's experts hold > kSortListMax ids and it sorts). A block per
  // 4096 positions of sorted_token_ids (one 16-byte sentinel store a thread), more per block where that would put
  // more than 2 blocks (each sorting all ids) on an SM (not measured: a why)
  static constexpr std::int64_t kSortFillIds = 4096;
  static constexpr int kSortBlocksPerSm = 2;
};
// Measured choices inside the kernels, cited by [tag] from their comments (step N of perf/NOTES.md):
// [shift]       x / block_size as a shift where it is a power of two: block_per_expert 0.86-0.98 of the time,
//               warp_tiny 0.89-0.93 (step 27)
// [pow2]        the block size's form a template argument (kPow2): block_per_expert 311 instructions per warp,
//               not 337, 0.91-0.97 of the time up to 512 experts; warp_tiny 0.91-0.96 (step 46)
// [fill32]      fill_range in 32-bit indices: warp_tiny 0.96-0.97, block_per_expert 0.97-0.98 (step 37)
// [sentinels]   sentinels first over the whole range: a loop over experts with padding cost ~150 ns per
//               expert per warp, serialised (step 13)
// [expert-ids]  write_expert_ids with no search per block: a search per block took 8.9 us (ncu) against 5.9 at
//               65536 experts (step 40) and left cluster_grid's busiest block 0.5 us late at 4096x8; a warp per
//               32 experts alone 1.2-1.6x with 8-64 experts, a warp per expert alone 1.15x on one_cluster with
//               512, the tail on one warp 1.03x with 1 id in 8 kept (step 47)
// [ballots]     ballots per bit in cluster_grid's ranking: 0.90-0.94 of its time; in cooperative_grid and
//               one_cluster 0.95-0.97 on uniform ids (64-512 experts) but 1.06x skewed, 1.21x mostly dropped,
//               1.07-1.15x with 8 experts (step 50)
// [match-any]   match.any: ballots took 1.10-1.29x where few experts are present, but ranked cluster_grid's
//               4096x8 in 0.42 us against 0.56 (~30 distinct experts a step); ballots unrolled 1.04x (step 50)
// [packed]      a ranked id in one register: as two, cooperative_grid's 16 ids a thread spilled (step 47)
// [clear-early] shared memory cleared before the dependent-launch wait: block_per_expert 0.94-0.96 (step 31);
//               its ids' bounds too, 0.98-0.99 (step 45)
// [scan-owned]  place_padded's scan over what each thread set: a block scan over all of start[] with its
//               barriers took 0.58 us of cluster_grid's 5.4 at 4096x8 (step 47)
// [ids-first]   expert_ids before the placing: behind its scattered stores they took 0.45 us per block in
//               cluster_grid at 4096x8 (step 47)
// [relaxed]     the cluster barrier's arrive without release: with it cluster_grid's grid barrier waited
//               0.3-0.4 us longer (step 47)
// [recount]     cluster_grid keeps its grid barrier: every cluster counting all ids again cost what it saved
//               (step 35); loading the ids to count alone took 1 us more (step 50)
// [pad-after]   cluster_grid with fewer experts than warps pads after the ids: 0.97 at 4096x8 (step 50)
// [many]        cluster_grid an instance of its own (kMany): one kernel for both took 1.03-1.05x (step 30)
// [owned-chain] block_per_expert's chain (ranked at the count, branch-free histogram atomics, a warp per owned
//               expert's padding, the tail on the blocks' last warps): ~380 -> ~337 instructions per warp at
//               256x8, 0.83-0.92 of the time (step 45)
// [warp-sums]   block sums as warp sums (redux on sm_80+), not prefix scans: 0.79-0.95 of the time (step 25)
// [tail-warps]  tail threads numbered from each block's last lane, skipping fill_range where they hold nothing:
//               block_per_expert 0.91-0.94 with >= 256 experts; the test inside fill_range cost one_cluster
//               1.01-1.03x (step 27)
// [early-allow] launch_dependents before the wait: warp_tiny 0.94-0.96; block_per_expert 1.07-1.21x with >= 256
//               experts (step 28); count/row_scan/scatter: the 2M-id three_launches call 127 us, not 107 (step 18)
// [scan-groups] two_digit_radix's expert scan over groups of 4 experts: a value per expert took 1.01-1.15x the
//               whole call's time; 2 rows per batch the same time for 1.6x the code (step 43)
// [strided]     block_scan_owned strided over the threads: a run each took 1.23x on cluster_grid at 4096x8 with
//               1024 experts (step 47)
// [tiles]       block_scan_tiles over 65536 values (ncu): a run per thread 367 us (143 with 16-byte loads),
//               chunks with a block scan each 48 us, tiles 38 (step 40)
// [code-size]   kernels instantiated per power-of-two steps (with_steps): an unrolled 110 KB body was 2-3 us
//               slower per call than a 26 KB one doing the same work (step 20)

// The constants under the names the kernels use.
constexpr int kThreads = AlignTuning::kThreads;
constexpr std::int32_t kDirectMaxExperts = AlignTuning::kMaxExperts;
constexpr int kItems = AlignTuning::kItems;
constexpr int kScanRows = AlignTuning::kScanRows;
constexpr int kGridItems = AlignTuning::kGridItems;
constexpr int kGridMaxBlocks = AlignTuning::kGridMaxBlocks;
constexpr int kOwnedItems = AlignTuning::kOwnedItems;
constexpr int kOwnedMaxThreads = AlignTuning::kOwnedMaxThreads;
constexpr int kClusterMaxBlocks = AlignTuning::kClusterMaxBlocks;
constexpr int kClusterMaxPer = AlignTuning::kClusterMaxPer;
constexpr int kClusterGridMaxBlocks = AlignTuning::kClusterGridMaxBlocks;
constexpr int kScanThreads = AlignTuning::kScanThreads;
static_assert(AlignTuning::kOwnedMaxIds <= std::int64_t{kOwnedMaxThreads} * kOwnedItems, "a block holds all ids");

// ---- paths -------------------------------------------------------------------------------------------------
enum class AlignPath { kEmpty, kWarpTiny, kBlockPerExpert, kBlockSort, kOneCluster, kClusterGrid, kCooperativeGrid,
                       kThreeLaunches, kTwoDigitRadix };
constexpr AlignPath kAllAlignPaths[] = {AlignPath::kEmpty,          AlignPath::kWarpTiny,      AlignPath::kBlockPerExpert,
                                        AlignPath::kBlockSort,      AlignPath::kOneCluster,    AlignPath::kClusterGrid,
                                        AlignPath::kCooperativeGrid, AlignPath::kThreeLaunches, AlignPath::kTwoDigitRadix};

inline const char* path_name(AlignPath p) {
  switch (p) {
    case AlignPath::kEmpty: return "empty";
    case AlignPath::kWarpTiny: return "warp_tiny";
    case AlignPath::kBlockPerExpert: return "block_per_expert";
    case AlignPath::kBlockSort: return "block_sort";
    case AlignPath::kOneCluster: return "one_cluster";
    case AlignPath::kClusterGrid: return "cluster_grid";
    case AlignPath::kCooperativeGrid: return "cooperative_grid";
    case AlignPath::kThreeLaunches: return "three_launches";
    case AlignPath::kTwoDigitRadix: return "two_digit_radix";
  }
  return "?";
}

constexpr int bits_for(std::int64_t values) {  // bits to name values 0 .. values-1
  int b = 0;
  while ((std::int64_t{1} << b) < values) ++b;
  return b;
}
inline int log2_of(int pow2) { return bits_for(pow2); }

// ---- how the ids are cut (shape alone) ---------------------------------------------------------------------
struct Cut {
  int per = 0;     // ids per thread (a power of two)
  int blocks = 0;  // blocks of kThreads
};
// cooperative_grid: fewer ids per thread until about kGridTargetBlocks blocks; runs where blocks <= kGridMaxBlocks
inline Cut grid_cut(std::int64_t n) {
  Cut c{1, 0};
  while (c.per < kGridItems && n > std::int64_t{kThreads} * c.per * AlignTuning::kGridTargetBlocks) c.per *= 2;
  c.blocks = static_cast<int>((n + std::int64_t{kThreads} * c.per - 1) / (std::int64_t{kThreads} * c.per));
  return c;
}
// one_cluster (max_blocks kClusterMaxBlocks), cluster_grid (kClusterGridMaxBlocks, whole clusters: some idle)
inline Cut cluster_cut(std::int64_t n, int max_blocks, bool whole_clusters) {
  Cut c{AlignTuning::kClusterPerStart, 0};
  while (n > std::int64_t{max_blocks} * kThreads * c.per) c.per *= 2;
  std::int64_t blocks = (n + std::int64_t{kThreads} * c.per - 1) / (std::int64_t{kThreads} * c.per);
  if (whole_clusters) blocks = (blocks + kClusterMaxBlocks - 1) / kClusterMaxBlocks * kClusterMaxBlocks;
  c.blocks = static_cast<int>(blocks);
  return c;
}
// three_launches and two_digit_radix: ids per warp segment (< 65536: u16 ranks) for `buckets` buckets
inline std::int64_t segment_for(std::int64_t n, std::int64_t buckets) {
  return layout::segment_length(n, buckets, AlignTuning::kMaxSegments);
}
struct Digits {
  int key_bits = 0, lo_bits = 0, hi_bits = 0;  // bits of the largest expert id; the two digits' widths
};
inline Digits radix_digits(std::int32_t experts) {
  Digits d;
  d.key_bits = bits_for(experts);
  d.lo_bits = d.key_bits / 2;
  d.hi_bits = d.key_bits - d.lo_bits;
  return d;
}

// ---- the device, as the policy sees it ---------------------------------------------------------------------
// A device's capabilities and the residency of each block-resident kernel instance, for one id type (an
// instance's registers may differ by id type): align/caps.cuh asks the runtime once per device and id type.
struct AlignCaps {
  DeviceCaps device;
  Residency grid[5];          // cooperative_grid, by log2 ids per thread (1 .. 16): blocks per SM
  Residency cluster_grid[3];  // cluster_grid, by log2 ids per thread (1 .. 4): clusters of kClusterMaxBlocks
  // one_cluster, by instance (<= 2 ids per thread, 4) and cluster size c in blocks (index c - 1): the most
  // experts at which one cluster is resident (0: none)
  std::int32_t one_cluster[2][kClusterMaxBlocks] = {};
};

// ---- the policy --------------------------------------------------------------------------------------------
struct AlignPolicy {
  AlignPath path = AlignPath::kEmpty;
  bool overlap = false;         // the path's launches with programmatic dependent launch
  bool pow2 = false;            // block_size is a power of two: warp_tiny's and block_per_expert's kPow2
  unsigned grid = 0, block = 0;  // the path's kernel; three_launches, two_digit_radix: count and scatter
  unsigned cluster = 0;         // one_cluster, cluster_grid: blocks per cluster
  bool cooperative = false;     // cluster_grid, cooperative_grid
  int per = 0;                  // ids per thread (block_per_expert, one_cluster, cluster_grid, cooperative_grid)
  int experts_per_block = 0;    // block_per_expert (a power of two)
  std::int64_t segment = 0, segments = 0;  // three_launches, two_digit_radix: ids per warp segment, segments
  Digits digits;                // two_digit_radix
  unsigned grid2 = 0;           // two_digit_radix: count and scatter of the second pass
  unsigned fill_grid = 0;       // two_digit_radix: fill_kernel
  std::int32_t fill = 0;        // block_sort: positions of sorted_token_ids a block writes
};

namespace policy_detail {
inline unsigned blocks_for(std::int64_t work, std::int64_t per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}
inline bool bucketed(const detail::AlignShape& s) { return s.num_experts <= kDirectMaxExperts; }
inline int one_cluster_instance(int per) { return per <= 2 ? 0 : 1; }  // one cluster: no instance for 1 id a thread
// Whether a block-resident path's grid is resident at once on this device. `tuned`: within the table's limits
// (what the policy picks), else whatever the device can hold (what a forced path may use).
inline bool resident(AlignPath p, const detail::AlignShape& s, const AlignCaps& caps, bool tuned) {
  const std::int64_t n = s.numel;
  const std::int32_t E = s.num_experts;
  const DeviceCaps& d = caps.device;
  switch (p) {
    case AlignPath::kOneCluster: {
      const Cut c = cluster_cut(n, kClusterMaxBlocks, false);
      return d.clusters && E <= caps.one_cluster[one_cluster_instance(c.per)][c.blocks - 1];
    }
    case AlignPath::kClusterGrid: {
      const Cut c = cluster_cut(n, kClusterGridMaxBlocks, true);
      return d.clusters && d.cooperative_launch &&
             std::int64_t{caps.cluster_grid[log2_of(c.per)].at(E)} * kClusterMaxBlocks >= c.blocks;
    }
    case AlignPath::kCooperativeGrid: {
      const Cut c = grid_cut(n);
      const int held = caps.grid[log2_of(c.per)].at(E);
      return d.cooperative_launch && c.blocks <= kGridMaxBlocks &&
             std::int64_t{tuned ? std::min(held, AlignTuning::kGridMaxBlocksPerSm) : held} * d.sm_count >= c.blocks;
    }
    default: return true;
  }
}
}  // namespace policy_detail

// Whether path p can run this shape on this device at all, its results bit-identical: its kernels take the
// shape, the shape's workspace (align_workspace.hpp) has its regions, and its grid is resident where it must be.
inline bool align_path_applies(AlignPath p, const detail::AlignShape& s, const AlignCaps& caps) {
  const std::int64_t n = s.numel;
  const bool bucketed = policy_detail::bucketed(s);
  switch (p) {
    case AlignPath::kEmpty: return n == 0;
    case AlignPath::kWarpTiny: return n >= 1 && n <= AlignTuning::kTinyMaxIds;
    case AlignPath::kBlockPerExpert: return n >= 1 && n <= AlignTuning::kOwnedMaxIds && bucketed;
    case AlignPath::kBlockSort: return n >= 1 && n <= AlignTuning::kSortMaxIds;
    case AlignPath::kOneCluster:  // no workspace: any shape its one cluster holds
      return n >= 1 && n <= AlignTuning::kClusterMaxIds && bucketed && policy_detail::resident(p, s, caps, false);
    case AlignPath::kClusterGrid:  // kGrid's table region holds its cluster table: only above kOwnedMaxIds
    case AlignPath::kCooperativeGrid:
      return n > AlignTuning::kOwnedMaxIds && bucketed &&
             (p == AlignPath::kCooperativeGrid || n <= AlignTuning::kClusterGridMaxIds) &&
             policy_detail::resident(p, s, caps, false);
    case AlignPath::kThreeLaunches: return n > AlignTuning::kOwnedMaxIds && bucketed;
    case AlignPath::kTwoDigitRadix: return n > AlignTuning::kTinyMaxIds && !bucketed;
  }
  return false;
}

// The path the policy picks: the table's, then the first fallback whose grid the device holds.
inline AlignPath choose_align_path(const detail::AlignShape& s, const AlignCaps& caps) {
  const std::int64_t n = s.numel;
  const std::int32_t E = s.num_experts;
  using T = AlignTuning;
  if (n == 0) return AlignPath::kEmpty;
  if (n <= T::kTinyIds || (n <= T::kTinyMaxIds && E > T::kTinyManyExperts)) return AlignPath::kWarpTiny;
  if (!policy_detail::bucketed(s)) return n <= T::kSortMaxIds ? AlignPath::kBlockSort : AlignPath::kTwoDigitRadix;
  if (n <= T::kOwnedMaxIds) return AlignPath::kBlockPerExpert;
  const AlignPath preferred = n <= T::kClusterMaxIds       ? AlignPath::kOneCluster
                              : n <= T::kClusterGridMaxIds ? AlignPath::kClusterGrid
                                                           : AlignPath::kCooperativeGrid;
  for (AlignPath p : {preferred, AlignPath::kCooperativeGrid})
    if (policy_detail::resident(p, s, caps, true)) return p;
  return AlignPath::kThreeLaunches;
}

// Path p's launch geometry for this shape on this device (p must apply).
inline AlignPolicy align_policy_for(AlignPath p, const detail::AlignShape& s, const AlignCaps& caps) {
  using policy_detail::blocks_for;
  const DeviceCaps& d = caps.device;
  const std::int64_t n = s.numel;
  const std::int32_t E = s.num_experts;
  AlignPolicy r;
  r.path = p;
  r.overlap = d.dependent_launch;
  r.pow2 = (s.block_size & (s.block_size - 1)) == 0;
  r.block = kThreads;
  const int warps = kThreads / d.warp_size;
  switch (p) {
    case AlignPath::kEmpty: break;
    case AlignPath::kWarpTiny:
      r.grid = std::min(AlignTuning::kTinyMaxGrid,
                        blocks_for(std::max(s.max_padded, s.max_blocks), AlignTuning::kTinyFillIds));
      break;
    case AlignPath::kBlockPerExpert: {
      const std::int64_t threads = std::clamp<std::int64_t>(
          // whole warps (64 lanes on AMD: a part-filled wave would hold ids no warp count covers)
          ((n + AlignTuning::kOwnedItems - 1) / AlignTuning::kOwnedItems + d.warp_size - 1) / d.warp_size * d.warp_size,
          AlignTuning::kOwnedMinThreads, kOwnedMaxThreads);
      r.block = static_cast<unsigned>(threads);
      r.per = static_cast<int>((n + threads - 1) / threads);
      const std::int64_t budget = std::int64_t{AlignTuning::kOwnedWarpsPerSm} * d.sm_count;
      const int owned_warps = static_cast<int>(threads) / d.warp_size;
      int k = 1;
      while (k < AlignTuning::kOwnedMaxExpertsPerBlock && (E + k - 1) / k * std::int64_t{owned_warps} > budget) k *= 2;
      r.experts_per_block = k;
      r.grid = static_cast<unsigned>((E + k - 1) / k);
      break;
    }
    case AlignPath::kBlockSort: {
      // positions a block: kSortFillIds, or more where the grid would pass kSortBlocksPerSm blocks an SM; a
      // multiple of 4 (16-byte stores)
      const std::int64_t spread = std::int64_t{AlignTuning::kSortBlocksPerSm} * d.sm_count;
      const std::int64_t fill = std::max(AlignTuning::kSortFillIds, (s.max_padded + spread - 1) / spread);
      r.fill = static_cast<std::int32_t>((fill + 3) / 4 * 4);
      r.block = AlignTuning::kSortThreads;
      r.grid = blocks_for(s.max_padded, r.fill);
      break;
    }
    case AlignPath::kOneCluster:
    case AlignPath::kClusterGrid: {
      const bool many = p == AlignPath::kClusterGrid;
      const Cut c = many ? cluster_cut(n, kClusterGridMaxBlocks, true) : cluster_cut(n, kClusterMaxBlocks, false);
      r.per = c.per;
      r.grid = static_cast<unsigned>(c.blocks);
      r.cluster = many ? static_cast<unsigned>(kClusterMaxBlocks) : r.grid;  // grid: a multiple of it
      r.cooperative = many;  // several clusters: one grid barrier
      break;
    }
    case AlignPath::kCooperativeGrid: {
      const Cut c = grid_cut(n);
      r.per = c.per;
      r.grid = static_cast<unsigned>(c.blocks);
      r.cooperative = true;
      break;
    }
    case AlignPath::kThreeLaunches:
      r.segment = segment_for(n, E);
      r.segments = (n + r.segment - 1) / r.segment;
      r.grid = std::max(blocks_for(r.segments, warps), blocks_for(s.max_padded, AlignTuning::kCountFillIds));
      break;
    case AlignPath::kTwoDigitRadix:
      r.digits = radix_digits(E);
      r.segment = segment_for(n, std::int64_t{1} << r.digits.hi_bits);
      r.segments = (n + r.segment - 1) / r.segment;
      r.grid = std::max(blocks_for(r.segments, warps), blocks_for(s.max_padded, AlignTuning::kCountFillIds));
      r.grid2 = blocks_for(r.segments, warps);  // writes no sentinels
      // a warp per 32 experts, and kRadixFillIds / kThreads values of the -1 tail per thread
      r.fill_grid = std::max(blocks_for(E, kThreads), blocks_for(s.max_blocks, AlignTuning::kRadixFillIds));
      break;
  }
  if (r.cooperative)
    r.overlap = r.overlap &&
                std::int64_t{r.grid} <= std::int64_t{AlignTuning::kCooperativeOverlapBlocksPerSm} * d.sm_count;
  return r;
}

inline AlignPolicy select_align_policy(const detail::AlignShape& s, const AlignCaps& caps) {
  return align_policy_for(choose_align_path(s, caps), s, caps);
}

// The paths that apply to this shape on this device: the policy's choice first, then the others in table order.
inline std::vector<AlignPath> align_paths(const detail::AlignShape& s, const AlignCaps& caps) {
  std::vector<AlignPath> v{choose_align_path(s, caps)};
  for (AlignPath p : kAllAlignPaths)
    if (p != v.front() && align_path_applies(p, s, caps)) v.push_back(p);
  return v;
}

}  // namespace gpu
}  // namespace moe
