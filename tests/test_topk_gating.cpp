// moe_topk_gating: the configured backend against the reference (ids exactly, weights bit for bit), and the
// reference against an independent oracle written here (the same arithmetic, but every ranking by a stable sort
// with float comparisons instead of the library's order keys and partial sorts). Golden cases by hand, ties,
// NaN/inf rows, every model family at its real size, random sweeps over sizes, dtypes and gates, error paths; the
// library's exp against a correctly rounded exp.
#include <cmath>
#include <ios>
#include <numeric>
#include <sstream>

#include "support.hpp"

using namespace moe_test;
using moe::bfloat16_t;
using moe::half_t;

namespace {

constexpr std::uint32_t kNanBits = 0x7FC00000u;

std::uint32_t fbits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_fbits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Logits of any dtype kept as fp32 values that the dtype represents exactly, plus their storage.
struct Logits {
  moe_dtype_t dtype = MOE_FLOAT32;
  std::vector<float> f32;             // the exact fp32 value of each logit
  std::vector<unsigned char> stored;  // what the call reads
};

Logits make_logits(const std::vector<float>& values, moe_dtype_t dtype) {
  Logits L;
  L.dtype = dtype;
  L.f32.resize(values.size());
  L.stored.resize(values.size() * moe::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == MOE_FLOAT32) {
      L.f32[i] = values[i];
      std::memcpy(&L.stored[i * 4], &values[i], 4);
    } else if (dtype == MOE_FLOAT16) {
      const half_t h = moe::reference::float_to_half(values[i]);
      L.f32[i] = moe::reference::half_to_float(h);
      std::memcpy(&L.stored[i * 2], &h, 2);
    } else {
      const bfloat16_t b = moe::reference::float_to_bfloat16(values[i]);
      L.f32[i] = moe::reference::bfloat16_to_float(b);
      std::memcpy(&L.stored[i * 2], &b, 2);
    }
  }
  return L;
}

struct Gate {
  std::int32_t topk = 1;
  moe_score_t score = MOE_SCORE_SOFTMAX;
  std::int32_t num_groups = 1, topk_groups = 1;
  std::vector<float> bias;  // empty: NULL
  bool renormalize = false;
  float scale = 1.0f;
  moe_gate_t c(const float* bias_ptr) const {
    moe_gate_t g = moe::make_gate(topk, score);
    g.num_groups = num_groups;
    g.topk_groups = topk_groups;
    g.correction_bias = bias.empty() ? nullptr : bias_ptr;
    g.renormalize = renormalize ? 1 : 0;
    g.routed_scaling_factor = scale;
    return g;
  }
};

std::string describe(const Gate& g, std::int64_t T, std::int32_t E, moe_dtype_t dtype) {
  std::ostringstream o;
  o << "T=" << T << " E=" << E << " topk=" << g.topk << " score=" << static_cast<int>(g.score) << " groups="
    << g.num_groups << "/" << g.topk_groups << " bias=" << !g.bias.empty() << " renorm=" << g.renormalize
    << " scale=" << g.scale << " dtype=" << static_cast<int>(dtype);
  return o.str();
}

struct Result {
  std::vector<std::int32_t> ids;
  std::vector<std::uint32_t> weight_bits;
};

// First difference between two results, for messages ("" when equal).
std::string difference(const Result& a, const Result& b, std::int32_t topk) {
  if (a.ids.size() != b.ids.size()) return "sizes differ";
  for (std::size_t i = 0; i < a.ids.size(); ++i)
    if (a.ids[i] != b.ids[i] || a.weight_bits[i] != b.weight_bits[i]) {
      std::ostringstream o;
      o << "token " << i / static_cast<std::size_t>(topk) << " slot " << i % static_cast<std::size_t>(topk)
        << ": id " << a.ids[i] << " vs " << b.ids[i] << ", weight 0x" << std::hex << a.weight_bits[i] << " vs 0x"
        << b.weight_bits[i] << std::dec << " (" << from_fbits(a.weight_bits[i]) << " vs "
        << from_fbits(b.weight_bits[i]) << ")";
      return o.str();
    }
  return "";
}

Result reference_gating(const Logits& L, std::int64_t T, std::int32_t E, const Gate& g) {
  Result r;
  const auto n = static_cast<std::size_t>(T * g.topk);
  r.ids.assign(n, kPoison);
  std::vector<float> w(n, -1.0f);
  moe::reference::topk_gating(L.stored.data(), L.dtype, T, E, g.c(g.bias.data()), r.ids.data(), w.data());
  for (float x : w) r.weight_bits.push_back(fbits(x));
  return r;
}

// The configured backend, through moe_malloc'd buffers, outputs poisoned.
Result backend_gating(const Logits& L, std::int64_t T, std::int32_t E, const Gate& g, void* stream = nullptr) {
  const auto n = static_cast<std::size_t>(T * g.topk);
  auto d_logits = to_device(L.stored);
  auto d_bias = to_device(g.bias);
  auto d_ids = to_device(std::vector<std::int32_t>(n, kPoison));
  auto d_w = to_device(std::vector<float>(n, -1.0f));
  moe::topk_gating(d_logits.data(), L.dtype, T, E, g.c(d_bias.data()), d_ids.data(), d_w.data(), stream);
  moe::synchronize(stream);
  Result r;
  r.ids = to_host(d_ids);
  for (float x : to_host(d_w)) r.weight_bits.push_back(fbits(x));
  return r;
}

