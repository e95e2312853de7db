// The C boundary: a thin wrapper over the C++ API that turns every exception into a status and a
// thread-local text. Nothing escapes.
#include <exception>
#include <new>
#include <string>

#include "moe/routing.h"
#include "moe/routing.hpp"

namespace {

thread_local std::string last_error;

template <class F>
moe_status_t guarded(F&& f) noexcept {
  try {
    f();
    return MOE_SUCCESS;
  } catch (const moe::Error& e) {
    last_error = e.what();
    return e.status();
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return MOE_ERROR_BACKEND;
  } catch (const std::exception& e) {
    last_error = e.what();
    return MOE_ERROR_BACKEND;
  } catch (...) {
    last_error = "unknown exception";
    return MOE_ERROR_BACKEND;
  }
}

// For the two calls that answer a number: -1 and the text on failure.
template <class F>
int64_t guarded_value(F&& f) noexcept {
  int64_t v = -1;
  guarded([&] { v = f(); });
  return v;
}

}  // namespace

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

const char* moe_last_error(void) { return last_error.c_str(); }

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

int64_t moe_align_max_padded(int64_t numel, int32_t num_experts, int32_t block_size) {
  return guarded_value([&] { return moe::align_max_padded(numel, num_experts, block_size); });
}
int64_t moe_align_max_blocks(int64_t numel, int32_t num_experts, int32_t block_size) {
  return guarded_value([&] { return moe::align_max_blocks(numel, num_experts, block_size); });
}
moe_status_t moe_align_workspace_size(int64_t numel, int32_t num_experts, int32_t block_size, size_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) throw moe::Error(MOE_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    *bytes = moe::align_workspace_size(numel, num_experts, block_size);
  });
}

moe_status_t moe_align_block_size(const void* topk_ids, moe_dtype_t id_type, int64_t numel, int32_t num_experts,
                                  int32_t block_size, int32_t* sorted_token_ids, int32_t* expert_ids,
                                  int32_t* num_tokens_post_pad, void* workspace, size_t workspace_bytes,
                                  void* stream) {
  return guarded([&] {
    moe::align_block_size(topk_ids, id_type, numel, num_experts, block_size, sorted_token_ids, expert_ids,
                          num_tokens_post_pad, workspace, workspace_bytes, stream);
  });
}

moe_status_t moe_sum(const void* input, moe_dtype_t dtype, int64_t num_tokens, int32_t topk, int64_t hidden,
                     void* output, void* stream) {
  return guarded([&] { moe::sum(input, dtype, num_tokens, topk, hidden, output, stream); });
}

}  // extern "C"
