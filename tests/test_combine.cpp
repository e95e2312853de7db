// moe_combine: golden cases by hand (weights, scale, both layouts, no FMA), NaN and garbage planted in every absent
// row (must not leak), tokens with no present slot, equality with moe_sum, random sweeps over dtypes, layouts,
// weights, scales, sizes and alignments against the reference (itself checked against a second oracle), round
// trips through align + permute, and every error path. Outputs are poisoned before each call.
#include <algorithm>
#include <ios>
#include <sstream>

#include "datapath.hpp"

using namespace moe_test;
using namespace moe_test::dp;

namespace {

template <class T>
struct CombineCall {
  moe_rows_layout_t layout = MOE_ROWS_FLAT;
  std::int64_t tokens = 0, hidden = 0;
  std::int32_t topk = 1;
  std::vector<T> rows;  // FLAT: tokens * topk rows; PERMUTED: as many as the positions address
  std::vector<std::int32_t> positions;  // empty: NULL
  std::vector<float> weights;           // empty: NULL
  float scale = 1.0f;
  std::size_t rows_offset = 0, out_offset = 0;  // elements past a 16-byte aligned allocation
  const std::int32_t* pos_ptr() const { return positions.empty() ? nullptr : positions.data(); }
  const float* w_ptr() const { return weights.empty() ? nullptr : weights.data(); }
};

template <class T>
std::vector<T> backend_combine(const CombineCall<T>& c) {
  const std::size_t n_out = static_cast<std::size_t>(c.tokens * c.hidden);
  Offset rows(c.rows.size() * sizeof(T), c.rows_offset * sizeof(T)), out(n_out * sizeof(T), c.out_offset * sizeof(T));
  rows.put(c.rows);
  out.put(std::vector<unsigned char>(out.bytes, 0x5A));
  moe::device_buffer<std::int32_t> pos;
  moe::device_buffer<float> w;
  if (!c.positions.empty()) pos = to_device(c.positions);
  if (!c.weights.empty()) w = to_device(c.weights);
  moe::combine(reinterpret_cast<const T*>(rows.data()), c.layout, c.tokens, c.topk, c.hidden, pos.data(), w.data(),
               c.scale, reinterpret_cast<T*>(out.data()));
  moe::synchronize();
  const auto bytes = out.get();
  std::vector<T> got(n_out);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  return got;
}

template <class T>
std::vector<T> reference_combine(const CombineCall<T>& c) {
  std::vector<T> out(static_cast<std::size_t>(c.tokens * c.hidden));
  std::memset(out.data(), 0x5A, out.size() * sizeof(T));
  moe::reference::combine(c.rows.data(), c.layout, c.tokens, c.topk, c.hidden, c.pos_ptr(), c.w_ptr(), c.scale,
                          out.data());
  return out;
}

template <class T>
std::string describe(const CombineCall<T>& c) {
  return std::string(c.layout == MOE_ROWS_FLAT ? "FLAT" : "PERMUTED") + " bytes=" + std::to_string(sizeof(T)) +
         " tokens=" + std::to_string(c.tokens) + " topk=" + std::to_string(c.topk) + " hidden=" +
         std::to_string(c.hidden) + " positions=" + (c.positions.empty() ? "no" : "yes") +
         " weights=" + (c.weights.empty() ? "no" : "yes") + " scale=" + std::to_string(c.scale) +
         " offsets=" + std::to_string(c.rows_offset) + "/" + std::to_string(c.out_offset);
}

template <class T>
void require_same(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  const std::int64_t at = first_diff(got, want);
  if (at >= 0) {
    const auto i = static_cast<std::size_t>(at);
    std::ostringstream m;
    m << what << " differ at " << at << ": bits 0x" << std::hex << bits(got[i]) << " vs 0x" << bits(want[i])
      << std::dec << " (" << to_float(got[i]) << " vs " << to_float(want[i]) << ")";
    FAIL(m.str());
  }
}

// backend == reference == oracle, bit for bit; returns the result
template <class T>
std::vector<T> check_combine(const CombineCall<T>& c) {
  INFO(describe(c));
  const auto ref = reference_combine(c);
  require_same(ref, oracle_combine(c.rows, c.layout, c.tokens, c.topk, c.hidden, c.pos_ptr(), c.w_ptr(), c.scale),
               "reference vs oracle");
  const auto got = backend_combine(c);
  require_same(got, ref, moe::backend_name());
  return got;
}

template <class T>
std::vector<T> values(std::initializer_list<float> v) {
  std::vector<T> out;
  for (float f : v) out.push_back(from_float<T>(f));
  return out;
}

// A random case: rows of either layout from a real align of routed ids (some dropped), positions, weights.
template <class T>
CombineCall<T> random_case(Rng& rng, moe_rows_layout_t layout, std::int64_t tokens, std::int32_t topk,
                           std::int64_t hidden, double dropped, int weights_kind) {
  CombineCall<T> c;
  c.layout = layout;
  c.tokens = tokens;
  c.topk = topk;
  c.hidden = hidden;
  const std::int32_t E = 64;
  const Layout l = host_layout(route(tokens, topk, E, rng, dropped), E, 16);
  const std::size_t numel = static_cast<std::size_t>(tokens * topk);
  if (layout == MOE_ROWS_PERMUTED) {
    c.positions = l.positions;
    c.rows = random_values<T>(static_cast<std::size_t>(std::max<std::int64_t>(l.post_pad, 1) * hidden), rng);
  } else {
    if (dropped > 0 || rng() % 2) c.positions = l.positions;  // presence only
    c.rows = random_values<T>(numel * static_cast<std::size_t>(hidden), rng);
  }
  if (weights_kind > 0) c.weights = random_weights(numel, rng, weights_kind == 2);
  const float scales[] = {1.0f, 0.5f, -3.0f, 1e-3f, 2.5f, 0.0f};
  c.scale = scales[rng() % 6];
  return c;
}

}  // namespace

