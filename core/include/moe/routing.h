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
 * that instance's team scratch or its launches need it: every operation but Kokkos::Serial's range kernels). Calls that write the same buffers still race, as any two writers do.
 *
 * Hot calls (moe_align_block_size, moe_align_block_size_ep, moe_sum, moe_permute, moe_combine,
 * moe_topk_gating, moe_route: every call that takes a `stream`, except moe_synchronize) never allocate and never
 * synchronise with the host: they are asynchronous on `stream` and can be captured into a CUDA/HIP graph. All their scratch memory comes from
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
  MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16,               /* values of moe_sum, moe_combine */
  MOE_FLOAT8_E4M3, MOE_FLOAT8_E5M2,                     /* 1-byte floats: moe_permute only (a copy of bytes);
                                                           any other call answers MOE_ERROR_UNSUPPORTED */
  /* not dtypes: every int32 is a value of the type (C++ range rules), so no int is undefined behaviour; any
   * value but the 10 above is MOE_ERROR_INVALID_ARGUMENT */
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
 * align_block_size_ep: moe_align_block_size for one rank of an expert-parallel layer, with two optional
 * outputs for the data path around the expert GEMMs (permute, combine).
 *
 * Expert parallelism. expert_map: [num_experts] int32 in the backend's memory, the local index in
 * [0, num_local_experts) of each global expert, or -1 when another rank holds it. Ids are grouped and padded by
 * LOCAL index, ascending; expert_ids hold local indices. Dropped: an id outside [0, num_experts), or whose map
 * entry is outside [0, num_local_experts) (-1 or anything else: never read out of bounds). expert_map NULL means
 * the identity (then num_local_experts must equal num_experts). Several globals may map to one local index: their
 * ids share one group, in ascending flat order.
 * expert_counts: optional out [num_local_experts] (NULL: not written): each local expert's unpadded count.
 * token_positions: optional out [numel] (NULL: not written): for each flat entry i, the index p with
 * sorted_token_ids[p] == i, or -1 when entry i was dropped.
 * Capacities: moe_align_max_padded/_blocks(numel, num_local_experts, block_size). Everything else (errors, tails
 * written, no allocation, no host sync) as moe_align_block_size.
 *
 * In detail:
 *   - sorted_token_ids, expert_ids, num_tokens_post_pad: exactly what moe_align_block_size gives for the ids
 *     replaced by their local index (dropped ids by -1) and num_experts = num_local_experts: the sentinel is
 *     `numel`, an empty local expert takes no block, both tails are written up to the capacities.
 *   - num_local_experts is in [1, 65536]; it may exceed num_experts (local indices no global maps to stay empty).
 *   - expert_map is read only at the entries of ids in [0, num_experts), and only on the device (no host copy).
 *   - expert_counts[l]: the number of flat entries grouped under l (without padding); 0 for an empty l.
 *   - Deterministic and bit-identical on every backend, like moe_align_block_size.
 *   - moe_align_workspace_size_ep(...) bytes of workspace, a function of the shape alone (the same whether
 *     expert_map is NULL or not, and whether the optional outputs are wanted or not).
 *
 * Example: 8 global experts on 2 ranks; this rank holds 4..7: expert_map = [-1,-1,-1,-1,0,1,2,3],
 * num_local_experts 4, block_size 2, ids [4,1, 6,4, 0,7, 5,6] (4 tokens x topk 2), s = 8:
 *   sorted_token_ids = [0,3, 6,s, 2,7, 5,s], expert_ids = [0,1,2,3], num_tokens_post_pad = 8; capacities
 *   8+4*1 = 12 and 6, so 4 more s and two more -1 are written; expert_counts = [2,1,2,1];
 *   token_positions = [0,-1,4,1,-1,6,2,5].
 *
 * Errors (MOE_ERROR_INVALID_ARGUMENT unless said): those of moe_align_block_size, with num_local_experts in
 * place of num_experts in the capacity bound; num_local_experts < 1 or > 65536; expert_map NULL while
 * num_local_experts != num_experts; an output (sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts,
 * token_positions) or the workspace overlapping another buffer of the call (the inputs topk_ids and expert_map
 * may overlap each other). Map entries are never errors: an entry out of range drops its ids.
 * numel == 0 is valid: num_tokens_post_pad = 0, expert_counts (if given) all 0, nothing else is written.
 * -------------------------------------------------------------------------------------------------------*/

/* Bytes of workspace moe_align_block_size_ep needs for this shape on this backend (may be 0). */
moe_status_t moe_align_workspace_size_ep(int64_t numel, int32_t num_experts, int32_t num_local_experts,
                                         int32_t block_size, size_t* bytes);
