// The per-token arithmetic of moe_combine, for the expert-parallel combine: it reduces with moe_combine's own
// combine_slot / combine_out (ops/combine.hpp), so its output is bit-identical to a single-process
// route -> permute -> expert -> moe_combine run.
//
//   acc = 0; for each present k, in order: acc = combine_slot(acc, w_k, x_k)   (fl32(acc + fl32(w_k * x_k)))
//   output = round_to_type(combine_out(acc, scale))                          (NaN canonical: numeric.hpp)
//
// x_k is the slot's value widened exactly to fp32 (ValueTraits::load); w_k is 1 when the caller has no weights.
#pragma once

#include <cstdint>

#include "host_device.hpp"
#include "ops/combine.hpp"

namespace moe {
namespace ep {

// One output element's accumulator. Usage: WeightedSum s; for k in order (present slots only): s.add(w_k, x_k);
// out = Traits::store(s.finish(scale)).
struct WeightedSum {
  float acc = 0.0f;
  MOE_HD void add(float w, float x) { acc = detail::combine_slot(acc, w, x); }
  MOE_HD float finish(float scale) const { return detail::combine_out(acc, scale); }
};

// The whole per-element rule for one output element of one token: slots k = 0..topk-1, slot k present when
// row_of(k) returns a non-null pointer to its row; element h of that row is loaded with Traits. weights: the
// token's [topk] weights or nullptr (1).
template <class Traits, class RowOf>
MOE_HD typename Traits::storage weighted_sum_element(std::int32_t topk, const float* weights, RowOf row_of,
                                                     std::int64_t h, float scale) {
  WeightedSum s;
  for (std::int32_t k = 0; k < topk; ++k) {
    const typename Traits::storage* row = row_of(k);
    if (row == nullptr) continue;
    s.add(weights != nullptr ? weights[k] : 1.0f, Traits::load(row[h]));
  }
  return Traits::store(s.finish(scale));
}

}  // namespace ep
}  // namespace moe
