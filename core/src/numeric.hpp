// The scalar rules of moe_sum, written once and compiled for host and device alike, so that every backend
// produces the same bits: widen to fp32 exactly, accumulate in order, round once to nearest even, and write
// any NaN as the type's canonical quiet NaN (NaN payloads propagate differently on CPUs and GPUs).
#pragma once

#include <cstdint>

#include "host_device.hpp"

#if defined(__CUDACC__) && !defined(__HIPCC__)
#include <cuda_fp16.h>
#endif

namespace moe {
namespace numeric {

constexpr std::uint32_t kCanonicalNanF32 = 0x7FC00000u;
constexpr std::uint16_t kCanonicalNanF16 = 0x7E00u;
constexpr std::uint16_t kCanonicalNanBF16 = 0x7FC0u;

// Bit casts. On the device, the intrinsics: a memcpy there can put the value in local memory (seen as an
// 8-byte stack frame and spills in the fp16 moe_sum kernel).
MOE_HD std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}
MOE_HD float f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}
MOE_HD bool is_nan_bits(std::uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// c ? a : b by masks: compilers keep it a select (a ?: whose operand holds an fp32 op may become a branch, which
// stops a loop's vectorisation)
MOE_HD std::uint32_t select_bits(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}

// The fp32 accumulator written as fp32: only NaN changes.
MOE_HD std::uint32_t f32_out_bits(float acc) {
  const std::uint32_t u = f32_bits(acc);
  return is_nan_bits(u) ? kCanonicalNanF32 : u;
}

MOE_HD float bf16_to_f32(std::uint16_t b) { return f32_from_bits(std::uint32_t{b} << 16); }

MOE_HD std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = f32_bits(f);
  if (is_nan_bits(u)) return kCanonicalNanBF16;
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even; overflow correctly carries into infinity
  return static_cast<std::uint16_t>(u >> 16);
}

MOE_HD float f16_to_f32(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));  // cvt.f32.f16: exact, like the code below (fewer registers)
#endif
  // Exact. Shift exponent and mantissa into place and rebias; subnormals are renormalised by one exact fp32
  // subtraction (no loop: it would cost registers in the GPU kernels). All three forms computed, one selected:
  // no branch, so host loops over halves vectorise (Kokkos host moe_sum: NOTES step 67).
  constexpr std::uint32_t kExpMask = 0x7C00u << 13;
  const std::uint32_t shifted = std::uint32_t{h & 0x7FFFu} << 13;
  const std::uint32_t exp = shifted & kExpMask;
  const std::uint32_t normal = shifted + ((127u - 15u) << 23);
  const std::uint32_t inf_nan = normal + ((128u - 16u) << 23);  // exponent all ones
  const std::uint32_t subnormal = f32_bits(f32_from_bits(normal + (1u << 23)) - f32_from_bits(113u << 23));
  const std::uint32_t o = select_bits(exp == kExpMask, inf_nan, select_bits(exp == 0, subnormal, normal));
  return f32_from_bits(o | (std::uint32_t{h & 0x8000u} << 16));
}

MOE_HD std::uint16_t f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  // cvt.rn.f16.f32: IEEE round to nearest even, overflow to infinity, subnormals kept: the code below's
  // results, which the tests compare bit for bit. The branchy software form spilled registers in moe_sum.
  return f != f ? kCanonicalNanF16 : __half_as_ushort(__float2half_rn(f));
#endif
  // Branch-free (every form computed, one selected by masks), so host loops over halves vectorise.
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t x = u & 0x7FFFFFFFu;
  // normal half (2^-14 <= |f| < 65520): rebias, round to nearest even at bit 13
  const std::uint32_t normal = (x - (112u << 23) + 0xFFFu + ((x >> 13) & 1u)) >> 13;
  // subnormal half or zero (|f| < 2^-14): |f| + 0.5 has an ulp of 2^-24, the half's quantum, so the fp32 add
  // rounds |f| / 2^-24 to the nearest even integer, left in the low mantissa bits (1024, the smallest normal
  // half's bits, where it rounds up into it)
  constexpr std::uint32_t kHalf = 126u << 23;
  const std::uint32_t subnormal = f32_bits(f32_from_bits(x) + f32_from_bits(kHalf)) - kHalf;
  std::uint32_t o = select_bits(x >= 0x38800000u, normal, subnormal);
  o = select_bits(x >= 0x477FF000u, 0x7C00u, o);  // >= 65520 rounds to infinity
  o |= sign;
  return static_cast<std::uint16_t>(select_bits(x > 0x7F800000u, kCanonicalNanF16, o));
}

// fp32 product and sum, each rounded on its own: never fused into an FMA, whatever the compiler's contraction
// default (moe_combine's acc + w * x must give the same bits everywhere). CUDA device code: the _rn intrinsics,
// which nvcc never contracts (the library is built with -fmad=false anyway; a Kokkos-CUDA application may not
// be). Clang (HIP device code, host): contraction off inside the function, so the fmul carries no contract flag
// and cannot be fused after inlining. GCC contracts across statements in C++ unless -ffp-contract=off, which
// cmake/MoEWarnings.cmake sets for every C++ target of the project.
MOE_HD float mul_f32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
#if defined(__clang__) && !defined(__NVCC__)
#pragma clang fp contract(off)
#endif
  return a * b;
#endif
}
MOE_HD float add_f32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
#if defined(__clang__) && !defined(__NVCC__)
#pragma clang fp contract(off)
#endif
  return a + b;
#endif
}
MOE_HD float sub_f32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
#if defined(__clang__) && !defined(__NVCC__)
#pragma clang fp contract(off)
#endif
  return a - b;
#endif
}

// Per-type load/store of the accumulation, so kernels are written once for the three types.
template <class Bits> struct ValueTraits;
struct F32 {};
struct F16 {};
struct BF16 {};
template <> struct ValueTraits<F32> {
  using storage = std::uint32_t;
  static MOE_HD float load(storage s) { return f32_from_bits(s); }
  static MOE_HD storage store(float acc) { return f32_out_bits(acc); }
};
template <> struct ValueTraits<F16> {
  using storage = std::uint16_t;
  static MOE_HD float load(storage s) { return f16_to_f32(s); }
  static MOE_HD storage store(float acc) { return f32_to_f16(acc); }
};
template <> struct ValueTraits<BF16> {
  using storage = std::uint16_t;
  static MOE_HD float load(storage s) { return bf16_to_f32(s); }
  static MOE_HD storage store(float acc) { return f32_to_bf16(acc); }
};

}  // namespace numeric
}  // namespace moe
