/* TEST SCAFFOLDING, not the library: the C API that issues 27 (data path) and 28 (gating) add to routing.h,
 * declared as those issues fix it, so that the Python bindings of these operations (python/src/ops_*.cpp) can be
 * compiled and their Python layer tested before the real operations are merged. Used only by a development
 * build with -DMOE_PY_FUTURE_STUB=ON (CPU backend), which appends this text to a copy of routing.h for the
 * symbol checks and force-includes it; future_stub.cpp implements it with plain loops. Delete this folder once
 * routing.h declares these functions. */
#ifndef MOE_ROUTING_FUTURE_STUB_H
#define MOE_ROUTING_FUTURE_STUB_H

#include "moe/routing.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_FLOAT8_E4M3 8 /* the real header appends these to moe_dtype_t */
#define MOE_FLOAT8_E5M2 9

moe_status_t moe_align_workspace_size_ep(int64_t numel, int32_t num_experts, int32_t num_local_experts,
                                         int32_t block_size, size_t* bytes);
moe_status_t moe_align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, int64_t numel,
    int32_t num_experts, const int32_t* expert_map, int32_t num_local_experts, int32_t block_size,
    int32_t* sorted_token_ids, int32_t* expert_ids, int32_t* num_tokens_post_pad,
    int32_t* expert_counts, int32_t* token_positions, void* workspace, size_t workspace_bytes, void* stream);
moe_status_t moe_permute(const void* hidden, moe_dtype_t dtype, int64_t num_tokens, int64_t hidden_size,
    int32_t topk, const int32_t* sorted_token_ids, const int32_t* num_tokens_post_pad, int64_t max_rows,
    void* permuted, void* stream);
typedef enum { MOE_ROWS_FLAT = 0, MOE_ROWS_PERMUTED = 1 } moe_rows_layout_t;
moe_status_t moe_combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, int64_t num_tokens,
    int32_t topk, int64_t hidden, const int32_t* token_positions, const float* topk_weights, float scale,
    void* output, void* stream);

typedef enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1, MOE_SCORE_SOFTMAX_TOPK = 2 } moe_score_t;
typedef struct {
  int32_t topk;
  moe_score_t score;
  int32_t num_groups;
  int32_t topk_groups;
  const float* correction_bias;
  int32_t renormalize;
  float routed_scaling_factor;
} moe_gate_t;
moe_status_t moe_topk_gating(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
    const moe_gate_t* gate, int32_t* topk_ids, float* topk_weights, void* stream);
moe_status_t moe_route_workspace_size(int64_t num_tokens, int32_t num_experts, const moe_gate_t* gate,
    int32_t num_local_experts, int32_t block_size, size_t* bytes);
moe_status_t moe_route(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
    const moe_gate_t* gate, const int32_t* expert_map, int32_t num_local_experts, int32_t block_size,
    int32_t* topk_ids, float* topk_weights, int32_t* sorted_token_ids, int32_t* expert_ids,
    int32_t* num_tokens_post_pad, int32_t* token_positions, void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif
