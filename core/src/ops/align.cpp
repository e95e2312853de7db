// align_block_size: shape and argument checks, the reference, and the public entries (C++, reference, C).
#include "ops/align.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "backend.hpp"
#include "buffers.hpp"
#include "c_boundary.hpp"
#include "dispatch.hpp"
#include "moe/reference.hpp"
#include "moe/routing.h"
#include "ops/reference_grouping.hpp"
#include "paths.hpp"

namespace moe {
namespace detail {

AlignShape make_align_shape(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  if (numel < 0 || numel > kMaxNumel) throw_invalid("numel must be in [0, 2^31), got " + str(numel));
  if (num_experts < 1 || num_experts > kMaxExperts)
    throw_invalid("num_experts must be in [1, 65536], got " + str(num_experts));
  if (block_size < 1) throw_invalid("block_size must be >= 1, got " + str(block_size));
  AlignShape s{numel, num_experts, block_size, 0, 0};
  const std::int64_t groups = numel < num_experts ? numel : num_experts;
  s.max_padded = numel + groups * (block_size - 1);  // < 2^31 + 2^16 * 2^31: no int64 overflow
  if (s.max_padded > std::numeric_limits<std::int32_t>::max())
    throw_invalid("numel + min(numel, num_experts) * (block_size - 1) = " + str(s.max_padded) +
                  " exceeds INT32_MAX: the padded length would not fit the int32 outputs (block_size " +
                  str(block_size) + " too large for numel " + str(numel) + ")");
  s.max_blocks = (s.max_padded + block_size - 1) / block_size;
  return s;
}

void check_align_args(const AlignShape& s, const AlignArgs& a, std::size_t required_workspace,
                      std::size_t workspace_alignment) {
  check_dtype(a.id_type, is_id_type(a.id_type), "id_type", "an integer type (MOE_INT8 ... MOE_INT64)");
  if (a.num_tokens_post_pad == nullptr) throw_invalid("num_tokens_post_pad is NULL");
  if (s.numel > 0) {
    if (a.topk_ids == nullptr) throw_invalid("topk_ids is NULL while numel = " + str(s.numel));
    if (a.sorted_token_ids == nullptr) throw_invalid("sorted_token_ids is NULL while numel = " + str(s.numel));
    if (a.expert_ids == nullptr) throw_invalid("expert_ids is NULL while numel = " + str(s.numel));
  }
  if (a.workspace_bytes < required_workspace)
    throw_invalid("workspace_bytes = " + str(static_cast<std::int64_t>(a.workspace_bytes)) +
                  " is smaller than the " + str(static_cast<std::int64_t>(required_workspace)) +
                  " bytes moe_align_workspace_size gives for this shape");
  if (required_workspace > 0 && a.workspace == nullptr)
    throw_invalid("workspace is NULL but this shape needs " + str(static_cast<std::int64_t>(required_workspace)) +
                  " bytes");
  check_workspace_alignment(a.workspace, "moe_align_block_size", workspace_alignment);
  check_disjoint({{a.topk_ids, span_bytes(s.numel, dtype_size(a.id_type)), "topk_ids"},
                  {a.sorted_token_ids, span_bytes(s.max_padded, sizeof(std::int32_t)), "sorted_token_ids"},
                  {a.expert_ids, span_bytes(s.max_blocks, sizeof(std::int32_t)), "expert_ids"},
                  {a.num_tokens_post_pad, sizeof(std::int32_t), "num_tokens_post_pad"},
                  {a.workspace, a.workspace_bytes, "workspace"}});
}

// ---- the reference: a counting sort, serial, in the most obvious order ----------------------------------------
namespace {

template <class IdT>
void reference_align_typed(const AlignShape& s, const IdT* ids, const AlignArgs& a) {
  const std::int32_t E = s.num_experts;
  auto expert_of = [&](std::int64_t i) -> std::int64_t {  // -1 for a dropped id
    const auto v = static_cast<std::int64_t>(ids[i]);
    return (v >= 0 && v < E) ? v : -1;
  };
  reference_group_and_pad(s.numel, E, s.block_size, s.max_padded, s.max_blocks, expert_of,
                          static_cast<std::int32_t*>(a.workspace),
                          {a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, nullptr, nullptr});
}

}  // namespace

std::size_t reference_align_workspace_size(const AlignShape& s) {
  if (s.numel == 0) return 0;  // the same rule on every backend: no ids, no scratch
  return static_cast<std::size_t>(s.num_experts) * sizeof(std::int32_t);
}

void reference_align(const AlignShape& s, const AlignArgs& a) {
  if (s.numel == 0) {  // both capacities are 0: only the padded total is written (the workspace may be NULL)
    *a.num_tokens_post_pad = 0;
    return;
  }
  dispatch_id_type(a.id_type, [&](auto tag) {
    reference_align_typed(s, static_cast<const decltype(tag)*>(a.topk_ids), a);
  });
}

}  // namespace detail

// ---- public entries --------------------------------------------------------------------------------------------
std::int64_t align_max_padded(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  return detail::make_align_shape(numel, num_experts, block_size).max_padded;
}
std::int64_t align_max_blocks(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  return detail::make_align_shape(numel, num_experts, block_size).max_blocks;
}
std::size_t align_workspace_size(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  return backend::align_workspace_size(detail::make_align_shape(numel, num_experts, block_size));
}

void align_block_size(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                      std::int32_t block_size, std::int32_t* sorted_token_ids, std::int32_t* expert_ids,
                      std::int32_t* num_tokens_post_pad, void* workspace, std::size_t workspace_bytes,
                      void* stream) {
  const detail::AlignShape s = detail::make_align_shape(numel, num_experts, block_size);
  const detail::AlignArgs a{topk_ids,   id_type,   sorted_token_ids, expert_ids, num_tokens_post_pad,
                            workspace, workspace_bytes};
  detail::check_align_args(s, a, backend::align_workspace_size(s));
  // a forced path (paths.hpp, tests and benchmark only) must apply to this shape: align_path throws where not
  if (detail::forced_path(detail::kAlignOperation) != nullptr) (void)detail::align_path(s, a.id_type);
  backend::align(s, a, stream);  // numel 0 too: num_tokens_post_pad = 0 is written on the stream
}

namespace reference {

std::size_t align_workspace_size(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  return detail::reference_align_workspace_size(detail::make_align_shape(numel, num_experts, block_size));
}

void align_block_size(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                      std::int32_t block_size, std::int32_t* sorted_token_ids, std::int32_t* expert_ids,
                      std::int32_t* num_tokens_post_pad, void* workspace, std::size_t workspace_bytes) {
  const detail::AlignShape s = detail::make_align_shape(numel, num_experts, block_size);
  const detail::AlignArgs a{topk_ids,   id_type,   sorted_token_ids, expert_ids, num_tokens_post_pad,
                            workspace, workspace_bytes};
  detail::check_align_args(s, a, detail::reference_align_workspace_size(s), alignof(std::int32_t));
  detail::reference_align(s, a);
}

}  // namespace reference
}  // namespace moe

