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

typedef enum {
  MOE_SUCCESS = 0,
  MOE_ERROR_INVALID_ARGUMENT = 1, /* a size, pointer or buffer the caller passed is not acceptable */
  MOE_ERROR_UNSUPPORTED = 2,      /* a valid dtype this operation does not take (e.g. float ids) */
  MOE_ERROR_BACKEND = 3           /* the backend's runtime failed (no device, launch error, ...) */
} moe_status_t;

typedef enum {
  MOE_INT8, MOE_UINT8, MOE_INT16, MOE_INT32, MOE_INT64, /* ids of moe_align_block_size */
  MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16                /* values of moe_sum */
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
 *   workspace           scratch of moe_align_workspace_size(...) bytes or more, in the backend's memory; its
 *                       contents need no initialisation. NULL / 0 is accepted when the size is 0.
 *
 * Example: ids [0,1,2,1,2,3,0,3,4], block_size 4, 5 experts, s = 9:
 *   sorted_token_ids = [0,6,s,s, 1,3,s,s, 2,4,s,s, 5,7,s,s, 8,s,s,s], expert_ids = [0,1,2,3,4],
 *   num_tokens_post_pad = 20; capacities 9+5*3 = 24 and 6, so 4 more s and one more -1 are written.
 *
 * Errors (MOE_ERROR_INVALID_ARGUMENT unless said): numel < 0 or >= 2^31; num_experts < 1 or > 65536;
 * block_size < 1; moe_align_max_padded(...) > INT32_MAX (the padded length would not fit the int32 outputs);
 * topk_ids, sorted_token_ids or expert_ids NULL while numel > 0; num_tokens_post_pad NULL; workspace smaller
 * than required (or NULL with a non-zero size); id_type not an integer type (MOE_ERROR_UNSUPPORTED).
 * numel == 0 is valid: num_tokens_post_pad = 0 and nothing else is written (both capacities are 0).
 * -------------------------------------------------------------------------------------------------------*/

/* numel + min(numel, num_experts) * (block_size - 1): the longest sorted_token_ids can be.
 * Returns -1 (and sets moe_last_error) for arguments moe_align_block_size would reject. */
int64_t moe_align_max_padded(int64_t numel, int32_t num_experts, int32_t block_size);
/* ceil(moe_align_max_padded(...) / block_size): the longest expert_ids can be; -1 for invalid arguments. */
int64_t moe_align_max_blocks(int64_t numel, int32_t num_experts, int32_t block_size);
/* Bytes of workspace moe_align_block_size needs for this shape on this backend (may be 0). */
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
 * while num_tokens * hidden > 0, output overlapping input (MOE_ERROR_INVALID_ARGUMENT); an integer dtype
 * (MOE_ERROR_UNSUPPORTED). num_tokens == 0 or hidden == 0 is a no-op.
 * -------------------------------------------------------------------------------------------------------*/
moe_status_t moe_sum(const void* input, moe_dtype_t dtype, int64_t num_tokens, int32_t topk, int64_t hidden,
                     void* output, void* stream);

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
typedef enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1, MOE_SCORE_SOFTMAX_TOPK = 2 } moe_score_t;
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
