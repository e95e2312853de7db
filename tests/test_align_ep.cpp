// align_block_size_ep (expert maps, expert_counts, token_positions): golden cases worked by hand, random sweeps
// across every path a backend's align has (the LOCAL grouping decides the GPU path: tiny, a block per expert, a
// cluster, a grid of clusters, a cooperative grid, three launches, radix beyond 1024 local experts), every id
// type, the identity map against plain align, the optional outputs against the reference and against what the
// layout itself implies, and every error path.
#include <climits>
#include <cstring>

#include "align_ep_support.hpp"

using namespace moe_test;

namespace {

struct Golden {
  std::vector<std::int32_t> sorted, expert_ids, counts, positions;
  std::int32_t post_pad;
};

// The backend with both optional outputs must give `want` exactly (tails included); then the usual full check.
template <class IdT>
void check_golden(const std::vector<IdT>& ids, std::int32_t E, const EpMap& map, std::int32_t L, std::int32_t bs,
                  const Golden& want) {
  const EpResult r = backend_align_ep(ids, E, map, L, bs);
  CHECK(r.align.num_tokens_post_pad == want.post_pad);
  CHECK(r.align.sorted_token_ids == want.sorted);
  CHECK(r.align.expert_ids == want.expert_ids);
  CHECK(r.counts == want.counts);
  CHECK(r.positions == want.positions);
  check_align_ep(ids, E, map, L, bs);
}

}  // namespace

TEST_CASE("align_ep golden: the contract's example, half of the experts on another rank") {
  // 8 experts on 2 ranks, this one holds 4..7; ids of 4 tokens x topk 2; sentinel 8
  const std::int32_t s = 8;
  const EpMap map{{-1, -1, -1, -1, 0, 1, 2, 3}};
  CHECK(map.entries == rank_map(8, 4, 1).entries);
  const std::vector<std::int32_t> ids{4, 1, 6, 4, 0, 7, 5, 6};
  // capacities 8 + 4*1 = 12 and 6
  check_golden(ids, 8, map, 4, 2,
               {{0, 3, 6, s, 2, 7, 5, s, s, s, s, s}, {0, 1, 2, 3, -1, -1}, {2, 1, 2, 1}, {0, -1, 4, 1, -1, 6, 2, 5}, 8});
  // the other rank: 0..3 local, the ids of 4..7 dropped
  check_golden(ids, 8, rank_map(8, 4, 0), 4, 2,
               {{4, s, 1, s, s, s, s, s, s, s, s, s}, {0, 1, -1, -1, -1, -1}, {1, 1, 0, 0}, {-1, 2, -1, -1, 0, -1, -1, -1}, 4});
}

TEST_CASE("align_ep golden: many globals to one local index share a group in flat order") {
  // 6 globals onto 2 locals (3 is remote); sentinel 12; capacities 12 + 2*3 = 18 and 5
  const std::int32_t s = 12;
  const EpMap map{{1, 0, 1, -1, 0, 1}};
  const std::vector<std::int64_t> ids{0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
  check_golden(ids, 6, map, 2, 4,
               {{1, 4, 7, 10, 0, 2, 5, 6, 9, 11, s, s, s, s, s, s, s, s},
                {0, 1, 1, -1, -1},
                {4, 6},
                {4, 0, 5, -1, 1, 6, 7, 2, -1, 8, 3, 9},
                12});
}

TEST_CASE("align_ep golden: map entries out of range drop their ids, never read out of bounds") {
  // entries -1, L (3), INT32_MAX, INT32_MIN, -2, 1000000 drop; ids 9 (>= E) and -1 drop before the map is read
  const std::int32_t s = 12;
  const EpMap map{{-1, 3, INT32_MAX, INT32_MIN, 2, 0, -2, 1000000}};
  const std::vector<std::int32_t> ids{0, 1, 2, 3, 4, 5, 4, 5, 9, -1, 6, 7};
  // local 1 is empty: no block; capacities 12 + 3*1 = 15 and 8
  check_golden(ids, 8, map, 3, 2,
               {{5, 7, 4, 6, s, s, s, s, s, s, s, s, s, s, s},
                {0, 2, -1, -1, -1, -1, -1, -1},
                {2, 0, 2},
                {-1, -1, -1, -1, 2, 0, 3, 1, -1, -1, -1, -1},
                4});
  // the same with 8-bit ids: 255 as uint8 is >= E; as int8 -1
  check_align_ep(std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5, 4, 5, 255, 6, 7}, 8, map, 3, 2);
  check_align_ep(std::vector<std::int8_t>{0, 1, 2, 3, 4, 5, 4, 5, -128, 6, 7}, 8, map, 3, 2);
}

