/* The C API from a C translation unit: the header compiles as C, and the contract's example runs. */
#include <stdio.h>
#include <string.h>

#include "moe/routing.h"

#define TRY(call)                                                                        \
  do {                                                                                   \
    if ((call) != MOE_SUCCESS) {                                                         \
      fprintf(stderr, "%s failed: %s\n", #call, moe_last_error());                       \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

int moe_c_api_smoke(void) {
  const int32_t ids[9] = {0, 1, 2, 1, 2, 3, 0, 3, 4};
  const int32_t s = 9;
  const int32_t want_sorted[24] = {0, 6, s, s, 1, 3, s, s, 2, 4, s, s, 5, 7, s, s, 8, s, s, s, s, s, s, s};
  const int32_t want_experts[6] = {0, 1, 2, 3, 4, -1};
  int32_t sorted[24], experts[6], post = -1;
  void *d_ids = NULL, *d_sorted = NULL, *d_experts = NULL, *d_post = NULL, *d_ws = NULL;
  size_t ws = 0;
  int64_t max_padded = moe_align_max_padded(9, 5, 4), max_blocks = moe_align_max_blocks(9, 5, 4);
  if (max_padded != 24 || max_blocks != 6) return 2;
  TRY(moe_align_workspace_size(9, 5, 4, &ws));
  TRY(moe_malloc(&d_ids, sizeof ids));
  TRY(moe_malloc(&d_sorted, sizeof sorted));
  TRY(moe_malloc(&d_experts, sizeof experts));
  TRY(moe_malloc(&d_post, sizeof post));
  TRY(moe_malloc(&d_ws, ws));
  TRY(moe_memcpy_to_device(d_ids, ids, sizeof ids));
  TRY(moe_align_block_size(d_ids, MOE_INT32, 9, 5, 4, (int32_t*)d_sorted, (int32_t*)d_experts, (int32_t*)d_post,
                           d_ws, ws, NULL));
  TRY(moe_synchronize(NULL));
  TRY(moe_memcpy_to_host(sorted, d_sorted, sizeof sorted));
  TRY(moe_memcpy_to_host(experts, d_experts, sizeof experts));
  TRY(moe_memcpy_to_host(&post, d_post, sizeof post));
  TRY(moe_free(d_ids));
  TRY(moe_free(d_sorted));
  TRY(moe_free(d_experts));
  TRY(moe_free(d_post));
  TRY(moe_free(d_ws));
  if (post != 20) return 3;
  if (memcmp(sorted, want_sorted, sizeof sorted) != 0) return 4;
  if (memcmp(experts, want_experts, sizeof experts) != 0) return 5;
  if (moe_align_block_size(d_ids, MOE_FLOAT16, 9, 5, 4, NULL, NULL, NULL, NULL, 0, NULL) == MOE_SUCCESS) return 6;
  {  /* routing.h's gating example */
    const float logits[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    moe_gate_t gate = {2, MOE_SCORE_SOFTMAX, 1, 1, NULL, 1, 1.0f};
    int32_t gids[2] = {-1, -1};
    float w[2] = {0.0f, 0.0f};
    void *d_logits = NULL, *d_gids = NULL, *d_w = NULL;
    TRY(moe_malloc(&d_logits, sizeof logits));
    TRY(moe_malloc(&d_gids, sizeof gids));
    TRY(moe_malloc(&d_w, sizeof w));
    TRY(moe_memcpy_to_device(d_logits, logits, sizeof logits));
    TRY(moe_topk_gating(d_logits, MOE_FLOAT32, 1, 4, &gate, (int32_t*)d_gids, (float*)d_w, NULL));
    TRY(moe_synchronize(NULL));
    TRY(moe_memcpy_to_host(gids, d_gids, sizeof gids));
    TRY(moe_memcpy_to_host(w, d_w, sizeof w));
    TRY(moe_free(d_logits));
    TRY(moe_free(d_gids));
    TRY(moe_free(d_w));
    if (gids[0] != 1 || gids[1] != 3 || w[0] != 0.5f || w[1] != 0.5f) return 7;
    if (moe_topk_gating(NULL, MOE_FLOAT32, 1, 4, NULL, NULL, NULL, NULL) != MOE_ERROR_INVALID_ARGUMENT) return 8;
  }
  return 0;
}