// ---- the oracle: the same arithmetic, every ranking by std::stable_sort on floats ---------------------------------
bool before(float a, float b) {  // a strictly before b: NaN below everything, ties kept in index order
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a > b;
}

Result oracle_gating(const Logits& L, std::int64_t T, std::int32_t E, const Gate& g) {
  using moe::reference::exp_f32;
  using moe::reference::sigmoid_f32;
  Result res;
  const std::int32_t K = g.topk, G = E / g.num_groups;
  for (std::int64_t t = 0; t < T; ++t) {
    const float* l = &L.f32[static_cast<std::size_t>(t * E)];
    std::vector<float> s(static_cast<std::size_t>(E)), b(s.size());
    if (g.score == MOE_SCORE_SOFTMAX) {
      float m = NAN;  // the largest non-NaN logit (NaN if none)
      for (std::int32_t e = 0; e < E; ++e)
        if (!std::isnan(l[e]) && (std::isnan(m) || l[e] > m)) m = l[e];
      float sum = 0.0f;
      for (std::int32_t e = 0; e < E; ++e) sum = sum + exp_f32(l[e] - m);
      for (std::int32_t e = 0; e < E; ++e) s[e] = exp_f32(l[e] - m) / sum;
    } else if (g.score == MOE_SCORE_SIGMOID) {
      for (std::int32_t e = 0; e < E; ++e) s[e] = sigmoid_f32(l[e]);
    } else {
      for (std::int32_t e = 0; e < E; ++e) s[e] = l[e];
    }
    for (std::int32_t e = 0; e < E; ++e) b[e] = g.bias.empty() ? s[e] : s[e] + g.bias[e];
    std::vector<std::int32_t> eligible;
    if (g.num_groups > 1) {
      std::vector<float> gs(static_cast<std::size_t>(g.num_groups));
      for (std::int32_t q = 0; q < g.num_groups; ++q) {
        std::vector<float> members(b.begin() + q * G, b.begin() + (q + 1) * G);
        std::stable_sort(members.begin(), members.end(), before);
        gs[q] = G == 1 ? members[0] : members[0] + members[1];
      }
      std::vector<std::int32_t> groups(static_cast<std::size_t>(g.num_groups));
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(), [&](std::int32_t x, std::int32_t y) { return before(gs[x], gs[y]); });
      groups.resize(static_cast<std::size_t>(g.topk_groups));
      std::sort(groups.begin(), groups.end());
      for (std::int32_t q : groups)
        for (std::int32_t e = q * G; e < (q + 1) * G; ++e) eligible.push_back(e);
    } else {
      eligible.resize(static_cast<std::size_t>(E));
      std::iota(eligible.begin(), eligible.end(), 0);
    }
    std::stable_sort(eligible.begin(), eligible.end(), [&](std::int32_t x, std::int32_t y) { return before(b[x], b[y]); });
    std::vector<float> w(static_cast<std::size_t>(K));
    for (std::int32_t r = 0; r < K; ++r) w[r] = s[eligible[r]];
    if (g.score == MOE_SCORE_SOFTMAX_TOPK) {
      float m = NAN;
      for (float x : w)
        if (!std::isnan(x) && (std::isnan(m) || x > m)) m = x;
      float sum = 0.0f;
      for (float x : w) sum = sum + exp_f32(x - m);
      for (float& x : w) x = exp_f32(x - m) / sum;
    }
    if (g.renormalize) {
      float sum = 0.0f;
      for (float x : w) sum = sum + x;
      for (float& x : w) x = x / sum;
    }
    for (std::int32_t r = 0; r < K; ++r) {
      res.ids.push_back(eligible[r]);
      const float x = w[r] * g.scale;
      res.weight_bits.push_back(std::isnan(x) ? kNanBits : fbits(x));
    }
  }
  return res;
}

// The check every case makes: reference == oracle, backend == reference, bit for bit.
void check_gating(const Logits& L, std::int64_t T, std::int32_t E, const Gate& g, bool with_oracle = true) {
  INFO(describe(g, T, E, L.dtype));
  const Result ref = reference_gating(L, T, E, g);
  if (with_oracle) {
    const Result oracle = oracle_gating(L, T, E, g);
    REQUIRE_MESSAGE(ref.ids == oracle.ids, "reference vs oracle: " << difference(ref, oracle, g.topk));
    REQUIRE_MESSAGE(ref.weight_bits == oracle.weight_bits, "reference vs oracle: " << difference(ref, oracle, g.topk));
  }
  const Result got = backend_gating(L, T, E, g);
  REQUIRE_MESSAGE(got.ids == ref.ids, moe::backend_name() << " vs reference: " << difference(got, ref, g.topk));
  REQUIRE_MESSAGE(got.weight_bits == ref.weight_bits,
                  moe::backend_name() << " vs reference: " << difference(got, ref, g.topk));
}

