/*
 * moe-routing: expert parallelism across ranks. C API (C++: moe/ep.hpp).
 *
 * When a layer's experts are spread over ranks, every forward pass sends each token's hidden row to the ranks
 * that hold its chosen experts (dispatch) and brings the expert outputs back to the token's rank, where they are
 * reduced with the routing weights (combine). This header wraps a communicator the CALLER owns (an MPI_Comm or a
 * ncclComm_t: the library never initialises or finalises MPI or NCCL) and moves rows over it: MPI_Alltoallv for
 * MPI, grouped ncclSend/ncclRecv for NCCL. No transport of its own.
 *
 * Transports, by build option: -DMOE_WITH_MPI=ON (CPU and KOKKOS backends on host memory; CUDA/HIP only with a
 * GPU-aware MPI, since device pointers are handed to MPI), -DMOE_WITH_NCCL=ON (CUDA backend; NCCL's API, which
 * RCCL shares on AMD). moe_ep_transport_available() says what this build has; the other creators answer
 * MOE_ERROR_UNSUPPORTED. Every pointer below that is not said to be host memory lives in the backend's memory
 * space, as for routing.h.
 *
 * ---- The flow of one MoE layer (every call is COLLECTIVE over the communicator: every rank calls it, in the
 * same order, on handles created with the same configuration) ------------------------------------------------
 *   moe_ep_dispatch_layout(h, topk_ids, num_tokens, &R, &slots, stream)   which token goes where; counts exchanged
 *   moe_ep_dispatch(h, hidden, scales, topk_weights, recv_hidden, recv_scales, recv_ids, recv_weights, rows, stream)
 *   ... the caller's experts on the received rows: e.g. moe_align_block_size_ep(recv_ids, numel = R * topk,
 *       expert_map = NULL, num_local_experts) -> moe_permute -> grouped GEMM, giving one output row per present
 *       slot (flat [R * topk] rows, or the permuted layout with align's token_positions)
 *   moe_ep_combine(h, expert_out, token_positions, topk_weights, scale, output)
 *
 * ---- Placement ---------------------------------------------------------------------------------------------
 * num_experts global experts. Default (expert_rank NULL): contiguous equal blocks, expert e on rank
 * e / (num_experts / world) with local index e % (num_experts / world); num_experts % world != 0 is an error.
 * Explicit: expert_rank[e] in [0, world) for each e (host memory); expert_local[e] its local index on that rank
 * (NULL: the experts of a rank numbered in ascending global order). Each rank's local indices must be exactly
 * 0 .. L_r - 1, each once (L_r may differ between ranks, and may be 0: that rank receives nothing).
 *
 * ---- Dispatch: what the receiving rank gets ----------------------------------------------------------------
 * A token is sent ONCE to each rank that holds at least one of its topk experts. Received rows are ordered by
 * source rank, then by the source's token index (never by timing). For received row r:
 *   recv_hidden[r]          the token's hidden row (copied as bytes: any dtype, fp8 included)
 *   recv_scales[r]          its scales_per_token fp32 scales (when the handle has scales)
 *   recv_topk_ids[r][k]     the LOCAL index of the token's k-th expert when that expert is on this rank, else -1
 *   recv_topk_weights[r][k] the token's k-th routing weight (every k, local or not)
 * Exact mode: rows 0 .. R-1, R = the count moe_ep_dispatch_layout returned; rows past R are not written.
 * Capacity mode: a fixed slab layout of world * capacity rows: the j-th row from source s is row s * capacity + j;
 * rows of a slab past what s sent have recv_topk_ids -1 and weights 0 (their hidden rows are not written), so an
 * align over all world * capacity * topk ids drops them.
 *
 * ---- Combine: what the caller gives back, and the arithmetic ------------------------------------------------
 * expert_out holds, for every received row r and every slot k with recv_topk_ids[r][k] >= 0 (a "present local
 * slot"), the expert's output row, of combine_dtype x hidden elements:
 *   token_positions NULL:  flat layout, row r * topk + k of expert_out ([recv_rows * topk, hidden]);
 *   token_positions given: permuted layout, row token_positions[r * topk + k] (as moe_align_block_size_ep writes
 *                          it for numel = recv_rows * topk), the layout moe_permute + a grouped GEMM produce.
 * Other rows (slots of remote experts, padding) are never read. Every present local slot's row goes back to the
 * token's home rank (one row per slot, unweighted), which then computes for each of its tokens, in k order over
 * ALL topk slots (wherever their experts ran), exactly moe_combine's arithmetic:
 *   acc = 0; for k = 0 .. topk-1: acc = fl32(acc + fl32(w[t][k] * x_k))   (no FMA, no reassociation)
 *   output[t] = round_to_type(fl32(acc * scale))                         (NaN written canonically, as moe_sum)
 * with w = topk_weights (NULL: 1). The output is bit-identical to a single-process run of the same layer (route,
 * permute, the same expert function, moe_combine) on the reference backend, whatever the world size.
 * A present local slot whose token_positions entry is negative has no row: its row is sent as NaN (so the home
 * rank's output for that token is NaN, never a silently wrong number); MPI: combine then fails on every rank
 * (after writing the output); NCCL: moe_ep_check_status on that rank reports it.
 *
 * ---- Modes -------------------------------------------------------------------------------------------------
 * MOE_EP_EXACT: moe_ep_dispatch_layout synchronises with the host once (the received counts), returns R, and the
 *   rows move in exactly-sized messages. Bounds: max_recv_rows / max_recv_slots per rank (see the config).
 * MOE_EP_CAPACITY: at most `capacity` rows from one rank to another per call, and `slot_capacity` expert-output
 *   rows back. On the NCCL path nothing synchronises with the host (fixed-size messages; CUDA-graph capturable);
 *   an overflow, a bad id or ranks that disagree are found on the device by every rank alike: the dispatch then
 *   delivers no rows (all recv_topk_ids -1), combine writes canonical NaN to every output element, and
 *   moe_ep_check_status (a host synchronisation, call it when convenient) returns the error with its text. On the
 *   MPI path the counts are on the host anyway: the same errors are raised at once, on every rank.
 *
 * ---- Errors: the same status and text on EVERY rank ---------------------------------------------------------
 * Detected collectively (every rank exchanges a small descriptor: the handle's shape and per-call counts), so no
 * rank is left waiting: an id outside [0, num_experts) (the error names the rank, the flat index and the value),
 * num_tokens > max_tokens, a capacity or receive bound exceeded (names the ranks and counts), ranks that disagree
 * on the shape (hidden, dtypes, num_experts, placement, topk, scales_per_token, mode, capacities: names the field
 * and the ranks), ranks that are not in the same call (a rank in dispatch while another is in combine, or one
 * call behind). On the MPI path local argument errors (a NULL pointer, a buffer too small, a call out of order)
 * are agreed on too: the faulty rank gets the text naming its argument, the others "rank r failed". On the NCCL
 * path argument errors found on the host before any transfer are reported on the faulty rank only (NCCL has no
 * host-side agreement without a synchronisation): the other ranks' transfers then wait for it, as NCCL does;
 * except those of moe_ep_dispatch_layout in capacity mode (num_tokens > max_tokens, NULL topk_ids), which travel
 * in the descriptor like a bad id: nothing is raised, the layer runs without moving rows, combine writes NaN over
 * the num_tokens rows passed, and moe_ep_check_status names the argument (on the faulty rank; the others name it).
 * After any reported error the handle stays usable: every rank left the call at the same point.
 *
 * ---- What callers must keep consistent across ranks ----------------------------------------------------------
 * - The communicator: the same group of ranks, each passing its own handle to it; the same num_experts and
 *   placement to moe_ep_comm_create_*; handles created in the same order with the same config fields (except
 *   max_tokens, max_recv_rows, max_recv_slots, which are per rank).
 * - The calls: dispatch_layout, dispatch, combine on the same handle, in the same order, on every rank, even a rank
 *   with no tokens (num_tokens = 0).
 * - Between dispatch and combine: recv_topk_ids may be read but the handle's layout must not be replaced (a new
 *   dispatch_layout on the same handle starts a new layer).
 * - The same routing weights (or NULL) given to moe_ep_dispatch and moe_ep_combine are not required to be the same
 *   buffer: combine uses the weights it is given, on the token's home rank.
 * Communicators and handles are not thread-safe; destroy them before MPI_Finalize / ncclCommDestroy.
 */
