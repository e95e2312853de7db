// moe-routing: C++ API, the primary interface. Typed, templated on id and value types; every failure throws
// moe::Error carrying the moe_status_t and a text naming the argument at fault. Semantics, shapes, edge cases
// and errors of each call are documented once, in routing.h, next to the C declaration they mirror.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "moe/routing.h"

namespace moe {

class Error : public std::runtime_error {
 public:
  Error(moe_status_t status, const std::string& what) : std::runtime_error(what), status_(status) {}
  moe_status_t status() const noexcept { return status_; }

 private:
  moe_status_t status_;
};

// Storage types for the 16-bit floats: the bits, nothing more. Layout-compatible with __half,
// __nv_bfloat16, hip_bfloat16, Eigen::half, ... (reinterpret_cast pointers to these).
struct half_t {
  std::uint16_t bits;
};
struct bfloat16_t {
  std::uint16_t bits;
};
// The 1-byte floats (OCP FP8 E4M3 / E5M2, e.g. __nv_fp8_e4m3): bits only; moe::permute moves them as bytes.
struct float8_e4m3_t {
  std::uint8_t bits;
};
struct float8_e5m2_t {
  std::uint8_t bits;
};

namespace detail {
// The id dtype of an integer type, by width and signedness. Undefined (an incomplete type) for the unsigned
// types wider than 8 bits: MOE_UINT8 is the C API's only unsigned id type (cast such ids to a signed type).
template <std::size_t Bytes, bool Signed> struct int_dtype;
template <> struct int_dtype<1, true> : std::integral_constant<moe_dtype_t, MOE_INT8> {};
template <> struct int_dtype<1, false> : std::integral_constant<moe_dtype_t, MOE_UINT8> {};
template <> struct int_dtype<2, true> : std::integral_constant<moe_dtype_t, MOE_INT16> {};
template <> struct int_dtype<4, true> : std::integral_constant<moe_dtype_t, MOE_INT32> {};
template <> struct int_dtype<8, true> : std::integral_constant<moe_dtype_t, MOE_INT64> {};
template <class T>
using int_dtype_of = int_dtype<sizeof(T), std::is_signed<T>::value>;
}  // namespace detail

// dtype_of<T>::value: the moe_dtype_t of a C++ type, for the types the library takes. Ids: every standard
// signed integer type (signed char, short, int, long, long long, so every intN_t), plain char and unsigned
// char by their width and signedness. unsigned short/int/long/long long are not id types (no dtype_of).
template <class T> struct dtype_of;
template <> struct dtype_of<char> : detail::int_dtype_of<char> {};
template <> struct dtype_of<signed char> : detail::int_dtype_of<signed char> {};
template <> struct dtype_of<unsigned char> : detail::int_dtype_of<unsigned char> {};
template <> struct dtype_of<short> : detail::int_dtype_of<short> {};
template <> struct dtype_of<int> : detail::int_dtype_of<int> {};
template <> struct dtype_of<long> : detail::int_dtype_of<long> {};
template <> struct dtype_of<long long> : detail::int_dtype_of<long long> {};
template <> struct dtype_of<float> : std::integral_constant<moe_dtype_t, MOE_FLOAT32> {};
template <> struct dtype_of<half_t> : std::integral_constant<moe_dtype_t, MOE_FLOAT16> {};
template <> struct dtype_of<bfloat16_t> : std::integral_constant<moe_dtype_t, MOE_BFLOAT16> {};
template <> struct dtype_of<float8_e4m3_t> : std::integral_constant<moe_dtype_t, MOE_FLOAT8_E4M3> {};
template <> struct dtype_of<float8_e5m2_t> : std::integral_constant<moe_dtype_t, MOE_FLOAT8_E5M2> {};

std::size_t dtype_size(moe_dtype_t dtype);  // bytes of one element; throws for an unknown dtype

const char* backend_name() noexcept;
void check_backend();  // throws moe::Error(MOE_ERROR_BACKEND) with the reason when the backend cannot run here

// Memory of the backend's space (see routing.h).
void* malloc(std::size_t bytes);
void free(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void synchronize(void* stream = nullptr);

std::int64_t align_max_padded(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size);
std::int64_t align_max_blocks(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size);
std::size_t align_workspace_size(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size);

// Type-erased forms (what the C API and the typed templates call).
void align_block_size(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                      std::int32_t block_size, std::int32_t* sorted_token_ids, std::int32_t* expert_ids,
                      std::int32_t* num_tokens_post_pad, void* workspace, std::size_t workspace_bytes,
                      void* stream = nullptr);
void sum(const void* input, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
         void* output, void* stream = nullptr);
void permute(const void* hidden, moe_dtype_t dtype, std::int64_t num_tokens, std::int64_t hidden_size,
             std::int32_t topk, const std::int32_t* sorted_token_ids, const std::int32_t* num_tokens_post_pad,
             std::int64_t max_rows, void* permuted, void* stream = nullptr);
void combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, std::int64_t num_tokens,
             std::int32_t topk, std::int64_t hidden, const std::int32_t* token_positions, const float* topk_weights,
             float scale, void* output, void* stream = nullptr);
void topk_gating(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
                 const moe_gate_t& gate, std::int32_t* topk_ids, float* topk_weights, void* stream = nullptr);
// moe_route (routing.h): gating then align_ep, one workspace. expert_map, token_positions may be NULL.
std::size_t route_workspace_size(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t& gate,
                                 std::int32_t num_local_experts, std::int32_t block_size);
void route(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
           const moe_gate_t& gate, const std::int32_t* expert_map, std::int32_t num_local_experts,
           std::int32_t block_size, std::int32_t* topk_ids, float* topk_weights, std::int32_t* sorted_token_ids,
           std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad, std::int32_t* token_positions,
           void* workspace, std::size_t workspace_bytes, void* stream = nullptr);

// Expert parallelism (routing.h, moe_align_block_size_ep): expert_map, expert_counts and token_positions may be
// NULL.
std::size_t align_workspace_size_ep(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local_experts,
                                    std::int32_t block_size);
void align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                         const std::int32_t* expert_map, std::int32_t num_local_experts, std::int32_t block_size,
                         std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                         std::int32_t* expert_counts, std::int32_t* token_positions, void* workspace,
                         std::size_t workspace_bytes, void* stream = nullptr);

