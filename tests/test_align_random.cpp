// align_block_size on random and adversarial inputs, every backend against the reference (and the reference
// against an independent stable-sort oracle), bit for bit, each case on every path that applies to it on this
// build and device (check_align). The cases are the catalogue's (catalogue.hpp): sizes that cross every code path
// a backend has, few to 65536 experts, every block size and id type, skewed and dropped ids, and the benchmark's
// own shapes.
#include "support.hpp"

using namespace moe_test;
namespace cat = moe_catalogue;

namespace {
void check_all(const std::vector<AlignCase>& cases, unsigned seed) {
  Rng rng(seed);
  for (const AlignCase& c : cases) check_case(c, rng);
}
}  // namespace

TEST_CASE("random: numel x experts sweep, 5% dropped ids") { check_all(cat::numel_by_experts(), 1); }

TEST_CASE("random: expert counts a split into groups of experts leaves a remainder in") {
  check_all(cat::expert_remainders(), 8);
}

TEST_CASE("random: sizes where a path changes blocks or ids per thread") { check_all(cat::path_edges(), 9); }

TEST_CASE("random: every block size") { check_all(cat::block_sizes(), 2); }

TEST_CASE("random: every id type") { check_all(cat::id_types(), 3); }

TEST_CASE("adversarial: skewed, single expert, empty experts, all dropped") { check_all(cat::adversarial(), 4); }

TEST_CASE("router-shaped: tokens x topk distinct experts") { check_all(cat::routers(), 5); }

TEST_CASE("large: millions of ids") { check_all(cat::millions(), 6); }

TEST_CASE("catalogue: the benchmark's align shapes (targets, sweep, large)") {
  check_all(cat::align_targets(), 10);
  check_all(cat::align_sweep(), 11);
  check_all(cat::align_large(), 12);
}

TEST_CASE("determinism: repeated calls give identical bits, on every path") {
  Rng rng(7);
  const AlignCase c{262147, 1, 256, 64, Dist::kSkew};
  const auto ids = cat::make_ids<std::int32_t>(c, rng);
  for (const std::string& path : paths_to_test<std::int32_t>(c.numel(), c.experts, c.block_size)) {
    INFO("path " << path);
    const moe::detail::ScopedForcedPath force(moe::detail::kAlignOperation, path);
    const AlignResult first = backend_align(ids, c.experts, c.block_size);
    for (int rep = 0; rep < 3; ++rep) CHECK(backend_align(ids, c.experts, c.block_size) == first);
  }
}
