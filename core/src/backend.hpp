// The interface every backend implements, once: declared here, defined in backends/<name>/. Exactly one
// backend is linked into a library build. The public API (api.cpp) checks arguments first, so these
// functions receive valid shapes and non-null pointers where the contract needs them. They throw moe::Error
// (usually MOE_ERROR_BACKEND) on runtime failures.
#pragma once

#include <cstddef>
#include <string>

#include "contract.hpp"

namespace moe {
namespace backend {

const char* name() noexcept;
// Empty when the backend can run here; otherwise why not (no GPU, driver too old, ...).
std::string unavailable_reason();

void* allocate(std::size_t bytes);
void deallocate(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void synchronize(void* stream);

// Must depend on the shape alone (never on the device), so that a size queried once stays valid.
std::size_t align_workspace_size(const detail::AlignShape& shape);
void align_block_size(const detail::AlignShape& shape, const detail::AlignArgs& args, void* stream);
void sum(const detail::SumShape& shape, const void* input, moe_dtype_t dtype, void* output, void* stream);

}  // namespace backend
}  // namespace moe
