// What the align policy knows of the current device, asked once per device and id type: the device's
// capabilities (query_device_caps, backend.cu) and how many blocks, or clusters, of each block-resident kernel
// instance it holds at once as the expert count (their shared memory) grows. Occupancy queries only: answered by
// the runtime from the kernels' resources, no launch, no synchronisation, legal under graph capture.
#pragma once

#include <atomic>
#include <map>
#include <mutex>

#include "align/cluster.cuh"
#include "align/cooperative_grid.cuh"
#include "align_policy.hpp"

namespace moe {
namespace gpu {
namespace caps_detail {

// The most experts (<= kDirectMaxExperts) at which count(experts) >= k, or 0; count(experts) never grows with
// the experts.
template <class Count>
std::int32_t most_experts(const Count& count, int k, int at_most, int at_least) {
  if (at_most >= k) return kDirectMaxExperts;  // at_most = count(kDirectMaxExperts), at_least = count(1)
  if (at_least < k) return 0;
  std::int32_t lo = 1, hi = kDirectMaxExperts;  // count(lo) >= k > count(hi)
  while (hi - lo > 1) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    (count(mid) >= k ? lo : hi) = mid;
  }
  return lo;
}
template <class Count>
Residency residency(const Count& count) {
  Residency r;
  const int at_most = count(kDirectMaxExperts), at_least = count(1);
  for (int k = 1; k <= Residency::kLevels; ++k) r.max_experts[k - 1] = most_experts(count, k, at_most, at_least);
  return r;
}

// What the runtime answers into n, or 0 where it refuses the query (an answer, not an error of a later call).
// The query runs before n is read: passed next to n as two arguments, n could be read first (C++ leaves the
// order of arguments unspecified; GCC reads right to left), and every residency was 0.
template <class Query>
int answer(const Query& query) {
  int n = 0;
  if (query(&n) == kSuccess) return n;
  (void)get_last_error();
  return 0;
}

template <class Kernel>
Residency blocks_per_sm(Kernel kernel, int warps) {
  return residency([&](std::int32_t experts) {
    return answer([&](int* n) { return max_active_blocks(n, kernel, kThreads, resident_smem_bytes(warps, experts)); });
  });
}

// Clusters of `cluster` blocks resident at once; none where the device or the kernel's code lacks them.
template <class Kernel>
auto clusters_of(Kernel kernel, unsigned cluster, int warps, bool able) {
  const void* k = reinterpret_cast<const void*>(kernel);
  able = able && answer([&](int* ptx) { return ptx_version(ptx, k); }) >= 90;  // below sm_90 its body is a trap
  return [=](std::int32_t experts) {
    if (!able) return 0;
    const std::size_t smem = resident_smem_bytes(warps, experts);
    return answer([&](int* n) { return max_active_clusters(n, k, cluster, kThreads, smem); });
  };
}

template <class IdT>
AlignCaps query_align_caps() {
  using Src = IdSource<IdT>;
  AlignCaps c;
  c.device = query_device_caps();
  const int warps = kThreads / c.device.warp_size;
  c.grid[0] = blocks_per_sm(grid_kernel<1, Src>, warps);
  c.grid[1] = blocks_per_sm(grid_kernel<2, Src>, warps);
  c.grid[2] = blocks_per_sm(grid_kernel<4, Src>, warps);
  c.grid[3] = blocks_per_sm(grid_kernel<8, Src>, warps);
  c.grid[4] = blocks_per_sm(grid_kernel<16, Src>, warps);
  if constexpr (kHasClusters) {  // the instances align.cu launches (one cluster: none for 1 id per thread)
    const bool able = c.device.clusters;
    c.cluster_grid[0] = residency(clusters_of(cluster_kernel<1, true, Src>, kClusterMaxBlocks, warps, able));
    c.cluster_grid[1] = residency(clusters_of(cluster_kernel<2, true, Src>, kClusterMaxBlocks, warps, able));
    c.cluster_grid[2] = residency(clusters_of(cluster_kernel<4, true, Src>, kClusterMaxBlocks, warps, able));
    for (int size = 1; size <= kClusterMaxBlocks; ++size) {
      const auto cs = static_cast<unsigned>(size);
      const auto two = clusters_of(cluster_kernel<2, false, Src>, cs, warps, able);
      const auto four = clusters_of(cluster_kernel<4, false, Src>, cs, warps, able);
      c.one_cluster[0][size - 1] = most_experts(two, 1, two(kDirectMaxExperts), two(1));
      c.one_cluster[1][size - 1] = most_experts(four, 1, four(kDirectMaxExperts), four(1));
    }
  }
  // the dependent launch also needs the kernels built for it (all of this file's are built alike)
  const void* grid1 = reinterpret_cast<const void*>(grid_kernel<1, Src>);
  c.device.dependent_launch =
      c.device.dependent_launch && answer([&](int* ptx) { return ptx_version(ptx, grid1); }) >= 90;
  return c;
}

}  // namespace caps_detail

// The current device's AlignCaps for ids of type IdT: asked at the first call on each device, then cached.
template <class IdT>
const AlignCaps& align_caps() {
  constexpr int kFastDevices = 64;
  static std::atomic<const AlignCaps*> fast[kFastDevices];  // zero-initialised: static storage
  static std::mutex mutex;
  static std::map<int, AlignCaps> known;  // node-based: its elements never move
  int dev = 0;
  check(current_device(&dev), "querying the current device");
  const bool indexed = dev >= 0 && dev < kFastDevices;
  if (indexed) {
    if (const AlignCaps* c = fast[dev].load(std::memory_order_acquire)) return *c;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(dev);
  if (it == known.end()) it = known.emplace(dev, caps_detail::query_align_caps<IdT>()).first;
  if (indexed) fast[dev].store(&it->second, std::memory_order_release);
  return it->second;
}

}  // namespace gpu
}  // namespace moe
