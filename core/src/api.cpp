// The public C++ API: check the arguments against the contract, then hand over to the one linked backend.
#include <cstdint>
#include <string>

#include "backend.hpp"
#include "contract.hpp"
#include "moe/routing.hpp"

namespace moe {

const char* backend_name() noexcept { return backend::name(); }

void check_backend() {
  const std::string why = backend::unavailable_reason();
  if (!why.empty()) detail::throw_backend(std::string(backend::name()) + " backend cannot run here: " + why);
}

void* malloc(std::size_t bytes) {
  // Checked here, once for every backend: rounding up (CPU) or adding a header (Kokkos) must never wrap.
  if (bytes > static_cast<std::size_t>(PTRDIFF_MAX))
    detail::throw_invalid("bytes = " + std::to_string(bytes) +
                          " exceeds PTRDIFF_MAX: no allocation can be that large (a size computed from -1?)");
  return bytes == 0 ? nullptr : backend::allocate(bytes);
}
void free(void* ptr) noexcept {
  if (ptr != nullptr) backend::deallocate(ptr);
}

namespace {
void check_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) detail::throw_invalid("memcpy with a NULL pointer");
}
}  // namespace

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  check_copy(dst, src, bytes);
  if (bytes > 0) backend::copy_to_device(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  check_copy(dst, src, bytes);
  if (bytes > 0) backend::copy_to_host(dst, src, bytes);
}
void synchronize(void* stream) { backend::synchronize(stream); }

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
  backend::align_block_size(s, a, stream);
}

void sum(const void* input, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
         void* output, void* stream) {
  const detail::SumShape s{num_tokens, topk, hidden};
  detail::check_sum_args(s, input, dtype, output);
  if (num_tokens * hidden == 0) return;
  backend::sum(s, input, dtype, output, stream);
}

}  // namespace moe
