// moe-routing: the CPU reference, the oracle every backend is tested against. Plain serial code on host
// memory, written to be obviously right. Same arguments, checks and results as the calls in routing.hpp
// (see routing.h for the semantics), whatever backend the library was built for.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/routing.hpp"

namespace moe {
namespace reference {

// Workspace bytes reference::align_block_size needs (host memory): one counter per expert.
std::size_t align_workspace_size(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size);

void align_block_size(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                      std::int32_t block_size, std::int32_t* sorted_token_ids, std::int32_t* expert_ids,
                      std::int32_t* num_tokens_post_pad, void* workspace, std::size_t workspace_bytes);

void sum(const void* input, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
         void* output);
void permute(const void* hidden, moe_dtype_t dtype, std::int64_t num_tokens, std::int64_t hidden_size,
             std::int32_t topk, const std::int32_t* sorted_token_ids, const std::int32_t* num_tokens_post_pad,
             std::int64_t max_rows, void* permuted);
void combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, std::int64_t num_tokens,
             std::int32_t topk, std::int64_t hidden, const std::int32_t* token_positions, const float* topk_weights,
             float scale, void* output);

// Workspace bytes reference::align_block_size_ep needs (host memory): one counter per local expert.
std::size_t align_workspace_size_ep(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local_experts,
                                    std::int32_t block_size);
// expert_map (host memory here), expert_counts and token_positions may be NULL.
void align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, std::int64_t numel, std::int32_t num_experts,
                         const std::int32_t* expert_map, std::int32_t num_local_experts, std::int32_t block_size,
                         std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                         std::int32_t* expert_counts, std::int32_t* token_positions, void* workspace,
                         std::size_t workspace_bytes);

void topk_gating(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
                 const moe_gate_t& gate, std::int32_t* topk_ids, float* topk_weights);

// moe_route on the host: reference gating, then reference align_ep (workspace: host memory of that size).
std::size_t route_workspace_size(std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t& gate,
                                 std::int32_t num_local_experts, std::int32_t block_size);
void route(const void* logits, moe_dtype_t dtype, std::int64_t num_tokens, std::int32_t num_experts,
           const moe_gate_t& gate, const std::int32_t* expert_map, std::int32_t num_local_experts,
           std::int32_t block_size, std::int32_t* topk_ids, float* topk_weights, std::int32_t* sorted_token_ids,
           std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad, std::int32_t* token_positions,
           void* workspace, std::size_t workspace_bytes);

template <class T>
void topk_gating(const T* logits, std::int64_t num_tokens, std::int32_t num_experts, const moe_gate_t& gate,
                 std::int32_t* topk_ids, float* topk_weights) {
  topk_gating(static_cast<const void*>(logits), dtype_of<T>::value, num_tokens, num_experts, gate, topk_ids,
              topk_weights);
}

template <class IdT>
void align_block_size(const IdT* topk_ids, std::int64_t numel, std::int32_t num_experts, std::int32_t block_size,
                      std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                      void* workspace, std::size_t workspace_bytes) {
  align_block_size(static_cast<const void*>(topk_ids), dtype_of<IdT>::value, numel, num_experts, block_size,
                   sorted_token_ids, expert_ids, num_tokens_post_pad, workspace, workspace_bytes);
}

template <class IdT>
void align_block_size_ep(const IdT* topk_ids, std::int64_t numel, std::int32_t num_experts,
                         const std::int32_t* expert_map, std::int32_t num_local_experts, std::int32_t block_size,
                         std::int32_t* sorted_token_ids, std::int32_t* expert_ids, std::int32_t* num_tokens_post_pad,
                         std::int32_t* expert_counts, std::int32_t* token_positions, void* workspace,
                         std::size_t workspace_bytes) {
  align_block_size_ep(static_cast<const void*>(topk_ids), dtype_of<IdT>::value, numel, num_experts, expert_map,
                      num_local_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts,
                      token_positions, workspace, workspace_bytes);
}

template <class T>
void sum(const T* input, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden, T* output) {
  sum(static_cast<const void*>(input), dtype_of<T>::value, num_tokens, topk, hidden, static_cast<void*>(output));
}

template <class T>
void permute(const T* hidden, std::int64_t num_tokens, std::int64_t hidden_size, std::int32_t topk,
             const std::int32_t* sorted_token_ids, const std::int32_t* num_tokens_post_pad, std::int64_t max_rows,
             T* permuted) {
  permute(static_cast<const void*>(hidden), dtype_of<T>::value, num_tokens, hidden_size, topk, sorted_token_ids,
          num_tokens_post_pad, max_rows, static_cast<void*>(permuted));
}

template <class T>
void combine(const T* rows, moe_rows_layout_t layout, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
             const std::int32_t* token_positions, const float* topk_weights, float scale, T* output) {
  combine(static_cast<const void*>(rows), dtype_of<T>::value, layout, num_tokens, topk, hidden, token_positions,
          topk_weights, scale, static_cast<void*>(output));
}

// The scalar rules of moe_sum, exposed so callers and tests can reason about single values.
float half_to_float(half_t h) noexcept;
float bfloat16_to_float(bfloat16_t b) noexcept;
half_t float_to_half(float f) noexcept;          // round to nearest even; NaN -> 0x7E00
bfloat16_t float_to_bfloat16(float f) noexcept;  // round to nearest even; NaN -> 0x7FC0

// The library's fp32 exp and sigmoid, as moe_topk_gating computes them on every backend (routing.h: their
// operations and measured error bound).
float exp_f32(float x) noexcept;
float sigmoid_f32(float x) noexcept;

}  // namespace reference
}  // namespace moe
