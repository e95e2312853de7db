// moe_routing._ext: the C API of moe-routing on DLPack arrays (nanobind). The Python package (python/moe_routing)
// allocates outputs and workspaces in the caller's framework and calls these; they check every array (dtype,
// shape, C-contiguity, memory space, capacity) and raise moe_routing.Error subclasses with the library's text.
// The *_ptr functions take raw pointers: the PyTorch layer's fast path, which has checked the tensors itself.
#include "common.hpp"

#include "../moe_routing/csrc/api_table.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#if defined(MOE_BACKEND_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace moe_py {

namespace {
nb::handle g_error_class[4];  // indexed by moe_status_t; [0] = Error itself (kept alive by the module)

constexpr std::int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10, kDLROCMHost = 11,
                       kDLCUDAManaged = 13;

const char* device_type_name(std::int32_t t) {
  switch (t) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "another device";
  }
}

// The memory space of this build's backend: host for CPU (and Kokkos with a host memory space), the current
// device for CUDA / HIP.
void check_memory_space(std::int32_t type, std::int32_t id, const char* what) {
  const std::string got = std::string(device_type_name(type)) + ":" + std::to_string(id);
#if defined(MOE_BACKEND_CUDA)
  if (type != kDLCUDA && type != kDLCUDAManaged)
    raise_invalid(std::string(what) + " must be a CUDA device array (this build's backend is cuda), got " + got);
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) raise(MOE_ERROR_BACKEND, "cudaGetDevice failed");
  if (type == kDLCUDA && id != current)
    raise_invalid(std::string(what) + " is on cuda:" + std::to_string(id) + " but the current device is cuda:" +
                  std::to_string(current) + " (the library runs on the current device)");
#elif defined(MOE_BACKEND_HIP)
  if (type != kDLROCM && type != kDLCUDA)
    raise_invalid(std::string(what) + " must be a GPU device array (this build's backend is hip), got " + got);
#else
  if (type != kDLCPU && type != kDLCUDAHost && type != kDLROCMHost)
    raise_invalid(std::string(what) + " must be a host array (this build's backend is " + moe_backend_name() +
                  "), got " + got);
#endif
}

bool c_contiguous(std::size_t ndim, const std::int64_t* shape, const std::int64_t* strides) {
  std::int64_t size = 1;
  for (std::size_t i = 0; i < ndim; ++i) size *= shape[i];
  if (size <= 1 || strides == nullptr) return true;
  std::int64_t accum = 1;
  for (std::size_t i = ndim; i-- > 0;) {
    if (shape[i] != 1 && strides[i] != accum) return false;
    accum *= shape[i];
  }
  return true;
}

template <class A>
void check_array(const A& a, const char* what) {
  if (!c_contiguous(a.ndim(), a.shape_ptr(), a.stride_ptr()))
    raise_invalid(std::string(what) + " must be C-contiguous (got strides that are not row-major)");
  check_memory_space(a.device_type(), a.device_id(), what);
}

std::string py_type_name(nb::handle h) { return nb::type_name(h.type()).c_str(); }
}  // namespace

[[noreturn]] void raise(moe_status_t status, const std::string& what) {
  const int s = static_cast<int>(status);
  nb::handle cls = (s >= 1 && s <= 3) ? g_error_class[s] : g_error_class[0];
  PyErr_SetString(cls.ptr(), what.c_str());
  throw nb::python_error();
}

[[noreturn]] void raise_last(moe_status_t status) { raise(status, moe_last_error()); }

Array input(nb::handle h, const char* what, bool optional) {
  Array a;
  a.what = what;
  if (h.is_none()) {
    if (optional) return a;
    raise_invalid(std::string(what) + " is None");
  }
  if (!nb::try_cast(h, a.ro, false))
    raise_invalid(std::string(what) + " must be an array exporting DLPack or the buffer protocol, got " +
                  py_type_name(h));
  a.present = true;
  check_array(a.ro, what);
  return a;
}

