// align_block_size in one place: its shape (checked, with the capacities), its arguments and their checks, and
// the reference algorithm. The public entries (C++, reference, C) are in align.cpp; semantics in routing.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract.hpp"

namespace moe {
namespace detail {

// A checked align shape with its capacities (sorted_token_ids and expert_ids lengths).
struct AlignShape {
  std::int64_t numel;
  std::int32_t num_experts;
  std::int32_t block_size;
  std::int64_t max_padded;  // numel + min(numel, num_experts) * (block_size - 1)
  std::int64_t max_blocks;  // ceil(max_padded / block_size)
};

// Throws moe::Error(MOE_ERROR_INVALID_ARGUMENT) naming the argument at fault.
AlignShape make_align_shape(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size);

struct AlignArgs {
  const void* topk_ids;
  moe_dtype_t id_type;
  std::int32_t* sorted_token_ids;
  std::int32_t* expert_ids;
  std::int32_t* num_tokens_post_pad;
  void* workspace;
  std::size_t workspace_bytes;
};

// Checks pointers, the id type and the workspace against `required_workspace` bytes, the workspace's
// alignment (`workspace_alignment`: MOE_WORKSPACE_ALIGNMENT for the backends, alignof(int32_t) for the host
// reference) and that no two buffers overlap (buffers.hpp).
void check_align_args(const AlignShape& shape, const AlignArgs& args, std::size_t required_workspace,
                      std::size_t workspace_alignment = MOE_WORKSPACE_ALIGNMENT);

// The reference (host memory, no checks): one int32 counter per expert of workspace.
std::size_t reference_align_workspace_size(const AlignShape& shape);
void reference_align(const AlignShape& shape, const AlignArgs& args);

}  // namespace detail
}  // namespace moe
