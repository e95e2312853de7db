// moe_sum in one place: its shape, arguments and checks, and the reference. Entries in sum.cpp; semantics in
// routing.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "contract.hpp"

namespace moe {
namespace detail {

struct SumShape {
  std::int64_t num_tokens;
  std::int32_t topk;
  std::int64_t hidden;
};

struct SumArgs {
  const void* input;
  moe_dtype_t dtype;
  void* output;
};

// Checks shape, dtype, pointers and overlap of a moe_sum call.
void check_sum_args(const SumShape& shape, const SumArgs& args);

std::size_t reference_sum_workspace_size(const SumShape& shape);  // 0
void reference_sum(const SumShape& shape, const SumArgs& args);

}  // namespace detail
}  // namespace moe
