/*
 * moe-routing: Mixture-of-Experts token routing kernels. C API.
 *
 * One library build serves one backend, chosen at configure time (-DMOE_BACKEND=CPU|CUDA|HIP|KOKKOS);
 * moe_backend_name() says which. Every backend gives results bit-identical to the CPU reference.
 *
 * Memory: every pointer passed to a routing call (moe_align_block_size, moe_sum) lives in the backend's
 * memory space: device memory for CUDA/HIP, Kokkos' default memory space for KOKKOS, host memory for CPU.
 * moe_malloc / moe_free / moe_memcpy_* manage that space. num_tokens_post_pad is an output in that space too.
 *
 * Errors: every call returns a status; on failure moe_last_error() holds a text naming the argument at
 * fault. No call aborts, and no call leaves an exception escape (C++ exceptions stop at this boundary).
 * An enum argument may hold any int: values that name no enumerator are refused with a status, never
 * undefined behaviour (the *_FORCE_INT32_* enumerators make every int32 a value of each enum type).
 *
 * Buffers: the buffers of one call (inputs, outputs and workspace, each with the size the contract gives it
 * for the call's shape; the workspace with its workspace_bytes) must not overlap: two that share a byte are
 * MOE_ERROR_INVALID_ARGUMENT, naming both. A workspace must be aligned to MOE_WORKSPACE_ALIGNMENT (256)
 * bytes, which every pointer from moe_malloc is: a misaligned one is MOE_ERROR_INVALID_ARGUMENT (a slice of a
 * larger moe_malloc block must start at a multiple of 256 bytes from its start). Other pointers need the
 * natural alignment of their element type.
 *
 * Threads: calls from any number of host threads at once are safe on every backend, with or without
 * streams (the Kokkos backend serialises the kernels of calls that share an execution space instance where
 * that instance's team scratch needs it). Calls that write the same buffers still race, as any two writers do.
 *
 * Hot calls (moe_align_block_size, moe_sum) never allocate and never synchronise with the host: they are
 * asynchronous on `stream` and can be captured into a CUDA/HIP graph. All their scratch memory comes from
 * the caller's workspace. Stream order is kept exactly: a call reads its inputs after all earlier work on
 * `stream` has finished, and later work sees its outputs. (CUDA on sm_90+: kernels are launched with
 * programmatic stream serialisation, so a call's launch overlaps the tail of the work before it and each
 * kernel waits on the device before touching memory; MOE_ROUTING_LAUNCH_OVERLAP=0 in the environment turns
 * this off, read once per kernel at its first launch.)
 *
 * This header is a fixed contract: names and meanings are never changed, only added to.
 */
#ifndef MOE_ROUTING_H
#define MOE_ROUTING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_ROUTING_VERSION_MAJOR 0
#define MOE_ROUTING_VERSION_MINOR 1

/* The alignment, in bytes, a workspace must have (and that every moe_malloc pointer has, on every backend). */
#define MOE_WORKSPACE_ALIGNMENT 256

typedef enum {
  MOE_SUCCESS = 0,
  MOE_ERROR_INVALID_ARGUMENT = 1, /* a size, pointer or buffer the caller passed is not acceptable */
  MOE_ERROR_UNSUPPORTED = 2,      /* a valid dtype this operation does not take (e.g. float ids) */
  MOE_ERROR_BACKEND = 3,          /* the backend's runtime failed (no device, launch error, ...) */
  /* not statuses: every int32 is a value of the type (C++ range rules), so no int is undefined behaviour */
  MOE_STATUS_FORCE_INT32_MIN_ = -0x7FFFFFFF - 1,
  MOE_STATUS_FORCE_INT32_MAX_ = 0x7FFFFFFF
} moe_status_t;

typedef enum {
  MOE_INT8, MOE_UINT8, MOE_INT16, MOE_INT32, MOE_INT64, /* ids of moe_align_block_size */
  MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16,               /* values of moe_sum */
  /* not dtypes: every int32 is a value of the type (C++ range rules), so no int is undefined behaviour; any
   * value but the 8 above is MOE_ERROR_INVALID_ARGUMENT */
  MOE_DTYPE_FORCE_INT32_MIN_ = -0x7FFFFFFF - 1,
  MOE_DTYPE_FORCE_INT32_MAX_ = 0x7FFFFFFF
} moe_dtype_t;

/* "cpu", "cuda", "hip" or "kokkos". */
const char* moe_backend_name(void);
/* Static text for a status ("success", "invalid argument", ...); "unknown status" for other values. */
const char* moe_status_string(moe_status_t s);
/* Text of this thread's last failure (empty if none yet); valid until this thread's next failure. */
const char* moe_last_error(void);
/* MOE_SUCCESS when the backend can run here (e.g. a GPU is visible); otherwise MOE_ERROR_BACKEND and
 * moe_last_error() says why. Added to the contract: lets tests and applications skip cleanly. */
moe_status_t moe_backend_check(void);

/* Memory of the backend's space. moe_malloc(&p, 0) gives p = NULL and succeeds; moe_free(NULL) is a no-op.
 * Every pointer moe_malloc gives is aligned to MOE_WORKSPACE_ALIGNMENT (256) bytes. bytes > PTRDIFF_MAX is
 * MOE_ERROR_INVALID_ARGUMENT (e.g. a size computed from a -1); out of memory is MOE_ERROR_BACKEND; on any
 * failure *ptr is NULL.
 * The copies are synchronous with respect to the host (they wait for work already queued on the default
 * stream to finish, as cudaMemcpy does). */
