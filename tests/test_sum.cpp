// moe_sum: every dtype against the reference bit for bit; the reference against float64 sums and against
// the rounding rules (exhaustive over the 16-bit types); special values; every topk.
#include <cmath>
#include <ios>

#include "support.hpp"

using namespace moe_test;
using moe::bfloat16_t;
using moe::half_t;

namespace {

float to_float(float x) { return x; }
float to_float(half_t x) { return moe::reference::half_to_float(x); }
float to_float(bfloat16_t x) { return moe::reference::bfloat16_to_float(x); }
template <class T> T from_float(float f);
template <> float from_float<float>(float f) { return f; }
template <> half_t from_float<half_t>(float f) { return moe::reference::float_to_half(f); }
template <> bfloat16_t from_float<bfloat16_t>(float f) { return moe::reference::float_to_bfloat16(f); }

template <class T>
std::uint32_t bits(T x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}

template <class T>
std::vector<T> backend_sum(const std::vector<T>& in, std::int64_t tokens, std::int32_t topk, std::int64_t hidden) {
  auto d_in = to_device(in);
  std::vector<T> poison(static_cast<std::size_t>(tokens * hidden));
  std::memset(poison.data(), 0x5A, poison.size() * sizeof(T));
  auto d_out = to_device(poison);
  moe::sum(d_in.data(), tokens, topk, hidden, d_out.data());
  moe::synchronize();
  return to_host(d_out);
}

template <class T>
std::vector<T> reference_sum(const std::vector<T>& in, std::int64_t tokens, std::int32_t topk, std::int64_t hidden) {
  std::vector<T> out(static_cast<std::size_t>(tokens * hidden));
  moe::reference::sum(in.data(), tokens, topk, hidden, out.data());
  return out;
}

template <class T>
void check_sum(const std::vector<T>& in, std::int64_t tokens, std::int32_t topk, std::int64_t hidden) {
  INFO("tokens=" << tokens << " topk=" << topk << " hidden=" << hidden << " bytes=" << sizeof(T));
  const auto ref = reference_sum(in, tokens, topk, hidden);
  const auto got = backend_sum(in, tokens, topk, hidden);
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (bits(got[i]) != bits(ref[i]))
      FAIL(moe::backend_name() << " differs at " << i << ": bits 0x" << std::hex << bits(got[i]) << " vs 0x"
                               << bits(ref[i]) << std::dec << " (" << to_float(got[i]) << " vs "
                               << to_float(ref[i]) << ")");
}

template <class T>
std::vector<T> random_values(std::size_t n, Rng& rng, float scale = 4.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = from_float<T>(d(rng));
  return v;
}

template <class T>
void sweep(Rng& rng) {
  // topk: each count a GPU kernel is built for (2, 4, 8) and those between and beyond (more rounds of loads)
  for (std::int64_t tokens : {1, 3, 17, 257})
    for (std::int32_t topk : {1, 2, 3, 4, 5, 8, 9})
      for (std::int64_t hidden : {1, 7, 8, 9, 64, 2051, 7168})
        check_sum(random_values<T>(static_cast<std::size_t>(tokens * topk * hidden), rng), tokens, topk, hidden);
}

}  // namespace

TEST_CASE("sum golden: fp32 in order, exact") {
  // [2 tokens, topk 3, hidden 2]
  const std::vector<float> in{1.0f, 2.0f, 10.0f, 20.0f, 100.0f, 200.0f, -1.0f, 0.5f, 1.0f, 0.25f, 0.0f, 0.125f};
  const auto out = backend_sum(in, 2, 3, 2);
  CHECK(out == std::vector<float>{111.0f, 222.0f, 0.0f, 0.875f});
  // order matters in fp32: (1e8 + 1) - 1e8 = 0 when summed left to right
  const auto order = backend_sum(std::vector<float>{1e8f, 1.0f, -1e8f}, 1, 3, 1);
  CHECK(order[0] == 0.0f);
  const auto other = backend_sum(std::vector<float>{1e8f, -1e8f, 1.0f}, 1, 3, 1);
  CHECK(other[0] == 1.0f);
}

