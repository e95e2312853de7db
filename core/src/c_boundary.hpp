// The C boundary's one rule, used by every C entry (c_api.cpp and each ops/<op>.cpp): run the C++ call, turn
// any exception into a status and this thread's last-error text. Nothing escapes.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "moe/routing.hpp"

namespace moe {
namespace detail {

std::string& last_error_text();  // this thread's (c_api.cpp)

template <class F>
moe_status_t guarded(F&& f) noexcept {
  try {
    f();
    return MOE_SUCCESS;
  } catch (const moe::Error& e) {
    last_error_text() = e.what();
    return e.status();
  } catch (const std::bad_alloc&) {
    last_error_text() = "out of host memory";
    return MOE_ERROR_BACKEND;
  } catch (const std::exception& e) {
    last_error_text() = e.what();
    return MOE_ERROR_BACKEND;
  } catch (...) {
    last_error_text() = "unknown exception";
    return MOE_ERROR_BACKEND;
  }
}

// For the calls that answer a number: -1 and the text on failure.
template <class F>
std::int64_t guarded_value(F&& f) noexcept {
  std::int64_t v = -1;
  guarded([&] { v = f(); });
  return v;
}

// For the calls that answer a size through a pointer.
template <class F>
moe_status_t guarded_size(std::size_t* bytes, F&& f) noexcept {
  return guarded([&] {
    if (bytes == nullptr) throw Error(MOE_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    *bytes = f();
  });
}

}  // namespace detail
}  // namespace moe
