// Bindings of the gating operations of issue 28 (moe_topk_gating, moe_route), compiled only when routing.h
// declares them (python/CMakeLists.txt). Semantics: routing.h.
#include "common.hpp"

#include <nanobind/stl/string.h>

namespace moe_py {

namespace {

moe_gate_t make_gate(std::int32_t topk, int score, std::int32_t num_groups, std::int32_t topk_groups,
                     const float* bias, int renormalize, float scale) {
  moe_gate_t g{};
  g.topk = topk;
  g.score = static_cast<moe_score_t>(score);
  g.num_groups = num_groups;
  g.topk_groups = topk_groups;
  g.correction_bias = bias;
  g.renormalize = renormalize;
  g.routed_scaling_factor = scale;
  return g;
}

// logits [num_tokens, num_experts] of a value dtype, and the optional bias [num_experts] fp32.
int check_logits(const Array& l, const Array& bias) {
  const int dt = moe_dtype_of(l.dtype());
  if (!is_value_dtype(dt))
    raise_unsupported("logits must be float32, float16 or bfloat16, got " + dtype_name(l.dtype()));
  require_ndim(l, 2, "(num_tokens, num_experts)");
  if (bias.present) {
    require_same_device(l, bias);
    require_dtype(bias, MOE_FLOAT32, "float32");
    if (bias.size() != l.shape(1))
      raise_invalid("correction_bias must have shape (" + std::to_string(l.shape(1)) + ",) = (num_experts,), got " +
                    shape_str(bias));
  }
  return dt;
}

void require_pairs(const Array& a, std::int64_t n, int dtype, const char* dtype_text) {
  require_dtype(a, dtype, dtype_text);
  if (a.size() < n) raise_invalid(std::string(a.what) + " has " + std::to_string(a.size()) +
                                  " elements, fewer than num_tokens * topk = " + std::to_string(n));
}

}  // namespace

#ifdef MOE_PY_HAS_TOPK_GATING
namespace {

void topk_gating(nb::handle logits, std::int32_t topk, int score, std::int32_t num_groups, std::int32_t topk_groups,
                 nb::handle correction_bias, int renormalize, float scale, nb::handle topk_ids,
                 nb::handle topk_weights, std::uintptr_t stream) {
  const Array l = input(logits, "logits");
  const Array bias = input(correction_bias, "correction_bias", true);
  const int dt = check_logits(l, bias);
  const Array ids = output(topk_ids, "topk_ids");
  const Array w = output(topk_weights, "topk_weights");
  const std::int64_t n = l.shape(0) * static_cast<std::int64_t>(topk > 0 ? topk : 0);
  require_pairs(ids, n, MOE_INT32, "int32");
  require_pairs(w, n, MOE_FLOAT32, "float32");
  require_same_device(l, ids);
  require_same_device(l, w);
  const moe_gate_t g = make_gate(topk, score, num_groups, topk_groups,
                                 bias.present ? static_cast<const float*>(bias.data()) : nullptr, renormalize, scale);
  if (l.shape(1) > INT32_MAX) raise_invalid("num_experts exceeds INT32_MAX");
  moe_status_t st;
  {
    nb::gil_scoped_release nogil;
    st = moe_topk_gating(l.data(), static_cast<moe_dtype_t>(dt), l.shape(0), static_cast<std::int32_t>(l.shape(1)),
                         &g, static_cast<std::int32_t*>(ids.mutable_data()), static_cast<float*>(w.mutable_data()),
                         stream_ptr(stream));
  }
  check(st);
}

void topk_gating_ptr(std::uintptr_t logits, int dtype, std::int64_t num_tokens, std::int32_t num_experts,
                     std::int32_t topk, int score, std::int32_t num_groups, std::int32_t topk_groups,
                     std::uintptr_t bias, int renormalize, float scale, std::uintptr_t ids, std::uintptr_t w,
                     std::uintptr_t stream) {
  const moe_gate_t g =
      make_gate(topk, score, num_groups, topk_groups, reinterpret_cast<const float*>(bias), renormalize, scale);
  check(moe_topk_gating(reinterpret_cast<const void*>(logits), static_cast<moe_dtype_t>(dtype), num_tokens,
                        num_experts, &g, reinterpret_cast<std::int32_t*>(ids), reinterpret_cast<float*>(w),
                        stream_ptr(stream)));
}

}  // namespace
#endif

#ifdef MOE_PY_HAS_ROUTE
namespace {

std::size_t route_workspace(std::int64_t num_tokens, std::int32_t num_experts, std::int32_t topk, int score,
                            std::int32_t num_groups, std::int32_t topk_groups, int renormalize, float scale,
                            std::int32_t num_local, std::int32_t block_size) {
  const moe_gate_t g = make_gate(topk, score, num_groups, topk_groups, nullptr, renormalize, scale);
  std::size_t bytes = 0;
  check(moe_route_workspace_size(num_tokens, num_experts, &g, num_local, block_size, &bytes));
  return bytes;
}

void route(nb::handle logits, std::int32_t topk, int score, std::int32_t num_groups, std::int32_t topk_groups,
           nb::handle correction_bias, int renormalize, float scale, nb::handle expert_map, std::int32_t num_local,
           std::int32_t block_size, nb::handle topk_ids, nb::handle topk_weights, nb::handle sorted_token_ids,
           nb::handle expert_ids, nb::handle num_tokens_post_pad, nb::handle token_positions, nb::handle workspace,
           std::uintptr_t stream) {
  const Array l = input(logits, "logits");
  const Array bias = input(correction_bias, "correction_bias", true);
  const int dt = check_logits(l, bias);
  const std::int64_t n = l.shape(0) * static_cast<std::int64_t>(topk > 0 ? topk : 0);
  const std::int64_t padded = moe_align_max_padded(n, num_local, block_size);
  if (padded < 0) raise_last(MOE_ERROR_INVALID_ARGUMENT);
  const std::int64_t blocks = moe_align_max_blocks(n, num_local, block_size);
  const Array map = input(expert_map, "expert_map", true);
  if (map.present) {
    require_same_device(l, map);
    require_dtype(map, MOE_INT32, "int32");
    if (map.size() != l.shape(1))
      raise_invalid("expert_map must have shape (" + std::to_string(l.shape(1)) + ",) = (num_experts,), got " +
                    shape_str(map));
  }
  const Array ids = output(topk_ids, "topk_ids");
  const Array w = output(topk_weights, "topk_weights");
  const Array s = output(sorted_token_ids, "sorted_token_ids");
  const Array e = output(expert_ids, "expert_ids");
  const Array p = output(num_tokens_post_pad, "num_tokens_post_pad");
  const Array pos = output(token_positions, "token_positions", true);
  const Array ws = output(workspace, "workspace", true);
  require_pairs(ids, n, MOE_INT32, "int32");
  require_pairs(w, n, MOE_FLOAT32, "float32");
  require_dtype(s, MOE_INT32, "int32");
  require_at_least(s, padded, "moe_align_max_padded");
  require_dtype(e, MOE_INT32, "int32");
  require_at_least(e, blocks, "moe_align_max_blocks");
  require_dtype(p, MOE_INT32, "int32");
  require_at_least(p, 1, "one int32");
  if (pos.present) require_pairs(pos, n, MOE_INT32, "int32");
  for (const Array* o : {&ids, &w, &s, &e, &p, &pos})
    if (o->present) require_same_device(l, *o);
  const moe_gate_t g = make_gate(topk, score, num_groups, topk_groups,
                                 bias.present ? static_cast<const float*>(bias.data()) : nullptr, renormalize, scale);
  if (l.shape(1) > INT32_MAX) raise_invalid("num_experts exceeds INT32_MAX");
  moe_status_t st;
  {
    nb::gil_scoped_release nogil;
    st = moe_route(l.data(), static_cast<moe_dtype_t>(dt), l.shape(0), static_cast<std::int32_t>(l.shape(1)), &g,
                   map.present ? static_cast<const std::int32_t*>(map.data()) : nullptr, num_local, block_size,
                   static_cast<std::int32_t*>(ids.mutable_data()), static_cast<float*>(w.mutable_data()),
                   static_cast<std::int32_t*>(s.mutable_data()), static_cast<std::int32_t*>(e.mutable_data()),
                   static_cast<std::int32_t*>(p.mutable_data()),
                   pos.present ? static_cast<std::int32_t*>(pos.mutable_data()) : nullptr,
                   ws.present ? ws.mutable_data() : nullptr,
                   ws.present ? static_cast<std::size_t>(ws.size() * ws.itemsize()) : 0, stream_ptr(stream));
  }
  check(st);
}

void route_ptr(std::uintptr_t logits, int dtype, std::int64_t num_tokens, std::int32_t num_experts, std::int32_t topk,
               int score, std::int32_t num_groups, std::int32_t topk_groups, std::uintptr_t bias, int renormalize,
               float scale, std::uintptr_t map, std::int32_t num_local, std::int32_t block_size, std::uintptr_t ids,
               std::uintptr_t w, std::uintptr_t s, std::uintptr_t e, std::uintptr_t p, std::uintptr_t pos,
               std::uintptr_t ws, std::size_t ws_bytes, std::uintptr_t stream) {
  const moe_gate_t g =
      make_gate(topk, score, num_groups, topk_groups, reinterpret_cast<const float*>(bias), renormalize, scale);
  check(moe_route(reinterpret_cast<const void*>(logits), static_cast<moe_dtype_t>(dtype), num_tokens, num_experts, &g,
                  reinterpret_cast<const std::int32_t*>(map), num_local, block_size,
                  reinterpret_cast<std::int32_t*>(ids), reinterpret_cast<float*>(w),
                  reinterpret_cast<std::int32_t*>(s), reinterpret_cast<std::int32_t*>(e),
                  reinterpret_cast<std::int32_t*>(p), reinterpret_cast<std::int32_t*>(pos),
                  reinterpret_cast<void*>(ws), ws_bytes, stream_ptr(stream)));
}

}  // namespace
#endif

void register_gating(nb::module_& m) {
#ifdef MOE_PY_HAS_TOPK_GATING
  m.def("topk_gating", &topk_gating, nb::arg("logits"), nb::arg("topk"), nb::arg("score"), nb::arg("num_groups"),
        nb::arg("topk_groups"), nb::arg("correction_bias").none(), nb::arg("renormalize"),
        nb::arg("routed_scaling_factor"), nb::arg("topk_ids"), nb::arg("topk_weights"), nb::arg("stream"));
  m.def("topk_gating_ptr", &topk_gating_ptr);
#endif
#ifdef MOE_PY_HAS_ROUTE
  m.def("route_workspace_size", &route_workspace);
  m.def("route", &route, nb::arg("logits"), nb::arg("topk"), nb::arg("score"), nb::arg("num_groups"),
        nb::arg("topk_groups"), nb::arg("correction_bias").none(), nb::arg("renormalize"),
        nb::arg("routed_scaling_factor"), nb::arg("expert_map").none(), nb::arg("num_local_experts"),
        nb::arg("block_size"), nb::arg("topk_ids"), nb::arg("topk_weights"), nb::arg("sorted_token_ids"),
        nb::arg("expert_ids"), nb::arg("num_tokens_post_pad"), nb::arg("token_positions").none(),
        nb::arg("workspace").none(), nb::arg("stream"));
  m.def("route_ptr", &route_ptr);
#endif
  (void)m;
}

}  // namespace moe_py
