// moe_route: moe_topk_gating then moe_align_block_size_ep in one call, by composition of the two backend
// operations (backend::topk_gating, backend::align_ep) on one stream, with one workspace. Entries in route.cpp;
// semantics in routing.h. Built only where ops/align_ep.hpp exists (CMakeLists.txt): drop that condition once
// align_ep is merged.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/align_ep.hpp"
#include "ops/topk_gating.hpp"

namespace moe {
namespace detail {

struct RouteShape {
  TopkGatingShape gating;
  AlignEpShape align;   // numel = num_tokens * topk over the gating's ids
  std::size_t align_offset;  // where align_ep's part of the workspace starts (gating's part, rounded up)
};

// Throws naming the argument at fault (those of moe_topk_gating, then of moe_align_block_size_ep).
RouteShape make_route_shape(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t* gate,
                            std::int32_t num_local_experts, std::int32_t block_size);

}  // namespace detail
}  // namespace moe
