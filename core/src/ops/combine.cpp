// moe_combine: shape and argument checks, the reference, and the public entries (C++, reference, C).
#include "ops/combine.hpp"

#include <limits>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "dispatch.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"

namespace moe {
namespace detail {

CombineShape make_combine_shape(moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden) {
  check_dtype(dtype, is_value_type(dtype), "dtype", "MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16");
  if (num_tokens < 0) throw_invalid("num_tokens must be >= 0, got " + str(num_tokens));
  if (topk < 1) throw_invalid("topk must be >= 1, got " + str(topk));
  if (hidden < 0) throw_invalid("hidden must be >= 0, got " + str(hidden));
  if (num_tokens > kMaxNumel / topk)
    throw_invalid("num_tokens * topk must be < 2^31 (token_positions are int32), got " + str(num_tokens) + " x " +
                  str(topk));
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() / 8;  // bytes must fit too
  if (hidden > 0 && num_tokens * topk > max / hidden)
    throw_invalid("num_tokens * topk * hidden overflows (" + str(num_tokens) + " x " + str(topk) + " x " +
                  str(hidden) + ")");
  return CombineShape{num_tokens, topk, hidden};
}

void check_combine_args(const CombineShape& s, const CombineArgs& a) {
  const int layout = static_cast<int>(a.layout);  // any int a C caller passed
  if (layout != MOE_ROWS_FLAT && layout != MOE_ROWS_PERMUTED)
    throw_invalid("layout is not a moe_rows_layout_t value (got " + str(layout) +
                  "; MOE_ROWS_FLAT = 0, MOE_ROWS_PERMUTED = 1)");
  if (combine_is_empty(s)) return;
  if (a.layout == MOE_ROWS_PERMUTED && a.token_positions == nullptr)
    throw_invalid("token_positions is NULL with layout MOE_ROWS_PERMUTED (it gives each slot's row)");
  if (a.rows == nullptr) throw_invalid("rows is NULL while num_tokens * hidden > 0");
  if (a.output == nullptr) throw_invalid("output is NULL while num_tokens * hidden > 0");
  const std::size_t esize = dtype_size(a.dtype);
  // rows: FLAT has num_tokens * topk rows; the PERMUTED buffer's length is the caller's (up to the align
  // capacity, possibly fewer rows than slots when ids were dropped): only its first row is known to exist
  const std::int64_t known_rows = a.layout == MOE_ROWS_FLAT ? s.numel() : 1;
  check_outputs_apart({{a.output, span_bytes(s.num_tokens * s.hidden, esize), "output"}},
                      {{a.rows, span_bytes(known_rows * s.hidden, esize), "rows"},
                       {a.token_positions, span_bytes(s.numel(), 4), "token_positions"},
                       {a.topk_weights, span_bytes(s.numel(), 4), "topk_weights"}});
}

// ---- the reference: per output element, the present slots in k order -----------------------------------------
namespace {

template <class Traits>
void reference_combine_typed(const CombineShape& s, const CombineArgs& a) {
  using storage = typename Traits::storage;
  const storage* rows = static_cast<const storage*>(a.rows);
  storage* out = static_cast<storage*>(a.output);
  const bool permuted = a.layout == MOE_ROWS_PERMUTED;
  for (std::int64_t t = 0; t < s.num_tokens; ++t)
    for (std::int64_t h = 0; h < s.hidden; ++h) {
      float acc = 0.0f;
      for (std::int32_t k = 0; k < s.topk; ++k) {
        const std::int64_t i = t * s.topk + k;
        const std::int64_t r = combine_row(i, a.token_positions, permuted);
        if (r < 0) continue;  // absent: its row is never read
        const float w = a.topk_weights != nullptr ? a.topk_weights[i] : 1.0f;
        acc = combine_slot(acc, w, Traits::load(rows[r * s.hidden + h]));
      }
      out[t * s.hidden + h] = Traits::store(combine_out(acc, a.scale));
    }
}

}  // namespace

std::size_t reference_combine_workspace_size(const CombineShape&) { return 0; }

void reference_combine(const CombineShape& s, const CombineArgs& a) {
  dispatch_value_traits(a.dtype, [&](auto traits) { reference_combine_typed<decltype(traits)>(s, a); });
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
void combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, std::int64_t num_tokens,
             std::int32_t topk, std::int64_t hidden, const std::int32_t* token_positions, const float* topk_weights,
             float scale, void* output, void* stream) {
  const detail::CombineShape s = detail::make_combine_shape(dtype, num_tokens, topk, hidden);
  const detail::CombineArgs a{rows, dtype, layout, token_positions, topk_weights, scale, output};
  detail::check_combine_args(s, a);
  if (detail::combine_is_empty(s)) return;
  backend::combine(s, a, stream);
}

namespace reference {

void combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, std::int64_t num_tokens,
             std::int32_t topk, std::int64_t hidden, const std::int32_t* token_positions, const float* topk_weights,
             float scale, void* output) {
  const detail::CombineShape s = detail::make_combine_shape(dtype, num_tokens, topk, hidden);
  const detail::CombineArgs a{rows, dtype, layout, token_positions, topk_weights, scale, output};
  detail::check_combine_args(s, a);
  if (detail::combine_is_empty(s)) return;
  detail::reference_combine(s, a);
}

}  // namespace reference
}  // namespace moe

extern "C" {

moe_status_t moe_combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, int64_t num_tokens,
                         int32_t topk, int64_t hidden, const int32_t* token_positions, const float* topk_weights,
                         float scale, void* output, void* stream) {
  return moe::detail::guarded([&] {
    moe::combine(rows, dtype, layout, num_tokens, topk, hidden, token_positions, topk_weights, scale, output,
                 stream);
  });
}

}  // extern "C"