using moe::detail::guarded;
using moe::detail::guarded_size;
using moe::detail::guarded_value;

extern "C" {

int64_t moe_align_max_padded(int64_t numel, int32_t num_experts, int32_t block_size) {
  return guarded_value([&] { return moe::align_max_padded(numel, num_experts, block_size); });
}
int64_t moe_align_max_blocks(int64_t numel, int32_t num_experts, int32_t block_size) {
  return guarded_value([&] { return moe::align_max_blocks(numel, num_experts, block_size); });
}
moe_status_t moe_align_workspace_size(int64_t numel, int32_t num_experts, int32_t block_size, size_t* bytes) {
  return guarded_size(bytes, [&] { return moe::align_workspace_size(numel, num_experts, block_size); });
}

moe_status_t moe_align_block_size(const void* topk_ids, moe_dtype_t id_type, int64_t numel, int32_t num_experts,
                                  int32_t block_size, int32_t* sorted_token_ids, int32_t* expert_ids,
                                  int32_t* num_tokens_post_pad, void* workspace, size_t workspace_bytes,
                                  void* stream) {
  return guarded([&] {
    moe::align_block_size(topk_ids, id_type, numel, num_experts, block_size, sorted_token_ids, expert_ids,
                          num_tokens_post_pad, workspace, workspace_bytes, stream);
  });
}

}  // extern "C"