Array output(nb::handle h, const char* what, bool optional) {
  Array a;
  a.what = what;
  a.writable = true;
  if (h.is_none()) {
    if (optional) return a;
    raise_invalid(std::string(what) + " is None");
  }
  if (!nb::try_cast(h, a.rw, false))
    raise_invalid(std::string(what) + " must be a writable array exporting DLPack or the buffer protocol, got " +
                  py_type_name(h) + " (read-only arrays, e.g. JAX's, cannot be outputs)");
  a.present = true;
  check_array(a.rw, what);
  return a;
}

std::string dtype_name(nb::dlpack::dtype dt) {
  using c = nb::dlpack::dtype_code;
  const char* prefix = "?";
  switch (static_cast<c>(dt.code)) {
    case c::Int: prefix = "int"; break;
    case c::UInt: prefix = "uint"; break;
    case c::Float: prefix = "float"; break;
    case c::Bfloat: prefix = "bfloat"; break;
    case c::Complex: prefix = "complex"; break;
    case c::Bool: return "bool";
    case c::Float8_E4M3FN: return "float8_e4m3fn";
    case c::Float8_E5M2: return "float8_e5m2";
    default: return "dlpack dtype code " + std::to_string(dt.code) + " (" + std::to_string(dt.bits) + " bits)";
  }
  std::string s = std::string(prefix) + std::to_string(dt.bits);
  if (dt.lanes != 1) s += "x" + std::to_string(dt.lanes);
  return s;
}

