/* The C entry points moe_routing._ext hands to the PyTorch operator shim (torch_ops.cpp), as one table of plain
 * C types: the shim is compiled against the user's torch (torch.utils.cpp_extension, at first import of
 * moe_routing.torch) and links nothing of this library; it calls these pointers. Shipped in the package.
 * Each function returns 0 or a moe_status_t; last_error() then holds the library's text. */
#ifndef MOE_ROUTING_TORCH_API_TABLE_H
#define MOE_ROUTING_TORCH_API_TABLE_H
#include <stddef.h>
#include <stdint.h>

#define MOE_TORCH_API_VERSION 1

typedef struct {
  int32_t version;      /* MOE_TORCH_API_VERSION */
  int32_t memory_host;  /* 1: the backend takes host memory (CPU tensors); 0: the current CUDA/HIP device */
  int32_t workspace_alignment; /* MOE_WORKSPACE_ALIGNMENT */
  int32_t code_int8, code_uint8, code_int16, code_int32, code_int64, code_float32, code_float16, code_bfloat16;
  /* align_max_padded, align_max_blocks and align_workspace_size in one call */
  int32_t (*align_caps)(int64_t numel, int32_t num_experts, int32_t block_size, int64_t* padded, int64_t* blocks,
                        size_t* workspace_bytes);
  int32_t (*align_block_size)(const void* topk_ids, int32_t id_type, int64_t numel, int32_t num_experts,
                              int32_t block_size, int32_t* sorted_token_ids, int32_t* expert_ids,
                              int32_t* num_tokens_post_pad, void* workspace, size_t workspace_bytes, void* stream);
  int32_t (*moe_sum)(const void* input, int32_t dtype, int64_t num_tokens, int32_t topk, int64_t hidden,
                     void* output, void* stream);
  const char* (*last_error)(void);
} moe_torch_api_t;

#endif
