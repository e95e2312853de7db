// The public C++ API for the calls that are not operations (backend, memory); each operation's entries are in
// ops/<op>.cpp.
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

}  // namespace moe