TEST_CASE("align_ep golden: every id dropped") {
  const std::int32_t s = 6;
  const EpMap map{{-1, -1, 0, 1}};
  const std::vector<std::int32_t> ids{0, 1, 0, 1, 7, -3};
  // capacities 6 + 2*3 = 12 and 3
  check_golden(ids, 4, map, 2, 4,
               {std::vector<std::int32_t>(12, s), {-1, -1, -1}, {0, 0}, std::vector<std::int32_t>(6, -1), 0});
}

TEST_CASE("align_ep golden: one token") {
  // topk 8 over 16 experts, this rank holds 8..11; sentinel 8; capacities 8 + 4*3 = 20 and 5
  const std::int32_t s = 8;
  const std::vector<std::int16_t> ids{3, 9, 10, 15, 8, 0, 11, 12};
  check_golden(ids, 16, rank_map(16, 4, 2), 4, 4,
               {{4, s, s, s, 1, s, s, s, 2, s, s, s, 6, s, s, s, s, s, s, s},
                {0, 1, 2, 3, -1},
                {1, 1, 1, 1},
                {-1, 4, 8, -1, 0, -1, 12, -1},
                16});
  // topk 1: one id, a block larger than the input
  check_golden(std::vector<std::int32_t>{10}, 16, rank_map(16, 4, 2), 4, 8,
               {{0, 1, 1, 1, 1, 1, 1, 1}, {2}, {0, 0, 1, 0}, {0}, 8});
}

TEST_CASE("align_ep golden: groups follow the LOCAL order, not the global one") {
  // map reverses 4 experts; block_size 1: a stable sort by local index with no padding
  const EpMap map{{3, 2, 1, 0}};
  check_golden(std::vector<std::int32_t>{0, 1, 2, 3, 0}, 4, map, 4, 1,
               {{3, 2, 1, 0, 4}, {0, 1, 2, 3, 3}, {1, 1, 1, 2}, {3, 2, 1, 0, 4}, 5});
}

TEST_CASE("align_ep golden: more local indices than globals (the unmapped ones stay empty)") {
  const EpMap map{{5, 0}};
  const std::int32_t s = 4;
  // capacities 4 + 4*1 = 8 and 4 (min(numel, L) = 4 groups)
  check_golden(std::vector<std::int32_t>{1, 0, 0, 1}, 2, map, 7, 2,
               {{0, 3, 1, 2, s, s, s, s}, {0, 5, -1, -1}, {2, 0, 0, 0, 0, 2, 0}, {0, 2, 3, 1}, 4});
}

TEST_CASE("align_ep golden: numel 0") {
  // post_pad 0, every count 0, nothing else written; NULL ids and outputs are fine
  auto counts = to_device(std::vector<std::int32_t>(5, kPoison));
  auto post = to_device(std::vector<std::int32_t>(1, kPoison));
  auto map = to_device(std::vector<std::int32_t>{0, 1, 2, 3, 4, -1});
  const std::size_t ws = moe::align_workspace_size_ep(0, 6, 5, 64);
  moe::device_buffer<unsigned char> d_ws(ws);
  moe::align_block_size_ep(static_cast<const std::int32_t*>(nullptr), 0, 6, map.data(), 5, 64, nullptr, nullptr,
                           post.data(), counts.data(), nullptr, d_ws.data(), ws);
  moe::synchronize();
  CHECK(to_host(post)[0] == 0);
  CHECK(to_host(counts) == std::vector<std::int32_t>(5, 0));
  check_align_ep(std::vector<std::int32_t>{}, 6, null_map(), 6, 16);
  check_align_ep(std::vector<std::int32_t>{}, 6, rank_map(6, 3, 1), 3, 16, EpWant{false, false});
}

