// The per-token arithmetic of moe_combine (issue 27), written once for host and device: the expert-parallel
// combine reduces with exactly these operations, so its output is bit-identical to a single-process
// route -> permute -> expert -> moe_combine run. When moe_combine's own shared code lands, point this header at it.
//
//   acc = 0; for each present k, in order: acc = fl32(acc + fl32(w_k * x_k))   (two roundings, never an FMA)
//   output = round_to_type(fl32(acc * scale))                                 (NaN canonical: numeric.hpp)
//
// x_k is the slot's value widened exactly to fp32 (ValueTraits::load); w_k is 1 when the caller has no weights.
// The products and sums are written with explicit round-to-nearest intrinsics on the device (nvcc would contract
// a*b+c into an FMA without -fmad=false); host code is compiled with -ffp-contract=off for the same reason.
#pragma once

#include <cstdint>

#include "host_device.hpp"
#include "numeric.hpp"

namespace moe {
namespace ep {

MOE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MOE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// One output element's accumulator. Usage: WeightedSum s; for k in order (present slots only): s.add(w_k, x_k);
// out = Traits::store(s.finish(scale)).
struct WeightedSum {
  float acc = 0.0f;
  MOE_HD void add(float w, float x) { acc = add_rn(acc, mul_rn(w, x)); }
  MOE_HD float finish(float scale) const { return mul_rn(acc, scale); }
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