moe_status_t moe_align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, int64_t numel,
    int32_t num_experts, const int32_t* expert_map, int32_t num_local_experts, int32_t block_size,
    int32_t* sorted_token_ids, int32_t* expert_ids, int32_t* num_tokens_post_pad,
    int32_t* expert_counts, int32_t* token_positions, void* workspace, size_t workspace_bytes, void* stream);

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

/* ---------------------------------------------------------------------------------------------------------
 * moe_permute: the rows of hidden [num_tokens, hidden_size] into the expert-grouped layout of
 * sorted_token_ids (the output of moe_align_block_size), the input of a grouped GEMM.
 *
 *   For p < *num_tokens_post_pad: permuted[p] = hidden[sorted_token_ids[p] / topk] when
 *   sorted_token_ids[p] < num_tokens * topk, else a row of zero bytes (the padding of each expert's group).
 *   Rows p in [*num_tokens_post_pad, max_rows) are not written.
 *
 *   hidden             [num_tokens, hidden_size] contiguous, of dtype.
 *   dtype              any moe_dtype_t, including MOE_FLOAT8_E4M3 / MOE_FLOAT8_E5M2: the copy is of bytes
 *                      (row_bytes = hidden_size * element size), values are never interpreted. Per-token or
 *                      per-token-group scales (e.g. of fp8 activations: [num_tokens, groups] fp32) are permuted
 *                      with a second call on them, with the same sorted_token_ids and num_tokens_post_pad.
 *   sorted_token_ids   [>= min(*num_tokens_post_pad, max_rows)] int32, read for p below that bound only.
 *                      An entry outside [0, num_tokens * topk) is padding: a zero row (align writes only
 *                      num_tokens * topk there; a negative entry is padding too, so no entry is ever used to
 *                      read out of bounds).
 *   num_tokens_post_pad [1] int32, read ON THE DEVICE (stream order: the align call before it on the stream
 *                      may have written it; no host synchronisation). A negative value counts as 0.
 *   max_rows           rows of permuted. Must be >= the padded capacity of the align call,
 *                      moe_align_max_padded(num_tokens * topk, num_experts, block_size). The host cannot see
 *                      *num_tokens_post_pad, so the call checks the bound it can: max_rows >= num_tokens * topk
 *                      (the smallest capacity of any align call). Should *num_tokens_post_pad exceed max_rows
 *                      anyway, only rows [0, max_rows) are written: never a write out of bounds.
 *   permuted           [max_rows, hidden_size] contiguous, of dtype.
 *
 * Example: hidden = [a, b, c] (3 tokens), topk 2, ids [[0,1],[1,2],[0,2]], 3 experts, block_size 2, s = 6:
 *   sorted_token_ids = [0,4, 1,2, 3,5], post_pad 6 -> permuted = [a, c, a, b, b, c];
 *   with block_size 4: sorted = [0,4,s,s, 1,2,s,s, 3,5,s,s] -> permuted = [a,c,0,0, a,b,0,0, b,c,0,0].
 *
 * Errors (MOE_ERROR_INVALID_ARGUMENT unless said): num_tokens < 0; topk < 1; hidden_size < 0;
 * num_tokens * topk >= 2^31; a byte count that overflows int64; max_rows < num_tokens * topk; hidden NULL
 * while num_tokens * hidden_size > 0; sorted_token_ids, num_tokens_post_pad or permuted NULL while
 * max_rows * hidden_size > 0; permuted overlapping hidden, sorted_token_ids (its first num_tokens * topk
 * entries) or num_tokens_post_pad; dtype not a moe_dtype_t value. max_rows == 0 or hidden_size == 0 is a
 * no-op (nothing read or written; sizes and dtype still checked, NULL pointers accepted). Every pointer is in the backend's memory space. A hot call, as
 * moe_align_block_size: no allocation, no host synchronisation, graph-capturable; deterministic.
 * -------------------------------------------------------------------------------------------------------*/
moe_status_t moe_permute(const void* hidden, moe_dtype_t dtype, int64_t num_tokens, int64_t hidden_size,
                         int32_t topk, const int32_t* sorted_token_ids, const int32_t* num_tokens_post_pad,
                         int64_t max_rows, void* permuted, void* stream);

