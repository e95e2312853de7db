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
  // subtraction (no loop: it would cost registers in the GPU kernels).
  constexpr std::uint32_t kExpMask = 0x7C00u << 13;
  std::uint32_t o = std::uint32_t{h & 0x7FFFu} << 13;
  const std::uint32_t exp = o & kExpMask;
  o += (127u - 15u) << 23;
  if (exp == kExpMask) {
    o += (128u - 16u) << 23;  // inf / NaN: exponent all ones
  } else if (exp == 0) {
    o += 1u << 23;
    o = f32_bits(f32_from_bits(o) - f32_from_bits(113u << 23));
  }
  return f32_from_bits(o | (std::uint32_t{h & 0x8000u} << 16));
}

MOE_HD std::uint16_t f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  // cvt.rn.f16.f32: IEEE round to nearest even, overflow to infinity, subnormals kept: the code below's
  // results, which the tests compare bit for bit. The branchy software form spilled registers in moe_sum.
  return f != f ? kCanonicalNanF16 : __half_as_ushort(__float2half_rn(f));
#endif
  const std::uint32_t u = f32_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t x = u & 0x7FFFFFFFu;
  if (x > 0x7F800000u) return kCanonicalNanF16;
  if (x >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to infinity
  if (x >= 0x38800000u) {                                                 // normal half: rebias, round
    std::uint32_t r = x - (112u << 23);
    r += 0xFFFu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // <= 2^-25: ties to even zero
  // subnormal half: round (mant * 2^(exp-150)) / 2^-24 = mant >> (126 - exp) to nearest even
  const std::uint32_t mant = (x & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - (x >> 23);
  std::uint32_t r = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
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
