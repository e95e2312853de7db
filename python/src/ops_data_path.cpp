// Bindings of the data-path operations of issue 27 (moe_align_block_size_ep, moe_permute, moe_combine), compiled
// only when routing.h declares them (python/CMakeLists.txt). Semantics: routing.h.
#include "common.hpp"

#include <nanobind/stl/string.h>

namespace moe_py {

namespace {

[[maybe_unused]] std::int64_t padded_of(std::int64_t numel, std::int32_t groups, std::int32_t block_size) {
  const std::int64_t v = moe_align_max_padded(numel, groups, block_size);
  if (v < 0) raise_last(MOE_ERROR_INVALID_ARGUMENT);
  return v;
}

[[maybe_unused]] void require_i32_vector(const Array& a, std::int64_t at_least, const char* capacity) {
  require_dtype(a, MOE_INT32, "int32");
  require_at_least(a, at_least, capacity);
}

}  // namespace

#ifdef MOE_PY_HAS_ALIGN_EP
namespace {

std::size_t align_workspace_ep(std::int64_t numel, std::int32_t num_experts, std::int32_t num_local,
                               std::int32_t block_size) {
  std::size_t bytes = 0;
  check(moe_align_workspace_size_ep(numel, num_experts, num_local, block_size, &bytes));
  return bytes;
}

void align_block_size_ep(nb::handle topk_ids, std::int32_t num_experts, std::int32_t block_size,
                         nb::handle expert_map, std::int32_t num_local, nb::handle sorted_token_ids,
                         nb::handle expert_ids, nb::handle num_tokens_post_pad, nb::handle expert_counts,
                         nb::handle token_positions, nb::handle workspace, std::uintptr_t stream) {
  const Array ids = input(topk_ids, "topk_ids");
  const int id_type = moe_dtype_of(ids.dtype());
  if (!is_id_dtype(id_type))
    raise_unsupported("topk_ids must have an integer dtype (int8, uint8, int16, int32, int64), got " +
                      dtype_name(ids.dtype()));
  const std::int64_t numel = ids.size();
  const std::int64_t padded = padded_of(numel, num_local, block_size);
  const std::int64_t blocks = moe_align_max_blocks(numel, num_local, block_size);
  const Array map = input(expert_map, "expert_map", true);
  if (map.present) {
    require_same_device(ids, map);
    require_dtype(map, MOE_INT32, "int32");
    if (map.ndim() != 1 || map.shape(0) != num_experts)
      raise_invalid("expert_map must have shape (" + std::to_string(num_experts) + ",) = (num_experts,), got " +
                    shape_str(map));
  }
  const Array s = output(sorted_token_ids, "sorted_token_ids");
  const Array e = output(expert_ids, "expert_ids");
  const Array p = output(num_tokens_post_pad, "num_tokens_post_pad");
  const Array c = output(expert_counts, "expert_counts", true);
  const Array t = output(token_positions, "token_positions", true);
  const Array ws = output(workspace, "workspace", true);
  for (const Array* o : {&s, &e, &p}) require_ndim(*o, 1, "(n,)");
  require_i32_vector(s, padded, "moe_align_max_padded");
  require_i32_vector(e, blocks, "moe_align_max_blocks");
  require_i32_vector(p, 1, "one int32");
  if (c.present) require_i32_vector(c, num_local, "num_local_experts");
  if (t.present) require_i32_vector(t, numel, "numel");
  for (const Array* o : {&s, &e, &p, &c, &t})
    if (o->present) require_same_device(ids, *o);
  moe_status_t st;
  {
    nb::gil_scoped_release nogil;
    st = moe_align_block_size_ep(
        ids.data(), static_cast<moe_dtype_t>(id_type), numel, num_experts,
        map.present ? static_cast<const std::int32_t*>(map.data()) : nullptr, num_local, block_size,
        static_cast<std::int32_t*>(s.mutable_data()), static_cast<std::int32_t*>(e.mutable_data()),
        static_cast<std::int32_t*>(p.mutable_data()),
        c.present ? static_cast<std::int32_t*>(c.mutable_data()) : nullptr,
        t.present ? static_cast<std::int32_t*>(t.mutable_data()) : nullptr, ws.present ? ws.mutable_data() : nullptr,
        ws.present ? static_cast<std::size_t>(ws.size() * ws.itemsize()) : 0, stream_ptr(stream));
  }
  check(st);
}

void align_block_size_ep_ptr(std::uintptr_t ids, int id_type, std::int64_t numel, std::int32_t num_experts,
                             std::uintptr_t map, std::int32_t num_local, std::int32_t block_size, std::uintptr_t s,
                             std::uintptr_t e, std::uintptr_t p, std::uintptr_t c, std::uintptr_t t,
                             std::uintptr_t ws, std::size_t ws_bytes, std::uintptr_t stream) {
  check(moe_align_block_size_ep(reinterpret_cast<const void*>(ids), static_cast<moe_dtype_t>(id_type), numel,
                                num_experts, reinterpret_cast<const std::int32_t*>(map), num_local, block_size,
                                reinterpret_cast<std::int32_t*>(s), reinterpret_cast<std::int32_t*>(e),
                                reinterpret_cast<std::int32_t*>(p), reinterpret_cast<std::int32_t*>(c),
                                reinterpret_cast<std::int32_t*>(t), reinterpret_cast<void*>(ws), ws_bytes,
                                stream_ptr(stream)));
}

}  // namespace
#endif

#ifdef MOE_PY_HAS_PERMUTE
namespace {

// permute copies bytes: a dtype the library does not name travels as the integer type of its size.
int permute_dtype(const Array& a) {
  const int t = moe_dtype_of(a.dtype());
  if (t >= 0) return t;
  switch (a.itemsize()) {
    case 1: return MOE_INT8;
    case 2: return MOE_INT16;
    case 4: return MOE_INT32;
    case 8: return MOE_INT64;
    default:
      raise_unsupported(std::string(a.what) + " has dtype " + dtype_name(a.dtype()) +
                        ", whose elements are not 1, 2, 4 or 8 bytes");
  }
}

void permute(nb::handle hidden, std::int32_t topk, nb::handle sorted_token_ids, nb::handle num_tokens_post_pad,
             nb::handle permuted, std::uintptr_t stream) {
  const Array h = input(hidden, "hidden");
  require_ndim(h, 2, "(num_tokens, hidden_size)");
  const int dt = permute_dtype(h);
  const Array s = input(sorted_token_ids, "sorted_token_ids");
  const Array p = input(num_tokens_post_pad, "num_tokens_post_pad");
  require_dtype(s, MOE_INT32, "int32");
  require_i32_vector(p, 1, "one int32");
  const Array o = output(permuted, "out");
  for (const Array* a : {&s, &p, &o}) require_same_device(h, *a);
  if (!(o.dtype() == h.dtype())) raise_invalid("out must have hidden's dtype " + dtype_name(h.dtype()) + ", got " + dtype_name(o.dtype()));
  if (o.ndim() != 2 || o.shape(1) != h.shape(1) || o.shape(0) < s.size())
    raise_invalid("out must have shape (max_rows, " + std::to_string(h.shape(1)) + ") with max_rows >= " +
                  std::to_string(s.size()) + " (len(sorted_token_ids)), got " + shape_str(o));
  moe_status_t st;
  {
    nb::gil_scoped_release nogil;
    st = moe_permute(h.data(), static_cast<moe_dtype_t>(dt), h.shape(0), h.shape(1), topk,
                     static_cast<const std::int32_t*>(s.data()), static_cast<const std::int32_t*>(p.data()),
                     o.shape(0), o.mutable_data(), stream_ptr(stream));
  }
  check(st);
}

void permute_ptr(std::uintptr_t hidden, int dtype, std::int64_t num_tokens, std::int64_t hidden_size,
                 std::int32_t topk, std::uintptr_t s, std::uintptr_t p, std::int64_t max_rows, std::uintptr_t out,
                 std::uintptr_t stream) {
  check(moe_permute(reinterpret_cast<const void*>(hidden), static_cast<moe_dtype_t>(dtype), num_tokens, hidden_size,
                    topk, reinterpret_cast<const std::int32_t*>(s), reinterpret_cast<const std::int32_t*>(p), max_rows,
                    reinterpret_cast<void*>(out), stream_ptr(stream)));
}

}  // namespace
#endif

#ifdef MOE_PY_HAS_COMBINE
namespace {

void combine(nb::handle rows, int layout, std::int64_t num_tokens, std::int32_t topk, nb::handle token_positions,
             nb::handle topk_weights, float scale, nb::handle out, std::uintptr_t stream) {
  const Array r = input(rows, "rows");
  const int dt = moe_dtype_of(r.dtype());
  if (!is_value_dtype(dt))
    raise_unsupported("rows must be float32, float16 or bfloat16, got " + dtype_name(r.dtype()));
  if (r.ndim() != 2 && r.ndim() != 3)
    raise_invalid("rows must have shape (rows, hidden) or (num_tokens, topk, hidden), got " + shape_str(r));
  const std::int64_t hidden = r.shape(r.ndim() - 1);
  const std::int64_t slots = num_tokens * topk;
  if (layout == MOE_ROWS_FLAT && hidden > 0 && r.size() / hidden != slots)
    raise_invalid("rows must have num_tokens * topk = " + std::to_string(slots) + " rows in layout 'flat', got " +
                  shape_str(r));
  const Array pos = input(token_positions, "token_positions", true);
  const Array w = input(topk_weights, "topk_weights", true);
  if (pos.present) {
    require_dtype(pos, MOE_INT32, "int32");
    if (pos.size() != slots)
      raise_invalid("token_positions must have num_tokens * topk = " + std::to_string(slots) + " elements, got " +
                    shape_str(pos));
    require_same_device(r, pos);
  }
  if (w.present) {
    require_dtype(w, MOE_FLOAT32, "float32");
    if (w.size() != slots)
      raise_invalid("topk_weights must have num_tokens * topk = " + std::to_string(slots) + " elements, got " +
                    shape_str(w));
    require_same_device(r, w);
  }
  const Array o = output(out, "out");
  require_same_device(r, o);
  require_dtype(o, dt, dtype_name(r.dtype()) + " (rows' dtype)");
  if (o.ndim() != 2 || o.shape(0) != num_tokens || o.shape(1) != hidden)
    raise_invalid("out must have shape (" + std::to_string(num_tokens) + ", " + std::to_string(hidden) +
                  ") = (num_tokens, hidden), got " + shape_str(o));
  moe_status_t st;
  {
    nb::gil_scoped_release nogil;
    st = moe_combine(r.data(), static_cast<moe_dtype_t>(dt), static_cast<moe_rows_layout_t>(layout), num_tokens, topk,
                     hidden, pos.present ? static_cast<const std::int32_t*>(pos.data()) : nullptr,
                     w.present ? static_cast<const float*>(w.data()) : nullptr, scale, o.mutable_data(),
                     stream_ptr(stream));
  }
  check(st);
}

void combine_ptr(std::uintptr_t rows, int dtype, int layout, std::int64_t num_tokens, std::int32_t topk,
                 std::int64_t hidden, std::uintptr_t pos, std::uintptr_t w, float scale, std::uintptr_t out,
                 std::uintptr_t stream) {
  check(moe_combine(reinterpret_cast<const void*>(rows), static_cast<moe_dtype_t>(dtype),
                    static_cast<moe_rows_layout_t>(layout), num_tokens, topk, hidden,
                    reinterpret_cast<const std::int32_t*>(pos), reinterpret_cast<const float*>(w), scale,
                    reinterpret_cast<void*>(out), stream_ptr(stream)));
}

}  // namespace
#endif

void register_data_path(nb::module_& m) {
#ifdef MOE_PY_HAS_ALIGN_EP
  m.def("align_workspace_size_ep", &align_workspace_ep);
  m.def("align_block_size_ep", &align_block_size_ep, nb::arg("topk_ids"), nb::arg("num_experts"),
        nb::arg("block_size"), nb::arg("expert_map").none(), nb::arg("num_local_experts"), nb::arg("sorted_token_ids"),
        nb::arg("expert_ids"), nb::arg("num_tokens_post_pad"), nb::arg("expert_counts").none(),
        nb::arg("token_positions").none(), nb::arg("workspace").none(), nb::arg("stream"));
  m.def("align_block_size_ep_ptr", &align_block_size_ep_ptr);
#endif
#ifdef MOE_PY_HAS_PERMUTE
  m.def("permute", &permute, nb::arg("hidden"), nb::arg("topk"), nb::arg("sorted_token_ids"),
        nb::arg("num_tokens_post_pad"), nb::arg("out"), nb::arg("stream"));
  m.def("permute_ptr", &permute_ptr);
#endif
#ifdef MOE_PY_HAS_COMBINE
  m.def("combine", &combine, nb::arg("rows"), nb::arg("layout"), nb::arg("num_tokens"), nb::arg("topk"),
        nb::arg("token_positions").none(), nb::arg("topk_weights").none(), nb::arg("scale"), nb::arg("out"),
        nb::arg("stream"));
  m.def("combine_ptr", &combine_ptr);
#endif
  (void)m;
}

}  // namespace moe_py
