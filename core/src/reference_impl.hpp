// The reference algorithms without argument checks, for the CPU backend (whose arguments the public API has
// already checked). moe::reference:: in reference.hpp is the checked public face of the same code.
#pragma once

#include "contract.hpp"

namespace moe {
namespace detail {

std::size_t reference_align_workspace_size(const AlignShape& shape);  // an int32 per expert; 0 for numel 0
void reference_align(const AlignShape& shape, const AlignArgs& args);
void reference_sum(const SumShape& shape, const void* input, moe_dtype_t dtype, void* output);

}  // namespace detail
}  // namespace moe