// ---- generators ------------------------------------------------------------------------------------------------
// Normal logits of scale sigma; `ties` > 0 rounds them to multiples of 1/ties (many equal logits); `specials`
// replaces that fraction of them by NaN, +-inf, +-0, huge or tiny values.
std::vector<float> random_values(std::size_t n, Rng& rng, float sigma = 2.0f, int ties = 0, double specials = 0.0) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 1e-40f, 88.0f, -120.0f};
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (ties > 0) x = std::round(x * static_cast<float>(ties)) / static_cast<float>(ties);
    if (specials > 0 && u(rng) < specials) x = special[rng() % 10];
  }
  return v;
}

std::vector<float> random_bias(std::int32_t E, Rng& rng, float sigma = 0.05f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> b(static_cast<std::size_t>(E));
  for (auto& x : b) x = d(rng);
  return b;
}

const moe_dtype_t kDtypes[] = {MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16};

}  // namespace

// ---- the library's exp -----------------------------------------------------------------------------------------
TEST_CASE("gating exp: within 1 float of the correctly rounded exp; specials exact") {
  using moe::reference::exp_f32;
  auto cr = [](float x) { return static_cast<float>(std::exp(static_cast<double>(x))); };  // see tools/exp_ulp.cpp
  auto ord = [](float f) {
    const std::uint32_t u = fbits(f);
    return (u >> 31) ? -static_cast<std::int64_t>(u & 0x7FFFFFFFu) : static_cast<std::int64_t>(u);
  };
  Rng rng(1);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::int64_t worst = 0, off = 0, n = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = from_fbits(bits(rng));
    if (std::isnan(x)) continue;
    const std::int64_t d = std::llabs(ord(exp_f32(x)) - ord(cr(x)));
    worst = std::max(worst, d);
    off += d != 0;
    ++n;
  }
  for (float x = -104.0f; x <= 89.0f; x += 0.0009765625f) {  // the whole finite range, 2^-10 apart
    const std::int64_t d = std::llabs(ord(exp_f32(x)) - ord(cr(x)));
    worst = std::max(worst, d);
    off += d != 0;
    ++n;
  }
  CHECK(worst <= 1);
  CHECK(off < n / 20);  // most results are correctly rounded (tools/exp_ulp.cpp: 0.8 % are not, in [-104, 89])
  CHECK(fbits(exp_f32(0.0f)) == fbits(1.0f));
  CHECK(fbits(exp_f32(-0.0f)) == fbits(1.0f));
  CHECK(fbits(exp_f32(INFINITY)) == fbits(INFINITY));
  CHECK(fbits(exp_f32(-INFINITY)) == fbits(0.0f));
  CHECK(fbits(exp_f32(NAN)) == kNanBits);
  CHECK(fbits(exp_f32(-NAN)) == kNanBits);
  CHECK(fbits(exp_f32(88.8f)) == fbits(INFINITY));
  CHECK(fbits(exp_f32(-103.3f)) == fbits(cr(-103.3f)));  // subnormal
  CHECK(exp_f32(-103.28f) > 0.0f);
  CHECK(exp_f32(-110.0f) == 0.0f);
  CHECK(exp_f32(1.0f) == cr(1.0f));
  using moe::reference::sigmoid_f32;
  CHECK(sigmoid_f32(0.0f) == 0.5f);
  CHECK(sigmoid_f32(INFINITY) == 1.0f);
  CHECK(fbits(sigmoid_f32(-INFINITY)) == fbits(0.0f));
  CHECK(std::isnan(sigmoid_f32(NAN)));
  CHECK(sigmoid_f32(-88.0f) > 0.0f);
  CHECK(fbits(sigmoid_f32(-100.0f)) == fbits(0.0f));  // exp(100) overflows: 1 / inf, where the true value is 3.7e-44
}

// The device's exp, bit for bit, through the gating call: with logit 0 on expert 0 and the others in
// (-104, -18), a softmax's sum rounds to exactly 1, so each weight IS exp(l_e); and sigmoid weights of very
// negative logits are 1 / exp(-l) of large arguments.
TEST_CASE("gating exp on the backend: weights that are exp(l) and 1 / exp(-l)") {
  Rng rng(2);
  std::uniform_real_distribution<float> small(-104.0f, -18.0f), large(-88.0f, 88.0f);
  const std::int64_t T = 512;
  for (std::int32_t E : {8, 32, 2048}) {  // fast path and general path
    std::vector<float> v(static_cast<std::size_t>(T * E));
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int32_t e = 0; e < E; ++e) v[static_cast<std::size_t>(t * E + e)] = e == 0 ? 0.0f : small(rng);
    Gate g;
    g.topk = std::min(E, 32);
    const Logits L = make_logits(v, MOE_FLOAT32);
    check_gating(L, T, E, g);
    const Result r = reference_gating(L, T, E, g);
    for (std::int64_t t = 0; t < 4; ++t)  // the claim above, checked on the reference
      for (std::int32_t k = 1; k < g.topk; ++k) {
        const auto i = static_cast<std::size_t>(t * g.topk + k);
        CHECK(r.weight_bits[i] == fbits(moe::reference::exp_f32(v[static_cast<std::size_t>(t * E + r.ids[i])])));
      }
    for (auto& x : v) x = large(rng);
    g.score = MOE_SCORE_SIGMOID;
    check_gating(make_logits(v, MOE_FLOAT32), T, E, g);
  }
}

