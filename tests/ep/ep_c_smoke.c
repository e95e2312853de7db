/* moe/ep.h from a C translation unit: the header compiles as C, and one small layer runs through the C API
 * (exact mode, flat layout, identity experts): output = fl(0.5 x) + fl(0.25 x) = 0.75 x for these values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/ep.h"

#define TRY(call)                                                          \
  do {                                                                     \
    if ((call) != MOE_SUCCESS) {                                           \
      fprintf(stderr, "%s failed: %s\n", #call, moe_last_error());         \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int moe_ep_c_smoke(const void* mpi_comm) {
  enum { T = 3, H = 4, K = 2 };
  moe_ep_comm_t comm = NULL;
  moe_ep_handle_t h = NULL;
  int32_t rank = -1, world = 0, local = 0;
  int32_t ids[T * K];
  float x[T * H], w[T * K], out[T * H];
  int64_t R = -1, Q = -1, rows = 0;
  void *d_ids, *d_x, *d_w, *d_out, *d_recv, *d_rids, *d_exp;
  float* recv;
  int32_t* rids;
  float* ex;
  int i, t, k, j;
  moe_ep_config_t cfg;
  if (!moe_ep_transport_available(MOE_EP_TRANSPORT_MPI)) return 2;
  if (moe_ep_dispatch_layout(NULL, NULL, 0, NULL, NULL, NULL) != MOE_ERROR_INVALID_ARGUMENT ||
      strstr(moe_last_error(), "handle is NULL") == NULL)
    return 3;
  /* collective errors: every rank passes 0 experts */
  if (moe_ep_comm_create_mpi(mpi_comm, 0, NULL, NULL, &comm) != MOE_ERROR_INVALID_ARGUMENT || comm != NULL ||
      strstr(moe_last_error(), "num_experts must be in [1, 65536]") == NULL)
    return 4;
  /* the world size, from a placement valid for any world: one expert, on rank 0 */
  {
    moe_ep_comm_t probe = NULL;
    int32_t one_rank[1] = {0};
    TRY(moe_ep_comm_create_mpi(mpi_comm, 1, one_rank, NULL, &probe)); /* expert 0 on rank 0 */
    TRY(moe_ep_comm_info(probe, &rank, &world, &local));
    TRY(moe_ep_comm_destroy(probe));
  }
  TRY(moe_ep_comm_create_mpi(mpi_comm, 2 * world, NULL, NULL, &comm));
  TRY(moe_ep_comm_info(comm, NULL, NULL, &local));
  if (local != 2) return 5;
  memset(&cfg, 0, sizeof cfg);
  cfg.max_tokens = T;
  cfg.hidden = H;
  cfg.dispatch_dtype = MOE_FLOAT32;
  cfg.combine_dtype = MOE_FLOAT32;
  cfg.topk = K;
  cfg.mode = MOE_EP_EXACT;
  TRY(moe_ep_handle_create(comm, &cfg, &h));
  TRY(moe_ep_handle_info(h, &rows, NULL));
  for (t = 0; t < T; ++t) {
    for (k = 0; k < K; ++k) ids[t * K + k] = (t + rank + 3 * k) % (2 * world), w[t * K + k] = k == 0 ? 0.5f : 0.25f;
    for (j = 0; j < H; ++j) x[t * H + j] = (float)(rank * 100 + t * 10 + j);
  }
  TRY(moe_malloc(&d_ids, sizeof ids));
  TRY(moe_malloc(&d_x, sizeof x));
  TRY(moe_malloc(&d_w, sizeof w));
  TRY(moe_malloc(&d_out, sizeof out));
  TRY(moe_memcpy_to_device(d_ids, ids, sizeof ids));
  TRY(moe_memcpy_to_device(d_x, x, sizeof x));
  TRY(moe_memcpy_to_device(d_w, w, sizeof w));
  TRY(moe_ep_dispatch_layout(h, (const int32_t*)d_ids, T, &R, &Q, NULL));
  if (R > rows) return 6;
  TRY(moe_malloc(&d_recv, (size_t)(rows * H) * sizeof(float)));
  TRY(moe_malloc(&d_rids, (size_t)(rows * K) * sizeof(int32_t)));
  TRY(moe_malloc(&d_exp, (size_t)(rows * K * H) * sizeof(float)));
  TRY(moe_ep_dispatch(h, d_x, NULL, (const float*)d_w, d_recv, NULL, (int32_t*)d_rids, NULL, rows, NULL));
  recv = (float*)calloc((size_t)(rows * H) + 1, sizeof(float));
  rids = (int32_t*)calloc((size_t)(rows * K) + 1, sizeof(int32_t));
  ex = (float*)calloc((size_t)(rows * K * H) + 1, sizeof(float));
  TRY(moe_memcpy_to_host(recv, d_recv, (size_t)(R * H) * sizeof(float)));
  TRY(moe_memcpy_to_host(rids, d_rids, (size_t)(R * K) * sizeof(int32_t)));
  for (i = 0; i < R; ++i)
    for (k = 0; k < K; ++k)
      if (rids[i * K + k] >= 0) memcpy(ex + (i * K + k) * H, recv + i * H, H * sizeof(float));
  TRY(moe_memcpy_to_device(d_exp, ex, (size_t)(R * K * H) * sizeof(float)));
  TRY(moe_ep_combine(h, d_exp, NULL, (const float*)d_w, 1.0f, d_out, NULL));
  TRY(moe_memcpy_to_host(out, d_out, sizeof out));
  TRY(moe_ep_check_status(h, NULL));
  for (i = 0; i < T * H; ++i)
    if (out[i] != 0.75f * x[i]) return 7;
  TRY(moe_ep_handle_destroy(h));
  TRY(moe_ep_comm_destroy(comm));
  moe_free(d_ids), moe_free(d_x), moe_free(d_w), moe_free(d_out), moe_free(d_recv), moe_free(d_rids), moe_free(d_exp);
  free(recv), free(rids), free(ex);
  return 0;
}
