// The types the public API takes: every standard integer type of 8 to 64 bits as ids (dtype_of), and enum
// arguments holding any int (a C caller may pass any), which must be refused without undefined behaviour.
#include <climits>
#include <type_traits>

#include "support.hpp"

using namespace moe_test;

// ---- ids of every standard integer type ------------------------------------------------------------------

static_assert(moe::dtype_of<signed char>::value == MOE_INT8, "signed char");
static_assert(moe::dtype_of<unsigned char>::value == MOE_UINT8, "unsigned char");
static_assert(moe::dtype_of<char>::value == (std::is_signed<char>::value ? MOE_INT8 : MOE_UINT8), "char");
static_assert(moe::dtype_of<short>::value == MOE_INT16, "short");
static_assert(moe::dtype_of<int>::value == MOE_INT32, "int");
static_assert(moe::dtype_of<long>::value == (sizeof(long) == 8 ? MOE_INT64 : MOE_INT32), "long");
static_assert(moe::dtype_of<long long>::value == MOE_INT64, "long long");
static_assert(moe::dtype_of<std::int8_t>::value == MOE_INT8 && moe::dtype_of<std::uint8_t>::value == MOE_UINT8 &&
                  moe::dtype_of<std::int16_t>::value == MOE_INT16 && moe::dtype_of<std::int32_t>::value == MOE_INT32 &&
                  moe::dtype_of<std::int64_t>::value == MOE_INT64,
              "the fixed-width types keep their dtypes");

namespace {
template <class IdT>
void check_type(Rng& rng) {
  for (const std::int32_t E : {1, 5, 100}) {
    const auto ids = uniform_ids<IdT>(1000, E, rng, 0.1);
    check_align(ids, E, 4);
  }
}
}  // namespace

TEST_CASE("types: ids of every standard integer type of 8 to 64 bits (long long, long, char, ...)") {
  Rng rng(5);
  check_type<char>(rng);
  check_type<signed char>(rng);
  check_type<unsigned char>(rng);
  check_type<short>(rng);
  check_type<int>(rng);
  check_type<long>(rng);
  check_type<long long>(rng);
}

// ---- enum values outside the enumerators -----------------------------------------------------------------

// Every int32 is a value of the C enums (C++ [dcl.enum]: the range of an enum without a fixed type is that of
// the smallest bit-field holding all its enumerators), so passing any int is defined, and the library refuses it.
static_assert(MOE_DTYPE_FORCE_INT32_MIN_ == INT32_MIN && MOE_DTYPE_FORCE_INT32_MAX_ == INT32_MAX, "dtype range");
static_assert(MOE_STATUS_FORCE_INT32_MIN_ == INT32_MIN && MOE_STATUS_FORCE_INT32_MAX_ == INT32_MAX, "status range");
static_assert(sizeof(moe_dtype_t) == sizeof(std::int32_t) && sizeof(moe_status_t) == sizeof(std::int32_t),
              "int-sized, as C has them");
static_assert(std::is_signed<std::underlying_type_t<moe_dtype_t>>::value, "-1 is a value");
static_assert(MOE_INT8 == 0 && MOE_UINT8 == 1 && MOE_INT16 == 2 && MOE_INT32 == 3 && MOE_INT64 == 4 &&
                  MOE_FLOAT32 == 5 && MOE_FLOAT16 == 6 && MOE_BFLOAT16 == 7,
              "enumerator values never change");
static_assert(MOE_SUCCESS == 0 && MOE_ERROR_INVALID_ARGUMENT == 1 && MOE_ERROR_UNSUPPORTED == 2 &&
                  MOE_ERROR_BACKEND == 3,
              "status values never change");

TEST_CASE("types: any int as a dtype or status is refused, not undefined") {
  moe::device_buffer<float> in(2 * 2 * 8), out(2 * 8);
  moe::device_buffer<std::int32_t> ids(16), sorted(64), experts(16), post(1);
  moe::device_buffer<unsigned char> ws(moe::align_workspace_size(16, 8, 4) + 1);
  for (const int v : {-1, 10, 42, 99, -1000, 1 << 20, INT32_MIN, INT32_MAX}) {
    INFO("value " << v);
    const auto dtype = static_cast<moe_dtype_t>(v);
    CHECK(moe_sum(in.data(), dtype, 2, 2, 8, out.data(), nullptr) == MOE_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(moe_last_error()).find("dtype") != std::string::npos);
    CHECK(moe_align_block_size(ids.data(), dtype, 16, 8, 4, sorted.data(), experts.data(), post.data(), ws.data(),
                               ws.size(), nullptr) == MOE_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(moe_last_error()).find("id_type") != std::string::npos);
    CHECK(std::string(moe_last_error()).find(std::to_string(v)) != std::string::npos);
    CHECK_THROWS_AS(moe::dtype_size(dtype), moe::Error);
    CHECK(std::string(moe_status_string(static_cast<moe_status_t>(v))) == "unknown status");
  }
}