// ---- golden cases ----------------------------------------------------------------------------------------------
TEST_CASE("gating golden: routing.h's example (softmax, a tie, renormalize)") {
  Gate g;
  g.topk = 2;
  g.renormalize = true;
  const Result r = backend_gating(make_logits({1, 3, 2, 3}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{1, 3});
  CHECK(r.weight_bits == std::vector<std::uint32_t>{fbits(0.5f), fbits(0.5f)});
  g.renormalize = false;
  const Result s = backend_gating(make_logits({1, 3, 2, 3}, MOE_FLOAT32), 1, 4, g);
  const float w = from_fbits(s.weight_bits[0]);
  CHECK(std::fabs(w - 1.0f / (2.0f + std::exp(-1.0f) + std::exp(-2.0f))) < 1e-7f);
  CHECK(s.weight_bits[0] == s.weight_bits[1]);
}

TEST_CASE("gating golden: ties go to the lower index (experts and groups)") {
  for (moe_score_t score : {MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID, MOE_SCORE_SOFTMAX_TOPK})
    for (std::int32_t E : {1, 5, 8, 64, 256, 384, 1024, 4096}) {
      INFO("score " << score << " E " << E);
      Gate g;
      g.score = score;
      g.topk = std::min(E, 8);
      const Result r = backend_gating(make_logits(std::vector<float>(static_cast<std::size_t>(2 * E), 0.25f), MOE_FLOAT32), 2, E, g);
      for (std::int32_t k = 0; k < g.topk; ++k) {
        CHECK(r.ids[static_cast<std::size_t>(k)] == k);
        CHECK(r.ids[static_cast<std::size_t>(g.topk + k)] == k);
      }
      check_gating(make_logits(std::vector<float>(static_cast<std::size_t>(2 * E), 0.25f), MOE_FLOAT32), 2, E, g);
    }
  // 8 experts in 4 groups of 2, every group score equal: groups 0 and 1 kept
  Gate g;
  g.score = MOE_SCORE_SOFTMAX_TOPK;
  g.num_groups = 4;
  g.topk_groups = 2;
  g.topk = 3;
  const Result r = backend_gating(make_logits({1, 2, 2, 1, 0, 3, 3, 0}, MOE_FLOAT32), 1, 8, g);
  CHECK(r.ids == std::vector<std::int32_t>{1, 2, 0});
  // -0 == +0: the lower index first
  g = Gate{};
  g.score = MOE_SCORE_SOFTMAX_TOPK;
  g.topk = 2;
  CHECK(backend_gating(make_logits({-0.0f, 0.0f}, MOE_FLOAT32), 1, 2, g).ids == std::vector<std::int32_t>{0, 1});
  CHECK(backend_gating(make_logits({0.0f, -0.0f}, MOE_FLOAT32), 1, 2, g).ids == std::vector<std::int32_t>{0, 1});
}

TEST_CASE("gating golden: groups by hand (the sum of each group's two best), bias for selection only") {
  // SOFTMAX_TOPK selects on the logits themselves: 4 groups of 2: [1,8] 9, [3,3] 6, [7,0] 7, [2,6] 8.
  // topk_groups 2 keeps groups 0 and 3: experts 0, 1, 6, 7; topk 3 -> 1 (8), 7 (6), 6 (2); 4 (7) is never chosen.
  Gate g;
  g.score = MOE_SCORE_SOFTMAX_TOPK;
  g.num_groups = 4;
  g.topk_groups = 2;
  g.topk = 3;
  const std::vector<float> l{1, 8, 3, 3, 7, 0, 2, 6};
  const Result r = backend_gating(make_logits(l, MOE_FLOAT32), 1, 8, g);
  CHECK(r.ids == std::vector<std::int32_t>{1, 7, 6});
  const double z = std::exp(0.0) + std::exp(-2.0) + std::exp(-6.0);
  CHECK(std::fabs(from_fbits(r.weight_bits[0]) - 1.0 / z) < 1e-7);
  CHECK(std::fabs(from_fbits(r.weight_bits[1]) - std::exp(-2.0) / z) < 1e-7);
  CHECK(std::fabs(from_fbits(r.weight_bits[2]) - std::exp(-6.0) / z) < 1e-8);
  check_gating(make_logits(l, MOE_FLOAT32), 1, 8, g);
  // a bias that lifts group 2 ([7,0] + [0, 3] = 10) and expert 5 (0 + 3): groups 2 and 0 kept; expert 5 (b 3) is
  // chosen before expert 0 (b 1), but its weight is from its logit alone
  g.bias = {0, 0, 0, 0, 0, 3, 0, 0};
  g.topk = 4;
  const Result b = backend_gating(make_logits(l, MOE_FLOAT32), 1, 8, g);
  CHECK(b.ids == std::vector<std::int32_t>{1, 4, 5, 0});
  const double zb = std::exp(0.0) + std::exp(-1.0) + std::exp(-8.0) + std::exp(-7.0);
  CHECK(std::fabs(from_fbits(b.weight_bits[2]) - std::exp(-8.0) / zb) < 1e-8);
  check_gating(make_logits(l, MOE_FLOAT32), 1, 8, g);
  // renormalize and scale: the weights of SIGMOID(0) = 0.5 each, renormalized over 4 = 0.25, scaled by 2.5
  Gate s;
  s.score = MOE_SCORE_SIGMOID;
  s.topk = 4;
  s.renormalize = true;
  s.scale = 2.5f;
  const Result q = backend_gating(make_logits(std::vector<float>(6, 0.0f), MOE_FLOAT32), 1, 6, s);
  CHECK(q.weight_bits == std::vector<std::uint32_t>(4, fbits(0.625f)));
}

TEST_CASE("gating golden: NaN and infinity rows") {
  Gate g;
  g.topk = 2;
  // SOFTMAX: a NaN logit makes every score NaN: ids 0, 1 (ties), weights the canonical NaN
  Result r = backend_gating(make_logits({1, NAN, 3, 2}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{0, 1});
  CHECK(r.weight_bits == std::vector<std::uint32_t>{kNanBits, kNanBits});
  // +inf likewise; -inf beside numbers gives 0
  r = backend_gating(make_logits({1, INFINITY, 3, 2}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.weight_bits == std::vector<std::uint32_t>{kNanBits, kNanBits});
  r = backend_gating(make_logits({-INFINITY, 0, -INFINITY, 0}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{1, 3});
  CHECK(r.weight_bits == std::vector<std::uint32_t>{fbits(0.5f), fbits(0.5f)});
  r = backend_gating(make_logits(std::vector<float>(4, -INFINITY), MOE_FLOAT32), 1, 4, g);
  CHECK(r.weight_bits == std::vector<std::uint32_t>{kNanBits, kNanBits});
  // SIGMOID: +inf -> 1, -inf -> 0, NaN last
  g.score = MOE_SCORE_SIGMOID;
  g.topk = 4;
  r = backend_gating(make_logits({NAN, 1, -INFINITY, INFINITY}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{3, 1, 2, 0});
  CHECK(r.weight_bits[0] == fbits(1.0f));
  CHECK(r.weight_bits[2] == fbits(0.0f));
  CHECK(r.weight_bits[3] == kNanBits);
  // renormalize over zeros: 0 / 0
  g.renormalize = true;
  g.topk = 2;
  r = backend_gating(make_logits(std::vector<float>(4, -INFINITY), MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{0, 1});
  CHECK(r.weight_bits == std::vector<std::uint32_t>{kNanBits, kNanBits});
  // a NaN bias ranks its expert last; NaN groups last
  g = Gate{};
  g.score = MOE_SCORE_SOFTMAX_TOPK;
  g.topk = 3;
  g.bias = {NAN, 0, 0, 0};
  r = backend_gating(make_logits({9, 1, 2, 3}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{3, 2, 1});
  g.bias.clear();
  g.num_groups = 2;
  g.topk_groups = 1;
  g.topk = 2;
  r = backend_gating(make_logits({NAN, 9, 1, 2}, MOE_FLOAT32), 1, 4, g);  // group 0's score is NaN + 9
  CHECK(r.ids == std::vector<std::int32_t>{3, 2});
  r = backend_gating(make_logits({NAN, NAN, NAN, NAN}, MOE_FLOAT32), 1, 4, g);
  CHECK(r.ids == std::vector<std::int32_t>{0, 1});
  CHECK(r.weight_bits == std::vector<std::uint32_t>{kNanBits, kNanBits});
  // SOFTMAX_TOPK with a chosen +inf
  g = Gate{};
  g.score = MOE_SCORE_SOFTMAX_TOPK;
  g.topk = 2;
  r = backend_gating(make_logits({1, INFINITY, 3}, MOE_FLOAT32), 1, 3, g);
  CHECK(r.ids == std::vector<std::int32_t>{1, 2});
  CHECK(r.weight_bits == std::vector<std::uint32_t>{kNanBits, kNanBits});
  // rows of specials in every mode and size: the backend equals the reference and every id is valid and distinct
  Rng rng(3);
  for (moe_score_t score : {MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID, MOE_SCORE_SOFTMAX_TOPK})
    for (std::int32_t E : {4, 60, 256, 2000}) {
      Gate h;
      h.score = score;
      h.renormalize = true;
      if (E % 4 == 0) h.num_groups = 4, h.topk_groups = 2;
      h.topk = std::min(E / h.num_groups * h.topk_groups, 6);
      const std::int64_t T = 40;
      const Logits L = make_logits(random_values(static_cast<std::size_t>(T * E), rng, 2.0f, 0, 0.3), MOE_FLOAT32);
      check_gating(L, T, E, h);
      const Result x = backend_gating(L, T, E, h);
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<std::int32_t> ids(x.ids.begin() + t * h.topk, x.ids.begin() + (t + 1) * h.topk);
        for (auto id : ids) CHECK((id >= 0 && id < E));
        std::sort(ids.begin(), ids.end());
        CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
      }
    }
}

// ---- the model families at their real sizes --------------------------------------------------------------------
namespace {
void family(const char* name, std::int32_t E, const Gate& g, std::uint64_t seed, float sigma = 2.0f) {
  INFO(name);
  Rng rng(seed);
  for (moe_dtype_t d : kDtypes)
    for (std::int64_t T : {1, 7, 300}) check_gating(make_logits(random_values(static_cast<std::size_t>(T * E), rng, sigma), d), T, E, g);
}
}  // namespace

TEST_CASE("gating families: Mixtral, Qwen, DeepSeek-V3/R1, Kimi K2, Llama-4, GPT-OSS") {
  Rng rng(4);
  Gate mixtral;  // Mixtral 8x7B / 8x22B: softmax over 8, top 2, renormalized
  mixtral.topk = 2;
  mixtral.renormalize = true;
  family("Mixtral", 8, mixtral, 10);
  Gate qwen15;  // Qwen1.5-MoE-A2.7B: 60 experts, top 4, not renormalized
  qwen15.topk = 4;
  family("Qwen1.5-MoE", 60, qwen15, 11);
  Gate qwen2 = qwen15;  // Qwen2-57B-A14B: 64 experts, top 8
  qwen2.topk = 8;
  family("Qwen2-MoE", 64, qwen2, 12);
  Gate qwen3 = qwen2;  // Qwen3-235B-A22B / 30B-A3B: 128 experts, top 8, renormalized
  qwen3.renormalize = true;
  family("Qwen3-MoE", 128, qwen3, 13);
  Gate ds;  // DeepSeek-V3 / R1: sigmoid, bias, 8 groups of 32, 4 kept, top 8, renormalized, x 2.5
  ds.topk = 8;
  ds.score = MOE_SCORE_SIGMOID;
  ds.num_groups = 8;
  ds.topk_groups = 4;
  ds.bias = random_bias(256, rng, 0.5f);
  ds.renormalize = true;
  ds.scale = 2.5f;
  family("DeepSeek-V3", 256, ds, 14);
  Gate kimi = ds;  // Kimi K2: 384 experts, one group, top 8, x 2.827
  kimi.num_groups = 1;
  kimi.topk_groups = 1;
  kimi.bias = random_bias(384, rng, 0.5f);
  kimi.scale = 2.827f;
  family("Kimi-K2", 384, kimi, 15);
  Gate llama;  // Llama-4 Scout (16 experts) / Maverick (128): sigmoid, top 1
  llama.topk = 1;
  llama.score = MOE_SCORE_SIGMOID;
  family("Llama-4 Scout", 16, llama, 16);
  family("Llama-4 Maverick", 128, llama, 17);
  Gate oss;  // GPT-OSS 20b (32 experts) / 120b (128): top 4 of the logits, softmax over those 4
  oss.topk = 4;
  oss.score = MOE_SCORE_SOFTMAX_TOPK;
  family("GPT-OSS-20b", 32, oss, 18);
  family("GPT-OSS-120b", 128, oss, 19);
  Gate ds2;  // DeepSeek-V2: softmax, 160 experts in 8 groups of 20, 3 kept, top 6, x 16
  ds2.topk = 6;
  ds2.num_groups = 8;
  ds2.topk_groups = 3;
  ds2.scale = 16.0f;
  family("DeepSeek-V2", 160, ds2, 20);
}

// ---- random sweeps ---------------------------------------------------------------------------------------------
namespace {
Gate random_gate(std::int32_t E, Rng& rng, std::int32_t max_topk) {
  Gate g;
  g.score = static_cast<moe_score_t>(rng() % 3);
  std::vector<std::int32_t> divisors;
  for (std::int32_t d = 1; d <= E && divisors.size() < 64; ++d)
    if (E % d == 0) divisors.push_back(d);
  if (rng() % 2) {
    g.num_groups = divisors[rng() % divisors.size()];
    g.topk_groups = 1 + static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(g.num_groups));
  }
  const std::int64_t available = std::int64_t{g.topk_groups} * (E / g.num_groups);
  g.topk = 1 + static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(std::min<std::int64_t>(available, max_topk)));
  if (rng() % 2) g.bias = random_bias(E, rng, rng() % 2 ? 0.01f : 1.0f);
  g.renormalize = rng() % 2;
  const float scales[] = {1.0f, 2.5f, 0.1f, -1.0f};
  g.scale = scales[rng() % 4];
  return g;
}
}  // namespace

TEST_CASE("gating random: small and medium expert counts, every gate, dtype and special") {
  Rng rng(5);
  for (int it = 0; it < 300; ++it) {
    const std::int32_t E = it < 150 ? 1 + static_cast<std::int32_t>(rng() % 40) : 1 + static_cast<std::int32_t>(rng() % 1100);
    const Gate g = random_gate(E, rng, it % 5 == 0 ? 1 << 20 : 32);
    const std::int64_t T = static_cast<std::int64_t>(rng() % 70);
    const moe_dtype_t d = kDtypes[rng() % 3];
    const int ties = rng() % 3 == 0 ? 2 : 0;
    const double specials = rng() % 4 == 0 ? 0.05 : 0.0;
    check_gating(make_logits(random_values(static_cast<std::size_t>(T * E), rng, 3.0f, ties, specials), d), T, E, g);
  }
}

TEST_CASE("gating random: large expert counts and large topk (the general paths)") {
  Rng rng(6);
  struct Case {
    std::int32_t E, topk, groups, kept;
    std::int64_t T;
  };
  const Case cases[] = {{2048, 8, 1, 1, 9},     {4096, 32, 16, 3, 5},    {65536, 8, 1, 1, 2},
                        {65536, 32, 64, 5, 2},   {65536, 1, 65536, 7, 1}, {1024, 1024, 1, 1, 3},
                        {777, 777, 7, 7, 2},     {65536, 65536, 1, 1, 1}, {3000, 100, 30, 2, 3},
                        {40000, 33, 8, 1, 2},    {1030, 500, 2, 1, 3},    {65535, 5, 5, 5, 1}};
  for (const Case& c : cases)
    for (moe_score_t score : {MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID, MOE_SCORE_SOFTMAX_TOPK}) {
      Gate g;
      g.score = score;
      g.topk = c.topk;
      g.num_groups = c.groups;
      g.topk_groups = c.kept;
      g.renormalize = score != MOE_SCORE_SOFTMAX_TOPK;
      if (score == MOE_SCORE_SIGMOID) g.bias = random_bias(c.E, rng, 0.1f);
      const moe_dtype_t d = kDtypes[rng() % 3];
      const bool oracle = std::int64_t{c.E} * c.T <= 70000;  // the oracle's stable sorts are slow on the largest
      check_gating(make_logits(random_values(static_cast<std::size_t>(c.T * c.E), rng, 1.0f, rng() % 2 ? 8 : 0, 0.001), d),
                   c.T, c.E, g, oracle);
    }
}

TEST_CASE("gating random: many tokens") {
  Rng rng(7);
  struct Case {
    std::int64_t T;
    std::int32_t E, topk;
  };
  for (const Case& c : {Case{65536, 8, 2}, Case{16384, 256, 8}, Case{4099, 128, 8}, Case{20000, 60, 4}}) {
    Gate g;
    g.topk = c.topk;
    g.renormalize = true;
    if (c.E == 256) g.score = MOE_SCORE_SIGMOID, g.num_groups = 8, g.topk_groups = 4, g.bias = random_bias(256, rng);
    check_gating(make_logits(random_values(static_cast<std::size_t>(c.T * c.E), rng), kDtypes[rng() % 3]), c.T, c.E, g,
                 c.T * c.E <= 300000);
  }
}

TEST_CASE("gating: num_tokens 0 writes nothing, even with NULL pointers") {
  moe_gate_t g = moe::make_gate(2, MOE_SCORE_SOFTMAX);
  CHECK(moe_topk_gating(nullptr, MOE_FLOAT32, 0, 8, &g, nullptr, nullptr, nullptr) == MOE_SUCCESS);
  std::int32_t id = kPoison;
  float w = -1.0f;
  CHECK(moe_topk_gating(nullptr, MOE_BFLOAT16, 0, 8, &g, &id, &w, nullptr) == MOE_SUCCESS);
  CHECK(id == kPoison);
}

TEST_CASE("gating: unaligned logits (fp16 rows of odd length, an offset pointer)") {
  Rng rng(8);
  for (std::int32_t E : {7, 60, 129, 255}) {
    Gate g;
    g.topk = 3;
    const std::int64_t T = 33;
    const Logits L = make_logits(random_values(static_cast<std::size_t>((T + 1) * E), rng), MOE_FLOAT16);
    // the call reads from the second row on: a pointer 2*E bytes past an allocation's start
    auto d_logits = to_device(L.stored);
    moe::device_buffer<std::int32_t> ids(static_cast<std::size_t>(T * g.topk));
    moe::device_buffer<float> w(ids.size());
    const moe_gate_t c = g.c(nullptr);
    moe::topk_gating(d_logits.data() + 2 * E, MOE_FLOAT16, T, E, c, ids.data(), w.data());
    moe::synchronize();
    std::vector<std::int32_t> ref_ids(ids.size());
    std::vector<float> ref_w(ids.size());
    moe::reference::topk_gating(L.stored.data() + 2 * E, MOE_FLOAT16, T, E, c, ref_ids.data(), ref_w.data());
    CHECK(to_host(ids) == ref_ids);
    const auto got_w = to_host(w);
    CHECK(std::memcmp(got_w.data(), ref_w.data(), ref_w.size() * 4) == 0);
  }
}

// ---- errors ----------------------------------------------------------------------------------------------------
TEST_CASE("gating errors: every argument named") {
  moe::device_buffer<float> logits(4 * 16), bias(16);
  moe::device_buffer<std::int32_t> ids(4 * 8);
  moe::device_buffer<float> w(4 * 8);
  auto call = [&](const moe_gate_t* g, std::int64_t T = 4, std::int32_t E = 16, moe_dtype_t d = MOE_FLOAT32) {
    return moe_topk_gating(logits.data(), d, T, E, g, ids.data(), w.data(), nullptr);
  };
  moe_gate_t g = moe::make_gate(2, MOE_SCORE_SOFTMAX);
  CHECK(call(&g) == MOE_SUCCESS);
  CHECK_C_ERROR(call(nullptr), MOE_ERROR_INVALID_ARGUMENT, "gate");
  CHECK_C_ERROR(call(&g, -1), MOE_ERROR_INVALID_ARGUMENT, "num_tokens");
  CHECK_C_ERROR(call(&g, 4, 0), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(&g, 4, 65537), MOE_ERROR_INVALID_ARGUMENT, "num_experts");
  CHECK_C_ERROR(call(&g, 4, 16, MOE_INT32), MOE_ERROR_UNSUPPORTED, "dtype");
  CHECK_C_ERROR(call(&g, 4, 16, MOE_INT8), MOE_ERROR_UNSUPPORTED, "dtype");
  moe_dtype_t bad_dtype;
  const int bad = 99;
  std::memcpy(&bad_dtype, &bad, sizeof bad);
  CHECK_C_ERROR(call(&g, 4, 16, bad_dtype), MOE_ERROR_INVALID_ARGUMENT, "dtype");
  moe_gate_t x = g;
  x.topk = 0;
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "topk");
  x.topk = 17;
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "topk");
  x = g;
  std::memcpy(&x.score, &bad, sizeof bad);
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "score");
  x = g;
  x.num_groups = 0;
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "num_groups");
  x.num_groups = 3;
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "num_groups");
  x.num_groups = 4;
  x.topk_groups = 0;
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "topk_groups");
  x.topk_groups = 5;
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "topk_groups");
  x.topk_groups = 1;
  x.topk = 5;  // one group of 4 experts kept
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "topk");
  x.topk = 4;
  CHECK(call(&x) == MOE_SUCCESS);
  x = g;
  x.topk_groups = -7;  // ignored without groups
  CHECK(call(&x) == MOE_SUCCESS);
  CHECK_C_ERROR(moe_topk_gating(nullptr, MOE_FLOAT32, 4, 16, &g, ids.data(), w.data(), nullptr),
                     MOE_ERROR_INVALID_ARGUMENT, "logits");
  CHECK_C_ERROR(moe_topk_gating(logits.data(), MOE_FLOAT32, 4, 16, &g, nullptr, w.data(), nullptr),
                     MOE_ERROR_INVALID_ARGUMENT, "topk_ids");
  CHECK_C_ERROR(moe_topk_gating(logits.data(), MOE_FLOAT32, 4, 16, &g, ids.data(), nullptr, nullptr),
                     MOE_ERROR_INVALID_ARGUMENT, "topk_weights");
  CHECK_C_ERROR(moe_topk_gating(logits.data(), MOE_FLOAT32, 4, 16, &g, ids.data(),
                                     reinterpret_cast<float*>(ids.data() + 4), nullptr),
                     MOE_ERROR_INVALID_ARGUMENT, "overlaps");
  CHECK_C_ERROR(moe_topk_gating(logits.data(), MOE_FLOAT32, 4, 16, &g, ids.data(), logits.data() + 8, nullptr),
                     MOE_ERROR_INVALID_ARGUMENT, "overlaps logits");
  x = g;
  x.correction_bias = w.data();
  CHECK_C_ERROR(call(&x), MOE_ERROR_INVALID_ARGUMENT, "correction_bias");
  x.correction_bias = bias.data();
  CHECK(call(&x) == MOE_SUCCESS);
  CHECK_C_ERROR(call(&g, std::int64_t{1} << 60, 65536), MOE_ERROR_INVALID_ARGUMENT, "overflows");
  // the C++ API throws
  try {
    moe::topk_gating(logits.data(), 4, 16, x, ids.data(), w.data());
    x.topk = 99;
    moe::topk_gating(logits.data(), 4, 16, x, ids.data(), w.data());
    FAIL("topk 99 of 16 accepted");
  } catch (const moe::Error& e) {
    CHECK(e.status() == MOE_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("topk") != std::string::npos);
  }
  // the reference checks the same
  std::vector<float> host(64);
  std::vector<std::int32_t> hid(32);
  std::vector<float> hw(32);
  CHECK_THROWS_AS(moe::reference::topk_gating(host.data(), 4, 0, g, hid.data(), hw.data()), moe::Error);
}