TEST_CASE("sum golden: one rounding at the end, to nearest even") {
  // bf16: 1 + 2^-8 is exactly between 1 and 1+2^-7: ties to even -> 1. Summing 1 and 2^-8 in fp32 first
  // gives the tie; rounding each addend to bf16 first would not matter here, but 3 * 2^-9 must survive:
  // 1 + 2^-9 + 2^-9 + 2^-9 = 1 + 3*2^-9 -> rounds up to 1 + 2^-7 (a per-step bf16 rounding would give 1).
  const float q = std::ldexp(1.0f, -9);
  const std::vector<bfloat16_t> in{from_float<bfloat16_t>(1.0f), from_float<bfloat16_t>(q),
                                   from_float<bfloat16_t>(q), from_float<bfloat16_t>(q)};
  const auto out = backend_sum(in, 1, 4, 1);
  CHECK(to_float(out[0]) == 1.0f + std::ldexp(1.0f, -7));
  const std::vector<bfloat16_t> tie{from_float<bfloat16_t>(1.0f), from_float<bfloat16_t>(std::ldexp(1.0f, -8))};
  CHECK(to_float(backend_sum(tie, 1, 2, 1)[0]) == 1.0f);
  // fp16: 2048 + 1 is a tie between 2048 and 2050 -> 2048; 2050 + 1 -> 2052 (even mantissa)
  const std::vector<half_t> h{from_float<half_t>(2048.0f), from_float<half_t>(1.0f), from_float<half_t>(2050.0f),
                              from_float<half_t>(1.0f)};
  const auto hout = backend_sum(h, 2, 2, 1);
  CHECK(to_float(hout[0]) == 2048.0f);
  CHECK(to_float(hout[1]) == 2052.0f);
}

TEST_CASE("sum: random sweep, every dtype, bit for bit") {
  Rng rng(11);
  sweep<float>(rng);
  sweep<half_t>(rng);
  sweep<bfloat16_t>(rng);
}

TEST_CASE("sum: large shapes") {
  Rng rng(12);
  check_sum(random_values<bfloat16_t>(4096u * 8 * 2048, rng), 4096, 8, 2048);
  check_sum(random_values<half_t>(1000u * 2 * 7168, rng), 1000, 2, 7168);
  check_sum(random_values<float>(513u * 4 * 4099, rng), 513, 4, 4099);
}

TEST_CASE("sum: special values (NaN, inf, -0, subnormals, overflow)") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float sub = std::numeric_limits<float>::denorm_min();
  const std::vector<float> cases[] = {
      {nan, 1.0f}, {-nan, 1.0f}, {inf, -inf}, {inf, 1.0f}, {-inf, -1.0f}, {-0.0f, -0.0f}, {-0.0f, 0.0f},
      {sub, sub},  {3e38f, 3e38f}, {65504.0f, 16.0f}, {65504.0f, 15.9f}, {5.9604645e-08f, 2.9802322e-08f},
      {1e-40f, 0.0f}, {6.1e-5f, -1e-8f}};
  for (const auto& c : cases) {
    std::vector<float> f32{c[0], c[1]};
    std::vector<half_t> f16{from_float<half_t>(c[0]), from_float<half_t>(c[1])};
    std::vector<bfloat16_t> b16{from_float<bfloat16_t>(c[0]), from_float<bfloat16_t>(c[1])};
    check_sum(f32, 1, 2, 1);
    check_sum(f16, 1, 2, 1);
    check_sum(b16, 1, 2, 1);
  }
  // a NaN sum is written as the canonical NaN, whatever the payload
  const std::uint32_t payload = 0x7FA12345u;  // a signalling NaN with a payload
  float snan;
  std::memcpy(&snan, &payload, sizeof snan);
  CHECK(bits(backend_sum(std::vector<float>{snan, 1.0f}, 1, 2, 1)[0]) == 0x7FC00000u);
  CHECK(bits(backend_sum(std::vector<float>{inf, -inf}, 1, 2, 1)[0]) == 0x7FC00000u);
  CHECK(bits(backend_sum(std::vector<half_t>{half_t{0xFE01}, half_t{0x3C00}}, 1, 2, 1)[0]) == 0x7E00u);
  CHECK(bits(backend_sum(std::vector<bfloat16_t>{bfloat16_t{0xFF81}, bfloat16_t{0}}, 1, 2, 1)[0]) == 0x7FC0u);
  // overflow of the 16-bit types rounds to infinity; 65519 still rounds down to 65504
  CHECK(bits(backend_sum(std::vector<half_t>{from_float<half_t>(65504.0f), from_float<half_t>(16.0f)}, 1, 2, 1)[0]) ==
        0x7C00u);
  CHECK(bits(reference_sum(std::vector<float>{65519.0f}, 1, 1, 1)[0]) == bits(65519.0f));
  CHECK(moe::reference::float_to_half(65519.0f).bits == 0x7BFFu);
  CHECK(moe::reference::float_to_half(65520.0f).bits == 0x7C00u);
}

