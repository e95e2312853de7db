#include "contract.hpp"

#include <limits>
#include <string>

#include "buffers.hpp"

namespace moe {
namespace detail {

void throw_invalid(const std::string& what) { throw Error(MOE_ERROR_INVALID_ARGUMENT, what); }
void throw_backend(const std::string& what) { throw Error(MOE_ERROR_BACKEND, what); }

bool is_id_type(moe_dtype_t t) noexcept {
  return t == MOE_INT8 || t == MOE_UINT8 || t == MOE_INT16 || t == MOE_INT32 || t == MOE_INT64;
}
bool is_value_type(moe_dtype_t t) noexcept { return t == MOE_FLOAT32 || t == MOE_FLOAT16 || t == MOE_BFLOAT16; }
bool is_known_dtype(moe_dtype_t t) noexcept { return is_id_type(t) || is_value_type(t); }

namespace {
std::string str(std::int64_t v) { return std::to_string(v); }

void check_dtype(moe_dtype_t t, bool ok, const char* arg, const char* expected) {
  if (!is_known_dtype(t))
    throw_invalid(std::string(arg) + " is not a moe_dtype_t value (got " + str(static_cast<int>(t)) + ")");
  if (!ok) throw Error(MOE_ERROR_UNSUPPORTED, std::string(arg) + " must be " + expected);
}
}  // namespace

AlignShape make_align_shape(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  if (numel < 0 || numel > kMaxNumel) throw_invalid("numel must be in [0, 2^31), got " + str(numel));
  if (num_experts < 1 || num_experts > kMaxExperts)
    throw_invalid("num_experts must be in [1, 65536], got " + str(num_experts));
  if (block_size < 1) throw_invalid("block_size must be >= 1, got " + str(block_size));
  AlignShape s{numel, num_experts, block_size, 0, 0};
  const std::int64_t groups = numel < num_experts ? numel : num_experts;
  s.max_padded = numel + groups * (block_size - 1);  // < 2^31 + 2^16 * 2^31: no int64 overflow
  if (s.max_padded > std::numeric_limits<std::int32_t>::max())
    throw_invalid("numel + min(numel, num_experts) * (block_size - 1) = " + str(s.max_padded) +
                  " exceeds INT32_MAX: the padded length would not fit the int32 outputs (block_size " +
                  str(block_size) + " too large for numel " + str(numel) + ")");
  s.max_blocks = (s.max_padded + block_size - 1) / block_size;
  return s;
}

void check_align_args(const AlignShape& s, const AlignArgs& a, std::size_t required_workspace,
                      std::size_t workspace_alignment) {
  check_dtype(a.id_type, is_id_type(a.id_type), "id_type", "an integer type (MOE_INT8 ... MOE_INT64)");
  if (a.num_tokens_post_pad == nullptr) throw_invalid("num_tokens_post_pad is NULL");
  if (s.numel > 0) {
    if (a.topk_ids == nullptr) throw_invalid("topk_ids is NULL while numel = " + str(s.numel));
    if (a.sorted_token_ids == nullptr) throw_invalid("sorted_token_ids is NULL while numel = " + str(s.numel));
    if (a.expert_ids == nullptr) throw_invalid("expert_ids is NULL while numel = " + str(s.numel));
  }
  if (a.workspace_bytes < required_workspace)
    throw_invalid("workspace_bytes = " + str(static_cast<std::int64_t>(a.workspace_bytes)) +
                  " is smaller than the " + str(static_cast<std::int64_t>(required_workspace)) +
                  " bytes moe_align_workspace_size gives for this shape");
  if (required_workspace > 0 && a.workspace == nullptr)
    throw_invalid("workspace is NULL but this shape needs " + str(static_cast<std::int64_t>(required_workspace)) +
                  " bytes");
  check_workspace_alignment(a.workspace, "moe_align_block_size", workspace_alignment);
  check_disjoint({{a.topk_ids, span_bytes(s.numel, dtype_size(a.id_type)), "topk_ids"},
                  {a.sorted_token_ids, span_bytes(s.max_padded, sizeof(std::int32_t)), "sorted_token_ids"},
                  {a.expert_ids, span_bytes(s.max_blocks, sizeof(std::int32_t)), "expert_ids"},
                  {a.num_tokens_post_pad, sizeof(std::int32_t), "num_tokens_post_pad"},
                  {a.workspace, a.workspace_bytes, "workspace"}});
}

void check_sum_args(const SumShape& s, const void* input, moe_dtype_t dtype, const void* output) {
  check_dtype(dtype, is_value_type(dtype), "dtype", "MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16");
  if (s.num_tokens < 0) throw_invalid("num_tokens must be >= 0, got " + str(s.num_tokens));
  if (s.topk < 1) throw_invalid("topk must be >= 1, got " + str(s.topk));
  if (s.hidden < 0) throw_invalid("hidden must be >= 0, got " + str(s.hidden));
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() / 8;  // bytes must fit too
  if (s.hidden > 0 && (s.num_tokens > max / s.hidden || s.num_tokens * s.hidden > max / s.topk))
    throw_invalid("num_tokens * topk * hidden overflows (" + str(s.num_tokens) + " x " + str(s.topk) + " x " +
                  str(s.hidden) + ")");
  const std::int64_t out_elems = s.num_tokens * s.hidden;
  if (out_elems == 0) return;
  if (input == nullptr) throw_invalid("input is NULL while num_tokens * hidden > 0");
  if (output == nullptr) throw_invalid("output is NULL while num_tokens * hidden > 0");
  const std::size_t esize = dtype_size(dtype);
  check_disjoint({{input, span_bytes(out_elems * s.topk, esize), "input"},  // no overflow: checked above
                  {output, span_bytes(out_elems, esize), "output"}});     // (moe_sum is not in place)
}

}  // namespace detail

std::size_t dtype_size(moe_dtype_t t) {
  switch (t) {
    case MOE_INT8:
    case MOE_UINT8: return 1;
    case MOE_INT16:
    case MOE_FLOAT16:
    case MOE_BFLOAT16: return 2;
    case MOE_INT32:
    case MOE_FLOAT32: return 4;
    case MOE_INT64: return 8;
    default: break;  // any other int (routing.h: every int32 is a moe_dtype_t value)
  }
  detail::throw_invalid("unknown moe_dtype_t value " + std::to_string(static_cast<int>(t)));
}

}  // namespace moe
