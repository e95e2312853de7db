// moe_permute in one place: its shape, arguments and checks, and the reference. Entries in permute.cpp;
// semantics in routing.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract.hpp"
#include "host_device.hpp"

namespace moe {
namespace detail {

struct PermuteShape {
  std::int64_t num_tokens;
  std::int64_t hidden_size;  // elements a row
  std::int32_t topk;
  std::int64_t max_rows;     // rows of permuted
  std::int64_t row_bytes;    // hidden_size * element size
  std::int64_t numel() const { return num_tokens * topk; }
};

// Throws moe::Error naming the argument at fault (dtype: invalid value; sizes; overflow; max_rows < numel).
PermuteShape make_permute_shape(moe_dtype_t dtype, std::int64_t num_tokens, std::int64_t hidden_size,
                                std::int32_t topk, std::int64_t max_rows);

struct PermuteArgs {
  const void* hidden;
  moe_dtype_t dtype;
  const std::int32_t* sorted_token_ids;
  const std::int32_t* num_tokens_post_pad;
  void* permuted;
};

// Pointers and overlap.
void check_permute_args(const PermuteShape& shape, const PermuteArgs& args);

// Nothing to do: no byte read or written (max_rows == 0 or a row of 0 bytes).
inline bool permute_is_empty(const PermuteShape& s) { return s.max_rows == 0 || s.row_bytes == 0; }

// The rows written: min(max(*num_tokens_post_pad, 0), max_rows), the one rule every backend applies on the device.
MOE_HD std::int64_t permute_rows(std::int32_t post_pad, std::int64_t max_rows) {
  return post_pad < 0 ? 0 : (post_pad < max_rows ? post_pad : max_rows);
}

// The widest access (16, 8, 4, 2 or 1 bytes) that divides the row bytes and both row pointers' alignment: the
// backends copy rows in words of that many bytes (16: one vector load/store on GPUs).
inline int permute_word_bytes(std::int64_t row_bytes, const void* hidden, const void* permuted) {
  const auto bits = static_cast<std::uint64_t>(row_bytes) | reinterpret_cast<std::uintptr_t>(hidden) |
                    reinterpret_cast<std::uintptr_t>(permuted);
  for (int w = 16; w > 1; w /= 2)
    if (bits % static_cast<std::uint64_t>(w) == 0) return w;
  return 1;
}
// Words of N bytes, of integer lanes so that GPU compilers emit one vector access per word.
template <int N> struct Word;
template <> struct alignas(16) Word<16> { std::uint32_t v[4]; };
template <> struct alignas(8) Word<8> { std::uint32_t v[2]; };
template <> struct alignas(4) Word<4> { std::uint32_t v; };
template <> struct alignas(2) Word<2> { std::uint16_t v; };
template <> struct Word<1> { std::uint8_t v; };

// Calls f(Word<N>{}) for the word width permute_word_bytes chose.
template <class F>
void dispatch_permute_word(int word_bytes, F&& f) {
  switch (word_bytes) {
    case 16: f(Word<16>{}); break;
    case 8: f(Word<8>{}); break;
    case 4: f(Word<4>{}); break;
    case 2: f(Word<2>{}); break;
    default: f(Word<1>{}); break;
  }
}

std::size_t reference_permute_workspace_size(const PermuteShape& shape);  // 0
void reference_permute(const PermuteShape& shape, const PermuteArgs& args);

}  // namespace detail
}  // namespace moe
