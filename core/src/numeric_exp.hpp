// The library's own fp32 exp and sigmoid, written once and compiled for host and device alike: a fixed sequence
// of IEEE fp32 operations (no FMA, no library exp, no vendor intrinsic), so that every backend gives the same
// bits. moe_topk_gating's scores are built from them (routing.h documents the contract).
//
// exp_f32(x):
//   x NaN -> the canonical quiet NaN (0x7FC00000); x > 89 (and +inf) -> +inf; x < -104 (and -inf) -> +0.
//   Otherwise: k = round(x * log2(e)) (round to nearest even, by adding and subtracting 1.5 * 2^23);
//   r = x - k * ln2 in two steps (Cody-Waite): rh = x - k * C1 is exact (C1 = 0x3F317200 has 15 significant
//   bits, |k| <= 150), c = k * C2 (C2 = ln2 - C1, rounded); exp(r) = 1 + (rh + (r*r*q(r) - c)) with r = rh - c and
//   q a degree-5 polynomial (Chebyshev fit of (exp(r) - 1 - r) / r^2 on [-0.35, 0.35], |error| < 1.5e-9, its
//   coefficients rounded to fp32), Horner, each multiply and add rounded separately; then the result is scaled by
//   2^k as (p * 2^k1) * 2^k2 with k1 = floor(k / 2), k2 = k - k1, both normal powers of two built from exponent
//   bits: the first product is exact, the second rounds once, which gives gradual underflow to subnormals and
//   overflow to +inf as IEEE multiplication does.
//   Accuracy, MEASURED exhaustively over all 2^32 fp32 inputs against a correctly rounded exp (tools/exp_ulp.cpp:
//   double exp, long double expl where the double lies near a rounding boundary; 20 inputs needed it, none stayed
//   ambiguous): every result is the correctly rounded float or one of its two neighbours (max distance 1 float);
//   17,974,216 results (0.80 % of the 2.24e9 inputs in [-104, 89]; 0.42 % of all inputs) are the neighbour; the
//   largest error against the exact value is 0.868 ulp (x = -0x1.4caf52p+2). Inputs outside [-104, 89] give
//   exactly +0, +inf or NaN, the correctly rounded results.
// sigmoid_f32(x) = 1 / (1 + exp_f32(-x)): three IEEE operations after exp (negation exact, add, divide).
//   +inf -> 1, -inf -> 0, NaN -> NaN. Measured by the same tool over every x >= -88.72283 (3,274,797,591 inputs):
//   at most 2 floats from the correctly rounded sigmoid (168,117,973 inputs, 5.13 %, differ), within 2.481 ulp of
//   the exact value (x = -0x1.0a2bd8p+4). 35 inputs near 0 (sigmoid = 0.5 + x/4 - ..., within 2^-60 of a midpoint)
//   stayed ambiguous at long double and were settled with mpmath at 60 digits (within 2 floats too). Below
//   -88.72283, exp(-x) overflows and the formula gives +0 exactly (the true value is below 2^-127).
//
// Contraction: the operations go through fmul/fadd/fsub/fdiv below. On NVIDIA devices they are the __f*_rn
// intrinsics, which the compiler never fuses or reorders whatever -fmad says; on clang (HIP, or a clang host
// build) a `#pragma clang fp contract(off)` forbids fusion in the functions here; GCC host builds rely on
// -ffp-contract=off, which the library's CMake passes (cmake/MoEWarnings.cmake). A build that forces FMA
// contraction or fast-math onto these files breaks the bit-exactness contract.
#pragma once

#include <cstdint>

#include "host_device.hpp"
#include "numeric.hpp"

#if defined(__clang__)
#define MOE_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define MOE_NO_CONTRACT
#endif

namespace moe {
namespace numeric {

// Measured max error of exp_f32 against a correctly rounded exp, in units in the last place of the correctly
// rounded result (an integer: how many representable floats apart), over all fp32 inputs; and the largest error
// against the exact real value, in ulp of that value. Written by hand from tools/exp_ulp.cpp's output.
constexpr int kExpUlpBound = 1;

// The rounded fp32 steps (never contracted into an FMA): numeric.hpp's mul_f32, add_f32, sub_f32, and the division.
MOE_HD float div_f32(float a, float b) {
  MOE_NO_CONTRACT
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// 2^n as a float, for n in [-126, 127].
MOE_HD float pow2i(int n) { return f32_from_bits(static_cast<std::uint32_t>(n + 127) << 23); }

MOE_HD float exp_f32(float x) {
  MOE_NO_CONTRACT
  if (is_nan_bits(f32_bits(x))) return f32_from_bits(kCanonicalNanF32);
  if (x > 89.0f) return f32_from_bits(0x7F800000u);  // exp(x) > FLT_MAX (and +inf)
  if (x < -104.0f) return 0.0f;                      // exp(x) < 2^-150 rounds to +0 (and -inf)
  constexpr float kLog2e = 0x1.715476p+0f;  // 0x3FB8AA3B, log2(e) rounded
  constexpr float kRound = 0x1.8p+23f;      // 1.5 * 2^23: (v + kRound) - kRound rounds v to an integer
  constexpr float kLn2Hi = 0x1.62e4p-1f;    // 0x3F317200: 15 significant bits
  constexpr float kLn2Lo = 0x1.7f7d1cp-20f; // 0x35BFBE8E: ln2 - kLn2Hi, rounded
  const float kf = sub_f32(add_f32(mul_f32(x, kLog2e), kRound), kRound);  // |kf| <= 150
  const float rh = sub_f32(x, mul_f32(kf, kLn2Hi));                   // exact
  const float c = mul_f32(kf, kLn2Lo);
  const float r = sub_f32(rh, c);
  float q = 0x1.a12a34p-13f;            // 0x3950951A
  q = add_f32(mul_f32(q, r), 0x1.6d491p-10f);  // 0x3AB6A488
  q = add_f32(mul_f32(q, r), 0x1.1110ep-7f);   // 0x3C088870
  q = add_f32(mul_f32(q, r), 0x1.5554e4p-5f);  // 0x3D2AAA72
  q = add_f32(mul_f32(q, r), 0x1.555556p-3f);  // 0x3E2AAAAB
  q = add_f32(mul_f32(q, r), 0.5f);
  const float y = add_f32(rh, sub_f32(mul_f32(mul_f32(r, r), q), c));
  const float p = add_f32(1.0f, y);
  const int k = static_cast<int>(kf);
  const int k1 = k >= 0 ? k / 2 : -((1 - k) / 2);  // floor(k / 2), written without relying on >> of negatives
  return mul_f32(mul_f32(p, pow2i(k1)), pow2i(k - k1));
}

MOE_HD float sigmoid_f32(float x) {
  MOE_NO_CONTRACT
  return div_f32(1.0f, add_f32(1.0f, exp_f32(-x)));
}

}  // namespace numeric
}  // namespace moe
