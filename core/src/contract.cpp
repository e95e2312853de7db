#include "contract.hpp"

#include <string>

namespace moe {
namespace detail {

void throw_invalid(const std::string& what) { throw Error(MOE_ERROR_INVALID_ARGUMENT, what); }
void throw_backend(const std::string& what) { throw Error(MOE_ERROR_BACKEND, what); }

bool is_id_type(moe_dtype_t t) noexcept {
  return t == MOE_INT8 || t == MOE_UINT8 || t == MOE_INT16 || t == MOE_INT32 || t == MOE_INT64;
}
bool is_value_type(moe_dtype_t t) noexcept { return t == MOE_FLOAT32 || t == MOE_FLOAT16 || t == MOE_BFLOAT16; }
bool is_fp8_type(moe_dtype_t t) noexcept { return t == MOE_FLOAT8_E4M3 || t == MOE_FLOAT8_E5M2; }
bool is_known_dtype(moe_dtype_t t) noexcept { return is_id_type(t) || is_value_type(t) || is_fp8_type(t); }

std::string str(std::int64_t v) { return std::to_string(v); }

void check_dtype(moe_dtype_t t, bool ok, const char* arg, const char* expected) {
  if (!is_known_dtype(t))
    throw_invalid(std::string(arg) + " is not a moe_dtype_t value (got " + str(static_cast<int>(t)) + ")");
  if (!ok) throw Error(MOE_ERROR_UNSUPPORTED, std::string(arg) + " must be " + expected);
}

}  // namespace detail

std::size_t dtype_size(moe_dtype_t t) {
  switch (t) {
    case MOE_INT8:
    case MOE_UINT8:
    case MOE_FLOAT8_E4M3:
    case MOE_FLOAT8_E5M2: return 1;
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