TEST_CASE("combine golden: weights, scale and both layouts, by hand") {
  // 2 tokens, topk 2, hidden 2; flat rows r0..r3, weights [0.5, 2, -1, 0.25], scale 2:
  // t0 = 2 * (0.5 * [1,2] + 2 * [10,20]) = [41, 82]; t1 = 2 * (-[100,200] + 0.25 * [1000,2000]) = [300, 600]
  CombineCall<float> flat;
  flat.tokens = 2;
  flat.topk = 2;
  flat.hidden = 2;
  flat.rows = {1, 2, 10, 20, 100, 200, 1000, 2000};
  flat.weights = {0.5f, 2.0f, -1.0f, 0.25f};
  flat.scale = 2.0f;
  CHECK(check_combine(flat) == std::vector<float>{41, 82, 300, 600});
  // the same rows in a permuted order with padding rows of NaN / inf, never read
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CombineCall<float> perm = flat;
  perm.layout = MOE_ROWS_PERMUTED;
  perm.rows = {1000, 2000, nan, nan, 10, 20, 1, 2, 100, 200, inf, -inf};
  perm.positions = {3, 2, 4, 0};
  CHECK(check_combine(perm) == std::vector<float>{41, 82, 300, 600});
  // FLAT with absent slots (their rows hold NaN): t0 = 2 * 2 * [10,20], t1 = 2 * -[100,200]
  CombineCall<float> holes = flat;
  holes.rows = {nan, nan, 10, 20, 100, 200, nan, -inf};
  holes.positions = {-1, 0, 5, -1};
  CHECK(check_combine(holes) == std::vector<float>{40, 80, -200, -400});
  // bf16 and fp16: one rounding at the end (as moe_sum): 1 + 3 * 2^-9 -> 1 + 2^-7 in bf16
  const float q = std::ldexp(1.0f, -9);
  CombineCall<bfloat16_t> b;
  b.tokens = 1;
  b.topk = 4;
  b.hidden = 1;
  b.rows = values<bfloat16_t>({1.0f, q, q, q});
  CHECK(to_float(check_combine(b)[0]) == 1.0f + std::ldexp(1.0f, -7));
  b.weights = {1.0f, 0.5f, 0.5f, 4.0f};  // 1 + 2^-10 + 2^-10 + 2^-7 = 1 + 5 * 2^-9 -> 1 + 2^-7 (rounds down)
  CHECK(to_float(check_combine(b)[0]) == 1.0f + std::ldexp(1.0f, -7));
  CombineCall<half_t> h;
  h.tokens = 2;
  h.topk = 2;
  h.hidden = 1;
  h.rows = values<half_t>({2048.0f, 1.0f, 2050.0f, 1.0f});
  const auto hout = check_combine(h);
  CHECK(to_float(hout[0]) == 2048.0f);  // 2049 ties to even
  CHECK(to_float(hout[1]) == 2052.0f);
}