#ifndef MOE_EP_H
#define MOE_EP_H

#include "moe/routing.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moe_ep_comm_s* moe_ep_comm_t;
typedef struct moe_ep_handle_s* moe_ep_handle_t;

/* The *_FORCE_INT32_* enumerators are not values to pass: they make every int32 a value of the type (C++ range
 * rules), so any int a C or Fortran caller passes is defined behaviour; unknown values are INVALID_ARGUMENT. */
typedef enum {
  MOE_EP_TRANSPORT_MPI = 0,
  MOE_EP_TRANSPORT_NCCL = 1,
  MOE_EP_TRANSPORT_FORCE_INT32_MIN_ = -0x7FFFFFFF - 1,
  MOE_EP_TRANSPORT_FORCE_INT32_MAX_ = 0x7FFFFFFF
} moe_ep_transport_t;
typedef enum {
  MOE_EP_EXACT = 0,
  MOE_EP_CAPACITY = 1,
  MOE_EP_MODE_FORCE_INT32_MIN_ = -0x7FFFFFFF - 1,
  MOE_EP_MODE_FORCE_INT32_MAX_ = 0x7FFFFFFF
} moe_ep_mode_t;

/* 1 when this build has the transport (MOE_WITH_MPI / MOE_WITH_NCCL), else 0. */
int moe_ep_transport_available(moe_ep_transport_t transport);

