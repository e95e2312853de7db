/* A C-only program: the contract's example through moe_align_block_size, then moe_sum, both checked.
 * Exits 0 on success, 77 without a usable backend (e.g. no GPU), 1 on a wrong answer or a failed call. */
#include <stdio.h>
#include <string.h>

#include <moe/routing.h>

#define TRY(call)                                                          \
  do {                                                                     \
    if ((call) != MOE_SUCCESS) {                                           \
      fprintf(stderr, "%s failed: %s\n", #call, moe_last_error());         \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(void) {
  static const int32_t ids[9] = {0, 1, 2, 1, 2, 3, 0, 3, 4};
  enum { s = 9 };
  static const int32_t want_sorted[24] = {0, 6, s, s, 1, 3, s, s, 2, 4, s, s, 5, 7, s, s, 8, s, s, s, s, s, s, s};
  static const int32_t want_experts[6] = {0, 1, 2, 3, 4, -1};
  static const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}; /* [2 tokens, topk 2, hidden 2] */
  static const float want_y[4] = {4, 6, 12, 14};
  int32_t sorted[24], experts[6], post = -1;
  float y[4];
  void *d_ids = NULL, *d_sorted = NULL, *d_experts = NULL, *d_post = NULL, *d_ws = NULL, *d_x = NULL, *d_y = NULL;
  size_t ws = 0;

  if (moe_backend_check() != MOE_SUCCESS) {
    printf("skipped: %s\n", moe_last_error());
    return 77;
  }
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

  TRY(moe_malloc(&d_x, sizeof x));
  TRY(moe_malloc(&d_y, sizeof y));
  TRY(moe_memcpy_to_device(d_x, x, sizeof x));
  TRY(moe_sum(d_x, MOE_FLOAT32, 2, 2, 2, d_y, NULL));
  TRY(moe_synchronize(NULL));
  TRY(moe_memcpy_to_host(y, d_y, sizeof y));
  /* a bad call: a status and a text naming the argument, never a crash */
  if (moe_sum(d_x, MOE_FLOAT32, 2, 2, 2, d_x, NULL) != MOE_ERROR_INVALID_ARGUMENT) return 1;
  printf("backend %s: post_pad %d, sum ok: %s; overlapping call refused: %s\n", moe_backend_name(), (int)post,
         memcmp(y, want_y, sizeof y) == 0 ? "yes" : "no", moe_last_error());

  TRY(moe_free(d_ids));
  TRY(moe_free(d_sorted));
  TRY(moe_free(d_experts));
  TRY(moe_free(d_post));
  TRY(moe_free(d_ws));
  TRY(moe_free(d_x));
  TRY(moe_free(d_y));
  if (post != 20 || memcmp(sorted, want_sorted, sizeof sorted) != 0) return 1;
  if (memcmp(experts, want_experts, sizeof experts) != 0) return 1;
  return memcmp(y, want_y, sizeof y) == 0 ? 0 : 1;
}