TEST_CASE("combine golden: products and sums rounded apart (no FMA), in k order") {
  // slot 0: acc = -(1 + 2^-11); slot 1: w = x = 1 + 2^-12, w*x = 1 + 2^-11 + 2^-24 rounds (tie, to even) to
  // 1 + 2^-11, so acc = +0. A fused multiply-add would give 2^-24.
  const float a = 1.0f + std::ldexp(1.0f, -11), e = 1.0f + std::ldexp(1.0f, -12);
  CombineCall<float> c;
  c.tokens = 1;
  c.topk = 2;
  c.hidden = 1;
  c.rows = {-a, e};
  c.weights = {1.0f, e};
  const auto out = check_combine(c);
  CHECK(bits(out[0]) == 0u);
  // the order of k: (1e8 + 1) - 1e8 = 0, (1e8 - 1e8) + 1 = 1
  CombineCall<float> o;
  o.tokens = 1;
  o.topk = 3;
  o.hidden = 1;
  o.rows = {1e8f, 1.0f, -1e8f};
  CHECK(check_combine(o)[0] == 0.0f);
  o.rows = {1e8f, -1e8f, 1.0f};
  CHECK(check_combine(o)[0] == 1.0f);
  // the scale applies once, after the sum: 3 * (2^24 + 1 + 1) = 3 * 2^24 (each +1 lost in fp32: 2^24 + 1 ties
  // to 2^24), not 3 * 2^24 + 6
  o.rows = {16777216.0f, 1.0f, 1.0f};
  o.scale = 3.0f;
  CHECK(check_combine(o)[0] == 50331648.0f);
}

TEST_CASE("combine: a token with no present slot gets round(0 * scale)") {
  CombineCall<float> f;
  f.layout = MOE_ROWS_PERMUTED;
  f.tokens = 3;
  f.topk = 2;
  f.hidden = 5;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  f.rows.assign(4 * 5, nan);
  for (int h = 0; h < 5; ++h) f.rows[static_cast<std::size_t>(2 * 5 + h)] = 1.0f + static_cast<float>(h);
  f.positions = {-1, -1, 2, -1, -1, -1};  // tokens 0 and 2: none present
  const struct {
    float scale;
    std::uint32_t empty_bits;
  } cases[] = {{1.0f, 0u}, {2.0f, 0u}, {-1.0f, 0x80000000u}, {0.0f, 0u}, {nan, 0x7FC00000u},
               {std::numeric_limits<float>::infinity(), 0x7FC00000u}};
  for (const auto& k : cases) {
    f.scale = k.scale;
    const auto out = check_combine(f);
    for (int h = 0; h < 5; ++h) {
      CHECK(bits(out[static_cast<std::size_t>(h)]) == k.empty_bits);
      CHECK(bits(out[static_cast<std::size_t>(10 + h)]) == k.empty_bits);
    }
  }
  // bf16 / fp16: +0, -0 and the canonical NaN of the type
  for (float scale : {1.0f, -1.0f, nan}) {
    CombineCall<bfloat16_t> b;
    b.layout = MOE_ROWS_FLAT;
    b.tokens = 2;
    b.topk = 3;
    b.hidden = 8;
    b.rows.assign(6 * 8, bfloat16_t{0x7FA1});  // NaN with a payload everywhere: never read
    b.positions = {-1, -1, -1, -1, -1, -1};
    b.scale = scale;
    const auto out = check_combine(b);
    const std::uint32_t want = std::isnan(scale) ? 0x7FC0u : scale < 0 ? 0x8000u : 0u;
    for (const auto& v : out) CHECK(bits(v) == want);
    CombineCall<half_t> h;
    h.tokens = 1;
    h.topk = 1;
    h.hidden = 9;
    h.rows.assign(9, half_t{0x7E01});
    h.positions = {-1};
    h.scale = scale;
    const std::uint32_t want_h = std::isnan(scale) ? 0x7E00u : scale < 0 ? 0x8000u : 0u;
    for (const auto& v : check_combine(h)) CHECK(bits(v) == want_h);
  }
}

