// moe_permute: shape and argument checks, the reference, and the public entries (C++, reference, C).
#include "ops/permute.hpp"

#include <cstring>
#include <limits>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"

namespace moe {
namespace detail {

PermuteShape make_permute_shape(moe_dtype_t dtype, std::int64_t num_tokens, std::int64_t hidden_size,
                                std::int32_t topk, std::int64_t max_rows) {
  check_dtype(dtype, true, "dtype", "a moe_dtype_t");  // any known dtype: a copy of bytes
  if (num_tokens < 0) throw_invalid("num_tokens must be >= 0, got " + str(num_tokens));
  if (hidden_size < 0) throw_invalid("hidden_size must be >= 0, got " + str(hidden_size));
  if (topk < 1) throw_invalid("topk must be >= 1, got " + str(topk));
  if (max_rows < 0) throw_invalid("max_rows must be >= 0, got " + str(max_rows));
  if (num_tokens > kMaxNumel / topk)
    throw_invalid("num_tokens * topk must be < 2^31 (sorted_token_ids are int32), got " + str(num_tokens) + " x " +
                  str(topk));
  const auto esize = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  if (hidden_size > max / esize) throw_invalid("hidden_size * element size overflows (" + str(hidden_size) + ")");
  PermuteShape s{num_tokens, hidden_size, topk, max_rows, hidden_size * esize};
  if (s.row_bytes > 0 && (num_tokens > max / s.row_bytes || max_rows > max / s.row_bytes))
    throw_invalid("num_tokens or max_rows times the row bytes overflows (" + str(num_tokens) + ", " + str(max_rows) +
                  " rows of " + str(s.row_bytes) + " bytes)");
  if (max_rows < s.numel())
    throw_invalid("max_rows = " + str(max_rows) + " is below num_tokens * topk = " + str(s.numel()) +
                  ": permuted must hold the padded capacity of the align call, moe_align_max_padded(" +
                  "num_tokens * topk, num_experts, block_size) >= num_tokens * topk");
  return s;
}

void check_permute_args(const PermuteShape& s, const PermuteArgs& a) {
  if (permute_is_empty(s)) return;
  if (a.hidden == nullptr && s.num_tokens > 0) throw_invalid("hidden is NULL while num_tokens * hidden_size > 0");
  if (a.sorted_token_ids == nullptr) throw_invalid("sorted_token_ids is NULL while max_rows * hidden_size > 0");
  if (a.num_tokens_post_pad == nullptr) throw_invalid("num_tokens_post_pad is NULL while max_rows * hidden_size > 0");
  if (a.permuted == nullptr) throw_invalid("permuted is NULL while max_rows * hidden_size > 0");
  const auto row_bytes = static_cast<std::size_t>(s.row_bytes);
  check_outputs_apart({{a.permuted, span_bytes(s.max_rows, row_bytes), "permuted"}},
                      {{a.hidden, span_bytes(s.num_tokens, row_bytes), "hidden"},
                       {a.sorted_token_ids, span_bytes(s.numel(), 4), "sorted_token_ids"},
                       {a.num_tokens_post_pad, 4, "num_tokens_post_pad"}});
}

// ---- the reference: one memcpy (or memset) per row ------------------------------------------------------------
std::size_t reference_permute_workspace_size(const PermuteShape&) { return 0; }

void reference_permute(const PermuteShape& s, const PermuteArgs& a) {
  const std::int64_t rows = permute_rows(*a.num_tokens_post_pad, s.max_rows);
  const auto* in = static_cast<const unsigned char*>(a.hidden);
  auto* out = static_cast<unsigned char*>(a.permuted);
  const auto bytes = static_cast<std::size_t>(s.row_bytes);
  for (std::int64_t p = 0; p < rows; ++p) {
    const std::int64_t i = a.sorted_token_ids[p];
    unsigned char* dst = out + p * s.row_bytes;
    if (i >= 0 && i < s.numel()) std::memcpy(dst, in + (i / s.topk) * s.row_bytes, bytes);
    else std::memset(dst, 0, bytes);
  }
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
void permute(const void* hidden, moe_dtype_t dtype, std::int64_t num_tokens, std::int64_t hidden_size,
             std::int32_t topk, const std::int32_t* sorted_token_ids, const std::int32_t* num_tokens_post_pad,
             std::int64_t max_rows, void* permuted, void* stream) {
  const detail::PermuteShape s = detail::make_permute_shape(dtype, num_tokens, hidden_size, topk, max_rows);
  const detail::PermuteArgs a{hidden, dtype, sorted_token_ids, num_tokens_post_pad, permuted};
  detail::check_permute_args(s, a);
  if (detail::permute_is_empty(s)) return;
  backend::permute(s, a, stream);
}

namespace reference {

void permute(const void* hidden, moe_dtype_t dtype, std::int64_t num_tokens, std::int64_t hidden_size,
             std::int32_t topk, const std::int32_t* sorted_token_ids, const std::int32_t* num_tokens_post_pad,
             std::int64_t max_rows, void* permuted) {
  const detail::PermuteShape s = detail::make_permute_shape(dtype, num_tokens, hidden_size, topk, max_rows);
  const detail::PermuteArgs a{hidden, dtype, sorted_token_ids, num_tokens_post_pad, permuted};
  detail::check_permute_args(s, a);
  if (detail::permute_is_empty(s)) return;
  detail::reference_permute(s, a);
}

}  // namespace reference
}  // namespace moe

extern "C" {

moe_status_t moe_permute(const void* hidden, moe_dtype_t dtype, int64_t num_tokens, int64_t hidden_size, int32_t topk,
                         const int32_t* sorted_token_ids, const int32_t* num_tokens_post_pad, int64_t max_rows,
                         void* permuted, void* stream) {
  return moe::detail::guarded([&] {
    moe::permute(hidden, dtype, num_tokens, hidden_size, topk, sorted_token_ids, num_tokens_post_pad, max_rows,
                 permuted, stream);
  });
}

}  // extern "C"
