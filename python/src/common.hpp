// The pieces every binding source of moe_routing._ext shares: the Python exception classes, the checks of
// DLPack arrays (dtype, shape, contiguity, memory space) and the moe_dtype_t of a DLPack dtype.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "moe/routing.h"

namespace moe_py {

namespace nb = nanobind;

using in_array = nb::ndarray<nb::ro>;  // read-only view: also takes producers that flag their export read-only
using out_array = nb::ndarray<>;

// Raise moe_routing.InvalidArgument / Unsupported / BackendError (all subclasses of moe_routing.Error).
[[noreturn]] void raise(moe_status_t status, const std::string& what);
[[noreturn]] inline void raise_invalid(const std::string& what) { raise(MOE_ERROR_INVALID_ARGUMENT, what); }
[[noreturn]] inline void raise_unsupported(const std::string& what) { raise(MOE_ERROR_UNSUPPORTED, what); }
// A failed C call: the status with moe_last_error()'s text.
[[noreturn]] void raise_last(moe_status_t status);
inline void check(moe_status_t status) {
  if (status != MOE_SUCCESS) raise_last(status);
}

// The array an argument names, checked for the backend's memory space and C-contiguity. `what` names the
// argument in errors. Outputs must be writable. A None handle raises unless optional (then the view is empty).
struct Array {
  nb::ndarray<nb::ro> ro;  // inputs
  out_array rw;            // outputs
  bool present = false;
  bool writable = false;
  const char* what = "";

  const void* data() const { return writable ? rw.data() : ro.data(); }
  void* mutable_data() const { return rw.data(); }
  std::size_t ndim() const { return writable ? rw.ndim() : ro.ndim(); }
  std::int64_t shape(std::size_t i) const { return writable ? rw.shape(i) : ro.shape(i); }
  std::int64_t size() const { return static_cast<std::int64_t>(writable ? rw.size() : ro.size()); }
  nb::dlpack::dtype dtype() const { return writable ? rw.dtype() : ro.dtype(); }
  std::int64_t itemsize() const { return (dtype().bits * dtype().lanes + 7) / 8; }
};
Array input(nb::handle h, const char* what, bool optional = false);
Array output(nb::handle h, const char* what, bool optional = false);

std::string dtype_name(nb::dlpack::dtype dt);
std::string shape_str(const Array& a);
// The moe_dtype_t of a DLPack dtype, or -1 if the library has none for it.
int moe_dtype_of(nb::dlpack::dtype dt);
bool is_id_dtype(int moe_dtype);
bool is_value_dtype(int moe_dtype);  // fp32, fp16, bf16

void require_ndim(const Array& a, std::size_t ndim, const char* expected_shape);
void require_dtype(const Array& a, int moe_dtype, const std::string& expected);
void require_at_least(const Array& a, std::int64_t elems, const char* capacity_name);
void require_same_device(const Array& a, const Array& b);

inline void* stream_ptr(std::uintptr_t s) { return reinterpret_cast<void*>(s); }

// Registration of the optional operation families (each in its own source, compiled only when routing.h
// declares them; python/CMakeLists.txt decides).
void register_core(nb::module_& m);
#ifdef MOE_PY_HAS_DATA_PATH
void register_data_path(nb::module_& m);
#endif
#ifdef MOE_PY_HAS_GATING
void register_gating(nb::module_& m);
#endif
#ifdef MOE_PY_HAS_EP
void register_ep(nb::module_& m);
#endif

}  // namespace moe_py
