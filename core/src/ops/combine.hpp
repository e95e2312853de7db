// moe_combine in one place: its shape, arguments and checks, and the reference, with the per-element rule every
// backend compiles (combine_slot / combine_out). Entries in combine.cpp; semantics in routing.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract.hpp"
#include "host_device.hpp"
#include "numeric.hpp"

namespace moe {
namespace detail {

struct CombineShape {
  std::int64_t num_tokens;
  std::int32_t topk;
  std::int64_t hidden;
  std::int64_t numel() const { return num_tokens * topk; }
};

// Throws moe::Error naming the argument at fault (dtype, sizes, overflow).
CombineShape make_combine_shape(moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden);

struct CombineArgs {
  const void* rows;
  moe_dtype_t dtype;
  moe_rows_layout_t layout;
  const std::int32_t* token_positions;  // NULL: MOE_ROWS_FLAT with every slot present
  const float* topk_weights;            // NULL: weights of 1
  float scale;
  void* output;
};

// Layout, pointers and overlap.
void check_combine_args(const CombineShape& shape, const CombineArgs& args);

inline bool combine_is_empty(const CombineShape& s) { return s.num_tokens == 0 || s.hidden == 0; }

// The row of slot i = t * topk + k, or -1 when the slot is absent: one rule for every backend.
MOE_HD std::int64_t combine_row(std::int64_t i, const std::int32_t* positions, bool permuted_layout) {
  if (positions == nullptr) return i;  // MOE_ROWS_FLAT, every slot present (checked: PERMUTED has positions)
  const std::int32_t p = positions[i];
  if (p < 0) return -1;
  return permuted_layout ? p : i;
}
// One present slot: acc = fl32(acc + fl32(w * x)); never an FMA (numeric.hpp).
MOE_HD float combine_slot(float acc, float w, float x) { return numeric::add_f32(acc, numeric::mul_f32(w, x)); }
// The result before rounding to the type: fl32(acc * scale).
MOE_HD float combine_out(float acc, float scale) { return numeric::mul_f32(acc, scale); }

std::size_t reference_combine_workspace_size(const CombineShape& shape);  // 0
void reference_combine(const CombineShape& shape, const CombineArgs& args);

}  // namespace detail
}  // namespace moe
