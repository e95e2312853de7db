// CPU backend: host memory, and the reference algorithms themselves. The `stream` argument is ignored.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend.hpp"
#include "paths.hpp"
#include "reference_impl.hpp"

namespace moe {
namespace backend {

const char* name() noexcept { return "cpu"; }
std::string unavailable_reason() { return {}; }

void* allocate(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;  // a cache line; also what vector loads of any width want
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
  // a forced path must apply (paths.hpp): align_path throws where it does not
  if (detail::forced_path(detail::kAlignOperation) != nullptr) (void)detail::align_path(s, a.id_type);
  detail::reference_align(s, a);
}
std::vector<std::string> align_paths(const detail::AlignShape&, moe_dtype_t) { return {"reference"}; }
void sum(const detail::SumShape& s, const void* input, moe_dtype_t dtype, void* output, void*) {
  detail::reference_sum(s, input, dtype, output);
}

}  // namespace backend
}  // namespace moe
