// The buffer rules every operation shares, in one place: the buffers of one call must not overlap, and a
// workspace must be aligned to MOE_WORKSPACE_ALIGNMENT. Each operation lists its buffers with the bytes the
// contract gives them for the call's shape; a failed check throws moe::Error(MOE_ERROR_INVALID_ARGUMENT) naming
// the arguments at fault.
//
//   check_disjoint({{topk_ids, ids_bytes, "topk_ids"}, {sorted, sorted_bytes, "sorted_token_ids"}, ...});
//   check_outputs_apart({{permuted, out_bytes, "permuted"}}, {{hidden, in_bytes, "hidden"}, ...});
//   check_workspace_alignment(workspace, "moe_align_block_size");
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "moe/routing.h"

namespace moe {
namespace detail {

constexpr std::size_t kWorkspaceAlignment = MOE_WORKSPACE_ALIGNMENT;

// One buffer of a call: [ptr, ptr + bytes). A NULL pointer or zero bytes is an empty buffer, which overlaps
// nothing (the NULL checks of each operation come first).
struct BufferRef {
  const void* ptr;
  std::size_t bytes;
  const char* name;  // the argument's name, as routing.h spells it
};

// Bytes of `count` elements of `elem_bytes` each, saturated at SIZE_MAX (a range that long overlaps every
// other non-empty one: no wrap makes two buffers look disjoint). count < 0 counts as 0.
std::size_t span_bytes(std::int64_t count, std::size_t elem_bytes) noexcept;

// Throws if any two non-empty buffers share a byte: "<a> [...] overlaps <b> [...]". Every pair is checked
// (the lists are short: at most a handful of buffers per call). A range that would pass the end of the address
// space is taken to reach it.
void check_disjoint(std::initializer_list<BufferRef> buffers);

// The rule of the operations whose inputs may alias each other (they are only read): throws if an output (or
// the workspace, listed with the outputs) shares a byte with another output or with any input; "<output> [...]
// overlaps <b> [...]".
void check_outputs_apart(std::initializer_list<BufferRef> outputs, std::initializer_list<BufferRef> inputs);

// Throws if `workspace` is not NULL and not a multiple of `alignment` (MOE_WORKSPACE_ALIGNMENT for every
// backend operation; the host reference needs only alignof(int32_t)). `op` names the call in the text. NULL
// is left to the caller's own check (NULL is valid where the required size is 0).
void check_workspace_alignment(const void* workspace, const char* op,
                               std::size_t alignment = kWorkspaceAlignment);

}  // namespace detail
}  // namespace moe
