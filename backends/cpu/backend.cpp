// CPU backend: host memory, and the reference algorithms themselves. The `stream` argument is ignored.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend.hpp"
#include "reference_impl.hpp"

namespace moe {
namespace backend {

const char* name() noexcept { return "cpu"; }
std::string unavailable_reason() { return {}; }

void* allocate(std::size_t bytes) {
  // MOE_WORKSPACE_ALIGNMENT (routing.h): every backend's moe_malloc gives it. The public API refuses
  // bytes > PTRDIFF_MAX before this, so the rounding cannot wrap.
  constexpr std::size_t kAlign = MOE_WORKSPACE_ALIGNMENT;
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) throw Error(MOE_ERROR_BACKEND, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}
void deallocate(void* ptr) noexcept { std::free(ptr); }
void copy_to_device(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
void copy_to_host(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
void synchronize(void*) {}

std::size_t align_workspace_size(const detail::AlignShape& s) { return detail::reference_align_workspace_size(s); }
void align_block_size(const detail::AlignShape& s, const detail::AlignArgs& a, void*) {
  detail::reference_align(s, a);
}
void sum(const detail::SumShape& s, const void* input, moe_dtype_t dtype, void* output, void*) {
  detail::reference_sum(s, input, dtype, output);
}

}  // namespace backend
}  // namespace moe