// Typed forms. IdT: any signed integer type of 8 to 64 bits (int8_t ... int64_t, long long, ...) or an unsigned
// 8-bit one. T: float, half_t, bfloat16_t.
template <class IdT>
void align_block_size(const IdT* topk_ids, std::int64_t numel, std::int32_t num_experts, std::int32_t block_size,
                      std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                      void* workspace, std::size_t workspace_bytes, void* stream = nullptr) {
  static_assert(std::is_integral<IdT>::value && !std::is_same<IdT, bool>::value, "topk_ids must be an integer type");
  static_assert(std::is_signed<IdT>::value || sizeof(IdT) == 1,
                "unsigned ids wider than 8 bits are not an id type of the C API (MOE_UINT8 is its only unsigned "
                "one): pass them as the signed type of the same width");
  align_block_size(static_cast<const void*>(topk_ids), dtype_of<IdT>::value, numel, num_experts, block_size,
                   sorted_token_ids, expert_ids, num_tokens_post_pad, workspace, workspace_bytes, stream);
}

template <class IdT>
void align_block_size_ep(const IdT* topk_ids, std::int64_t numel, std::int32_t num_experts,
                         const std::int32_t* expert_map, std::int32_t num_local_experts, std::int32_t block_size,
                         std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                         std::int32_t* expert_counts, std::int32_t* token_positions, void* workspace,
                         std::size_t workspace_bytes, void* stream = nullptr) {
  static_assert(std::is_integral<IdT>::value, "topk_ids must be an integer type");
  align_block_size_ep(static_cast<const void*>(topk_ids), dtype_of<IdT>::value, numel, num_experts, expert_map,
                      num_local_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts,
                      token_positions, workspace, workspace_bytes, stream);
}

template <class T>
void sum(const T* input, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden, T* output,
         void* stream = nullptr) {
  sum(static_cast<const void*>(input), dtype_of<T>::value, num_tokens, topk, hidden, static_cast<void*>(output),
      stream);
}

// T: any type of dtype_of (the 16-bit and fp8 storage types, float, the integer types).
template <class T>
void permute(const T* hidden, std::int64_t num_tokens, std::int64_t hidden_size, std::int32_t topk,
             const std::int32_t* sorted_token_ids, const std::int32_t* num_tokens_post_pad, std::int64_t max_rows,
             T* permuted, void* stream = nullptr) {
  permute(static_cast<const void*>(hidden), dtype_of<T>::value, num_tokens, hidden_size, topk, sorted_token_ids,
          num_tokens_post_pad, max_rows, static_cast<void*>(permuted), stream);
}

// A gate with the given top-k and score and no grouping, bias, renormalisation or scaling; set the other fields
// as the model needs (e.g. DeepSeek-V3: g.num_groups = 8, g.topk_groups = 4, g.correction_bias = bias,
// g.renormalize = 1, g.routed_scaling_factor = 2.5f).
inline moe_gate_t make_gate(std::int32_t topk, moe_score_t score) {
  moe_gate_t g{};
  g.topk = topk;
  g.score = score;
  g.num_groups = 1;
  g.topk_groups = 1;
  g.correction_bias = nullptr;
  g.renormalize = 0;
  g.routed_scaling_factor = 1.0f;
  return g;
}

// T: float, half_t, bfloat16_t.
template <class T>
void combine(const T* rows, moe_rows_layout_t layout, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
             const std::int32_t* token_positions, const float* topk_weights, float scale, T* output,
             void* stream = nullptr) {
  combine(static_cast<const void*>(rows), dtype_of<T>::value, layout, num_tokens, topk, hidden, token_positions,
          topk_weights, scale, static_cast<void*>(output), stream);
}

template <class T>
void topk_gating(const T* logits, std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t& gate,
                 std::int32_t* topk_ids, float* topk_weights, void* stream = nullptr) {
  static_assert(!std::is_integral<T>::value, "logits must be float, half_t or bfloat16_t");
  topk_gating(static_cast<const void*>(logits), dtype_of<T>::value, num_tokens, num_experts, gate, topk_ids,
              topk_weights, stream);
}

// Owning buffer in the backend's memory space (move-only). Handy for applications and tests.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  // count * sizeof(T) above PTRDIFF_MAX (or overflowing) throws moe::Error(MOE_ERROR_INVALID_ARGUMENT).
  explicit device_buffer(std::size_t count) : ptr_(static_cast<T*>(moe::malloc(bytes_for(count)))), size_(count) {}
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept : ptr_(o.ptr_), size_(o.size_) { o.ptr_ = nullptr, o.size_ = 0; }
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      moe::free(ptr_);
      ptr_ = o.ptr_, size_ = o.size_;
      o.ptr_ = nullptr, o.size_ = 0;
    }
    return *this;
  }
  ~device_buffer() { moe::free(ptr_); }

  T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }

 private:
  static std::size_t bytes_for(std::size_t count) {
    if (count > static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(T))
      throw Error(MOE_ERROR_INVALID_ARGUMENT, "device_buffer: count = " + std::to_string(count) + " elements of " +
                                                  std::to_string(sizeof(T)) + " bytes exceed PTRDIFF_MAX bytes");
    return count * sizeof(T);
  }

  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace moe