TEST_CASE("combine: NaN, inf and garbage planted in every absent row never leak") {
  Rng rng(41);
  auto plant = [&](auto tag, moe_rows_layout_t layout, std::int64_t tokens, std::int32_t topk, std::int64_t hidden) {
    using T = decltype(tag);
    INFO("layout=" << layout << " tokens=" << tokens << " topk=" << topk << " hidden=" << hidden);
    CombineCall<T> c = random_case<T>(rng, layout, tokens, topk, hidden, 0.3, 1);
    c.scale = 1.0f;
    REQUIRE(c.positions.size() == static_cast<std::size_t>(tokens * topk));  // dropped > 0: FLAT keeps them too
    // which rows are read: FLAT -> row i of each present slot; PERMUTED -> positions of present slots
    const std::size_t n_rows = c.rows.size() / static_cast<std::size_t>(hidden);
    std::vector<char> used(n_rows, 0);
    for (std::size_t i = 0; i < c.positions.size(); ++i)
      if (c.positions[i] >= 0) used[layout == MOE_ROWS_FLAT ? i : static_cast<std::size_t>(c.positions[i])] = 1;
    CombineCall<T> clean = c, dirty = c;
    const std::uint32_t garbage[] = {0x7FC00000u, 0x7F800001u, 0xFF800000u, 0x7F800000u, 0xFFFFFFFFu};
    for (std::size_t r = 0; r < n_rows; ++r)
      if (!used[r])
        for (std::int64_t h = 0; h < hidden; ++h) {
          const std::size_t j = r * static_cast<std::size_t>(hidden) + static_cast<std::size_t>(h);
          clean.rows[j] = from_float<T>(0.0f);
          const std::uint32_t g = garbage[(r + static_cast<std::size_t>(h)) % 5];
          std::memcpy(&dirty.rows[j], &g, sizeof(T));  // the low bytes: NaN / inf / all-ones patterns of T too
          if (sizeof(T) == 2) {
            const std::uint16_t g16 = static_cast<std::uint16_t>(g >> 16);
            std::memcpy(&dirty.rows[j], &g16, 2);
          }
        }
    const auto want = check_combine(clean);
    const auto got = check_combine(dirty);
    require_same(got, want, "planted vs clean");
    for (const auto& v : got) REQUIRE_FALSE(std::isnan(to_float(v)));
  };
  for (auto layout : {MOE_ROWS_FLAT, MOE_ROWS_PERMUTED}) {
    plant(float{}, layout, 37, 8, 64);
    plant(bfloat16_t{}, layout, 100, 2, 2048);
    plant(half_t{}, layout, 13, 4, 13);  // the scalar path
    plant(bfloat16_t{}, layout, 7, 3, 40);
  }
}

TEST_CASE("combine: NULL weights, scale 1, every slot present equals moe_sum bit for bit") {
  Rng rng(42);
  auto same_as_sum = [&](auto tag, std::int64_t tokens, std::int32_t topk, std::int64_t hidden, bool specials) {
    using T = decltype(tag);
    INFO("bytes=" << sizeof(T) << " tokens=" << tokens << " topk=" << topk << " hidden=" << hidden);
    auto x = random_values<T>(static_cast<std::size_t>(tokens * topk * hidden), rng, 1000.0f);
    if (specials) {
      const float s[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::denorm_min(),
                         3e38f, 65504.0f, 1e-40f};
      for (auto& v : x)
        if (rng() % 7 == 0) v = from_float<T>(s[rng() % 8]);
    }
    auto d_in = to_device(x);
    std::vector<T> poison(static_cast<std::size_t>(tokens * hidden));
    std::memset(poison.data(), 0x5A, poison.size() * sizeof(T));
    auto d_sum = to_device(poison), d_comb = to_device(poison);
    moe::sum(d_in.data(), tokens, topk, hidden, d_sum.data());
    moe::combine(d_in.data(), MOE_ROWS_FLAT, tokens, topk, hidden, nullptr, nullptr, 1.0f, d_comb.data());
    moe::synchronize();
    const auto s = to_host(d_sum), c = to_host(d_comb);
    require_same(c, s, "combine vs moe_sum");
    std::vector<T> ref(poison.size());
    moe::reference::sum(x.data(), tokens, topk, hidden, ref.data());
    require_same(c, ref, "combine vs reference moe_sum");
    // every slot present through positions too (FLAT with positions >= 0, PERMUTED with the identity)
    std::vector<std::int32_t> identity(static_cast<std::size_t>(tokens * topk));
    for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::int32_t>(i);
    auto d_pos = to_device(identity);
    moe::combine(d_in.data(), MOE_ROWS_PERMUTED, tokens, topk, hidden, d_pos.data(), nullptr, 1.0f, d_comb.data());
    moe::synchronize();
    require_same(to_host(d_comb), s, "combine PERMUTED (identity) vs moe_sum");
  };
  for (std::int32_t topk : {1, 2, 3, 4, 8, 9}) {
    same_as_sum(float{}, 17, topk, 100, true);
    same_as_sum(bfloat16_t{}, 33, topk, 2048, true);
    same_as_sum(half_t{}, 5, topk, 7, true);
  }
  same_as_sum(bfloat16_t{}, 1000, 8, 1024, false);
}