std::string shape_str(const Array& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

int moe_dtype_of(nb::dlpack::dtype dt) {
  using c = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return -1;
  switch (static_cast<c>(dt.code)) {
    case c::Int:
      return dt.bits == 8 ? MOE_INT8 : dt.bits == 16 ? MOE_INT16 : dt.bits == 32 ? MOE_INT32
           : dt.bits == 64 ? MOE_INT64 : -1;
    case c::UInt: return dt.bits == 8 ? MOE_UINT8 : -1;
    case c::Float: return dt.bits == 32 ? MOE_FLOAT32 : dt.bits == 16 ? MOE_FLOAT16 : -1;
    case c::Bfloat: return dt.bits == 16 ? MOE_BFLOAT16 : -1;
#ifdef MOE_PY_HAS_FLOAT8
    case c::Float8_E4M3FN: return dt.bits == 8 ? MOE_FLOAT8_E4M3 : -1;
    case c::Float8_E5M2: return dt.bits == 8 ? MOE_FLOAT8_E5M2 : -1;
#endif
    default: return -1;
  }
}

bool is_id_dtype(int t) {
  return t == MOE_INT8 || t == MOE_UINT8 || t == MOE_INT16 || t == MOE_INT32 || t == MOE_INT64;
}
bool is_value_dtype(int t) { return t == MOE_FLOAT32 || t == MOE_FLOAT16 || t == MOE_BFLOAT16; }

void require_ndim(const Array& a, std::size_t ndim, const char* expected_shape) {
  if (a.ndim() != ndim)
    raise_invalid(std::string(a.what) + " must have shape " + expected_shape + ", got shape " + shape_str(a));
}

void require_dtype(const Array& a, int moe_dtype, const std::string& expected) {
  if (moe_dtype_of(a.dtype()) != moe_dtype)
    raise_invalid(std::string(a.what) + " must be " + expected + ", got " + dtype_name(a.dtype()));
}

void require_at_least(const Array& a, std::int64_t elems, const char* capacity_name) {
  if (a.size() < elems)
    raise_invalid(std::string(a.what) + " has " + std::to_string(a.size()) + " elements, fewer than the " +
                  std::to_string(elems) + " this call writes (" + capacity_name + ")");
}

void require_same_device(const Array& a, const Array& b) {
  const auto ta = a.writable ? a.rw.device_type() : a.ro.device_type();
  const auto tb = b.writable ? b.rw.device_type() : b.ro.device_type();
  const auto ia = a.writable ? a.rw.device_id() : a.ro.device_id();
  const auto ib = b.writable ? b.rw.device_id() : b.ro.device_id();
  if ((ta == kDLCUDA || ta == kDLROCM) && (ta != tb || ia != ib))
    raise_invalid(std::string(b.what) + " is not on the device of " + a.what);
}

namespace {

std::int64_t max_padded(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  const std::int64_t v = moe_align_max_padded(numel, num_experts, block_size);
  if (v < 0) raise_last(MOE_ERROR_INVALID_ARGUMENT);
  return v;
}
std::int64_t max_blocks(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  const std::int64_t v = moe_align_max_blocks(numel, num_experts, block_size);
  if (v < 0) raise_last(MOE_ERROR_INVALID_ARGUMENT);
  return v;
}
std::size_t align_workspace(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  std::size_t bytes = 0;
  check(moe_align_workspace_size(numel, num_experts, block_size, &bytes));
  return bytes;
}

// The id array of an align call: integer dtype (others: Unsupported, as the C API answers), any shape.
int id_dtype(const Array& ids) {
  const int t = moe_dtype_of(ids.dtype());
  if (!is_id_dtype(t))
    raise_unsupported(std::string(ids.what) + " must have an integer dtype (int8, uint8, int16, int32, int64), got " +
                      dtype_name(ids.dtype()));
  return t;
}

void workspace_of(const Array& ws, void** ptr, std::size_t* bytes) {
  *ptr = ws.present ? ws.mutable_data() : nullptr;
  *bytes = ws.present ? static_cast<std::size_t>(ws.size() * ws.itemsize()) : 0;
}

void align_block_size(nb::handle topk_ids, std::int32_t num_experts, std::int32_t block_size,
                      nb::handle sorted_token_ids, nb::handle expert_ids, nb::handle num_tokens_post_pad,
                      nb::handle workspace, std::uintptr_t stream) {
  const Array ids = input(topk_ids, "topk_ids");
  const int id_type = id_dtype(ids);
  const std::int64_t numel = ids.size();
  const std::int64_t padded = max_padded(numel, num_experts, block_size);
  const std::int64_t blocks = max_blocks(numel, num_experts, block_size);
  const Array sorted = output(sorted_token_ids, "sorted_token_ids");
  const Array experts = output(expert_ids, "expert_ids");
  const Array post = output(num_tokens_post_pad, "num_tokens_post_pad");
  const Array ws = output(workspace, "workspace", true);
  for (const Array* o : {&sorted, &experts, &post}) {
    require_ndim(*o, 1, "(n,)");
    require_dtype(*o, MOE_INT32, "int32");
    require_same_device(ids, *o);
  }
  require_at_least(sorted, padded, "moe_align_max_padded");
  require_at_least(experts, blocks, "moe_align_max_blocks");
  require_at_least(post, 1, "one int32");
  void* ws_ptr;
  std::size_t ws_bytes;
  workspace_of(ws, &ws_ptr, &ws_bytes);
  moe_status_t s;
  {
    nb::gil_scoped_release nogil;
    s = moe_align_block_size(ids.data(), static_cast<moe_dtype_t>(id_type), numel, num_experts, block_size,
                             static_cast<std::int32_t*>(sorted.mutable_data()),
                             static_cast<std::int32_t*>(experts.mutable_data()),
                             static_cast<std::int32_t*>(post.mutable_data()), ws_ptr, ws_bytes, stream_ptr(stream));
  }
  check(s);
}

void moe_sum(nb::handle x, nb::handle out, std::uintptr_t stream) {
  const Array in = input(x, "x");
  const int t = moe_dtype_of(in.dtype());
  if (!is_value_dtype(t))
    raise_unsupported(std::string("x must be float32, float16 or bfloat16, got ") + dtype_name(in.dtype()));
  require_ndim(in, 3, "(num_tokens, topk, hidden)");
  const Array o = output(out, "out");
  require_same_device(in, o);
  require_dtype(o, t, dtype_name(in.dtype()) + " (x's dtype)");
  if (o.ndim() != 2 || o.shape(0) != in.shape(0) || o.shape(1) != in.shape(2))
    raise_invalid("out must have shape (" + std::to_string(in.shape(0)) + ", " + std::to_string(in.shape(2)) +
                  ") = (num_tokens, hidden), got " + shape_str(o));
  if (in.shape(1) > INT32_MAX) raise_invalid("x's topk dimension exceeds INT32_MAX");
  moe_status_t s;
  {
    nb::gil_scoped_release nogil;
    s = ::moe_sum(in.data(), static_cast<moe_dtype_t>(t), in.shape(0), static_cast<std::int32_t>(in.shape(1)),
                  in.shape(2), o.mutable_data(), stream_ptr(stream));
  }
  check(s);
}

// Raw-pointer forms for the PyTorch layer (which has checked dtype, shape, device and contiguity itself);
// the library still checks sizes, NULLs and workspace.
void align_block_size_ptr(std::uintptr_t ids, int id_type, std::int64_t numel, std::int32_t num_experts,
                          std::int32_t block_size, std::uintptr_t sorted, std::uintptr_t experts, std::uintptr_t post,
                          std::uintptr_t ws, std::size_t ws_bytes, std::uintptr_t stream) {
  check(moe_align_block_size(reinterpret_cast<const void*>(ids), static_cast<moe_dtype_t>(id_type), numel,
                             num_experts, block_size, reinterpret_cast<std::int32_t*>(sorted),
                             reinterpret_cast<std::int32_t*>(experts), reinterpret_cast<std::int32_t*>(post),
                             reinterpret_cast<void*>(ws), ws_bytes, stream_ptr(stream)));
}

void moe_sum_ptr(std::uintptr_t x, int dtype, std::int64_t num_tokens, std::int32_t topk, std::int64_t hidden,
                 std::uintptr_t out, std::uintptr_t stream) {
  check(::moe_sum(reinterpret_cast<const void*>(x), static_cast<moe_dtype_t>(dtype), num_tokens, topk, hidden,
                  reinterpret_cast<void*>(out), stream_ptr(stream)));
}

// The table of torch_ops.cpp (moe_routing/csrc/api_table.h): plain C types around the C API.
std::int32_t api_align_caps(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size,
                            std::int64_t* padded, std::int64_t* blocks, std::size_t* ws) {
  *padded = moe_align_max_padded(numel, num_experts, block_size);
  *blocks = moe_align_max_blocks(numel, num_experts, block_size);
  if (*padded < 0 || *blocks < 0) return MOE_ERROR_INVALID_ARGUMENT;
  return moe_align_workspace_size(numel, num_experts, block_size, ws);
}
std::int32_t api_align(const void* ids, std::int32_t id_type, std::int64_t numel, std::int32_t num_experts,
                       std::int32_t block_size, std::int32_t* sorted, std::int32_t* experts, std::int32_t* post,
                       void* ws, std::size_t ws_bytes, void* stream) {
  return moe_align_block_size(ids, static_cast<moe_dtype_t>(id_type), numel, num_experts, block_size, sorted,
                              experts, post, ws, ws_bytes, stream);
}
std::int32_t api_sum(const void* x, std::int32_t dtype, std::int64_t num_tokens, std::int32_t topk,
                     std::int64_t hidden, void* out, void* stream) {
  return ::moe_sum(x, static_cast<moe_dtype_t>(dtype), num_tokens, topk, hidden, out, stream);
}
const moe_torch_api_t g_torch_api = {
    MOE_TORCH_API_VERSION,
#if defined(MOE_BACKEND_CUDA) || defined(MOE_BACKEND_HIP)
    0,
#else
    1,
#endif
    MOE_WORKSPACE_ALIGNMENT, MOE_INT8, MOE_UINT8, MOE_INT16, MOE_INT32, MOE_INT64, MOE_FLOAT32, MOE_FLOAT16,
    MOE_BFLOAT16, &api_align_caps, &api_align, &api_sum, &moe_last_error};

}  // namespace

void register_core(nb::module_& m) {
  m.def("backend_name", [] { return std::string(moe_backend_name()); },
        "The backend this build of the library runs on: 'cpu', 'cuda', 'hip' or 'kokkos'.");
  m.def("backend_check", [] { check(moe_backend_check()); },
        "Raise BackendError when the backend cannot run here (e.g. no GPU visible).");
  m.def("align_max_padded", &max_padded, nb::arg("numel"), nb::arg("num_experts"), nb::arg("block_size"));
  m.def("align_max_blocks", &max_blocks, nb::arg("numel"), nb::arg("num_experts"), nb::arg("block_size"));
  m.def("align_workspace_size", &align_workspace, nb::arg("numel"), nb::arg("num_experts"), nb::arg("block_size"));
  m.def("align_block_size", &align_block_size, nb::arg("topk_ids"), nb::arg("num_experts"), nb::arg("block_size"),
        nb::arg("sorted_token_ids"), nb::arg("expert_ids"), nb::arg("num_tokens_post_pad"),
        nb::arg("workspace").none(), nb::arg("stream"));
  m.def("moe_sum", &moe_sum, nb::arg("x"), nb::arg("out"), nb::arg("stream"));
  m.def("align_block_size_ptr", &align_block_size_ptr);
  m.def("moe_sum_ptr", &moe_sum_ptr);
  m.def("torch_api_table", [] { return reinterpret_cast<std::uintptr_t>(&g_torch_api); },
        "The address of this build's moe_torch_api_t (moe_routing/csrc/api_table.h), for the torch operator shim.");

  nb::dict dt;
  dt["int8"] = static_cast<int>(MOE_INT8);
  dt["uint8"] = static_cast<int>(MOE_UINT8);
  dt["int16"] = static_cast<int>(MOE_INT16);
  dt["int32"] = static_cast<int>(MOE_INT32);
  dt["int64"] = static_cast<int>(MOE_INT64);
  dt["float32"] = static_cast<int>(MOE_FLOAT32);
  dt["float16"] = static_cast<int>(MOE_FLOAT16);
  dt["bfloat16"] = static_cast<int>(MOE_BFLOAT16);
#ifdef MOE_PY_HAS_FLOAT8
  dt["float8_e4m3"] = static_cast<int>(MOE_FLOAT8_E4M3);
  dt["float8_e5m2"] = static_cast<int>(MOE_FLOAT8_E5M2);
#endif
  m.attr("DTYPES") = dt;
#if defined(MOE_BACKEND_CUDA)
  m.attr("MEMORY") = "cuda";
#elif defined(MOE_BACKEND_HIP)
  m.attr("MEMORY") = "hip";
#else
  m.attr("MEMORY") = "host";
#endif
}

}  // namespace moe_py

namespace nb = nanobind;

NB_MODULE(_ext, m) {
  m.doc() = "moe-routing's C API on DLPack arrays (use the moe_routing package, not this module)";
  nb::module_ errors = nb::module_::import_("moe_routing._errors");
  const char* names[4] = {"Error", "InvalidArgument", "Unsupported", "BackendError"};
  for (int i = 0; i < 4; ++i) {
    nb::object cls = errors.attr(names[i]);
    m.attr(names[i]) = cls;  // the module keeps them alive
    moe_py::g_error_class[i] = cls;
  }
  moe_py::register_core(m);
#ifdef MOE_PY_HAS_DATA_PATH
  moe_py::register_data_path(m);
#endif
#ifdef MOE_PY_HAS_GATING
  moe_py::register_gating(m);
#endif
#ifdef MOE_PY_HAS_EP
  moe_py::register_ep(m);
#endif
}