TEST_CASE("align_ep: expert_map NULL is plain align; so is the identity map") {
  Rng rng(101);
  for (std::size_t n : {1u, 8u, 30u, 1000u, 5000u, 20000u, 70000u})
    for (std::int32_t E : {8, 256, 2000}) {
      const auto ids = uniform_ids<std::int32_t>(n, E, rng, 0.1);
      const AlignResult plain = backend_align(ids, E, 64);
      REQUIRE(plain == reference_align(ids, E, 64));
      for (EpWant want : {EpWant{false, false}, EpWant{true, true}}) {
        CHECK(backend_align_ep(ids, E, null_map(), E, 64, want).align == plain);
        CHECK(backend_align_ep(ids, E, rank_map(E, E, 0), E, 64, want).align == plain);
      }
      check_align_ep(ids, E, null_map(), E, 64);
    }
}

TEST_CASE("align_ep random: numel sweep over every path, EP and many-to-one maps") {
  // numel: tiny (<= 8; <= 32 with > 256 local experts), a block per expert (to 2048), a cluster (to 8192), a
  // grid of clusters (to 65536), the cooperative grid (beyond); local experts to 1024 (direct) and beyond (radix)
  const std::size_t numels[] = {1, 5, 8, 9, 32, 33, 500, 2048, 2049, 5000, 8192, 8193, 40000, 65536, 65537, 300007};
  struct Config {
    std::int32_t E, L;
    int kind;  // 0 rank map, 1 random many-to-one with remote and bad entries, 2 permutation, 3 NULL map
  };
  const Config configs[] = {{256, 32, 0}, {256, 32, 1}, {64, 64, 2},    {2048, 1025, 1},
                            {65536, 65536, 2}, {65536, 4096, 0}, {300, 2000, 1}, {1024, 1024, 3}};
  Rng rng(102);
  int variant = 0;
  for (std::size_t n : numels)
    for (const Config& c : configs) {
      const EpMap map = c.kind == 0   ? rank_map(c.E, c.L, static_cast<std::int32_t>(rng() % (c.E / c.L)))
                        : c.kind == 1 ? random_map(c.E, c.L, rng, 0.5, 0.1)
                        : c.kind == 2 ? permuted_map(c.E, c.L, rng)
                                      : null_map();
      // the optional outputs: both, counts only, positions only, neither, in turn
      const EpWant want{variant % 4 < 2, variant % 4 == 0 || variant % 4 == 2};
      ++variant;
      check_align_ep(uniform_ids<std::int32_t>(n, c.E, rng, 0.05), c.E, map, c.L, 64, want);
    }
}

TEST_CASE("align_ep random: every id type") {
  Rng rng(103);
  for (std::size_t n : {1u, 777u, 40000u}) {
    check_align_ep(uniform_ids<std::int8_t>(n, 100, rng, 0.1), 100, random_map(100, 20, rng, 0.3, 0.1), 20, 16);
    check_align_ep(uniform_ids<std::uint8_t>(n, 200, rng, 0.1), 200, rank_map(200, 50, 3), 50, 16);
    check_align_ep(uniform_ids<std::int16_t>(n, 3000, rng, 0.1), 3000, random_map(3000, 1500, rng, 0.5, 0.05), 1500,
                   16);
    check_align_ep(uniform_ids<std::int32_t>(n, 256, rng, 0.1), 256, rank_map(256, 32, 7), 32, 16);
    check_align_ep(uniform_ids<std::int64_t>(n, 256, rng, 0.1), 256, random_map(256, 8, rng, 0.5, 0.1), 8, 16);
    // the identity on the caller's ids of each type (align takes them as they are)
    check_align_ep(uniform_ids<std::int8_t>(n, 100, rng, 0.1), 100, null_map(), 100, 16);
    check_align_ep(uniform_ids<std::uint8_t>(n, 200, rng, 0.1), 200, null_map(), 200, 16);
    check_align_ep(uniform_ids<std::int16_t>(n, 3000, rng, 0.1), 3000, null_map(), 3000, 16);
    check_align_ep(uniform_ids<std::int64_t>(n, 65536, rng, 0.1), 65536, null_map(), 65536, 16);
  }
}