TEST_CASE("combine: random sweep, dtypes x layouts x weights x scales x sizes x alignments") {
  Rng rng(43);
  std::uniform_int_distribution<std::int64_t> hidden_dist(1, 7168);
  const std::int64_t token_counts[] = {1, 2, 3, 9, 64, 257, 1000, 5000};
  auto sweep = [&](auto tag) {
    using T = decltype(tag);
    for (auto layout : {MOE_ROWS_FLAT, MOE_ROWS_PERMUTED})
      for (int rep = 0; rep < 10; ++rep) {
        const std::int64_t tokens = token_counts[rng() % 8];
        const std::int32_t topk = static_cast<std::int32_t>(1 + rng() % 9);
        const std::int64_t picks[] = {hidden_dist(rng), 2048, 7168, 1, 7, 8, 4096, 2051};
        std::int64_t hidden = picks[rng() % 8];
        while (tokens * topk * hidden > (3 << 20)) hidden /= 2;
        hidden = std::max<std::int64_t>(hidden, 1);
        const double dropped = rep % 3 == 0 ? 0.0 : 0.25;
        CombineCall<T> c = random_case<T>(rng, layout, tokens, topk, hidden, dropped, rep % 3);
        const std::size_t offsets[] = {0, 0, 0, 1, 2, 3};
        c.rows_offset = offsets[rng() % 6];
        c.out_offset = offsets[rng() % 6];
        check_combine(c);
      }
  };
  sweep(float{});
  sweep(half_t{});
  sweep(bfloat16_t{});
}

TEST_CASE("combine: the GPU kernel instances (topk 1..16, hidden around its vector and block sizes)") {
  Rng rng(44);
  for (std::int32_t topk : {1, 2, 3, 4, 5, 7, 8, 9, 16})
    for (std::int64_t hidden : {8, 1016, 1024, 1032, 2048, 7168})
      for (auto layout : {MOE_ROWS_FLAT, MOE_ROWS_PERMUTED}) {
        check_combine(random_case<bfloat16_t>(rng, layout, 5, topk, hidden, 0.2, 2));
        check_combine(random_case<float>(rng, layout, 3, topk, hidden, 0.0, 1));
      }
}

