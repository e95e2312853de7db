// moe_sum: shape and argument checks, the reference, and the public entries (C++, reference, C).
#include "ops/sum.hpp"

#include <limits>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "dispatch.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"
#include "numeric.hpp"

namespace moe {
namespace detail {

void check_sum_args(const SumShape& s, const SumArgs& a) {
  check_dtype(a.dtype, is_value_type(a.dtype), "dtype", "MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16");
  if (s.num_tokens < 0) throw_invalid("num_tokens must be >= 0, got " + str(s.num_tokens));
  if (s.topk < 1) throw_invalid("topk must be >= 1, got " + str(s.topk));
  if (s.hidden < 0) throw_invalid("hidden must be >= 0, got " + str(s.hidden));
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() / 8;  // bytes must fit too
  if (s.hidden > 0 && (s.num_tokens > max / s.hidden || s.num_tokens * s.hidden > max / s.topk))
    throw_invalid("num_tokens * topk * hidden overflows (" + str(s.num_tokens) + " x " + str(s.topk) + " x " +
                  str(s.hidden) + ")");
  const std::int64_t out_elems = s.num_tokens * s.hidden;
  if (out_elems == 0) return;
  if (a.input == nullptr) throw_invalid("input is NULL while num_tokens * hidden > 0");
  if (a.output == nullptr) throw_invalid("output is NULL while num_tokens * hidden > 0");
  const std::size_t esize = dtype_size(a.dtype);
  check_disjoint({{a.input, span_bytes(out_elems * s.topk, esize), "input"},  // no overflow: checked above
                  {a.output, span_bytes(out_elems, esize), "output"}});     // (moe_sum is not in place)
}

// ---- the reference: acc = 0; acc += x_k in k order; one rounding -----------------------------------------------
namespace {

template <class Traits>
void reference_sum_typed(const SumShape& s, const SumArgs& a) {
  using storage = typename Traits::storage;
  const storage* in = static_cast<const storage*>(a.input);
  storage* out = static_cast<storage*>(a.output);
  for (std::int64_t t = 0; t < s.num_tokens; ++t)
    for (std::int64_t h = 0; h < s.hidden; ++h) {
      float acc = 0.0f;
      for (std::int32_t k = 0; k < s.topk; ++k) acc = acc + Traits::load(in[(t * s.topk + k) * s.hidden + h]);
      out[t * s.hidden + h] = Traits::store(acc);
    }
}

}  // namespace

std::size_t reference_sum_workspace_size(const SumShape&) { return 0; }

void reference_sum(const SumShape& s, const SumArgs& a) {
  dispatch_value_traits(a.dtype, [&](auto traits) { reference_sum_typed<decltype(traits)>(s, a); });
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
void sum(const void* input, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
         void* output, void* stream) {
  const detail::SumShape s{num_tokens, topk, hidden};
  const detail::SumArgs a{input, dtype, output};
  detail::check_sum_args(s, a);
  if (num_tokens * hidden == 0) return;
  backend::sum(s, a, stream);
}

namespace reference {

void sum(const void* input, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
         void* output) {
  const detail::SumShape s{num_tokens, topk, hidden};
  const detail::SumArgs a{input, dtype, output};
  detail::check_sum_args(s, a);
  detail::reference_sum(s, a);
}

}  // namespace reference
}  // namespace moe

extern "C" {

moe_status_t moe_sum(const void* input, moe_dtype_t dtype, int64_t num_tokens, int32_t topk, int64_t hidden,
                     void* output, void* stream) {
  return moe::detail::guarded([&] { moe::sum(input, dtype, num_tokens, topk, hidden, output, stream); });
}

}  // extern "C"
