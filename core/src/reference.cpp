// The scalar rules of moe_sum as public reference functions (moe/reference.hpp). The reference algorithms
// themselves live with their operations, in ops/<op>.cpp.
#include "moe/reference.hpp"

#include "numeric.hpp"

namespace moe {
namespace reference {

float half_to_float(half_t h) noexcept { return numeric::f16_to_f32(h.bits); }
float bfloat16_to_float(bfloat16_t b) noexcept { return numeric::bf16_to_f32(b.bits); }
half_t float_to_half(float f) noexcept { return half_t{numeric::f32_to_f16(f)}; }
bfloat16_t float_to_bfloat16(float f) noexcept { return bfloat16_t{numeric::f32_to_bf16(f)}; }

}  // namespace reference
}  // namespace moe