TEST_CASE("align_ep random: every block size, skewed and all-remote inputs") {
  Rng rng(104);
  for (std::int32_t bs : {1, 3, 16, 48, 64, 100, 128, 256})
    for (std::size_t n : {1u, 20u, 100u, 2048u, 5000u, 20000u, 70000u}) {
      check_align_ep(uniform_ids<std::int32_t>(n, 256, rng, 0.01), 256, rank_map(256, 32, 1), 32, bs);
      check_align_ep(skewed_ids<std::int32_t>(n, 256, rng, 37), 256, rank_map(256, 32, 1), 32, bs);  // hot: local 5
      check_align_ep(skewed_ids<std::int32_t>(n, 256, rng, 3), 256, rank_map(256, 32, 1), 32, bs);   // hot: remote
    }
  // every id on another rank, and every id on one local expert
  for (std::size_t n : {7u, 3000u, 100000u}) {
    check_align_ep(std::vector<std::int32_t>(n, 3), 256, rank_map(256, 32, 1), 32, 64);
    check_align_ep(std::vector<std::int32_t>(n, 63), 256, rank_map(256, 32, 1), 32, 64);
  }
}

TEST_CASE("align_ep random: router-shaped ids on the issue's EP shapes (256 experts, 32 local)") {
  Rng rng(105);
  for (std::size_t tokens : {1u, 256u, 4096u, 16384u})
    for (std::int32_t rank : {0, 5}) check_align_ep(router_ids<std::int32_t>(tokens, 8, 256, rng), 256,
                                                    rank_map(256, 32, rank), 32, 64);
}

TEST_CASE("align_ep random: many experts (radix on the local grouping) and one local expert") {
  Rng rng(106);
  for (std::size_t n : {20u, 3000u, 100000u}) {
    check_align_ep(uniform_ids<std::int32_t>(n, 65536, rng, 0.05), 65536, random_map(65536, 65536, rng, 0.2, 0.05),
                   65536, 64);
    check_align_ep(uniform_ids<std::int32_t>(n, 65536, rng, 0.05), 65536, random_map(65536, 1, rng, 0.5, 0.1), 1,
                   32);
    check_align_ep(uniform_ids<std::int32_t>(n, 8, rng, 0.05), 8, random_map(8, 65536, rng, 0.0, 0.0), 65536, 16);
  }
}

TEST_CASE("align_ep: large input") {
  Rng rng(107);
  check_align_ep(uniform_ids<std::int32_t>(2000003, 256, rng, 0.02), 256, rank_map(256, 32, 2), 32, 64);
}

TEST_CASE("align_ep: determinism, and the map read afresh each call") {
  Rng rng(108);
  const auto ids = skewed_ids<std::int32_t>(262147, 256, rng);
  const EpMap map = random_map(256, 40, rng, 0.5, 0.1);
  const EpResult first = backend_align_ep(ids, 256, map, 40, 64);
  for (int rep = 0; rep < 3; ++rep) CHECK(backend_align_ep(ids, 256, map, 40, 64) == first);
  CHECK(first == reference_align_ep(ids, 256, map, 40, 64));
}

// ---- errors ------------------------------------------------------------------------------------------------
namespace {

struct EpBuffers {
  EpBuffers(std::int64_t numel, std::int32_t E, std::int32_t L, std::int32_t bs)
      : ids(static_cast<std::size_t>(numel)),
        map(static_cast<std::size_t>(E)),
        sorted(static_cast<std::size_t>(moe::align_max_padded(numel, L, bs))),
        experts(static_cast<std::size_t>(moe::align_max_blocks(numel, L, bs))),
        post(1),
        counts(static_cast<std::size_t>(L)),
        positions(static_cast<std::size_t>(numel)),
        ws_bytes(moe::align_workspace_size_ep(numel, E, L, bs)),
        ws(ws_bytes + 64) {
    // ids all 0, map entries all 0: a call that gets through the checks has a defined result
    const std::vector<std::int32_t> zeros(static_cast<std::size_t>(std::max<std::int64_t>(numel, E)), 0);
    moe::copy_to_device(ids.data(), zeros.data(), ids.bytes());
    moe::copy_to_device(map.data(), zeros.data(), map.bytes());
  }
  moe::device_buffer<std::int32_t> ids, map, sorted, experts, post, counts, positions;
  std::size_t ws_bytes;
  moe::device_buffer<unsigned char> ws;
};

}  // namespace