/* ---------------------------------------------------------------------------------------------------------
 * moe_combine: output[t][h] = scale * sum over k = 0..topk-1, in that order, of w[t][k] * rows[r(t,k)][h]:
 * the weighted sum of each token's expert outputs, after the grouped GEMM.
 *
 *   layout MOE_ROWS_FLAT: rows is [num_tokens * topk, hidden] in flat order, r(t,k) = t*topk+k; slot (t,k) is
 *     present unless token_positions (optional, may be NULL: every slot present) holds -1 for it.
 *   layout MOE_ROWS_PERMUTED: rows is the expert-grouped layout (e.g. moe_permute's output after the GEMM),
 *     r(t,k) = token_positions[t*topk+k] (required); present when >= 0.
 *   In both layouts any negative token_positions entry marks the slot absent, as -1 does.
 *   An absent slot's row is never read (it may hold garbage or NaN); a token with no present slot gets
 *   round_to_type(0 * scale): zeros for any finite scale (-0 for a negative scale).
 *
 *   rows             of dtype, hidden elements a row, contiguous; MOE_ROWS_PERMUTED: every position in
 *                    token_positions must be a row of it (the caller's guarantee: moe_align_block_size_ep
 *                    gives positions below its num_tokens_post_pad).
 *   token_positions  [num_tokens * topk] int32, or NULL (MOE_ROWS_FLAT only).
 *   topk_weights     [num_tokens, topk] fp32, or NULL for weights of 1.
 *   scale            fp32 factor applied once, after the sum.
 *   output           [num_tokens, hidden] contiguous, of dtype.
 *   dtype            MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16.
 *
 *   Arithmetic, exactly: acc = +0; for each present k in order: acc = fl32(acc + fl32(w * x)) (x the value
 *   widened exactly to fp32; no FMA, no reassociation); output = round_to_type(fl32(acc * scale)), to nearest
 *   even, a NaN written as the canonical NaN of the type as in moe_sum. With NULL weights, scale 1 and every
 *   slot present it equals moe_sum bit for bit. Every backend gives the same bits. Every pointer is in the
 *   backend's memory space; a hot call (no allocation, no host synchronisation, graph-capturable).
 *
 * Errors (MOE_ERROR_INVALID_ARGUMENT unless said): num_tokens < 0; topk < 1; hidden < 0; num_tokens * topk
 * >= 2^31; an element count that overflows int64; layout not a moe_rows_layout_t value; token_positions NULL
 * with MOE_ROWS_PERMUTED; rows or output NULL while num_tokens * hidden > 0; output overlapping rows
 * (MOE_ROWS_FLAT: its num_tokens * topk rows; MOE_ROWS_PERMUTED: its first row, the only one the host knows
 * of), token_positions or topk_weights; dtype an integer or fp8 type
 * (MOE_ERROR_UNSUPPORTED) or not a moe_dtype_t value. num_tokens == 0 or hidden == 0 is a no-op (dtype, sizes
 * and layout are still checked; NULL pointers accepted).
 * -------------------------------------------------------------------------------------------------------*/
typedef enum {
  MOE_ROWS_FLAT = 0,
  MOE_ROWS_PERMUTED = 1,
  /* not layouts: every int32 is a value of the type (C++ range rules); any other value is INVALID_ARGUMENT */
  MOE_ROWS_FORCE_INT32_MIN_ = -0x7FFFFFFF - 1,
  MOE_ROWS_FORCE_INT32_MAX_ = 0x7FFFFFFF
} moe_rows_layout_t;
moe_status_t moe_combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, int64_t num_tokens,
                         int32_t topk, int64_t hidden, const int32_t* token_positions, const float* topk_weights,
                         float scale, void* output, void* stream);