moe_status_t moe_malloc(void** ptr, size_t bytes);
moe_status_t moe_free(void* ptr);
moe_status_t moe_memcpy_to_device(void* dst, const void* src, size_t bytes);
moe_status_t moe_memcpy_to_host(void* dst, const void* src, size_t bytes);
/* Waits for `stream` (cudaStream_t / hipStream_t, or NULL for the default stream). CPU: returns at once. */
moe_status_t moe_synchronize(void* stream);

/* ---------------------------------------------------------------------------------------------------------
 * align_block_size: group the (token, expert) assignments of a router by expert, each group padded to a
 * multiple of block_size (the GEMM tile), for a grouped/fused MoE GEMM.
 *
 *   topk_ids            [numel] ids, numel = num_tokens * topk, of type id_type (any of the 5 integer types).
 *                       An id outside [0, num_experts) is dropped: it lands in no group. Use this for expert
 *                       parallelism (ids of experts on other ranks set to -1).
 *   sorted_token_ids    [moe_align_max_padded(...)] out: for each expert in ascending order, the flat indices
 *                       i of its entries in ascending order (stable, deterministic), then the sentinel `numel`
 *                       up to the next multiple of block_size. An expert with no entries takes no block. The
 *                       tail past num_tokens_post_pad is filled with the sentinel.
 *   expert_ids          [moe_align_max_blocks(...)] out: the expert of each block; -1 in the tail.
 *   num_tokens_post_pad [1] out: total padded length (a multiple of block_size).
 *   workspace           scratch of moe_align_workspace_size(...) bytes or more, in the backend's memory, aligned
 *                       to MOE_WORKSPACE_ALIGNMENT; its contents need no initialisation. NULL / 0 is accepted
 *                       when the size is 0 (always so for numel == 0, on every backend).
 *
 * Example: ids [0,1,2,1,2,3,0,3,4], block_size 4, 5 experts, s = 9:
 *   sorted_token_ids = [0,6,s,s, 1,3,s,s, 2,4,s,s, 5,7,s,s, 8,s,s,s], expert_ids = [0,1,2,3,4],
 *   num_tokens_post_pad = 20; capacities 9+5*3 = 24 and 6, so 4 more s and one more -1 are written.
 *
 * Errors (MOE_ERROR_INVALID_ARGUMENT unless said): numel < 0 or >= 2^31; num_experts < 1 or > 65536;
 * block_size < 1; moe_align_max_padded(...) > INT32_MAX (the padded length would not fit the int32 outputs);
 * topk_ids, sorted_token_ids or expert_ids NULL while numel > 0; num_tokens_post_pad NULL; workspace smaller
 * than required (or NULL with a non-zero size); workspace not NULL and not aligned to MOE_WORKSPACE_ALIGNMENT;
 * any two of topk_ids [numel ids], sorted_token_ids [max_padded int32], expert_ids [max_blocks int32],
 * num_tokens_post_pad [1 int32] and workspace [workspace_bytes] overlapping (the text names both); id_type
 * not a moe_dtype_t value; id_type not an integer type (MOE_ERROR_UNSUPPORTED).
 * numel == 0 is valid: num_tokens_post_pad = 0 and nothing else is written (both capacities are 0, and the
 * workspace size is 0 on every backend).
 * -------------------------------------------------------------------------------------------------------*/

/* numel + min(numel, num_experts) * (block_size - 1): the longest sorted_token_ids can be.
 * Returns -1 (and sets moe_last_error) for arguments moe_align_block_size would reject. */
int64_t moe_align_max_padded(int64_t numel, int32_t num_experts, int32_t block_size);
/* ceil(moe_align_max_padded(...) / block_size): the longest expert_ids can be; -1 for invalid arguments. */
int64_t moe_align_max_blocks(int64_t numel, int32_t num_experts, int32_t block_size);
/* Bytes of workspace moe_align_block_size needs for this shape on this backend (may be 0; 0 for numel == 0). */
moe_status_t moe_align_workspace_size(int64_t numel, int32_t num_experts, int32_t block_size, size_t* bytes);
moe_status_t moe_align_block_size(const void* topk_ids, moe_dtype_t id_type, int64_t numel,
                                  int32_t num_experts, int32_t block_size, int32_t* sorted_token_ids,
                                  int32_t* expert_ids, int32_t* num_tokens_post_pad, void* workspace,
                                  size_t workspace_bytes, void* stream);

/* ---------------------------------------------------------------------------------------------------------
 * moe_sum: output[t][h] = sum over k = 0..topk-1, in that order, of input[t][k][h].
 *
 *   input  [num_tokens, topk, hidden] contiguous; output [num_tokens, hidden] contiguous; same dtype, one of
 *   MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16. Accumulates in fp32 (acc = 0; acc += x_k; no FMA, no
 *   reassociation) and rounds once to the output type, to nearest even. Every backend gives the same bits.
 *   A NaN result is written as the canonical quiet NaN of the type (0x7FC00000, 0x7E00, 0x7FC0), so that
 *   NaN payloads, which hardware propagates differently, never make backends differ.
 *
 * Errors: num_tokens < 0, topk < 1, hidden < 0, an element count that overflows int64, input or output NULL
 * while num_tokens * hidden > 0, output overlapping input (each with its size: [num_tokens * topk * hidden]
 * and [num_tokens * hidden] elements), dtype not a moe_dtype_t value (MOE_ERROR_INVALID_ARGUMENT); an integer
 * dtype (MOE_ERROR_UNSUPPORTED). num_tokens == 0 or hidden == 0 is a no-op.
 * -------------------------------------------------------------------------------------------------------*/
moe_status_t moe_sum(const void* input, moe_dtype_t dtype, int64_t num_tokens, int32_t topk, int64_t hidden,
                     void* output, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_ROUTING_H */
