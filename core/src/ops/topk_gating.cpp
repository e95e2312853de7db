// moe_topk_gating: shape and argument checks, the reference, and the public entries (C++, reference, C).
#include "ops/topk_gating.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "dispatch.hpp"
#include "gating_rules.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"
#include "numeric.hpp"
#include "numeric_exp.hpp"

// The Fortran module (moe_routing.f90) declares moe_gate_t as a bind(C) type with this layout.
static_assert(offsetof(moe_gate_t, topk) == 0 && offsetof(moe_gate_t, score) == 4 &&
                  offsetof(moe_gate_t, num_groups) == 8 && offsetof(moe_gate_t, topk_groups) == 12 &&
                  offsetof(moe_gate_t, correction_bias) == 16 &&
                  offsetof(moe_gate_t, renormalize) == 16 + sizeof(void*) &&
                  offsetof(moe_gate_t, routed_scaling_factor) == 20 + sizeof(void*),
              "moe_gate_t layout: the Fortran interface mirrors it");

namespace moe {
namespace detail {

TopkGatingShape make_topk_gating_shape(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t* gate) {
  if (gate == nullptr) throw_invalid("gate is NULL");
  if (num_tokens < 0) throw_invalid("num_tokens must be >= 0, got " + str(num_tokens));
  if (num_experts < 1 || num_experts > kMaxExperts)
    throw_invalid("num_experts must be in [1, 65536], got " + str(num_experts));
  const int score = static_cast<int>(gate->score);
  if (score != MOE_SCORE_SOFTMAX && score != MOE_SCORE_SIGMOID && score != MOE_SCORE_SOFTMAX_TOPK)
    throw_invalid("gate->score is not a moe_score_t value (got " + str(score) +
                  "; MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID or MOE_SCORE_SOFTMAX_TOPK)");
  if (gate->num_groups < 1) throw_invalid("gate->num_groups must be >= 1, got " + str(gate->num_groups));
  if (num_experts % gate->num_groups != 0)
    throw_invalid("gate->num_groups = " + str(gate->num_groups) + " does not divide num_experts = " +
                  str(num_experts));
  TopkGatingShape s{};
  s.num_tokens = num_tokens;
  s.num_experts = num_experts;
  s.score = gate->score;
  s.num_groups = gate->num_groups;
  s.group_size = num_experts / gate->num_groups;
  s.topk_groups = gate->num_groups;
  if (gate->num_groups > 1) {
    if (gate->topk_groups < 1 || gate->topk_groups > gate->num_groups)
      throw_invalid("gate->topk_groups must be in [1, num_groups = " + str(gate->num_groups) + "], got " +
                    str(gate->topk_groups));
    s.topk_groups = gate->topk_groups;
  }
  const std::int64_t available = std::int64_t{s.topk_groups} * s.group_size;
  if (gate->topk < 1 || gate->topk > available)
    throw_invalid("gate->topk must be in [1, " + str(available) + "] (the experts " +
                  (gate->num_groups > 1 ? "of topk_groups = " + str(s.topk_groups) + " groups of " +
                                              str(s.group_size)
                                        : std::string("num_experts")) +
                  "), got " + str(gate->topk));
  s.topk = gate->topk;
  s.renormalize = gate->renormalize != 0;
  s.routed_scaling_factor = gate->routed_scaling_factor;
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() / 8;  // bytes must fit too
  if (num_tokens > max / num_experts)
    throw_invalid("num_tokens * num_experts overflows (" + str(num_tokens) + " x " + str(num_experts) + ")");
  return s;
}

void check_topk_gating_args(const TopkGatingShape& s, const TopkGatingArgs& a) {
  check_dtype(a.dtype, is_value_type(a.dtype), "dtype", "MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16");
  if (s.num_tokens == 0) return;
  if (a.logits == nullptr) throw_invalid("logits is NULL while num_tokens = " + str(s.num_tokens));
  if (a.topk_ids == nullptr) throw_invalid("topk_ids is NULL while num_tokens = " + str(s.num_tokens));
  if (a.topk_weights == nullptr) throw_invalid("topk_weights is NULL while num_tokens = " + str(s.num_tokens));
  const auto out = static_cast<std::size_t>(s.num_tokens) * static_cast<std::size_t>(s.topk) * 4u;
  check_outputs_apart({{a.topk_ids, out, "topk_ids"}, {a.topk_weights, out, "topk_weights"}},
                      {{a.logits, span_bytes(s.num_tokens * s.num_experts, dtype_size(a.dtype)), "logits"},
                       {a.correction_bias, span_bytes(s.num_experts, 4), "gate->correction_bias"}});
}

// ---- the reference: per token, the steps of routing.h in their order, the rankings by sorting ---------------------
namespace {

using gating::order_key;

template <class Traits>
void reference_gating_typed(const TopkGatingShape& s, const TopkGatingArgs& a) {
  using storage = typename Traits::storage;
  const storage* logits = static_cast<const storage*>(a.logits);
  const std::int32_t E = s.num_experts, K = s.topk, G = s.group_size;
  std::vector<float> l(static_cast<std::size_t>(E)), sc(static_cast<std::size_t>(E));
  std::vector<std::uint64_t> key(static_cast<std::size_t>(E)), gkey(static_cast<std::size_t>(s.num_groups));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E)), gorder(static_cast<std::size_t>(s.num_groups));
  std::vector<char> kept(static_cast<std::size_t>(s.num_groups));
  std::vector<float> v(static_cast<std::size_t>(K));
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(K));
  auto by_key = [](const std::vector<std::uint64_t>& k) {
    return [&k](std::int32_t x, std::int32_t y) { return k[static_cast<std::size_t>(x)] > k[static_cast<std::size_t>(y)]; };
  };
  for (std::int64_t t = 0; t < s.num_tokens; ++t) {
    for (std::int32_t e = 0; e < E; ++e) l[e] = Traits::load(logits[t * E + e]);
    // 1. scores
    float m = 0.0f, sum = 0.0f;
    if (s.score == MOE_SCORE_SOFTMAX) {
      std::uint32_t mk = 0;
      for (std::int32_t e = 0; e < E; ++e) mk = std::max(mk, gating::score_key(l[e]));
      m = gating::softmax_max(mk);
      for (std::int32_t e = 0; e < E; ++e) sum = numeric::add_f32(sum, gating::softmax_term(l[e], m));
    }
    for (std::int32_t e = 0; e < E; ++e) sc[e] = gating::score_of(s.score, l[e], m, sum);
    // 2. selection scores, 3. the choice
    for (std::int32_t e = 0; e < E; ++e) key[e] = order_key(gating::selection_of(sc[e], a.correction_bias, e), e);
    std::fill(kept.begin(), kept.end(), 1);
    if (s.num_groups > 1) {
      for (std::int32_t g = 0; g < s.num_groups; ++g) {
        gating::Top2 top{0, 0};
        for (std::int32_t e = g * G; e < (g + 1) * G; ++e) top = gating::top2_insert(top, key[e]);
        gkey[g] = order_key(gating::group_score(top, G), g);
      }
      std::iota(gorder.begin(), gorder.end(), 0);
      std::partial_sort(gorder.begin(), gorder.begin() + s.topk_groups, gorder.end(), by_key(gkey));
      std::fill(kept.begin(), kept.end(), 0);
      for (std::int32_t i = 0; i < s.topk_groups; ++i) kept[gorder[i]] = 1;
      for (std::int32_t e = 0; e < E; ++e)
        if (!kept[e / G]) key[e] = 0;  // never chosen
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), by_key(key));
    // 4. weights, in the written order
    for (std::int32_t r = 0; r < K; ++r) v[r] = sc[order[r]];
    gating::finish_weights(v.data(), K, s.score, s.renormalize, s.routed_scaling_factor, bits.data());
    for (std::int32_t r = 0; r < K; ++r) a.topk_ids[t * K + r] = order[r];
    std::memcpy(&a.topk_weights[t * K], bits.data(), static_cast<std::size_t>(K) * 4);
  }
}

}  // namespace

