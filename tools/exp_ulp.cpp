// Measures moe::numeric::exp_f32 (core/src/numeric_exp.hpp) and sigmoid_f32 exhaustively: every one of the 2^32
// fp32 bit patterns, against a correctly rounded result. Run once by hand; its output is recorded in
// numeric_exp.hpp (kExpUlpBound) and routing.h.
//
//   g++ -std=c++17 -O2 -ffp-contract=off -fno-fast-math -pthread -Icore/src -Icore/include tools/exp_ulp.cpp
//       -o build-tools/exp_ulp   (one line), then: build-tools/exp_ulp [threads] [exp|sigmoid|both]
//
// Correctly rounded reference: the double exp((double)x) (glibc, error < 1 ulp of double, i.e. < 2^-52 relative)
// rounded to fp32 once. That rounding is the correctly rounded fp32 result unless the exact value lies within
// 2^-52 relative of a rounding boundary (a midpoint between two floats, or the overflow threshold): such inputs
// are detected (the double's neighbours 2^-49 relative away round to different floats) and recomputed with the
// x87 long double expl (64-bit significand, error < 2^-62 relative), again checked the same way at 2^-60; an
// input still ambiguous there would be reported as "unresolved" (none are). Subnormal results are rounded by the
// same double -> float conversion, which rounds once to the subnormal grid: correctly rounded too.
//
// Reported: (1) the largest distance, in representable floats, between exp_f32(x) and the correctly rounded
// exp(x) (0 = correctly rounded; 1 = the neighbour), and how many inputs are not correctly rounded; (2) the
// largest error against the exact value, in ulp of the exact value (ulp = spacing of floats in its binade,
// 2^-149 for subnormals). The same for sigmoid_f32 against 1 / (1 + exp(-x)) evaluated in double / long double,
// over x >= -88.72283 (below, exp(-x) overflows and the formula gives exactly +0: counted apart). Inputs whose
// reference stays ambiguous at long double precision are listed (sigmoid has some near x = 0, where the value is
// 0.5 + x/4 - ...: within 2^-60 of a midpoint; they are settled separately, see the recorded results below).
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "numeric_exp.hpp"

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Monotone integer image of a non-NaN float: consecutive floats map to consecutive integers (+0 and -0 both 0).
std::int64_t ordinal(float f) {
  const std::uint32_t u = to_bits(f);
  const std::int64_t m = u & 0x7FFFFFFFu;
  return (u >> 31) ? -m : m;
}
// Spacing of floats in the binade of |v| (v finite, as long double).
long double ulp_of(long double v) {
  v = fabsl(v);
  if (v < static_cast<long double>(FLT_MIN)) return ldexpl(1.0L, -149);
  int e;
  frexpl(v, &e);  // v = m * 2^e, m in [0.5, 1)
  if (e > 128) e = 128;
  return ldexpl(1.0L, e - 24);
}

struct Stats {
  std::uint64_t count = 0, not_cr = 0, unresolved = 0, escalated = 0, skipped = 0;
  std::vector<float> unresolved_x;  // the first few
  std::int64_t max_dist = 0;
  float worst_dist_x = 0;
  long double max_err = 0;
  float worst_err_x = 0;
  void merge(const Stats& o) {
    count += o.count, not_cr += o.not_cr, unresolved += o.unresolved, escalated += o.escalated, skipped += o.skipped;
    unresolved_x.insert(unresolved_x.end(), o.unresolved_x.begin(), o.unresolved_x.end());
    if (o.max_dist > max_dist) max_dist = o.max_dist, worst_dist_x = o.worst_dist_x;
    if (o.max_err > max_err) max_err = o.max_err, worst_err_x = o.worst_err_x;
  }
};

// Correctly rounded float of the exact value, given approximations: `d` (double) and a function for the long
// double. Returns the float, and the best approximation of the exact value in *exact.
template <class LongFn>
float correctly_rounded(double d, LongFn long_fn, long double* exact, Stats& st, float x) {
  const float lo = static_cast<float>(d * (1.0 - 0x1p-49)), hi = static_cast<float>(d * (1.0 + 0x1p-49));
  if (lo == hi) {
    *exact = d;
    return lo;
  }
  ++st.escalated;
  const long double ld = long_fn();
  const float llo = static_cast<float>(ld * (1.0L - 0x1p-60L)), lhi = static_cast<float>(ld * (1.0L + 0x1p-60L));
  if (llo != lhi) {
    ++st.unresolved;
    if (st.unresolved_x.size() < 64) st.unresolved_x.push_back(x);
  }
  *exact = ld;
  return static_cast<float>(ld);
}