/* ---------------------------------------------------------------------------------------------------------
 * moe_topk_gating: from a router's logits to each token's top-k experts and their weights, for every common
 * router (Mixtral/Qwen softmax, DeepSeek-V3/R1 and Kimi K2 grouped sigmoid with a correction bias, Llama-4
 * sigmoid, GPT-OSS softmax over the chosen logits), with one result on every backend.
 *
 *   logits        [num_tokens, num_experts] contiguous, MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16; converted to
 *                 fp32 exactly. Everything below is fp32 arithmetic, each operation rounded to nearest even, in
 *                 the order written (no FMA contraction, no reassociation).
 *   gate          a HOST pointer to the settings below; gate->correction_bias points into the backend's memory.
 *   topk_ids      [num_tokens, topk] out: each token's chosen experts, best first.
 *   topk_weights  [num_tokens, topk] out (fp32): their weights, in the same order.
 *
 * Per token, with l_e the logit of expert e (0 <= e < num_experts):
 *   1. Scores s_e.  SOFTMAX: m = max_e l_e, s_e = exp(l_e - m) / sum, where sum = exp(l_0 - m) + exp(l_1 - m)
 *      + ... added in ascending e (starting from 0).  SIGMOID: s_e = 1 / (1 + exp(-l_e)).  SOFTMAX_TOPK (GPT-OSS):
 *      s_e = l_e (the softmax comes in step 4).  `exp` is the library's own fp32 function (below).
 *   2. Selection scores b_e = s_e + correction_bias[e] (b_e = s_e when correction_bias is NULL).
 *   3. Choice. With num_groups > 1 the experts form num_groups contiguous groups of
 *      G = num_experts / num_groups; a group's score is the sum of its two largest b_e (its one b_e when G == 1);
 *      the topk_groups groups of highest score are kept and the experts of the other groups are never chosen.
 *      Then the topk experts of highest b_e (among the kept groups) are chosen and written in descending b_e.
 *      Every ranking (groups and experts) uses one order: a before b iff v_a > v_b, or v_a == v_b and
 *      index_a < index_b (ties: the lower index first), where NaN is below every number (-inf included), all NaNs
 *      are equal, and -0 == +0.
 *   4. Weights, in the written order r = 0..topk-1: w_r = s of the r-th chosen expert (without the bias).
 *      SOFTMAX_TOPK: w_r = exp(l_r - m') / sum' over the chosen logits only (m' their max, sum' their exp terms
 *      added in the written order).  If renormalize: w_r = w_r / (w_0 + w_1 + ... ) (added in the written
 *      order).  Then w_r = w_r * routed_scaling_factor (always applied; 1 changes nothing).
 *   A max (m, m') is the largest value under the order above, so a NaN never wins over a number; it matters only
 *   through exp(l - m) anyway.
 *
 * NaN and infinities. The arithmetic is IEEE with these consequences (the same bits on every backend):
 *   - SOFTMAX: a NaN or +inf logit, or a row of only -inf, makes every s_e of the token NaN (as torch.softmax);
 *     -inf logits beside finite ones get s_e = 0. SIGMOID: +inf -> 1, -inf -> 0, NaN -> NaN. SOFTMAX_TOPK: the
 *     weights are NaN when a chosen logit is NaN or +inf, or all chosen logits are -inf.
 *   - A NaN selection score ranks below every number: such experts are chosen only after every expert with a
 *     number (lower index first), and only among kept groups; a NaN group score ranks below every number too.
 *     Ids are always valid expert indices in kept groups and distinct within a token, whatever the logits.
 *   - renormalize with a zero sum gives inf or NaN weights (w / 0).
 *   - A NaN weight is written as the canonical quiet NaN 0x7FC00000 (payloads differ between CPUs and GPUs).
 *
 * exp: moe_routing's own fp32 exp, the same operations on every backend: a reduction by ln2 (k = round(x log2 e),
 * r = x - k ln2 in two steps, the first exact), a degree-7 polynomial for exp(r) evaluated with separate multiplies
 * and adds, and a scaling by 2^k in two exact-or-once-rounded multiplies (gradual underflow, overflow to +inf).
 * exp(NaN) = NaN, exp(+inf) = +inf, exp(-inf) = +0. MEASURED over all 2^32 fp32 inputs against a correctly
 * rounded exp (tools/exp_ulp.cpp): every result is the correctly rounded float or a neighbour of it (at most 1
 * ulp apart; 0.8 % of the inputs in [-104, 89] get the neighbour), and within 0.868 ulp of the exact value.
 * sigmoid(x) = 1 / (1 + exp(-x)) with that exp and IEEE add and division, measured the same way over every
 * x >= -88.72: at most 2 floats from the correctly rounded sigmoid (5.1 % of those inputs differ), within 2.49
 * ulp of the exact value. For x < -88.72 exp(-x) overflows and the formula gives +0 (the true value is below
 * 2^-127); sigmoid(x) = 1 for x above about 17.33.
 * moe::reference::exp_f32 / sigmoid_f32 (moe/reference.hpp) expose these functions to C++.
 *
 * Fast for every size, deterministic, no allocation, no host synchronisation (graph-capturable); no workspace.
 *
 * Example: 1 token, 4 experts, SOFTMAX, topk 2, renormalize, logits [1, 3, 2, 3]: s = [0.0541, 0.3995, 0.1470,
 * 0.3995]; experts 1 and 3 tie: topk_ids = [1, 3] (lower index first), topk_weights = [0.5, 0.5].
 *
 * Errors (MOE_ERROR_INVALID_ARGUMENT unless said): gate NULL; num_tokens < 0; num_experts < 1 or > 65536;
 * gate->score not a moe_score_t; gate->num_groups < 1 or not dividing num_experts; gate->topk_groups outside
 * [1, num_groups] when num_groups > 1 (ignored when num_groups == 1); gate->topk < 1 or above the experts that
 * can be chosen (num_experts, or topk_groups * num_experts / num_groups with groups); num_tokens * num_experts
 * too large for 64-bit byte counts; logits, topk_ids or topk_weights NULL while num_tokens > 0; an output
 * overlapping another buffer of the call (logits, the bias, the other output); dtype not a moe_dtype_t value;
 * an integer dtype (MOE_ERROR_UNSUPPORTED). num_tokens == 0 is valid and writes nothing. Any
 * routed_scaling_factor is accepted (applied as is). The bias values are never checked (NaN ranks as above).
 * -------------------------------------------------------------------------------------------------------*/