std::size_t reference_topk_gating_workspace_size(const TopkGatingShape&) { return 0; }

void reference_topk_gating(const TopkGatingShape& s, const TopkGatingArgs& a) {
  dispatch_value_traits(a.dtype, [&](auto traits) { reference_gating_typed<decltype(traits)>(s, a); });
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
void topk_gating(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
                 const moe_gate_t& gate, std::int32_t* topk_ids, float* topk_weights, void* stream) {
  const detail::TopkGatingShape s = detail::make_topk_gating_shape(num_tokens, num_experts, &gate);
  const detail::TopkGatingArgs a{logits, dtype, gate.correction_bias, topk_ids, topk_weights};
  detail::check_topk_gating_args(s, a);
  if (num_tokens == 0) return;
  backend::topk_gating(s, a, stream);
}

namespace reference {

void topk_gating(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
                 const moe_gate_t& gate, std::int32_t* topk_ids, float* topk_weights) {
  const detail::TopkGatingShape s = detail::make_topk_gating_shape(num_tokens, num_experts, &gate);
  const detail::TopkGatingArgs a{logits, dtype, gate.correction_bias, topk_ids, topk_weights};
  detail::check_topk_gating_args(s, a);
  if (num_tokens == 0) return;
  detail::reference_topk_gating(s, a);
}

float exp_f32(float x) noexcept { return numeric::exp_f32(x); }
float sigmoid_f32(float x) noexcept { return numeric::sigmoid_f32(x); }

}  // namespace reference
}  // namespace moe

extern "C" {

moe_status_t moe_topk_gating(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
                             const moe_gate_t* gate, int32_t* topk_ids, float* topk_weights, void* stream) {
  return moe::detail::guarded([&] {
    if (gate == nullptr) moe::detail::throw_invalid("gate is NULL");
    moe::topk_gating(logits, dtype, num_tokens, num_experts, *gate, topk_ids, topk_weights, stream);
  });
}

}  // extern "C"
