// The GPU align policy (backends/cuda_hip/align_policy.hpp), pinned on made-up devices: this shape on these
// capabilities gives this path. Plain host C++, so it runs on every build (CI runs it on the CPU and Kokkos
// ones): an H100/H200-like device (132 SMs, clusters, dependent launch), an A100-like one (108 SMs, neither),
// an AMD MI300-like one (304 CUs, 64-lane wavefronts, neither), a small GPU whose SMs cannot hold the cooperative
// grid, and the H100 planning as AMD does (CapsLimits::portable()).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "align_policy.hpp"
#include "align_workspace.hpp"

namespace {

namespace gpu = moe::gpu;
using gpu::AlignCaps;
using gpu::AlignPath;
using gpu::Residency;

// k blocks per SM (or clusters) resident for up to `experts` experts, for every k <= levels
Residency held(int levels, std::int32_t experts = 1024) {
  Residency r;
  for (int k = 0; k < levels && k < Residency::kLevels; ++k) r.max_experts[k] = experts;
  return r;
}

AlignCaps device(int sms, int warp, bool clusters, bool dependent, int grid_per_sm) {
  AlignCaps c;
  c.device.sm_count = sms;
  c.device.warp_size = warp;
  c.device.cooperative_launch = true;
  c.device.clusters = clusters;
  c.device.dependent_launch = dependent;
  for (auto& g : c.grid) g = held(grid_per_sm);
  if (clusters) {
    for (auto& g : c.cluster_grid) g = held(Residency::kLevels);  // 8 clusters of 8 and more
    for (auto& per : c.one_cluster)
      for (auto& size : per) size = 1024;
  }
  return c;
}
AlignCaps h100() { return device(132, 32, true, true, 4); }
AlignCaps a100() { return device(108, 32, false, false, 3); }
AlignCaps mi300() { return device(304, 64, false, false, 4); }
AlignCaps small_gpu() { return device(8, 32, false, false, 2); }
AlignCaps h100_portable() {
  AlignCaps c = h100();
  c.device = gpu::within(c.device, moe::detail::CapsLimits::portable());
  return c;
}

moe::detail::AlignShape shape(std::int64_t numel, std::int32_t experts, std::int32_t block = 64) {
  return moe::detail::make_align_shape(numel, experts, block);
}
std::string chosen(const AlignCaps& caps, std::int64_t numel, std::int32_t experts, std::int32_t block = 64) {
  return gpu::path_name(gpu::select_align_policy(shape(numel, experts, block), caps).path);
}
std::vector<std::string> paths(const AlignCaps& caps, std::int64_t numel, std::int32_t experts) {
  std::vector<std::string> v;
  for (AlignPath p : gpu::align_paths(shape(numel, experts), caps)) v.emplace_back(gpu::path_name(p));
  return v;
}
using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("policy: the path by size on every device (the issue-5 targets and the paths' edges)") {
  for (const AlignCaps& caps : {h100(), a100(), mi300(), small_gpu(), h100_portable()}) {
    CHECK(chosen(caps, 0, 256) == "empty");
    CHECK(chosen(caps, 8, 256) == "warp_tiny");           // 1x8
    CHECK(chosen(caps, 20, 65536) == "warp_tiny");        // any expert count
    CHECK(chosen(caps, 32, 257) == "warp_tiny");          // <= 32 ids above 256 experts
    CHECK(chosen(caps, 32, 256) == "block_per_expert");   // 16x2
    CHECK(chosen(caps, 2048, 256) == "block_per_expert");  // 256x8
    CHECK(chosen(caps, 2048, 1024) == "block_per_expert");
    CHECK(chosen(caps, 33, 1025) == "block_sort");         // <= 2048 ids above 1024 experts
    CHECK(chosen(caps, 2048, 65536) == "block_sort");
    CHECK(chosen(caps, 2049, 1025) == "two_digit_radix");
    CHECK(chosen(caps, 100000, 65536) == "two_digit_radix");
    CHECK(chosen(caps, 3000017, 256) == "three_launches");  // more blocks than a cooperative grid takes
  }
  const AlignCaps h = h100();
  CHECK(chosen(h, 2049, 256) == "one_cluster");
  CHECK(chosen(h, 8192, 1024) == "one_cluster");           // 1024x8
  CHECK(chosen(h, 8193, 256) == "cluster_grid");
  CHECK(chosen(h, 32768, 256) == "cluster_grid");          // 4096x8
  CHECK(chosen(h, 65536, 8) == "cluster_grid");            // 8192x8
  CHECK(chosen(h, 65537, 256) == "cooperative_grid");
  CHECK(chosen(h, 131072, 8) == "cooperative_grid");       // 65536x2, 8 experts
  CHECK(chosen(h, 524288, 256) == "cooperative_grid");     // 65536x8: 128 blocks of 16 ids a thread
  CHECK(chosen(h, 2097152, 256) == "three_launches");      // 262144x8: 512 blocks > 3 per SM x 132
  for (const AlignCaps& caps : {a100(), mi300(), h100_portable()}) {  // no clusters: the cooperative grid
    CHECK(chosen(caps, 2049, 256) == "cooperative_grid");
    CHECK(chosen(caps, 32768, 256) == "cooperative_grid");
    CHECK(chosen(caps, 524288, 256) == "cooperative_grid");
  }
  CHECK(chosen(mi300(), 2097152, 256) == "cooperative_grid");  // 512 blocks fit 3 per CU x 304
  const AlignCaps s = small_gpu();  // 2 blocks per SM x 8 SMs: no cooperative grid of more than 16 blocks
  CHECK(chosen(s, 4096, 256) == "cooperative_grid");    // 16 blocks
  CHECK(chosen(s, 4097, 256) == "three_launches");
  CHECK(chosen(s, 32768, 256) == "three_launches");
  CHECK(chosen(s, 524288, 256) == "three_launches");
}

TEST_CASE("policy: fallbacks follow what the device holds") {
  AlignCaps h = h100();
  for (auto& g : h.cluster_grid) g = held(5);  // only 5 clusters of 8 resident
  CHECK(chosen(h, 8193, 256) == "cluster_grid");        // 40 blocks of 1 id a thread: 5 clusters
  CHECK(chosen(h, 16384, 256) == "cooperative_grid");   // 64 blocks: 8 clusters
  h = h100();
  h.one_cluster[0][7] = 512;  // a cluster of 8 blocks of 2 ids a thread: up to 512 experts only
  CHECK(chosen(h, 4096, 512) == "one_cluster");
  CHECK(chosen(h, 4096, 513) == "cooperative_grid");
  h = h100();
  for (auto& g : h.grid) g = held(1);  // one block per SM: 128 blocks still fit 132 SMs, 256 do not
  CHECK(chosen(h, 524288, 256) == "cooperative_grid");
  CHECK(chosen(h, 1048576, 256) == "three_launches");
  h.device.sm_count = 100;  // fewer SMs than blocks
  CHECK(chosen(h, 524288, 256) == "three_launches");
  h = h100();
  h.device.cooperative_launch = false;  // no grid barriers at all
  CHECK(chosen(h, 4096, 256) == "one_cluster");
  CHECK(chosen(h, 32768, 256) == "three_launches");
}

TEST_CASE("policy: every path that applies, the policy's first") {
  const AlignCaps h = h100();
  CHECK(paths(h, 0, 8) == Names{"empty"});
  CHECK(paths(h, 8, 256) == Names{"warp_tiny", "block_per_expert", "block_sort", "one_cluster"});
  CHECK(paths(h, 20, 65536) == Names{"warp_tiny", "block_sort"});
  CHECK(paths(h, 1000, 256) == Names{"block_per_expert", "block_sort", "one_cluster"});
  CHECK(paths(h, 2048, 1024) == Names{"block_per_expert", "block_sort", "one_cluster"});
  CHECK(paths(h, 2048, 1025) == Names{"block_sort", "two_digit_radix"});
  CHECK(paths(h, 4096, 256) == Names{"one_cluster", "cluster_grid", "cooperative_grid", "three_launches"});
  CHECK(paths(h, 32768, 256) == Names{"cluster_grid", "cooperative_grid", "three_launches"});
  CHECK(paths(h, 524288, 256) == Names{"cooperative_grid", "three_launches"});
  // 512 blocks need 4 per SM: the policy leaves them to three_launches (its table), a forced path may take them
  CHECK(paths(h, 2097152, 256) == Names{"three_launches", "cooperative_grid"});
  CHECK(paths(h, 3000017, 256) == Names{"three_launches"});
  CHECK(paths(h, 100000, 4096) == Names{"two_digit_radix"});
  for (const AlignCaps& caps : {a100(), mi300(), h100_portable()}) {
    CHECK(paths(caps, 8, 256) == Names{"warp_tiny", "block_per_expert", "block_sort"});
    CHECK(paths(caps, 4096, 256) == Names{"cooperative_grid", "three_launches"});
  }
  CHECK(paths(small_gpu(), 32768, 256) == Names{"three_launches"});
}

TEST_CASE("policy: launch geometry") {
  const auto h = h100();
  // block_per_expert at 2048 ids: 512 threads of 4 ids; experts per block keep <= 16 warps per SM
  auto p = gpu::select_align_policy(shape(2048, 256), h);
  CHECK(p.block == 512);
  CHECK(p.per == 4);
  CHECK(p.experts_per_block == 2);  // 256 blocks x 16 warps > 16 x 132
  CHECK(p.grid == 128);
  CHECK(gpu::select_align_policy(shape(2048, 8), h).experts_per_block == 1);
  CHECK(gpu::select_align_policy(shape(2048, 1024), h).experts_per_block == 8);
  CHECK(gpu::select_align_policy(shape(2048, 256), a100()).experts_per_block == 4);
  CHECK(gpu::select_align_policy(shape(2048, 1024), mi300()).experts_per_block == 2);  // 8 wavefronts a block
  // whole warps: 600 ids want 150 threads, 160 on 32-lane warps, 192 on 64-lane wavefronts (a part-filled wave
  // held ids no warp count covered)
  CHECK(gpu::select_align_policy(shape(600, 256), h).block == 160);
  CHECK(gpu::select_align_policy(shape(600, 256), mi300()).block == 192);
  p = gpu::select_align_policy(shape(256, 256), h);  // 128 threads, 2 ids each
  CHECK((p.block == 128 && p.per == 2 && p.experts_per_block == 1));
  // one_cluster: the fewest ids per thread that fit 8 blocks; the cluster is the grid
  p = gpu::select_align_policy(shape(4096, 256), h);
  CHECK((p.per == 2 && p.grid == 8 && p.cluster == 8 && !p.cooperative && p.overlap));
  p = gpu::select_align_policy(shape(6000, 256), h);
  CHECK((p.per == 4 && p.grid == 6 && p.cluster == 6));
  // cluster_grid: whole clusters of 8, cooperative
  p = gpu::select_align_policy(shape(32768, 256), h);
  CHECK((p.per == 2 && p.grid == 64 && p.cluster == 8 && p.cooperative && p.overlap));
  p = gpu::select_align_policy(shape(8193, 256), h);
  CHECK((p.per == 1 && p.grid == 40));
  // cooperative_grid: about 128 blocks; dependent launch only up to one block per SM
  p = gpu::select_align_policy(shape(524288, 256), h);
  CHECK((p.per == 16 && p.grid == 128 && p.cooperative && p.overlap));
  p = gpu::align_policy_for(AlignPath::kCooperativeGrid, shape(2097152, 256), h);
  CHECK((p.grid == 512 && !p.overlap));
  CHECK(!gpu::select_align_policy(shape(524288, 256), a100()).overlap);  // no dependent launch
  // warp_tiny: a block per 16384 tail values, at most 2048 blocks; the block size's form
  p = gpu::select_align_policy(shape(8, 256, 64), h);
  CHECK((p.grid == 1 && p.block == 256 && p.pow2));
  CHECK(!gpu::select_align_policy(shape(8, 256, 48), h).pow2);
  // three_launches: a block per 8 segments (4 wavefronts of 64 on AMD), and per 16384 sentinels
  p = gpu::select_align_policy(shape(3000017, 256), h);
  CHECK((p.segment == 256 && p.segments == 11719 && p.grid == 1465));
  CHECK(gpu::align_policy_for(AlignPath::kThreeLaunches, shape(3000017, 256), mi300()).grid == 2930);
  // block_sort: 1024 threads, a block per 4096 positions, more per block past 2 blocks an SM (multiples of 4)
  p = gpu::select_align_policy(shape(2048, 65536, 64), h);  // 131072 positions
  CHECK((p.block == 1024 && p.fill == 4096 && p.grid == 32 && p.pow2));
  p = gpu::select_align_policy(shape(2048, 4096, 1024), h);  // 2097152 positions over <= 264 blocks
  CHECK((p.fill == 7944 && p.grid == 264));
  p = gpu::align_policy_for(AlignPath::kBlockSort, shape(1, 65536, 48), h);  // (warp_tiny's shape)
  CHECK((p.fill == 4096 && p.grid == 1 && !p.pow2));
  // two_digit_radix: 16 bits of expert as 8 + 8
  p = gpu::align_policy_for(AlignPath::kTwoDigitRadix, shape(2048, 65536), h);
  CHECK((p.digits.key_bits == 16 && p.digits.lo_bits == 8 && p.digits.hi_bits == 8));
  CHECK(p.fill_grid == 256);  // a lane per expert
}

TEST_CASE("policy: the workspace depends on the shape alone and holds every path that applies") {
  // numel <= 2048 (or 32 above 1024 experts): no path needs any
  for (std::int64_t n : {0, 1, 32, 2048}) CHECK(gpu::align_workspace(shape(n, 1024)).bytes == 0);
  CHECK(gpu::align_workspace(shape(32, 65536)).bytes == 0);
  const auto w = gpu::align_workspace(shape(32768, 256));  // cluster_grid's table lies in the grid's
  CHECK(w.grid_table == 0);
  CHECK(w.grid_totals == 128 * 256 * 4);  // 128 blocks x 256 experts
  CHECK(w.table == w.grid_totals + 1024);
  CHECK(w.bytes == 131072 + 1024 + 128 * 256 * 4 + 1024 + 65536);
  CHECK(gpu::align_workspace(shape(3000017, 256)).grid_totals == 0);  // no cooperative grid there
  // every path that applies on any device has its regions: cluster_grid's (clusters x experts) table fits the
  // grid's (blocks x experts)
  for (std::int64_t n : {2049, 8193, 16385, 32769, 65536}) {
    const auto s = shape(n, 1024);
    const auto ws = gpu::align_workspace(s);
    const auto cg = gpu::align_policy_for(AlignPath::kClusterGrid, s, h100());
    CHECK(std::size_t{cg.grid} / 8 * 1024 * 4 <= ws.grid_totals - ws.grid_table);
  }
}