TEST_CASE("align_ep errors: shape arguments") {
  EpBuffers b(16, 8, 4, 4);
  auto call = [&](std::int64_t numel, std::int32_t E, std::int32_t L, std::int32_t bs) {
    return moe_align_block_size_ep(b.ids.data(), MOE_INT32, numel, E, b.map.data(), L, bs, b.sorted.data(),
                                   b.experts.data(), b.post.data(), b.counts.data(), b.positions.data(), b.ws.data(),
                                   b.ws.size(), nullptr);
  };
  CHECK_C_ERROR(call(-1, 8, 4, 4), MOE_ERROR_INVALID_ARGUMENT, "numel");
  CHECK_C_ERROR(call(std::int64_t{1} << 31, 8, 4, 4), MOE_ERROR_INVALID_ARGUMENT, "numel");
  CHECK_C_ERROR(call(16, 0, 4, 4), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(16, 65537, 4, 4), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(16, 8, 0, 4), MOE_ERROR_INVALID_ARGUMENT, "num_local_experts");
  CHECK_C_ERROR(call(16, 8, -2, 4), MOE_ERROR_INVALID_ARGUMENT, "num_local_experts");
  CHECK_C_ERROR(call(16, 8, 65537, 4), MOE_ERROR_INVALID_ARGUMENT, "num_local_experts");
  CHECK_C_ERROR(call(16, 8, 4, 0), MOE_ERROR_INVALID_ARGUMENT, "block_size");
  CHECK_C_ERROR(call(16, 8, 4, -64), MOE_ERROR_INVALID_ARGUMENT, "block_size");
  CHECK_C_ERROR(call(1 << 30, 8, 4, 1 << 29), MOE_ERROR_INVALID_ARGUMENT, "INT32_MAX");
  std::size_t bytes = 123;
  CHECK_C_ERROR(moe_align_workspace_size_ep(16, 8, 0, 4, &bytes), MOE_ERROR_INVALID_ARGUMENT, "num_local_experts");
  CHECK_C_ERROR(moe_align_workspace_size_ep(16, 70000, 4, 4, &bytes), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(moe_align_workspace_size_ep(16, 8, 4, 0, &bytes), MOE_ERROR_INVALID_ARGUMENT, "block_size");
  CHECK(bytes == 123);
  CHECK_C_ERROR(moe_align_workspace_size_ep(16, 8, 4, 4, nullptr), MOE_ERROR_INVALID_ARGUMENT, "bytes");
  // the capacity bound is the LOCAL grouping's: 65536 global experts would overflow it, one local expert does not
  CHECK(moe_align_workspace_size(std::int64_t{1} << 30, 65536, 1 << 20, &bytes) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(moe_align_workspace_size_ep(std::int64_t{1} << 30, 65536, 1, 1 << 20, &bytes) == MOE_SUCCESS);
}

TEST_CASE("align_ep errors: pointers, dtype, the identity map and the workspace") {
  EpBuffers b(16, 8, 4, 4);
  struct P {
    const void* ids;
    moe_dtype_t t;
    const std::int32_t* map;
    std::int32_t L;
    std::int32_t *sorted, *experts, *post, *counts, *positions;
    void* ws;
    std::size_t ws_bytes;
  };
  const P ok{b.ids.data(), MOE_INT32, b.map.data(), 4, b.sorted.data(), b.experts.data(), b.post.data(),
             b.counts.data(), b.positions.data(), b.ws.data(), b.ws.size()};
  auto call = [&](P p) {
    return moe_align_block_size_ep(p.ids, p.t, 16, 8, p.map, p.L, 4, p.sorted, p.experts, p.post, p.counts,
                                   p.positions, p.ws, p.ws_bytes, nullptr);
  };
  auto with = [&](auto&& edit) {
    P p = ok;
    edit(p);
    return call(p);
  };
  CHECK_C_ERROR(with([](P& p) { p.ids = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "topk_ids");
  CHECK_C_ERROR(with([](P& p) { p.sorted = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "sorted_token_ids");
  CHECK_C_ERROR(with([](P& p) { p.experts = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "expert_ids");
  CHECK_C_ERROR(with([](P& p) { p.post = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "num_tokens_post_pad");
  CHECK_C_ERROR(with([](P& p) { p.t = MOE_FLOAT32; }), MOE_ERROR_UNSUPPORTED, "id_type");
  CHECK_C_ERROR(with([](P& p) { p.t = enum_from_int<moe_dtype_t>(42); }), MOE_ERROR_INVALID_ARGUMENT, "id_type");
  CHECK_C_ERROR(with([](P& p) { p.map = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "expert_map");
  CHECK_C_ERROR(with([](P& p) { p.map = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "num_local_experts");
  if (b.ws_bytes > 0) {
    const std::size_t need = b.ws_bytes;
    CHECK_C_ERROR(with([&](P& p) { p.ws_bytes = need - 1; }), MOE_ERROR_INVALID_ARGUMENT, "workspace");
    CHECK_C_ERROR(with([](P& p) { p.ws = nullptr; }), MOE_ERROR_INVALID_ARGUMENT, "workspace");
  }
  // overlaps: outputs with each other, with the inputs, with the workspace
  CHECK_C_ERROR(with([&](P& p) { p.counts = b.sorted.data() + 2; }), MOE_ERROR_INVALID_ARGUMENT, "expert_counts");
  CHECK_C_ERROR(with([&](P& p) { p.positions = b.ids.data() + 15; }), MOE_ERROR_INVALID_ARGUMENT, "token_positions");
  CHECK_C_ERROR(with([&](P& p) { p.positions = b.ids.data() + 15; }), MOE_ERROR_INVALID_ARGUMENT, "topk_ids");
  CHECK_C_ERROR(with([&](P& p) { p.sorted = b.map.data(); }), MOE_ERROR_INVALID_ARGUMENT, "expert_map");
  CHECK_C_ERROR(with([&](P& p) { p.post = b.experts.data() + 1; }), MOE_ERROR_INVALID_ARGUMENT, "expert_ids");
  if (b.ws_bytes > 0)
    CHECK_C_ERROR(with([&](P& p) { p.positions = static_cast<std::int32_t*>(p.ws); }), MOE_ERROR_INVALID_ARGUMENT,
                   "workspace");
  // an error writes nothing
  const std::vector<std::int32_t> poison(b.sorted.size(), kPoison);
  moe::copy_to_device(b.sorted.data(), poison.data(), b.sorted.bytes());
  CHECK(with([](P& p) { p.map = nullptr; }) == MOE_ERROR_INVALID_ARGUMENT);
  moe::synchronize();
  CHECK(to_host(b.sorted) == poison);
  // accepted: NULL optional outputs; a NULL map with as many local experts as globals; inputs overlapping each
  // other; a larger workspace than needed
  CHECK(with([](P& p) { p.counts = nullptr, p.positions = nullptr; }) == MOE_SUCCESS);
  CHECK(with([&](P& p) { p.map = b.ids.data(); }) == MOE_SUCCESS);
  CHECK(call(ok) == MOE_SUCCESS);
  EpBuffers identity(16, 8, 8, 4);
  CHECK(moe_align_block_size_ep(identity.ids.data(), MOE_INT32, 16, 8, nullptr, 8, 4, identity.sorted.data(),
                                identity.experts.data(), identity.post.data(), identity.counts.data(),
                                identity.positions.data(), identity.ws.data(), identity.ws.size(),
                                nullptr) == MOE_SUCCESS);
  moe::synchronize();
}

TEST_CASE("align_ep errors: the C++ API throws moe::Error with the status") {
  EpBuffers b(16, 8, 4, 4);
  try {
    moe::align_block_size_ep(b.ids.data(), 16, 8, nullptr, 4, 4, b.sorted.data(), b.experts.data(), b.post.data(),
                             nullptr, nullptr, b.ws.data(), b.ws.size());
    FAIL("a NULL map with 4 of 8 experts accepted");
  } catch (const moe::Error& e) {
    CHECK(e.status() == MOE_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("expert_map") != std::string::npos);
  }
  CHECK_THROWS_AS(moe::align_workspace_size_ep(16, 8, 9999999, 4), moe::Error);
  // the reference checks the same way
  std::vector<std::int32_t> ids(16), sorted(64), experts(16), counts(4), positions(16);
  std::int32_t post = 0;
  std::vector<unsigned char> ws(moe::reference::align_workspace_size_ep(16, 8, 4, 4));
  CHECK_THROWS_AS(moe::reference::align_block_size_ep(ids.data(), 16, 8, nullptr, 4, 4, sorted.data(),
                                                      experts.data(), &post, counts.data(), positions.data(),
                                                      ws.data(), ws.size()),
                  moe::Error);
  CHECK_THROWS_AS(moe::reference::align_block_size_ep(ids.data(), 16, 8, nullptr, 8, 4, sorted.data(),
                                                      experts.data(), &post, counts.data(), positions.data(),
                                                      ws.data(), 0),
                  moe::Error);
}
