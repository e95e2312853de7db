// moe_route: gating then align_ep, composed on one stream (see route.hpp); the public entries (C++, reference, C).
#include "ops/route.hpp"

#include <initializer_list>
#include <string>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"

namespace moe {
namespace detail {

namespace {
// The align part of the workspace starts on the alignment every backend operation asks of its workspace.
std::size_t round_up(std::size_t n) { return (n + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

struct RouteCall {
  RouteShape shape;
  TopkGatingArgs gating;
  AlignEpArgs align;
};

// Shapes, arguments and their checks, for a workspace requirement given by `gating_ws` / `align_ws`.
template <class GatingWs, class AlignWs>
RouteCall make_call(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
                    const moe_gate_t* gate, const std::int32_t* expert_map, std::int32_t num_local_experts,
                    std::int32_t block_size, std::int32_t* topk_ids, float* topk_weights,
                    std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                    std::int32_t* token_positions, void* workspace, std::size_t workspace_bytes, GatingWs gating_ws,
                    AlignWs align_ws) {
  RouteCall c{make_route_shape(num_tokens, num_experts, gate, num_local_experts, block_size), {}, {}};
  c.shape.align_offset = round_up(gating_ws(c.shape.gating));
  const std::size_t need = c.shape.align_offset + align_ws(c.shape.align);
  if (workspace_bytes < need)
    throw_invalid("workspace_bytes = " + str(static_cast<std::int64_t>(workspace_bytes)) + " is smaller than the " +
                  str(static_cast<std::int64_t>(need)) + " bytes moe_route_workspace_size gives for this shape");
  if (need > 0 && workspace == nullptr)
    throw_invalid("workspace is NULL but this shape needs " + str(static_cast<std::int64_t>(need)) + " bytes");
  c.gating = TopkGatingArgs{logits, dtype, gate->correction_bias, topk_ids, topk_weights};
  check_topk_gating_args(c.shape.gating, c.gating);
  char* ws = static_cast<char*>(workspace);
  c.align = AlignEpArgs{topk_ids,   MOE_INT32,  expert_map,     sorted_token_ids,
                        expert_ids, num_tokens_post_pad, nullptr, token_positions,
                        ws == nullptr ? nullptr : ws + c.shape.align_offset, workspace_bytes - c.shape.align_offset};
  check_align_ep_args(c.shape.align, c.align, align_ws(c.shape.align));
  const AlignEpShape& s = c.shape.align;
  const std::size_t n = static_cast<std::size_t>(s.numel) * 4u;
  const std::size_t in_bytes = static_cast<std::size_t>(num_tokens) * static_cast<std::size_t>(num_experts) *
                               (is_value_type(dtype) ? dtype_size(dtype) : 0u);
  // The overlaps neither part's own checks sees: align's outputs and the whole workspace against gating's
  // inputs and weights (the ids are align's input, written by gating: they are checked by gating against these).
  check_outputs_apart({{sorted_token_ids, static_cast<std::size_t>(s.max_padded) * 4u, "sorted_token_ids"},
                       {expert_ids, static_cast<std::size_t>(s.max_blocks) * 4u, "expert_ids"},
                       {num_tokens_post_pad, 4u, "num_tokens_post_pad"},
                       {token_positions, n, "token_positions"},
                       {workspace, workspace_bytes, "workspace"}},
                      {{logits, in_bytes, "logits"},
                       {gate->correction_bias, static_cast<std::size_t>(num_experts) * 4u, "gate->correction_bias"},
                       {topk_weights, n, "topk_weights"}});
  check_outputs_apart({{topk_weights, n, "topk_weights"}},
                      {{expert_map, static_cast<std::size_t>(num_experts) * 4u, "expert_map"}});
  return c;
}
}  // namespace

RouteShape make_route_shape(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t* gate,
                            std::int32_t num_local_experts, std::int32_t block_size) {
  const TopkGatingShape g = make_topk_gating_shape(num_tokens, num_experts, gate);
  if (num_tokens > kMaxNumel / g.topk)
    throw_invalid("num_tokens * topk must be < 2^31 (the ids moe_align_block_size_ep groups), got " +
                  str(num_tokens) + " x " + str(g.topk));
  return RouteShape{g, make_align_ep_shape(num_tokens * g.topk, num_experts, num_local_experts, block_size), 0};
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
std::size_t route_workspace_size(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t& gate,
                                 std::int32_t num_local_experts, std::int32_t block_size) {
  const detail::RouteShape s = detail::make_route_shape(num_tokens, num_experts, &gate, num_local_experts, block_size);
  return detail::round_up(backend::topk_gating_workspace_size(s.gating)) + backend::align_ep_workspace_size(s.align);
}

void route(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
           const moe_gate_t& gate, const std::int32_t* expert_map, std::int32_t num_local_experts,
           std::int32_t block_size, std::int32_t* topk_ids, float* topk_weights, std::int32_t* sorted_token_ids,
           std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad, std::int32_t* token_positions,
           void* workspace, std::size_t workspace_bytes, void* stream) {
  const auto c = detail::make_call(
      logits, dtype, num_tokens, num_experts, &gate, expert_map, num_local_experts, block_size, topk_ids,
      topk_weights, sorted_token_ids, expert_ids, num_tokens_post_pad, token_positions, workspace, workspace_bytes,
      [](const detail::TopkGatingShape& s) { return backend::topk_gating_workspace_size(s); },
      [](const detail::AlignEpShape& s) { return backend::align_ep_workspace_size(s); });
  if (num_tokens > 0) backend::topk_gating(c.shape.gating, c.gating, stream);
  backend::align_ep(c.shape.align, c.align, stream);  // numel 0 too: num_tokens_post_pad = 0
}

namespace reference {

std::size_t route_workspace_size(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t& gate,
                                 std::int32_t num_local_experts, std::int32_t block_size) {
  const detail::RouteShape s = detail::make_route_shape(num_tokens, num_experts, &gate, num_local_experts, block_size);
  return detail::round_up(detail::reference_topk_gating_workspace_size(s.gating)) +
         detail::reference_align_ep_workspace_size(s.align);
}

void route(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
           const moe_gate_t& gate, const std::int32_t* expert_map, std::int32_t num_local_experts,
           std::int32_t block_size, std::int32_t* topk_ids, float* topk_weights, std::int32_t* sorted_token_ids,
           std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad, std::int32_t* token_positions,
           void* workspace, std::size_t workspace_bytes) {
  const auto c = detail::make_call(
      logits, dtype, num_tokens, num_experts, &gate, expert_map, num_local_experts, block_size, topk_ids,
      topk_weights, sorted_token_ids, expert_ids, num_tokens_post_pad, token_positions, workspace, workspace_bytes,
      [](const detail::TopkGatingShape& s) { return detail::reference_topk_gating_workspace_size(s); },
      [](const detail::AlignEpShape& s) { return detail::reference_align_ep_workspace_size(s); });
  if (num_tokens > 0) detail::reference_topk_gating(c.shape.gating, c.gating);
  detail::reference_align_ep(c.shape.align, c.align);
}

}  // namespace reference
}  // namespace moe

extern "C" {

moe_status_t moe_route_workspace_size(int64_t num_tokens, int32_t num_experts, const moe_gate_t* gate,
                                      int32_t num_local_experts, int32_t block_size, size_t* bytes) {
  return moe::detail::guarded_size(bytes, [&] {
    if (gate == nullptr) moe::detail::throw_invalid("gate is NULL");
    return moe::route_workspace_size(num_tokens, num_experts, *gate, num_local_experts, block_size);
  });
}

moe_status_t moe_route(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
                       const moe_gate_t* gate, const int32_t* expert_map, int32_t num_local_experts,
                       int32_t block_size, int32_t* topk_ids, float* topk_weights, int32_t* sorted_token_ids,
                       int32_t* expert_ids, int32_t* num_tokens_post_pad, int32_t* token_positions, void* workspace,
                       size_t workspace_bytes, void* stream) {
  return moe::detail::guarded([&] {
    if (gate == nullptr) moe::detail::throw_invalid("gate is NULL");
    moe::route(logits, dtype, num_tokens, num_experts, *gate, expert_map, num_local_experts, block_size, topk_ids,
               topk_weights, sorted_token_ids, expert_ids, num_tokens_post_pad, token_positions, workspace,
               workspace_bytes, stream);
  });
}

}  // extern "C"