TEST_CASE("combine: round trips through align and permute on the backend") {
  Rng rng(45);
  // permute, then combine with weights 1 (NULL) gives back each token's row summed once per present slot
  auto round_trip = [&](auto tag, std::int64_t tokens, std::int32_t topk, std::int64_t hidden, std::int32_t E,
                        std::int32_t bs, double dropped) {
    using T = decltype(tag);
    INFO("bytes=" << sizeof(T) << " tokens=" << tokens << " topk=" << topk << " hidden=" << hidden << " E=" << E
                  << " bs=" << bs << " dropped=" << dropped);
    const auto ids = route(tokens, topk, E, rng, dropped);
    const auto numel = static_cast<std::int64_t>(ids.size());
    const std::int64_t cap = moe::align_max_padded(numel, E, bs);
    // align on the backend; the row count stays in device memory for permute
    auto d_ids = to_device(ids);
    moe::device_buffer<std::int32_t> sorted(static_cast<std::size_t>(cap)),
        experts(static_cast<std::size_t>(moe::align_max_blocks(numel, E, bs))), post(1);
    moe::device_buffer<unsigned char> ws(moe::align_workspace_size(numel, E, bs));
    moe::align_block_size(d_ids.data(), numel, E, bs, sorted.data(), experts.data(), post.data(), ws.data(),
                          ws.size());
    const auto x = random_values<T>(static_cast<std::size_t>(tokens * hidden), rng);
    auto d_x = to_device(x);
    std::vector<T> poison(static_cast<std::size_t>(cap * hidden));
    for (auto& v : poison) v = from_float<T>(std::numeric_limits<float>::quiet_NaN());  // unwritten rows: NaN
    auto d_perm = to_device(poison);
    moe::permute(d_x.data(), tokens, hidden, topk, sorted.data(), post.data(), cap, d_perm.data());
    moe::synchronize();
    // token positions from sorted_token_ids, on the host
    const auto h_sorted = to_host(sorted);
    const std::int32_t post_pad = to_host(post)[0];
    const auto pos = positions_from_sorted(h_sorted, post_pad, numel);
    auto d_pos = to_device(pos);
    std::vector<T> out_poison(static_cast<std::size_t>(tokens * hidden));
    std::memset(out_poison.data(), 0x5A, out_poison.size() * sizeof(T));
    auto d_out = to_device(out_poison);
    moe::combine(d_perm.data(), MOE_ROWS_PERMUTED, tokens, topk, hidden, d_pos.data(), nullptr, 1.0f, d_out.data());
    moe::synchronize();
    const auto got = to_host(d_out);
    // the host: the token's row summed once per present slot, in fp32, rounded once
    std::vector<T> want(got.size());
    for (std::int64_t t = 0; t < tokens; ++t) {
      int present = 0;
      for (std::int32_t k = 0; k < topk; ++k) present += pos[static_cast<std::size_t>(t * topk + k)] >= 0;
      for (std::int64_t h = 0; h < hidden; ++h) {
        float acc = 0.0f;
        for (int k = 0; k < present; ++k) acc = acc + to_float(x[static_cast<std::size_t>(t * hidden + h)]);
        want[static_cast<std::size_t>(t * hidden + h)] = store<T>(acc);
      }
    }
    require_same(got, want, "permute + combine vs the host sum of each token's row");
    // with weights: the permuted layout gives what the flat layout of the same rows gives
    const auto w = random_weights(static_cast<std::size_t>(numel), rng, true);
    auto d_w = to_device(w);
    std::vector<T> flat(static_cast<std::size_t>(numel * hidden));
    for (std::int64_t i = 0; i < numel; ++i)
      std::copy_n(x.begin() + (i / topk) * hidden, hidden, flat.begin() + i * hidden);
    auto d_flat = to_device(flat);
    auto d_out2 = to_device(out_poison);
    moe::combine(d_perm.data(), MOE_ROWS_PERMUTED, tokens, topk, hidden, d_pos.data(), d_w.data(), 0.75f, d_out.data());
    moe::combine(d_flat.data(), MOE_ROWS_FLAT, tokens, topk, hidden, d_pos.data(), d_w.data(), 0.75f, d_out2.data());
    moe::synchronize();
    const auto a = to_host(d_out), b = to_host(d_out2);
    require_same(a, b, "PERMUTED vs FLAT of the same rows");
    std::vector<T> ref(a.size());
    moe::reference::combine(flat.data(), MOE_ROWS_FLAT, tokens, topk, hidden, pos.data(), w.data(), 0.75f, ref.data());
    require_same(a, ref, "vs the reference");
  };
  round_trip(bfloat16_t{}, 1, 8, 2048, 256, 64, 0.0);
  round_trip(bfloat16_t{}, 300, 8, 512, 256, 64, 0.5);  // expert parallelism: half the ids on other ranks
  round_trip(half_t{}, 77, 2, 7168, 8, 16, 0.1);
  round_trip(float{}, 1000, 4, 33, 64, 1, 0.2);
  round_trip(bfloat16_t{}, 4096, 8, 64, 256, 128, 0.0);
  round_trip(float{}, 5, 3, 4, 4, 4, 1.0);  // every id dropped: zeros
}

