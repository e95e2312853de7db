// align_block_size on random and adversarial inputs, every backend against the reference (and the reference
// against an independent stable-sort oracle), bit for bit. Sizes cross every code path a backend has: tiny
// (<= 8 ids, or 32 with many experts), a block per expert (up to 2048 ids), a cluster, a grid of clusters or a
// cooperative grid (up to 2M ids), three launches (the 3M case), few to 65536 experts.
#include "support.hpp"

using namespace moe_test;

namespace {
// powers of two (a GPU backend may divide by a shift there) and others (an integer division)
const std::int32_t kBlockSizes[] = {1, 3, 16, 48, 64, 100, 128, 256};
}

TEST_CASE("random: numel x experts sweep, 5% dropped ids") {
  const std::size_t numels[] = {1, 2, 3, 7, 31, 32, 33, 127, 509, 1021, 2053, 4099, 8191, 16411, 65521, 131101};
  // 20000: a GPU expert scan over several loads per warp, its last warp's tile and rows partly filled
  const std::int32_t experts[] = {1, 2, 8, 60, 256, 512, 1024, 1025, 4096, 20000, 65536};
  Rng rng(1);
  for (std::size_t n : numels)
    for (std::int32_t E : experts) check_align(uniform_ids<std::int32_t>(n, E, rng, 0.05), E, 64);
}

TEST_CASE("random: expert counts a split into groups of experts leaves a remainder in") {
  // a backend may give each worker a range of consecutive experts (the GPU's block-per-expert path does, 2, 4
  // or 8 per block with many experts): counts that no range size divides leave a short last range; sizes on
  // both sides of the GPU's path limits (32 ids with more than 256 experts, 2048 ids) and far beyond
  Rng rng(8);
  for (std::size_t n : {33u, 256u, 257u, 2047u, 2048u, 2049u, 32767u, 32768u, 32769u})
    for (std::int32_t E : {127, 129, 255, 257, 641, 1023}) {
      check_align(skewed_ids<std::int32_t>(n, E, rng, E - 1), E, 16);  // the hot expert in the last range
      check_align(uniform_ids<std::int32_t>(n, E, rng, 0.05), E, 64);
    }
}

TEST_CASE("random: sizes where a path changes blocks or ids per thread") {
  // the GPU's block-per-expert path (from 9 or 33 ids, by experts, to 2048) keeps 128 threads up to 512 ids,
  // 1 to 4 ids each, then grows the block to 512 threads, and gives a block 1, 2, 4 or 8 experts as experts and
  // threads grow (on a 132-SM H200, 2048 ids: 1 with 8 experts, 2 with 256 or 257, the last block then owning
  // one, 4 with 513, 8 with 1024); its cluster path (2049 to 8192 ids, 8 blocks of 256 threads) doubles
  // its ids per thread after 2048 and 4096; its grid of clusters (8193 to 65536 ids, up to 64 blocks, whole
  // clusters of 8) after 16384 and 32768, then hands over to the cooperative grid; the last warp, block or
  // cluster is then partly filled or holds no ids at all
  Rng rng(9);
  for (std::size_t n : {8u, 9u, 16u, 32u, 33u, 127u, 128u, 129u, 512u, 513u, 1000u, 1024u, 1025u, 1057u, 2048u,
                        2049u, 4095u, 4096u, 4097u, 6000u, 8191u, 8192u, 8193u, 16384u, 16385u, 32769u, 65536u, 65537u})
    for (std::int32_t E : {8, 256, 257, 513, 1024}) {
      check_align(uniform_ids<std::int32_t>(n, E, rng, 0.05), E, 64);
      check_align(skewed_ids<std::int32_t>(n, E, rng, E / 2), E, 16);
    }
}

TEST_CASE("random: every block size") {
  // on the GPU: 5000 ids take one cluster, 20000 a grid of clusters (its padding written after the ids with up to
  // 256 experts), 70000 the cooperative grid
  Rng rng(2);
  for (std::int32_t bs : kBlockSizes)
    for (std::size_t n : {1u, 20u, 100u, 2048u, 5000u, 20000u, 70000u})
      for (std::int32_t E : {3, 256, 2000}) check_align(uniform_ids<std::int32_t>(n, E, rng, 0.01), E, bs);
}

TEST_CASE("random: every id type") {
  Rng rng(3);
  for (std::size_t n : {1u, 777u, 40000u}) {
    check_align(uniform_ids<std::int8_t>(n, 100, rng, 0.1), 100, 16);
    check_align(uniform_ids<std::uint8_t>(n, 200, rng, 0.1), 200, 16);
    check_align(uniform_ids<std::int16_t>(n, 3000, rng, 0.1), 3000, 16);
    check_align(uniform_ids<std::int32_t>(n, 256, rng, 0.1), 256, 16);
    check_align(uniform_ids<std::int64_t>(n, 256, rng, 0.1), 256, 16);
    // ids of a narrow type with more experts than the type can name: all valid but the negative ones
    check_align(uniform_ids<std::int8_t>(n, 65536, rng, 0.1), 65536, 64);
  }
}

TEST_CASE("adversarial: skewed, single expert, empty experts, all dropped") {
  // on the GPU: 3000 ids take one cluster, 20000 a grid of clusters (8 and 256 experts: padding written after
  // the ids: every id of one expert, or none kept at all), 100000 the cooperative grid
  Rng rng(4);
  for (std::size_t n : {5u, 3000u, 20000u, 100000u, 524288u}) {
    for (std::int32_t E : {8, 256, 65536}) {
      check_align(skewed_ids<std::int32_t>(n, E, rng), E, 64);
      check_align(skewed_ids<std::int32_t>(n, E, rng, E - 1), E, 16);
      check_align(std::vector<std::int32_t>(n, E - 1), E, 128);                    // one expert holds all
      check_align(uniform_ids<std::int32_t>(n, E, rng, 1.0), E, 64);               // every id dropped
      check_align(uniform_ids<std::int32_t>(n, E, rng, 0.875), E, 64);             // expert parallel, 8 ranks
    }
    auto even = uniform_ids<std::int32_t>(n, 128, rng);                           // odd experts empty
    for (auto& x : even) x = static_cast<std::int32_t>(x & ~1);
    check_align(even, 128, 64);
  }
}

TEST_CASE("router-shaped: tokens x topk distinct experts") {
  Rng rng(5);
  for (std::size_t tokens : {1u, 16u, 256u, 4096u, 16384u})
    for (auto [topk, E] : {std::pair<int, int>{2, 8}, {8, 256}, {6, 160}, {8, 512}})
      check_align(router_ids<std::int32_t>(tokens, topk, E, rng), E, 64);
}

TEST_CASE("large: millions of ids") {
  Rng rng(6);
  check_align(uniform_ids<std::int32_t>(3000017, 256, rng, 0.02), 256, 64);
  check_align(skewed_ids<std::int64_t>(2000003, 65536, rng), 65536, 128);
  check_align(uniform_ids<std::int16_t>(1048583, 8, rng), 8, 16);
}

TEST_CASE("determinism: repeated calls give identical bits") {
  Rng rng(7);
  const auto ids = skewed_ids<std::int32_t>(262147, 256, rng);
  const AlignResult first = backend_align(ids, 256, 64);
  for (int rep = 0; rep < 3; ++rep) CHECK(backend_align(ids, 256, 64) == first);
}
