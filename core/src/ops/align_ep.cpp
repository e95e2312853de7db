// align_block_size_ep: shape and argument checks, the reference, and the public entries (C++, reference, C).
#include "ops/align_ep.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "dispatch.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"
#include "ops/reference_grouping.hpp"

namespace moe {
namespace detail {

AlignEpShape make_align_ep_shape(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local_experts,
                                 std::int32_t block_size) {
  if (num_experts < 1 || num_experts > kMaxExperts)
    throw_invalid("num_experts must be in [1, 65536], got " + str(num_experts));
  if (num_local_experts < 1 || num_local_experts > kMaxExperts)
    throw_invalid("num_local_experts must be in [1, 65536], got " + str(num_local_experts));
  // numel, block_size and the INT32_MAX bound of the padded length: as moe_align_block_size with the local
  // experts as its groups
  const AlignShape local = make_align_shape(numel, num_local_experts, block_size);
  return AlignEpShape{numel, num_experts, num_local_experts, block_size, local.max_padded, local.max_blocks};
}

AlignShape local_align_shape(const AlignEpShape& s) {
  return AlignShape{s.numel, s.num_local_experts, s.block_size, s.max_padded, s.max_blocks};
}

namespace {

std::size_t int32s(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(std::int32_t); }

}  // namespace

void check_align_ep_args(const AlignEpShape& s, const AlignEpArgs& a, std::size_t required_workspace) {
  check_dtype(a.id_type, is_id_type(a.id_type), "id_type", "an integer type (MOE_INT8 ... MOE_INT64)");
  if (a.num_tokens_post_pad == nullptr) throw_invalid("num_tokens_post_pad is NULL");
  if (s.numel > 0) {
    if (a.topk_ids == nullptr) throw_invalid("topk_ids is NULL while numel = " + str(s.numel));
    if (a.sorted_token_ids == nullptr) throw_invalid("sorted_token_ids is NULL while numel = " + str(s.numel));
    if (a.expert_ids == nullptr) throw_invalid("expert_ids is NULL while numel = " + str(s.numel));
  }
  if (a.expert_map == nullptr && s.num_local_experts != s.num_experts)
    throw_invalid("expert_map is NULL (the identity), so num_local_experts (" + str(s.num_local_experts) +
                  ") must equal num_experts (" + str(s.num_experts) + ")");
  if (a.workspace_bytes < required_workspace)
    throw_invalid("workspace_bytes = " + str(static_cast<std::int64_t>(a.workspace_bytes)) +
                  " is smaller than the " + str(static_cast<std::int64_t>(required_workspace)) +
                  " bytes moe_align_workspace_size_ep gives for this shape");
  if (required_workspace > 0 && a.workspace == nullptr)
    throw_invalid("workspace is NULL but this shape needs " + str(static_cast<std::int64_t>(required_workspace)) +
                  " bytes");
  const std::size_t id_bytes = static_cast<std::size_t>(s.numel) * dtype_size(a.id_type);
  check_outputs_apart({{a.sorted_token_ids, int32s(s.max_padded), "sorted_token_ids"},
                       {a.expert_ids, int32s(s.max_blocks), "expert_ids"},
                       {a.num_tokens_post_pad, sizeof(std::int32_t), "num_tokens_post_pad"},
                       {a.expert_counts, int32s(s.num_local_experts), "expert_counts"},
                       {a.token_positions, int32s(s.numel), "token_positions"},
                       {a.workspace, required_workspace, "workspace"}},
                      {{a.topk_ids, id_bytes, "topk_ids"}, {a.expert_map, int32s(s.num_experts), "expert_map"}});
}

// ---- the reference: a counting sort by local index, serial, in the most obvious order ------------------------
namespace {

template <class IdT>
void reference_align_ep_typed(const AlignEpShape& s, const IdT* ids, const AlignEpArgs& a) {
  const std::int32_t E = s.num_experts, L = s.num_local_experts;
  auto local_of = [&](std::int64_t i) -> std::int64_t {  // -1 for a dropped id
    const auto v = static_cast<std::int64_t>(ids[i]);
    if (v < 0 || v >= E) return -1;
    const std::int64_t l = a.expert_map != nullptr ? a.expert_map[v] : v;
    return (l >= 0 && l < L) ? l : -1;
  };
  reference_group_and_pad(s.numel, L, s.block_size, s.max_padded, s.max_blocks, local_of,
                          static_cast<std::int32_t*>(a.workspace),
                          {a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, a.expert_counts,
                           a.token_positions});
}

}  // namespace

std::size_t reference_align_ep_workspace_size(const AlignEpShape& s) {
  return static_cast<std::size_t>(s.num_local_experts) * sizeof(std::int32_t);
}

void reference_align_ep(const AlignEpShape& s, const AlignEpArgs& a) {
  dispatch_id_type(a.id_type, [&](auto tag) {
    reference_align_ep_typed(s, static_cast<const decltype(tag)*>(a.topk_ids), a);
  });
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
std::size_t align_workspace_size_ep(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local_experts,
                                    std::int32_t block_size) {
  return backend::align_ep_workspace_size(
      detail::make_align_ep_shape(numel, num_experts, num_local_experts, block_size));
}

void align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                         const std::int32_t* expert_map, std::int32_t num_local_experts, std::int32_t block_size,
                         std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                         std::int32_t* expert_counts, std::int32_t* token_positions, void* workspace,
                         std::size_t workspace_bytes, void* stream) {
  const detail::AlignEpShape s = detail::make_align_ep_shape(numel, num_experts, num_local_experts, block_size);
  const detail::AlignEpArgs a{topk_ids,      id_type,         expert_map, sorted_token_ids, expert_ids,
                              num_tokens_post_pad, expert_counts, token_positions, workspace, workspace_bytes};
  detail::check_align_ep_args(s, a, backend::align_ep_workspace_size(s));
  backend::align_ep(s, a, stream);  // numel 0 too: num_tokens_post_pad = 0 and the counts are written
}

namespace reference {

std::size_t align_workspace_size_ep(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local_experts,
                                    std::int32_t block_size) {
  return detail::reference_align_ep_workspace_size(
      detail::make_align_ep_shape(numel, num_experts, num_local_experts, block_size));
}

void align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                         const std::int32_t* expert_map, std::int32_t num_local_experts, std::int32_t block_size,
                         std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                         std::int32_t* expert_counts, std::int32_t* token_positions, void* workspace,
                         std::size_t workspace_bytes) {
  const detail::AlignEpShape s = detail::make_align_ep_shape(numel, num_experts, num_local_experts, block_size);
  const detail::AlignEpArgs a{topk_ids,      id_type,         expert_map, sorted_token_ids, expert_ids,
                              num_tokens_post_pad, expert_counts, token_positions, workspace, workspace_bytes};
  detail::check_align_ep_args(s, a, detail::reference_align_ep_workspace_size(s));
  detail::reference_align_ep(s, a);
}

}  // namespace reference
}  // namespace moe

using moe::detail::guarded;
using moe::detail::guarded_size;

extern "C" {

moe_status_t moe_align_workspace_size_ep(int64_t numel, int32_t num_experts, int32_t num_local_experts,
                                         int32_t block_size, size_t* bytes) {
  return guarded_size(bytes, [&] {
    return moe::align_workspace_size_ep(numel, num_experts, num_local_experts, block_size);
  });
}

moe_status_t moe_align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, int64_t numel, int32_t num_experts,
                                     const int32_t* expert_map, int32_t num_local_experts, int32_t block_size,
                                     int32_t* sorted_token_ids, int32_t* expert_ids, int32_t* num_tokens_post_pad,
                                     int32_t* expert_counts, int32_t* token_positions, void* workspace,
                                     size_t workspace_bytes, void* stream) {
  return guarded([&] {
    moe::align_block_size_ep(topk_ids, id_type, numel, num_experts, expert_map, num_local_experts, block_size,
                             sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts, token_positions,
                             workspace, workspace_bytes, stream);
  });
}

}  // extern "C"