/* Communicators. COLLECTIVE: every rank of the communicator calls it with the same num_experts and placement
 * (checked: a mismatch is an error on every rank).
 *   mpi_comm   host pointer TO the caller's MPI_Comm (e.g. &comm; MPI_Comm is an int in MPICH and a pointer in Open
 *              MPI, so the header takes its address and needs no mpi.h). The library duplicates it
 *              (MPI_Comm_dup: its messages never mix with the caller's) and frees the duplicate at destroy.
 *              MPI must be initialised (MPI_THREAD_SINGLE is enough: all calls come from the calling thread).
 *   nccl_comm  the caller's ncclComm_t (a pointer), used as is; its device is the current device.
 *   expert_rank, expert_local: the placement (host memory; NULL: contiguous blocks, see above).
 * Errors: NULL comm/out; num_experts < 1 or > 65536; no placement and num_experts % world != 0; an expert_rank
 * outside [0, world); local indices of a rank not exactly 0 .. L_r-1; ranks that disagree (num_experts, placement);
 * the transport not built (MOE_ERROR_UNSUPPORTED); an MPI or NCCL failure (MOE_ERROR_BACKEND). */
moe_status_t moe_ep_comm_create_mpi(const void* mpi_comm, int32_t num_experts, const int32_t* expert_rank,
                                    const int32_t* expert_local, moe_ep_comm_t* comm);
moe_status_t moe_ep_comm_create_nccl(void* nccl_comm, int32_t num_experts, const int32_t* expert_rank,
                                     const int32_t* expert_local, moe_ep_comm_t* comm);
/* Not collective. NULL is a no-op. Handles made from it keep what they need alive. */
moe_status_t moe_ep_comm_destroy(moe_ep_comm_t comm);
/* This rank, the world size, this rank's number of local experts. Any output may be NULL. */
moe_status_t moe_ep_comm_info(moe_ep_comm_t comm, int32_t* rank, int32_t* world_size, int32_t* num_local_experts);
/* Host out [num_experts]: the local index of each global expert on this rank, or -1 when another rank holds it
 * (the expert_map of moe_align_block_size_ep for callers that keep global ids). */
moe_status_t moe_ep_comm_expert_map(moe_ep_comm_t comm, int32_t* expert_map);
/* Host out [num_local_experts]: the global id of each local expert. */
moe_status_t moe_ep_comm_local_experts(moe_ep_comm_t comm, int32_t* global_ids);

/* The shape of one MoE layer's exchange. Every field must be equal on every rank, except max_tokens, max_recv_rows
 * and max_recv_slots (per rank). Fields of the other mode are ignored. */
typedef struct {
  int64_t max_tokens;       /* most tokens this rank passes to one dispatch (>= 0; per rank) */
  int64_t hidden;           /* elements per row, both directions (>= 1) */
  moe_dtype_t dispatch_dtype; /* dtype of the dispatched rows: any moe_dtype_t (copied as bytes; the fp8 values
                               * 8 and 9 of routing.h's MOE_FLOAT8_E4M3/E5M2 are taken as 1-byte types) */
  moe_dtype_t combine_dtype;  /* dtype of the expert outputs and the combined output: FLOAT32/FLOAT16/BFLOAT16 */
  int32_t topk;             /* slots per token, 1 .. 64 */
  int32_t scales_per_token; /* fp32 scales sent with each row (0: none; e.g. hidden / 128 for per-group fp8) */
  moe_ep_mode_t mode;
  int64_t capacity;         /* CAPACITY: most rows one rank sends another per call (>= 1) */
  int64_t slot_capacity;    /* CAPACITY: most expert-output rows one rank sends back to another per call;
                             * 0: capacity * min(topk, the largest number of local experts of any rank) */
  int64_t max_recv_rows;    /* EXACT, per rank: most rows this rank receives per call; 0: world * max_tokens */
  int64_t max_recv_slots;   /* EXACT, per rank: most present local slots per call; 0: max_recv_rows * min(topk,
                             * this rank's local experts) */
} moe_ep_config_t;

