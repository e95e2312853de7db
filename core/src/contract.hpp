// The contract of every routing call, in one place: argument checks (with the texts users see) and the
// capacity arithmetic. The public API checks arguments here before any backend runs, so backends may assume
// valid shapes and never re-check.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/routing.hpp"

namespace moe {
namespace detail {

constexpr std::int64_t kMaxNumel = (std::int64_t{1} << 31) - 1;  // numel < 2^31
constexpr std::int32_t kMaxExperts = 65536;

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

struct SumShape {
  std::int64_t num_tokens;
  std::int32_t topk;
  std::int64_t hidden;
};

// Checks shape, dtype, pointers and overlap of a moe_sum call.
void check_sum_args(const SumShape& shape, const void* input, moe_dtype_t dtype, const void* output);

bool is_id_type(moe_dtype_t t) noexcept;
bool is_value_type(moe_dtype_t t) noexcept;
bool is_known_dtype(moe_dtype_t t) noexcept;

[[noreturn]] void throw_invalid(const std::string& what);
[[noreturn]] void throw_backend(const std::string& what);

}  // namespace detail
}  // namespace moe
