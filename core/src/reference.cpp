// The CPU reference: a counting sort, serial, in the most obvious order. The oracle of every test.
#include "moe/reference.hpp"

#include <algorithm>

#include "contract.hpp"
#include "dispatch.hpp"
#include "numeric.hpp"
#include "reference_impl.hpp"

namespace moe {
namespace reference {

namespace {

template <class IdT>
void align_typed(const detail::AlignShape& s, const IdT* ids, const detail::AlignArgs& a) {
  const std::int64_t n = s.numel;
  const std::int32_t E = s.num_experts, bs = s.block_size;
  std::int32_t* cursor = static_cast<std::int32_t*>(a.workspace);  // count, then next write position
  auto expert_of = [&](std::int64_t i) -> std::int64_t {           // -1 for a dropped id
    const auto v = static_cast<std::int64_t>(ids[i]);
    return (v >= 0 && v < E) ? v : -1;
  };

  std::fill(cursor, cursor + E, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t e = expert_of(i);
    if (e >= 0) ++cursor[e];
  }

  std::fill(a.sorted_token_ids, a.sorted_token_ids + s.max_padded, static_cast<std::int32_t>(n));
  std::fill(a.expert_ids, a.expert_ids + s.max_blocks, -1);
  std::int64_t pos = 0;
  for (std::int32_t e = 0; e < E; ++e) {
    const std::int64_t count = cursor[e];
    const std::int64_t blocks = (count + bs - 1) / bs;
    std::fill(a.expert_ids + pos / bs, a.expert_ids + pos / bs + blocks, e);
    cursor[e] = static_cast<std::int32_t>(pos);
    pos += blocks * bs;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t e = expert_of(i);
    if (e >= 0) a.sorted_token_ids[cursor[e]++] = static_cast<std::int32_t>(i);
  }
  *a.num_tokens_post_pad = static_cast<std::int32_t>(pos);
}

template <class Traits>
void sum_typed(const detail::SumShape& s, const void* input, void* output) {
  using storage = typename Traits::storage;
  const storage* in = static_cast<const storage*>(input);
  storage* out = static_cast<storage*>(output);
  for (std::int64_t t = 0; t < s.num_tokens; ++t)
    for (std::int64_t h = 0; h < s.hidden; ++h) {
      float acc = 0.0f;
      for (std::int32_t k = 0; k < s.topk; ++k) acc = acc + Traits::load(in[(t * s.topk + k) * s.hidden + h]);
      out[t * s.hidden + h] = Traits::store(acc);
    }
}

}  // namespace

std::size_t align_workspace_size(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  return detail::reference_align_workspace_size(detail::make_align_shape(numel, num_experts, block_size));
}

void align_block_size(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                      std::int32_t block_size, std::int32_t* sorted_token_ids, std::int32_t* expert_ids,
                      std::int32_t* num_tokens_post_pad, void* workspace, std::size_t workspace_bytes) {
  const detail::AlignShape s = detail::make_align_shape(numel, num_experts, block_size);
  const detail::AlignArgs a{topk_ids,   id_type,   sorted_token_ids, expert_ids, num_tokens_post_pad,
                            workspace, workspace_bytes};
  detail::check_align_args(s, a, detail::reference_align_workspace_size(s), alignof(std::int32_t));
  detail::reference_align(s, a);
}

void sum(const void* input, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
         void* output) {
  const detail::SumShape s{num_tokens, topk, hidden};
  detail::check_sum_args(s, input, dtype, output);
  detail::reference_sum(s, input, dtype, output);
}

float half_to_float(half_t h) noexcept { return numeric::f16_to_f32(h.bits); }
float bfloat16_to_float(bfloat16_t b) noexcept { return numeric::bf16_to_f32(b.bits); }
half_t float_to_half(float f) noexcept { return half_t{numeric::f32_to_f16(f)}; }
bfloat16_t float_to_bfloat16(float f) noexcept { return bfloat16_t{numeric::f32_to_bf16(f)}; }

}  // namespace reference

namespace detail {

std::size_t reference_align_workspace_size(const AlignShape& s) {
  if (s.numel == 0) return 0;  // the same rule on every backend: no ids, no scratch
  return static_cast<std::size_t>(s.num_experts) * sizeof(std::int32_t);
}

void reference_align(const AlignShape& s, const AlignArgs& a) {
  if (s.numel == 0) {  // both capacities are 0: only the padded total is written (the workspace may be NULL)
    *a.num_tokens_post_pad = 0;
    return;
  }
  dispatch_id_type(a.id_type, [&](auto tag) {
    reference::align_typed(s, static_cast<const decltype(tag)*>(a.topk_ids), a);
  });
}

void reference_sum(const SumShape& s, const void* input, moe_dtype_t dtype, void* output) {
  dispatch_value_traits(dtype, [&](auto traits) { reference::sum_typed<decltype(traits)>(s, input, output); });
}

}  // namespace detail
}  // namespace moe
