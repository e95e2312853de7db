// The C boundary for the calls that are not operations (backend, errors, memory); each operation's C entries
// are in ops/<op>.cpp. Every entry goes through detail::guarded (c_boundary.hpp).
#include "c_boundary.hpp"
#include "moe/routing.h"
#include "moe/routing.hpp"

namespace moe {
namespace detail {
std::string& last_error_text() {
  thread_local std::string text;
  return text;
}
}  // namespace detail
}  // namespace moe

using moe::detail::guarded;

extern "C" {

const char* moe_backend_name(void) { return moe::backend_name(); }

const char* moe_status_string(moe_status_t s) {
  switch (s) {
    case MOE_SUCCESS: return "success";
    case MOE_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case MOE_ERROR_UNSUPPORTED: return "unsupported";
    case MOE_ERROR_BACKEND: return "backend error";
    default: return "unknown status";  // any other int (routing.h: every int32 is a moe_status_t value)
  }
}

const char* moe_last_error(void) { return moe::detail::last_error_text().c_str(); }

moe_status_t moe_backend_check(void) { return guarded([] { moe::check_backend(); }); }

moe_status_t moe_malloc(void** ptr, size_t bytes) {
  return guarded([&] {
    if (ptr == nullptr) throw moe::Error(MOE_ERROR_INVALID_ARGUMENT, "ptr is NULL");
    *ptr = nullptr;
    *ptr = moe::malloc(bytes);
  });
}
moe_status_t moe_free(void* ptr) { return guarded([&] { moe::free(ptr); }); }
moe_status_t moe_memcpy_to_device(void* dst, const void* src, size_t bytes) {
  return guarded([&] { moe::copy_to_device(dst, src, bytes); });
}
moe_status_t moe_memcpy_to_host(void* dst, const void* src, size_t bytes) {
  return guarded([&] { moe::copy_to_host(dst, src, bytes); });
}
moe_status_t moe_synchronize(void* stream) { return guarded([&] { moe::synchronize(stream); }); }

}  // extern "C"