// ---- errors --------------------------------------------------------------------------------------------------
TEST_CASE("errors: combine") {
  const std::int64_t T = 4, H = 8;
  const std::int32_t K = 2;
  moe::device_buffer<float> rows(T * K * H), out(T * H), w(T * K);
  moe::device_buffer<std::int32_t> pos(T * K);
  const float* r = rows.data();
  float* o = out.data();
  const std::int32_t* p = pos.data();
  const float* wt = w.data();
  const auto F = MOE_ROWS_FLAT, P = MOE_ROWS_PERMUTED;
  const auto f32 = MOE_FLOAT32;
  const auto inval = MOE_ERROR_INVALID_ARGUMENT;
  CHECK_C_ERROR(moe_combine(r, f32, F, -1, K, H, p, wt, 1.0f, o, nullptr), inval, "num_tokens");
  CHECK_C_ERROR(moe_combine(r, f32, F, T, 0, H, p, wt, 1.0f, o, nullptr), inval, "topk");
  CHECK_C_ERROR(moe_combine(r, f32, F, T, K, -2, p, wt, 1.0f, o, nullptr), inval, "hidden");
  CHECK_C_ERROR(moe_combine(r, f32, F, std::int64_t{1} << 30, K, H, p, wt, 1.0f, o, nullptr), inval, "2^31");
  CHECK_C_ERROR(moe_combine(r, f32, F, 1 << 20, K, std::int64_t{1} << 42, p, wt, 1.0f, o, nullptr), inval,
                      "overflows");
  CHECK_C_ERROR(moe_combine(r, f32, enum_from_int<moe_rows_layout_t>(7), T, K, H, p, wt, 1.0f, o, nullptr), inval,
                      "layout");
  CHECK_C_ERROR(moe_combine(r, f32, enum_from_int<moe_rows_layout_t>(-1), T, K, H, p, wt, 1.0f, o, nullptr), inval,
                      "layout");
  // an unknown layout is refused even for an empty call
  CHECK_C_ERROR(moe_combine(nullptr, f32, enum_from_int<moe_rows_layout_t>(2), 0, K, H, nullptr, nullptr, 1.0f,
                                  nullptr, nullptr),
                      inval, "layout");
  CHECK_C_ERROR(moe_combine(r, f32, P, T, K, H, nullptr, wt, 1.0f, o, nullptr), inval, "token_positions");
  CHECK_C_ERROR(moe_combine(nullptr, f32, F, T, K, H, p, wt, 1.0f, o, nullptr), inval, "rows");
  CHECK_C_ERROR(moe_combine(r, f32, F, T, K, H, p, wt, 1.0f, nullptr, nullptr), inval, "output");
  // dtypes: integers and fp8 unsupported, unknown values invalid
  for (moe_dtype_t t : {MOE_INT8, MOE_UINT8, MOE_INT16, MOE_INT32, MOE_INT64, MOE_FLOAT8_E4M3, MOE_FLOAT8_E5M2})
    CHECK_C_ERROR(moe_combine(r, t, F, T, K, H, p, wt, 1.0f, o, nullptr), MOE_ERROR_UNSUPPORTED, "dtype");
  CHECK_C_ERROR(moe_combine(r, enum_from_int<moe_dtype_t>(10), F, T, K, H, p, wt, 1.0f, o, nullptr), inval, "dtype");
  CHECK_C_ERROR(moe_combine(r, enum_from_int<moe_dtype_t>(-5), F, T, K, H, p, wt, 1.0f, o, nullptr), inval, "dtype");
  // overlap of the output with each input
  float* rw = rows.data();
  CHECK_C_ERROR(moe_combine(r, f32, F, T, K, H, p, wt, 1.0f, rw + 5, nullptr), inval, "overlaps rows");
  const auto* inside_out = reinterpret_cast<const std::int32_t*>(o + 3);
  CHECK_C_ERROR(moe_combine(r, f32, F, T, K, H, inside_out, wt, 1.0f, o, nullptr), inval,
                      "overlaps token_positions");
  CHECK_C_ERROR(moe_combine(r, f32, F, T, K, H, p, o + 31, 1.0f, o, nullptr), inval, "overlaps topk_weights");
  // empty calls are no-ops, NULLs accepted (FLAT or PERMUTED)
  CHECK(moe_combine(nullptr, MOE_BFLOAT16, P, 0, 8, 4096, nullptr, nullptr, 1.0f, nullptr, nullptr) == MOE_SUCCESS);
  CHECK(moe_combine(nullptr, MOE_FLOAT16, F, 16, 8, 0, nullptr, nullptr, 1.0f, nullptr, nullptr) == MOE_SUCCESS);
  // the C++ API throws moe::Error with the status
  try {
    moe::combine(static_cast<const float*>(r), MOE_ROWS_PERMUTED, T, K, H, nullptr, nullptr, 1.0f, o);
    FAIL("PERMUTED without positions accepted");
  } catch (const moe::Error& e) {
    CHECK(e.status() == inval);
    CHECK(std::string(e.what()).find("token_positions") != std::string::npos);
  }
}
