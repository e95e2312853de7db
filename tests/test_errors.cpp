// Every error path: the status, and a text that names the argument at fault; the C API returns it, the C++
// API throws it. Nothing crashes and nothing is written.
#include <thread>

#include "support.hpp"

using namespace moe_test;

namespace {

struct AlignBuffers {
  explicit AlignBuffers(std::int64_t numel, std::int32_t E, std::int32_t bs)
      : ids(static_cast<std::size_t>(numel)),
        sorted(static_cast<std::size_t>(moe::align_max_padded(numel, E, bs))),
        experts(static_cast<std::size_t>(moe::align_max_blocks(numel, E, bs))),
        post(1),
        ws_bytes(moe::align_workspace_size(numel, E, bs)),
        ws(ws_bytes + 64) {}
  moe::device_buffer<std::int32_t> ids, sorted, experts, post;
  std::size_t ws_bytes;
  moe::device_buffer<unsigned char> ws;
};

}  // namespace

TEST_CASE("errors: align shape arguments") {
  AlignBuffers b(16, 8, 4);
  auto call = [&](std::int64_t numel, std::int32_t E, std::int32_t bs) {
    return moe_align_block_size(b.ids.data(), MOE_INT32, numel, E, bs, b.sorted.data(), b.experts.data(),
                                b.post.data(), b.ws.data(), b.ws.size(), nullptr);
  };
  CHECK_C_ERROR(call(-1, 8, 4), MOE_ERROR_INVALID_ARGUMENT, "numel");
  CHECK_C_ERROR(call(std::int64_t{1} << 31, 8, 4), MOE_ERROR_INVALID_ARGUMENT, "numel");
  CHECK_C_ERROR(call(16, 0, 4), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(16, -3, 4), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(16, 65537, 4), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(16, 8, 0), MOE_ERROR_INVALID_ARGUMENT, "block_size");
  CHECK_C_ERROR(call(16, 8, -64), MOE_ERROR_INVALID_ARGUMENT, "block_size");
  CHECK_C_ERROR(call(1 << 30, 4, 1 << 29), MOE_ERROR_INVALID_ARGUMENT, "INT32_MAX");
  CHECK(moe_align_max_padded(-1, 8, 4) == -1);
  CHECK(std::string(moe_last_error()).find("numel") != std::string::npos);
  CHECK(moe_align_max_blocks(16, 8, 0) == -1);
  CHECK(std::string(moe_last_error()).find("block_size") != std::string::npos);
  std::size_t bytes = 123;
  CHECK_C_ERROR(moe_align_workspace_size(16, 70000, 4, &bytes), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK(bytes == 123);
  CHECK_C_ERROR(moe_align_workspace_size(16, 8, 4, nullptr), MOE_ERROR_INVALID_ARGUMENT, "bytes");
}

TEST_CASE("errors: align pointers, dtype and workspace") {
  AlignBuffers b(16, 8, 4);
  auto call = [&](const void* ids, moe_dtype_t t, std::int32_t* sorted, std::int32_t* experts, std::int32_t* post,
                  void* ws, std::size_t ws_bytes) {
    return moe_align_block_size(ids, t, 16, 8, 4, sorted, experts, post, ws, ws_bytes, nullptr);
  };
  void* ws = b.ws.data();
  const std::size_t wsb = b.ws.size();
  CHECK_C_ERROR(call(nullptr, MOE_INT32, b.sorted.data(), b.experts.data(), b.post.data(), ws, wsb),
                MOE_ERROR_INVALID_ARGUMENT, "topk_ids");
  CHECK_C_ERROR(call(b.ids.data(), MOE_INT32, nullptr, b.experts.data(), b.post.data(), ws, wsb),
                MOE_ERROR_INVALID_ARGUMENT, "sorted_token_ids");
  CHECK_C_ERROR(call(b.ids.data(), MOE_INT32, b.sorted.data(), nullptr, b.post.data(), ws, wsb),
                MOE_ERROR_INVALID_ARGUMENT, "expert_ids");
  CHECK_C_ERROR(call(b.ids.data(), MOE_INT32, b.sorted.data(), b.experts.data(), nullptr, ws, wsb),
                MOE_ERROR_INVALID_ARGUMENT, "num_tokens_post_pad");
  CHECK_C_ERROR(call(b.ids.data(), MOE_FLOAT32, b.sorted.data(), b.experts.data(), b.post.data(), ws, wsb),
                MOE_ERROR_UNSUPPORTED, "id_type");
  CHECK_C_ERROR(call(b.ids.data(), MOE_BFLOAT16, b.sorted.data(), b.experts.data(), b.post.data(), ws, wsb),
                MOE_ERROR_UNSUPPORTED, "id_type");
  CHECK_C_ERROR(call(b.ids.data(), enum_from_int<moe_dtype_t>(42), b.sorted.data(), b.experts.data(), b.post.data(),
                     ws, wsb),
                MOE_ERROR_INVALID_ARGUMENT, "id_type");
  if (b.ws_bytes > 0) {
    CHECK_C_ERROR(call(b.ids.data(), MOE_INT32, b.sorted.data(), b.experts.data(), b.post.data(), ws, b.ws_bytes - 1),
                  MOE_ERROR_INVALID_ARGUMENT, "workspace");
    CHECK_C_ERROR(call(b.ids.data(), MOE_INT32, b.sorted.data(), b.experts.data(), b.post.data(), nullptr, wsb),
                  MOE_ERROR_INVALID_ARGUMENT, "workspace");
  }
  // a workspace that is large enough but for a larger shape is fine; NULL/0 is fine when the size is 0
  CHECK(call(b.ids.data(), MOE_INT32, b.sorted.data(), b.experts.data(), b.post.data(), ws, wsb) == MOE_SUCCESS);
}

TEST_CASE("errors: the workspace of a large shape, on every backend") {
  // Backends that need scratch for large inputs must ask for it: a zero-byte workspace must be refused
  // wherever the size query says more.
  const std::size_t need = moe::align_workspace_size(1 << 22, 65536, 64);
  if (need > 0) {
    try {
      moe::align_block_size(static_cast<const std::int32_t*>(nullptr), 1 << 22, 65536, 64, nullptr, nullptr, nullptr,
                            nullptr, 0);
      FAIL("accepted a NULL everything");
    } catch (const moe::Error& e) {
      CHECK(e.status() == MOE_ERROR_INVALID_ARGUMENT);
    }
  }
}

TEST_CASE("errors: the C++ API throws moe::Error with the status") {
  AlignBuffers b(16, 8, 4);
  try {
    moe::align_block_size(b.ids.data(), 16, 0, 4, b.sorted.data(), b.experts.data(), b.post.data(), b.ws.data(),
                          b.ws.size());
    FAIL("num_experts = 0 accepted");
  } catch (const moe::Error& e) {
    CHECK(e.status() == MOE_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("num_experts") != std::string::npos);
  }
  CHECK_THROWS_AS(moe::align_max_padded(5, 8, 0), moe::Error);
  CHECK_THROWS_AS(moe::sum(static_cast<const float*>(nullptr), 4, 2, 8, static_cast<float*>(nullptr)), moe::Error);
}

TEST_CASE("errors: sum") {
  moe::device_buffer<float> in(4 * 2 * 8), out(4 * 8);
  float* i = in.data();
  float* o = out.data();
  CHECK_C_ERROR(moe_sum(i, MOE_FLOAT32, -1, 2, 8, o, nullptr), MOE_ERROR_INVALID_ARGUMENT, "num_tokens");
  CHECK_C_ERROR(moe_sum(i, MOE_FLOAT32, 4, 0, 8, o, nullptr), MOE_ERROR_INVALID_ARGUMENT, "topk");
  CHECK_C_ERROR(moe_sum(i, MOE_FLOAT32, 4, 2, -8, o, nullptr), MOE_ERROR_INVALID_ARGUMENT, "hidden");
  CHECK_C_ERROR(moe_sum(nullptr, MOE_FLOAT32, 4, 2, 8, o, nullptr), MOE_ERROR_INVALID_ARGUMENT, "input");
  CHECK_C_ERROR(moe_sum(i, MOE_FLOAT32, 4, 2, 8, nullptr, nullptr), MOE_ERROR_INVALID_ARGUMENT, "output");
  CHECK_C_ERROR(moe_sum(i, MOE_INT32, 4, 2, 8, o, nullptr), MOE_ERROR_UNSUPPORTED, "dtype");
  CHECK_C_ERROR(moe_sum(i, enum_from_int<moe_dtype_t>(-1), 4, 2, 8, o, nullptr), MOE_ERROR_INVALID_ARGUMENT, "dtype");
  CHECK_C_ERROR(moe_sum(i, MOE_FLOAT32, 4, 2, 8, i + 8, nullptr), MOE_ERROR_INVALID_ARGUMENT, "overlaps");
  CHECK_C_ERROR(moe_sum(i, MOE_FLOAT32, std::int64_t{1} << 40, 1 << 20, std::int64_t{1} << 20, o, nullptr),
                MOE_ERROR_INVALID_ARGUMENT, "overflows");
  // empty shapes are no-ops, even with NULL pointers
  CHECK(moe_sum(nullptr, MOE_BFLOAT16, 0, 8, 4096, nullptr, nullptr) == MOE_SUCCESS);
  CHECK(moe_sum(nullptr, MOE_FLOAT16, 16, 8, 0, nullptr, nullptr) == MOE_SUCCESS);
}

TEST_CASE("errors: memory helpers") {
  CHECK_C_ERROR(moe_malloc(nullptr, 16), MOE_ERROR_INVALID_ARGUMENT, "ptr");
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(moe_malloc(&p, 0) == MOE_SUCCESS);
  CHECK(p == nullptr);
  CHECK(moe_free(nullptr) == MOE_SUCCESS);
  int host = 0;
  CHECK_C_ERROR(moe_memcpy_to_device(nullptr, &host, 4), MOE_ERROR_INVALID_ARGUMENT, "NULL");
  CHECK_C_ERROR(moe_memcpy_to_host(&host, nullptr, 4), MOE_ERROR_INVALID_ARGUMENT, "NULL");
  CHECK(moe_memcpy_to_host(nullptr, nullptr, 0) == MOE_SUCCESS);
  CHECK(moe_synchronize(nullptr) == MOE_SUCCESS);
}

TEST_CASE("errors: status strings and the last error is per thread") {
  CHECK(std::string(moe_status_string(MOE_SUCCESS)) == "success");
  CHECK(std::string(moe_status_string(MOE_ERROR_INVALID_ARGUMENT)) == "invalid argument");
  CHECK(std::string(moe_status_string(MOE_ERROR_UNSUPPORTED)) == "unsupported");
  CHECK(std::string(moe_status_string(MOE_ERROR_BACKEND)) == "backend error");
  CHECK(std::string(moe_status_string(enum_from_int<moe_status_t>(99))) == "unknown status");
  CHECK(moe_align_max_padded(-5, 1, 1) == -1);
  const std::string here = moe_last_error();
  std::string there = "unset";
  std::thread([&] { there = moe_last_error(); }).join();
  CHECK(there.empty());
  CHECK(here.find("numel") != std::string::npos);
}
