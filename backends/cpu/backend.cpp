// CPU backend: host memory, and the reference algorithms themselves. The `stream` argument is ignored.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend.hpp"
#include "paths.hpp"

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

// Every operation is its reference (ops/<op>.hpp): nothing to write here when an operation is added.
#define MOE_CPU_OPERATION(op, Op)                                                                             \
  std::size_t op##_workspace_size(const detail::Op##Shape& s) { return detail::reference_##op##_workspace_size(s); } \
  void op(const detail::Op##Shape& s, const detail::Op##Args& a, void*) { detail::reference_##op(s, a); }
MOE_OPERATIONS(MOE_CPU_OPERATION)
#undef MOE_CPU_OPERATION

// One path: the reference itself.
std::vector<std::string> align_paths(const detail::AlignShape&, moe_dtype_t) { return {"reference"}; }

}  // namespace backend
}  // namespace moe
