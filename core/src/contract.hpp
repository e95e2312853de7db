// What every operation's contract shares: limits, dtype classes and the error helpers (the texts users see).
// Each operation's own shape, checks and capacities are in ops/<op>.hpp. The public API checks arguments before
// any backend runs, so backends may assume valid shapes and never re-check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moe/routing.hpp"

namespace moe {
namespace detail {

constexpr std::int64_t kMaxNumel = (std::int64_t{1} << 31) - 1;  // numel < 2^31
constexpr std::int32_t kMaxExperts = 65536;

bool is_id_type(moe_dtype_t t) noexcept;
bool is_value_type(moe_dtype_t t) noexcept;
bool is_fp8_type(moe_dtype_t t) noexcept;  // MOE_FLOAT8_E4M3, MOE_FLOAT8_E5M2: moe_permute only
bool is_known_dtype(moe_dtype_t t) noexcept;
// MOE_ERROR_INVALID_ARGUMENT for a value outside moe_dtype_t, else MOE_ERROR_UNSUPPORTED unless `ok`:
// "<arg> must be <expected>".
void check_dtype(moe_dtype_t t, bool ok, const char* arg, const char* expected);
std::string str(std::int64_t v);

[[noreturn]] void throw_invalid(const std::string& what);
[[noreturn]] void throw_backend(const std::string& what);

}  // namespace detail
}  // namespace moe