/* COLLECTIVE. Allocates the handle's staging in the backend's memory (sizes: moe_ep_handle_info) and checks the
 * config against every rank's. Errors: bad fields (named), ranks that disagree (named), sizes past 2^31 rows. */
moe_status_t moe_ep_handle_create(moe_ep_comm_t comm, const moe_ep_config_t* config, moe_ep_handle_t* handle);
/* Not collective. NULL is a no-op. */
moe_status_t moe_ep_handle_destroy(moe_ep_handle_t handle);
/* recv_rows: the rows of the receive buffers moe_ep_dispatch needs (exact: max_recv_rows; capacity: world *
 * capacity); staging_bytes: the handle's own memory in the backend's space. Either may be NULL. */
moe_status_t moe_ep_handle_info(moe_ep_handle_t handle, int64_t* recv_rows, int64_t* staging_bytes);

/* COLLECTIVE. Which rows go where, for topk_ids [num_tokens, topk] int32 (global expert ids).
 * num_recv_rows (host, may be NULL): exact mode: R, the rows this rank receives (one host synchronisation);
 * capacity mode: world * capacity (the slab layout; no synchronisation on the NCCL path).
 * num_recv_slots (host, may be NULL): exact mode: the present local slots among them (the rows expert_out must
 * provide); capacity mode: world * slot_capacity (an upper bound).
 * Errors (every rank): see "Errors" above. */
moe_status_t moe_ep_dispatch_layout(moe_ep_handle_t handle, const int32_t* topk_ids, int64_t num_tokens,
                                    int64_t* num_recv_rows, int64_t* num_recv_slots, void* stream);
/* COLLECTIVE. Sends the rows of the last layout. hidden [num_tokens, hidden] of dispatch_dtype; scales
 * [num_tokens, scales_per_token] fp32 (NULL iff scales_per_token == 0); topk_weights [num_tokens, topk] fp32
 * (NULL: every weight received is 1). Outputs (see "Dispatch" above), each with recv_rows rows of room:
 * recv_hidden [recv_rows, hidden], recv_scales [recv_rows, scales_per_token] (NULL iff no scales),
 * recv_topk_ids [recv_rows, topk] int32, recv_topk_weights [recv_rows, topk] fp32 (may be NULL: not written).
 * recv_rows must be >= R (exact) or world * capacity (capacity). */
moe_status_t moe_ep_dispatch(moe_ep_handle_t handle, const void* hidden, const float* scales,
                             const float* topk_weights, void* recv_hidden, float* recv_scales,
                             int32_t* recv_topk_ids, float* recv_topk_weights, int64_t recv_rows, void* stream);
/* COLLECTIVE. expert_out: see "Combine" above (combine_dtype). token_positions: NULL (flat) or [recv_rows * topk]
 * int32. topk_weights: this rank's [num_tokens, topk] fp32 of the layout's call, or NULL (weights 1). output:
 * [num_tokens, hidden] of combine_dtype, this rank's tokens in their order; must not overlap expert_out (not
 * checked: expert_out's extent depends on the caller's layout). */
moe_status_t moe_ep_combine(moe_ep_handle_t handle, const void* expert_out, const int32_t* token_positions,
                            const float* topk_weights, float scale, void* output, void* stream);
/* NCCL path: waits for `stream` and reports what the device found: the verdict of the last layout (capacity
 * mode: overflow, bad ids, ranks that disagree; it stays until the next layout) and any present slot without a
 * row since the last check (then cleared): MOE_SUCCESS, or the error with its text. Not collective; every rank
 * gets the same verdict (a missing row is reported on the expert's rank). MPI path: MOE_SUCCESS (errors were
 * raised at once, by the call that found them). */
moe_status_t moe_ep_check_status(moe_ep_handle_t handle, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_EP_H */
