// align_block_size_ep (expert parallelism) in one place: its shape (checked, with the capacities of the LOCAL
// grouping), its arguments and their checks, and the reference. The public entries (C++, reference, C) are in
// align_ep.cpp; semantics in routing.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract.hpp"
#include "ops/align.hpp"

namespace moe {
namespace detail {

// A checked shape. Ids are grouped by local index: the capacities are those of moe_align_block_size with
// num_local_experts groups (moe_align_max_padded/_blocks(numel, num_local_experts, block_size)).
struct AlignEpShape {
  std::int64_t numel;
  std::int32_t num_experts;        // global: ids in [0, num_experts) are looked up in expert_map
  std::int32_t num_local_experts;  // the groups: map entries in [0, num_local_experts) keep an id
  std::int32_t block_size;
  std::int64_t max_padded;  // numel + min(numel, num_local_experts) * (block_size - 1)
  std::int64_t max_blocks;  // ceil(max_padded / block_size)
};

// Throws moe::Error(MOE_ERROR_INVALID_ARGUMENT) naming the argument at fault.
AlignEpShape make_align_ep_shape(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local_experts,
                                 std::int32_t block_size);

// The plain align shape of the local grouping: what a backend composing align_ep from align runs on mapped ids.
AlignShape local_align_shape(const AlignEpShape& shape);

struct AlignEpArgs {
  const void* topk_ids;
  moe_dtype_t id_type;
  const std::int32_t* expert_map;  // [num_experts] or NULL (the identity); never read on the host
  std::int32_t* sorted_token_ids;
  std::int32_t* expert_ids;
  std::int32_t* num_tokens_post_pad;
  std::int32_t* expert_counts;    // [num_local_experts] or NULL
  std::int32_t* token_positions;  // [numel] or NULL
  void* workspace;
  std::size_t workspace_bytes;
};

// Checks pointers, the id type, the identity map's condition, overlaps and the workspace against
// `required_workspace` bytes. Reads no buffer (they may be in device memory).
void check_align_ep_args(const AlignEpShape& shape, const AlignEpArgs& args, std::size_t required_workspace);

// The reference (host memory, no checks): one int32 counter per local expert of workspace.
std::size_t reference_align_ep_workspace_size(const AlignEpShape& shape);
void reference_align_ep(const AlignEpShape& shape, const AlignEpArgs& args);

}  // namespace detail
}  // namespace moe