void account(float got, float cr, long double exact, float x, Stats& st) {
  ++st.count;
  const bool got_nan = std::isnan(got), cr_nan = std::isnan(cr);
  if (got_nan || cr_nan) {
    if (got_nan != cr_nan) {
      ++st.not_cr;
      st.max_dist = INT64_MAX;
      st.worst_dist_x = x;
    }
    return;
  }
  const std::int64_t dist = std::llabs(ordinal(got) - ordinal(cr));
  if (dist != 0) ++st.not_cr;
  if (dist > st.max_dist) st.max_dist = dist, st.worst_dist_x = x;
  if (std::isinf(got) || std::isinf(static_cast<float>(exact))) return;  // infinite: counted by distance only
  const long double err = fabsl(static_cast<long double>(got) - exact) / ulp_of(exact);
  if (err > st.max_err) st.max_err = err, st.worst_err_x = x;
}

bool g_exp = true, g_sigmoid = true;

void sweep(std::uint64_t begin, std::uint64_t end, Stats* exp_st, Stats* sig_st) {
  for (std::uint64_t i = begin; i < end; ++i) {
    const float x = from_bits(static_cast<std::uint32_t>(i));
    long double exact;
    if (g_exp) {  // exp
      const float got = moe::numeric::exp_f32(x);
      const float cr = std::isnan(x) ? x
                                     : correctly_rounded(std::exp(static_cast<double>(x)),
                                                         [&] { return expl(static_cast<long double>(x)); }, &exact,
                                                         *exp_st, x);
      if (std::isnan(x)) {
        ++exp_st->count;
        if (to_bits(got) != 0x7FC00000u) ++exp_st->not_cr, exp_st->max_dist = INT64_MAX, exp_st->worst_dist_x = x;
      } else {
        account(got, cr, exact, x, *exp_st);
      }
    }
    if (g_sigmoid) {  // sigmoid
      const float got = moe::numeric::sigmoid_f32(x);
      if (x < -88.72283f) {  // exp(-x) overflows: the formula gives 1 / inf = +0 (the true value is below 2^-126)
        ++sig_st->skipped;
        if (to_bits(got) != 0u) ++sig_st->not_cr, sig_st->max_dist = INT64_MAX, sig_st->worst_dist_x = x;
        continue;
      }
      if (std::isnan(x)) {
        ++sig_st->count;
        if (!std::isnan(got)) ++sig_st->not_cr, sig_st->max_dist = INT64_MAX, sig_st->worst_dist_x = x;
        continue;
      }
      const double xd = x;
      const float cr = correctly_rounded(
          1.0 / (1.0 + std::exp(-xd)), [&] { return 1.0L / (1.0L + expl(-static_cast<long double>(x))); }, &exact,
          *sig_st, x);
      account(got, cr, exact, x, *sig_st);
    }
  }
}

void report(const char* name, const Stats& s) {
  std::printf("%s: %" PRIu64 " inputs; not correctly rounded: %" PRIu64 " (%.4f %%); max distance from the correctly "
              "rounded result: %" PRId64 " float(s) (first at x = %a = %.9g)\n",
              name, s.count, s.not_cr, 100.0 * static_cast<double>(s.not_cr) / static_cast<double>(s.count), s.max_dist,
              static_cast<double>(s.worst_dist_x), static_cast<double>(s.worst_dist_x));
  std::printf("%s: max error vs the exact value: %.6Lf ulp (at x = %a = %.9g); escalated to long double: %" PRIu64
              ", unresolved: %" PRIu64 "; inputs outside the measured range (exactly 0 by the formula): %" PRIu64 "\n",
              name, s.max_err, static_cast<double>(s.worst_err_x), static_cast<double>(s.worst_err_x), s.escalated,
              s.unresolved, s.skipped);
  for (float x : s.unresolved_x) std::printf("  unresolved at x = %a\n", static_cast<double>(x));
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  const char* which = argc > 2 ? argv[2] : "both";  // exp | sigmoid | both
  g_exp = std::strcmp(which, "sigmoid") != 0;
  g_sigmoid = std::strcmp(which, "exp") != 0;
  const std::uint64_t total = std::uint64_t{1} << 32;
  std::vector<Stats> e(threads), s(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back(sweep, total * t / threads, total * (t + 1) / threads, &e[t], &s[t]);
  for (auto& th : pool) th.join();
  Stats es, ss;
  for (unsigned t = 0; t < threads; ++t) es.merge(e[t]), ss.merge(s[t]);
  if (g_exp) report("exp_f32", es);
  if (g_sigmoid) report("sigmoid_f32", ss);
  return es.unresolved == 0 && ss.unresolved == 0 ? 0 : 1;
}