typedef enum {
  MOE_SCORE_SOFTMAX = 0,
  MOE_SCORE_SIGMOID = 1,
  MOE_SCORE_SOFTMAX_TOPK = 2,
  /* not scores: every int32 is a value of the type (C++ range rules); any other value is INVALID_ARGUMENT */
  MOE_SCORE_FORCE_INT32_MIN_ = -0x7FFFFFFF - 1,
  MOE_SCORE_FORCE_INT32_MAX_ = 0x7FFFFFFF
} moe_score_t;
typedef struct {
  int32_t topk;                  /* experts chosen per token, >= 1 */
  moe_score_t score;             /* softmax over all experts of a token, or sigmoid of each logit */
  int32_t num_groups;            /* 1: no grouping; else the experts split into num_groups equal contiguous groups */
  int32_t topk_groups;           /* groups kept per token, 1..num_groups (ignored when num_groups == 1) */
  const float* correction_bias;  /* [num_experts] in the backend's memory, or NULL: added for selection only */
  int32_t renormalize;           /* nonzero: the chosen weights are divided by their sum */
  float routed_scaling_factor;   /* the weights are multiplied by it last (1 for none) */
} moe_gate_t;

moe_status_t moe_topk_gating(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
                             const moe_gate_t* gate, int32_t* topk_ids, float* topk_weights, void* stream);

/* ---------------------------------------------------------------------------------------------------------
 * moe_route: moe_topk_gating, then moe_align_block_size_ep over the ids it chose, in one call with one
 * workspace: from a router's logits to the layout a grouped / fused MoE GEMM reads.
 *
 *   logits, dtype, num_tokens, num_experts, gate, topk_ids, topk_weights: as moe_topk_gating (topk_ids and
 *                  topk_weights [num_tokens, gate->topk] are outputs here too).
 *   expert_map, num_local_experts, block_size, sorted_token_ids, expert_ids, num_tokens_post_pad,
 *   token_positions: as moe_align_block_size_ep for topk_ids (int32, numel = num_tokens * gate->topk); expert_map
 *                  may be NULL (the identity: num_local_experts == num_experts); token_positions may be NULL
 *                  (not written); expert_counts is not produced. Capacities: moe_align_max_padded / _blocks(numel,
 *                  num_local_experts, block_size).
 *   workspace      moe_route_workspace_size(...) bytes or more, in the backend's memory, no initialisation needed
 *                  (gating's part, rounded up to 256 bytes, then align_ep's part).
 *
 * Every output equals, bit for bit, moe_topk_gating followed by moe_align_block_size_ep on the same stream (that
 * is how it is computed today: two backend operations back to back; no allocation, no host synchronisation).
 * Errors: those of moe_topk_gating and of moe_align_block_size_ep (naming the argument), num_tokens * topk >=
 * 2^31, a workspace smaller than moe_route_workspace_size gives, and any output or the workspace overlapping
 * another buffer of the call. num_tokens == 0 is valid: num_tokens_post_pad = 0 and nothing else is written.
 * -------------------------------------------------------------------------------------------------------*/
moe_status_t moe_route_workspace_size(int64_t num_tokens, int32_t num_experts, const moe_gate_t* gate,
                                      int32_t num_local_experts, int32_t block_size, size_t* bytes);
moe_status_t moe_route(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
                       const moe_gate_t* gate, const int32_t* expert_map, int32_t num_local_experts,
                       int32_t block_size, int32_t* topk_ids, float* topk_weights, int32_t* sorted_token_ids,
                       int32_t* expert_ids, int32_t* num_tokens_post_pad, int32_t* token_positions, void* workspace,
                       size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_ROUTING_H */
