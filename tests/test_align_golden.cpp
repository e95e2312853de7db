// align_block_size on inputs worked out by hand: the contract's own examples and its edge cases.
#include "support.hpp"

using moe_test::AlignResult;
using moe_test::backend_align;
using moe_test::check_align;

namespace {
constexpr std::int32_t s9 = 9;  // the sentinel of the 9-id examples
}

TEST_CASE("golden: the contract's example, block_size 4") {
  const std::vector<std::int32_t> ids{0, 1, 2, 1, 2, 3, 0, 3, 4};
  const AlignResult r = backend_align(ids, 5, 4);
  const std::vector<std::int32_t> sorted{0, 6, s9, s9, 1, 3, s9, s9, 2, 4, s9, s9, 5, 7, s9, s9, 8, s9, s9, s9,
                                         /* tail to capacity 9 + 5*3 = 24 */ s9, s9, s9, s9};
  CHECK(r.num_tokens_post_pad == 20);
  CHECK(r.sorted_token_ids == sorted);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1, 2, 3, 4, -1});
  check_align(ids, 5, 4);
}

TEST_CASE("golden: empty experts take no block, dropped ids land nowhere") {
  // experts 1 and 3 empty; -1, 6 and 100 are out of range for 6 experts
  const std::vector<std::int64_t> ids{5, -1, 0, 6, 5, 2, 100, 0};
  const AlignResult r = backend_align(ids, 6, 2);
  const std::int32_t s = 8;
  // capacity 8 + 6*1 = 14, 7 blocks
  CHECK(r.num_tokens_post_pad == 6);
  CHECK(r.sorted_token_ids == std::vector<std::int32_t>{2, 7, 5, s, 0, 4, s, s, s, s, s, s, s, s});
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 2, 5, -1, -1, -1, -1});
  check_align(ids, 6, 2);
}

TEST_CASE("golden: a block size that is not a power of two") {
  const std::vector<std::int32_t> ids{2, 0, 2, 2, 1, 0, 2};
  const AlignResult r = backend_align(ids, 3, 3);
  const std::int32_t s = 7;
  // groups of 2, 1 and 4 ids padded to 3, 3 and 6; capacity 7 + 3*2 = 13, ceil(13 / 3) = 5 blocks
  CHECK(r.num_tokens_post_pad == 12);
  CHECK(r.sorted_token_ids == std::vector<std::int32_t>{1, 5, s, 4, s, s, 0, 2, 3, 6, s, s, s});
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1, 2, 2, -1});
  check_align(ids, 3, 3);
}

TEST_CASE("golden: block_size 1 is a stable sort with no padding") {
  const std::vector<std::int16_t> ids{3, 1, 3, 0, 1, 3};
  const AlignResult r = backend_align(ids, 4, 1);
  CHECK(r.num_tokens_post_pad == 6);
  CHECK(r.sorted_token_ids == std::vector<std::int32_t>{3, 1, 4, 0, 2, 5});
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1, 1, 3, 3, 3});
}

TEST_CASE("golden: one token, one expert, block larger than the input") {
  const std::vector<std::uint8_t> ids{0};
  const AlignResult r = backend_align(ids, 1, 256);
  CHECK(r.num_tokens_post_pad == 256);
  CHECK(r.sorted_token_ids.size() == 256);
  CHECK(r.sorted_token_ids[0] == 0);
  CHECK(std::count(r.sorted_token_ids.begin() + 1, r.sorted_token_ids.end(), 1) == 255);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0});
}

TEST_CASE("golden: every id dropped writes only sentinels and -1") {
  const std::vector<std::int8_t> ids{-1, -2, 7, 8, -128, 127};
  const AlignResult r = backend_align(ids, 7, 16);
  CHECK(r.num_tokens_post_pad == 0);
  CHECK(r.sorted_token_ids == std::vector<std::int32_t>(6 + 6 * 15, 6));
  CHECK(r.expert_ids == std::vector<std::int32_t>(6, -1));
}

TEST_CASE("golden: numel 0 writes post_pad 0 and accepts NULL buffers") {
  moe::device_buffer<std::int32_t> post(1);
  const std::int32_t poison = moe_test::kPoison;
  moe::copy_to_device(post.data(), &poison, sizeof poison);
  CHECK(moe::align_max_padded(0, 8, 64) == 0);
  CHECK(moe::align_max_blocks(0, 8, 64) == 0);
  const std::size_t ws = moe::align_workspace_size(0, 8, 64);
  moe::device_buffer<unsigned char> work(ws);
  moe::align_block_size(static_cast<const std::int32_t*>(nullptr), 0, 8, 64, nullptr, nullptr, post.data(),
                        work.data(), ws);
  moe::synchronize();
  std::int32_t got = -1;
  moe::copy_to_host(&got, post.data(), sizeof got);
  CHECK(got == 0);
}

TEST_CASE("golden: expert ids at the limits of each id type") {
  check_align(std::vector<std::int8_t>{127, 0, -128, 127, 5}, 128, 4);
  check_align(std::vector<std::uint8_t>{255, 0, 255, 128}, 256, 2);
  check_align(std::vector<std::int16_t>{32767, 0, -32768, 32767, 1}, 32768, 2);
  check_align(std::vector<std::int32_t>{65535, 0, 65536, -1, 65535, 2147483647}, 65536, 8);
  check_align(std::vector<std::int64_t>{65535, (std::int64_t{1} << 32), (std::int64_t{1} << 32) + 3, 3}, 65536, 8);
}

TEST_CASE("capacities follow the contract's formulas") {
  CHECK(moe::align_max_padded(9, 5, 4) == 9 + 5 * 3);
  CHECK(moe::align_max_blocks(9, 5, 4) == 6);
  CHECK(moe::align_max_padded(3, 256, 64) == 3 + 3 * 63);  // min(numel, E) groups at most
  CHECK(moe::align_max_blocks(3, 256, 64) == 3);
  CHECK(moe::align_max_padded(1000, 1, 1) == 1000);
  CHECK(moe::align_max_padded((std::int64_t{1} << 31) - 1, 1, 1) == (std::int64_t{1} << 31) - 1);
}
