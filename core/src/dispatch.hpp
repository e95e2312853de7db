// Runtime dtype -> C++ type, written once for every backend. `f` is called with a tag value: only its type
// matters.
#pragma once

#include <cstdint>

#include "moe/routing.hpp"
#include "numeric.hpp"

namespace moe {
namespace detail {

template <class F>
decltype(auto) dispatch_id_type(moe_dtype_t t, F&& f) {
  switch (t) {
    case MOE_INT8: return f(std::int8_t{});
    case MOE_UINT8: return f(std::uint8_t{});
    case MOE_INT16: return f(std::int16_t{});
    case MOE_INT32: return f(std::int32_t{});
    default: return f(std::int64_t{});  // callers checked is_id_type(t) first
  }
}

// Value types go by their numeric::ValueTraits (storage bits and the load/store rules of moe_sum).
template <class F>
decltype(auto) dispatch_value_traits(moe_dtype_t t, F&& f) {
  switch (t) {
    case MOE_FLOAT32: return f(numeric::ValueTraits<numeric::F32>{});
    case MOE_FLOAT16: return f(numeric::ValueTraits<numeric::F16>{});
    default: return f(numeric::ValueTraits<numeric::BF16>{});  // callers checked is_value_type(t) first
  }
}

}  // namespace detail
}  // namespace moe
