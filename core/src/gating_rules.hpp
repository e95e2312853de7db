// The scalar rules of moe_topk_gating, written once and compiled for host and device alike (the reference in
// ops/topk_gating.cpp, the CUDA/HIP kernels, the Kokkos kernels): the scores, and the one order in which every
// backend ranks experts and groups. Semantics in routing.h.
#pragma once

#include <cstdint>

#include "host_device.hpp"
#include "moe/routing.h"
#include "numeric.hpp"
#include "numeric_exp.hpp"

namespace moe {
namespace gating {

// ---- the order -------------------------------------------------------------------------------------------------
// score_key: a 32-bit image of a selection score that orders like the score, with every NaN below -inf (all NaNs
// equal, whatever their sign or payload) and -0 equal to +0:
//   NaN -> 1; -inf -> 0x007FFFFF; ... ; -0, +0 -> 0x80000000; ... ; +inf -> 0xFF800000.
// 0 is left free: it marks an item that must never be chosen (an expert of a group not kept, a padding slot).
MOE_HD std::uint32_t score_key(float v) {
  std::uint32_t u = numeric::f32_bits(v);
  if (numeric::is_nan_bits(u)) return 1u;
  if (u == 0x80000000u) u = 0u;  // -0 == +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// The score a key stands for (exact inverse for non-NaN scores, -0 read as +0); key 1 -> the canonical NaN.
MOE_HD float score_of_key(std::uint32_t k) {
  if (k <= 1u) return numeric::f32_from_bits(numeric::kCanonicalNanF32);
  return numeric::f32_from_bits((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// order_key: a unique 48-bit key per (score, index), index in [0, 65536): item a comes before item b iff
// order_key(a) > order_key(b), that is iff score_a > score_b, or score_a == score_b and index_a < index_b (with
// NaN below every number and -0 == +0, as score_key). Experts and groups are both ranked by it. 0: never chosen.
MOE_HD std::uint64_t order_key(float score, std::int32_t index) {
  return (std::uint64_t{score_key(score)} << 16) | static_cast<std::uint32_t>(0xFFFF - index);
}
MOE_HD std::int32_t index_of_key(std::uint64_t key) { return 0xFFFF - static_cast<std::int32_t>(key & 0xFFFFu); }
MOE_HD float score_of_order_key(std::uint64_t key) { return score_of_key(static_cast<std::uint32_t>(key >> 16)); }

// The larger of two keys, and the top two of a group kept as a pair (first >= second).
MOE_HD std::uint64_t max_key(std::uint64_t a, std::uint64_t b) { return a > b ? a : b; }
struct Top2 {
  std::uint64_t first, second;
};
MOE_HD Top2 top2_insert(Top2 t, std::uint64_t k) {
  if (k > t.first) return Top2{k, t.first};
  if (k > t.second) return Top2{t.first, k};
  return t;
}
MOE_HD Top2 top2_merge(Top2 a, Top2 b) {
  const std::uint64_t first = max_key(a.first, b.first);
  const std::uint64_t lo = a.first > b.first ? b.first : a.first;
  return Top2{first, max_key(lo, max_key(a.second, b.second))};
}
// The same on 32-bit score keys (the two largest values, equal values allowed): what a group's score needs.
struct Top2Keys {
  std::uint32_t first, second;
};
MOE_HD Top2Keys top2_insert(Top2Keys t, std::uint32_t k) {
  if (k > t.first) return Top2Keys{k, t.first};
  if (k > t.second) return Top2Keys{t.first, k};
  return t;
}
MOE_HD Top2Keys top2_merge(Top2Keys a, Top2Keys b) {
  const std::uint32_t first = a.first > b.first ? a.first : b.first;
  const std::uint32_t lo = a.first > b.first ? b.first : a.first;
  const std::uint32_t second = a.second > b.second ? a.second : b.second;
  return Top2Keys{first, lo > second ? lo : second};
}
MOE_HD float group_score(Top2Keys t, std::int32_t group_size) {
  const float b1 = score_of_key(t.first);
  return group_size == 1 ? b1 : numeric::add_f32(b1, score_of_key(t.second));
}

// A group's score from the keys of its two best experts: the sum of their selection scores (the one score when
// the group has one expert). Reading the scores back from keys turns a -0 into +0, which changes no sum's key.
MOE_HD float group_score(Top2 t, std::int32_t group_size) {
  const float b1 = score_of_order_key(t.first);
  return group_size == 1 ? b1 : numeric::add_f32(b1, score_of_order_key(t.second));
}

// ---- scores ----------------------------------------------------------------------------------------------------
// The maximum of a softmax, from the max of score_key over the logits (exact, any reduction order): the largest
// logit (+0 for a zero), NaN only when every logit is NaN.
MOE_HD float softmax_max(std::uint32_t max_score_key) { return score_of_key(max_score_key); }
// exp(l - m) of a softmax term.
MOE_HD float softmax_term(float l, float m) { return numeric::exp_f32(numeric::sub_f32(l, m)); }

// s_e of a logit: SOFTMAX exp(l - m) / sum, SIGMOID 1 / (1 + exp(-l)), SOFTMAX_TOPK the logit itself.
MOE_HD float score_of(moe_score_t score, float l, float m, float sum) {
  if (score == MOE_SCORE_SOFTMAX) return numeric::div_f32(softmax_term(l, m), sum);
  if (score == MOE_SCORE_SIGMOID) return numeric::sigmoid_f32(l);
  return l;
}
// b_e: the score plus the correction bias (none: the score itself).
MOE_HD float selection_of(float s, const float* bias, std::int32_t e) { return bias ? numeric::add_f32(s, bias[e]) : s; }

// ---- weights ---------------------------------------------------------------------------------------------------
// Step 4 in one thread, for the reference and the host forms: v[0, K), the chosen experts' scores (SOFTMAX_TOPK:
// their logits) in the written order, to the written weights' bits: softmax over them (SOFTMAX_TOPK), divided by
// their sum (renormalize), times scale, NaN canonical. Sums in r order.
MOE_HD void finish_weights(float* v, std::int32_t K, moe_score_t score, bool renormalize, float scale,
                           std::uint32_t* bits) {
  if (score == MOE_SCORE_SOFTMAX_TOPK) {
    std::uint32_t mk = 0;
    for (std::int32_t r = 0; r < K; ++r) {
      const std::uint32_t k = score_key(v[r]);
      mk = k > mk ? k : mk;
    }
    const float mt = softmax_max(mk);
    float st = 0.0f;
    for (std::int32_t r = 0; r < K; ++r) st = numeric::add_f32(st, softmax_term(v[r], mt));
    for (std::int32_t r = 0; r < K; ++r) v[r] = numeric::div_f32(softmax_term(v[r], mt), st);
  }
  if (renormalize) {
    float total = 0.0f;
    for (std::int32_t r = 0; r < K; ++r) total = numeric::add_f32(total, v[r]);
    for (std::int32_t r = 0; r < K; ++r) v[r] = numeric::div_f32(v[r], total);
  }
  for (std::int32_t r = 0; r < K; ++r) bits[r] = numeric::f32_out_bits(numeric::mul_f32(v[r], scale));
}

}  // namespace gating
}  // namespace moe
