// moe_topk_gating in one place: its shape (the gate's settings, checked), its arguments and their checks, and the
// reference. Entries in topk_gating.cpp; semantics in routing.h; the scalar rules every backend shares in
// gating_rules.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract.hpp"

namespace moe {
namespace detail {

// A checked gating shape: the token and expert counts and the gate's settings (moe_gate_t without its pointer).
struct TopkGatingShape {
  std::int64_t num_tokens;
  std::int32_t num_experts;
  std::int32_t topk;
  moe_score_t score;
  std::int32_t num_groups;   // 1: no grouping
  std::int32_t topk_groups;  // groups kept; num_groups when num_groups == 1
  std::int32_t group_size;   // num_experts / num_groups
  bool renormalize;
  float routed_scaling_factor;
};

// Throws moe::Error(MOE_ERROR_INVALID_ARGUMENT) naming the argument at fault (gate NULL, num_tokens,
// num_experts, gate->score, gate->num_groups, gate->topk_groups, gate->topk).
TopkGatingShape make_topk_gating_shape(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t* gate);

struct TopkGatingArgs {
  const void* logits;
  moe_dtype_t dtype;
  const float* correction_bias;  // [num_experts] or NULL
  std::int32_t* topk_ids;
  float* topk_weights;
};

// Checks the dtype, the pointers and that no output overlaps another buffer.
void check_topk_gating_args(const TopkGatingShape& shape, const TopkGatingArgs& args);

// The reference (host memory, no checks). Needs no workspace.
std::size_t reference_topk_gating_workspace_size(const TopkGatingShape& shape);  // 0
void reference_topk_gating(const TopkGatingShape& shape, const TopkGatingArgs& args);

}  // namespace detail
}  // namespace moe