TEST_CASE("sum: the reference agrees with float64 sums to within one rounding") {
  Rng rng(13);
  const auto in = random_values<float>(64 * 8 * 33, rng, 100.0f);
  const auto out = reference_sum(in, 64, 8, 33);
  for (std::int64_t t = 0; t < 64; ++t)
    for (std::int64_t h = 0; h < 33; ++h) {
      double exact = 0;
      for (int k = 0; k < 8; ++k) exact += in[static_cast<std::size_t>((t * 8 + k) * 33 + h)];
      CHECK(std::fabs(out[static_cast<std::size_t>(t * 33 + h)] - exact) <= 8 * 800 * 6e-8);
    }
}

TEST_CASE("conversions: exhaustive over the 16-bit types") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = half_t{static_cast<std::uint16_t>(b)};
    const float f = moe::reference::half_to_float(h);
    const bool nan = std::isnan(f);
    CHECK_MESSAGE(nan == (((b & 0x7C00u) == 0x7C00u) && (b & 0x3FFu)), "half " << b);
    if (nan) {
      CHECK(moe::reference::float_to_half(f).bits == 0x7E00u);
      continue;
    }
    // the value itself, from the fields (the conversion's three forms: subnormal, normal, infinity)
    const int e = static_cast<int>((b >> 10) & 0x1Fu), m = static_cast<int>(b & 0x3FFu);
    const double magnitude = e == 31 ? HUGE_VAL : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    REQUIRE_MESSAGE(f == static_cast<float>((b & 0x8000u) ? -magnitude : magnitude), "half value " << b);
    REQUIRE_MESSAGE(moe::reference::float_to_half(f).bits == b, "half round trip " << b);
    // the midpoint to the next half up rounds to the even one of the two
    if ((b & 0x7FFFu) < 0x7BFFu) {
      const float next = moe::reference::half_to_float(half_t{static_cast<std::uint16_t>(b + 1)});
      const float mid = static_cast<float>((static_cast<double>(f) + next) / 2);
      const std::uint16_t even = (b & 1u) ? static_cast<std::uint16_t>(b + 1) : static_cast<std::uint16_t>(b);
      REQUIRE_MESSAGE(moe::reference::float_to_half(mid).bits == even, "half midpoint above " << b);
    }
    const auto bf = bfloat16_t{static_cast<std::uint16_t>(b)};
    const float g = moe::reference::bfloat16_to_float(bf);
    if (std::isnan(g)) {
      CHECK(moe::reference::float_to_bfloat16(g).bits == 0x7FC0u);
    } else {
      REQUIRE_MESSAGE(moe::reference::float_to_bfloat16(g).bits == b, "bf16 round trip " << b);
    }
  }
}
