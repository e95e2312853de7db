// The internal path entries (core/src/paths.hpp) on every backend: the paths each shape has, forcing one, the
// error where a forced path does not apply, and planning within fewer capabilities (the plan AMD takes, or a
// smaller GPU), each checked against the reference. (Every align test already runs each of its cases on every
// path that applies: check_align.)
#include <cstring>

#include "support.hpp"

using namespace moe_test;
namespace cat = moe_catalogue;
using moe::detail::CapsLimits;
using moe::detail::ScopedForcedCaps;
using moe::detail::ScopedForcedPath;

namespace {
bool gpu_backend() {
  return std::strcmp(moe::backend_name(), "cuda") == 0 || std::strcmp(moe::backend_name(), "hip") == 0;
}
std::string path_of(std::int64_t numel, std::int32_t experts, std::int32_t block_size = 64) {
  return moe::detail::align_path(moe::detail::make_align_shape(numel, experts, block_size), MOE_INT32);
}
}  // namespace

TEST_CASE("paths: each shape has paths, the first is what a call takes, a forced one is what it takes then") {
  for (std::int64_t n : {0, 1, 33, 2049, 40000, 3000017}) {
    for (std::int32_t E : {8, 256, 4096}) {
      const auto paths = paths_of<std::int32_t>(n, E, 64);
      REQUIRE(!paths.empty());
      CHECK(path_of(n, E) == paths.front());
      for (const std::string& p : paths) {
        const ScopedForcedPath force(moe::detail::kAlignOperation, p);
        CHECK(path_of(n, E) == p);
      }
    }
  }
  if (std::strcmp(moe::backend_name(), "cpu") == 0) CHECK(paths_of<std::int32_t>(4096, 256, 64).front() == "reference");
  if (std::strcmp(moe::backend_name(), "kokkos") == 0) {  // GPU spaces: the four kernels; host spaces: the
    const auto p = paths_of<std::int32_t>(4096, 256, 64);  // counting sort first, the four kernels forceable
    const std::vector<std::string> gpu{"kokkos_four_kernels"}, host{"kokkos_host_counting", "kokkos_four_kernels"};
    CHECK((p == gpu || p == host));
  }
  if (gpu_backend()) {  // the GPU's choice by size (align_policy.hpp; the clusters' paths where the device has them)
    CHECK(path_of(0, 8) == "empty");
    CHECK(path_of(8, 256) == "warp_tiny");
    CHECK(path_of(2048, 256) == "block_per_expert");
    CHECK(path_of(100000, 4096) == "two_digit_radix");
    CHECK(path_of(2048, 65536) == "block_sort");
    CHECK(path_of(3000017, 256) == "three_launches");
    // the block-resident grids, whose residency the runtime answers (align/caps.cuh), fit every GPU of >= 43
    // multiprocessors (128 blocks, 3 per SM); a wrong answer once left them never taken, three_launches instead
    CHECK(path_of(524288, 256) == "cooperative_grid");
    const std::string mid = path_of(32768, 256);
    CHECK((mid == "cluster_grid" || mid == "cooperative_grid"));
  }
}

TEST_CASE("paths: a forced path that does not apply fails, naming it and the paths that apply") {
  const std::vector<std::int32_t> ids{0, 1, 2};
  {
    const ScopedForcedPath force(moe::detail::kAlignOperation, "no_such_path");
    try {
      (void)backend_align(ids, 4, 16);
      FAIL("a forced path that does not apply was taken");
    } catch (const moe::Error& e) {
      CHECK(e.status() == MOE_ERROR_UNSUPPORTED);
      CHECK(std::string(e.what()).find("no_such_path") != std::string::npos);
      CHECK(std::string(e.what()).find(paths_of<std::int32_t>(3, 4, 16).front()) != std::string::npos);
    }
  }
  if (gpu_backend()) {  // a real path, but not for this shape: three launches need more than 2048 ids
    const ScopedForcedPath force(moe::detail::kAlignOperation, "three_launches");
    CHECK_THROWS_AS((void)backend_align(ids, 4, 16), moe::Error);
  }
  // the override ends with its scope, and nests
  CHECK(backend_align(ids, 4, 16) == reference_align(ids, 4, 16));
  const auto paths = paths_of<std::int32_t>(40000, 256, 64);
  {
    const ScopedForcedPath outer(moe::detail::kAlignOperation, paths.back());
    {
      const ScopedForcedPath inner(moe::detail::kAlignOperation, paths.front());
      CHECK(path_of(40000, 256) == paths.front());
    }
    CHECK(path_of(40000, 256) == paths.back());
  }
  CHECK(path_of(40000, 256) == paths.front());
}

TEST_CASE("paths: the plan of a device without clusters and dependent launch (HIP on AMD), on this one") {
  const ScopedForcedCaps portable(CapsLimits::portable());
  if (gpu_backend()) {
    for (std::int64_t n : {2049, 8193, 40000}) {
      const auto paths = paths_of<std::int32_t>(n, 256, 64);
      CHECK(std::find(paths.begin(), paths.end(), "one_cluster") == paths.end());
      CHECK(std::find(paths.begin(), paths.end(), "cluster_grid") == paths.end());
    }
    CHECK(path_of(32768, 256) == "cooperative_grid");
  }
  Rng rng(31);
  for (const auto& list : {cat::path_edges(), cat::align_targets(), cat::capture_shapes()})
    for (const AlignCase& c : list) check_case(c, rng);
}

TEST_CASE("paths: a smaller GPU, whose multiprocessors cannot hold the cooperative grid") {
  CapsLimits small;
  small.max_sm_count = 8;
  const ScopedForcedCaps limit(small);
  if (gpu_backend()) {
    CHECK(path_of(524288, 256) == "three_launches");  // 128 blocks > 3 per SM x 8
    const auto paths = paths_of<std::int32_t>(524288, 256, 64);
    CHECK(std::find(paths.begin(), paths.end(), "cooperative_grid") == paths.end());
  }
  Rng rng(32);
  for (const AlignCase& c : cat::align_targets()) check_case(c, rng);
  check_case({2048, 1, 1024, 64}, rng);  // block_per_expert with 8 experts per block (16 warps per SM x 8)
}
