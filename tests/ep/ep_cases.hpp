// The expert-parallel test cases, written once for every transport (test_ep_mpi.cpp: MPI ranks;
// test_ep_nccl.cpp: one thread per GPU): random layers generated from a shared seed, so that every rank can
// compute the single-process run of the whole layer from all ranks' inputs, and adversarial / error cases.
// Checks are bit for bit: the received rows, ids and weights against the expected layout, and the combined
// output against the single-process route -> expert -> combine arithmetic written out here independently.
// Compiled with -ffp-contract=off: the reference's a*b then +c must not become an FMA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "moe/ep.hpp"
#include "moe/reference.hpp"
#include "moe/routing.hpp"

namespace ep_test {

// What the harness provides: this rank, collectives for the test's own bookkeeping, and the communicator.
struct World {
  virtual ~World() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::int64_t sum(std::int64_t v) = 0;  // over ranks (also a barrier)
  virtual moe::ep::Comm make_comm(std::int32_t num_experts, const std::int32_t* expert_rank,
                                  const std::int32_t* expert_local) = 0;
  virtual bool device_path() const = 0;  // NCCL: capacity-mode errors come from check_status
  virtual void* stream() const { return nullptr; }
  // Runs f: directly, or (capturable: a capacity-mode call on a GPU) captured into a graph and replayed.
  virtual void submit(const std::function<void()>& f, bool capturable) {
    (void)capturable;
    f();
  }
};

struct Tally {
  std::int64_t passed = 0, failed = 0;
  std::vector<std::string> notes;
  void check(bool ok, const std::string& what) {
    if (ok) ++passed;
    else {
      ++failed;
      if (notes.size() < 40) notes.push_back(what);
    }
  }
};

// ---- values -------------------------------------------------------------------------------------------------------
inline std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float fp8_e4m3_to_float(std::uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 7;
  if (exp == 15 && man == 7) return f32_from(0x7FC00000u);
  const float v = exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return sign ? -v : v;
}
inline std::size_t elem_bytes(moe_dtype_t t) {
  const int v = static_cast<int>(t);
  return v >= 8 ? 1 : moe::dtype_size(t);
}
// Element h of a dispatched row, as fp32 (the expert's view of its input).
inline float load_in(moe_dtype_t t, const unsigned char* row, std::int64_t h) {
  const unsigned char* p = row + h * static_cast<std::int64_t>(elem_bytes(t));
  switch (static_cast<int>(t)) {
    case MOE_FLOAT32: { float f; std::memcpy(&f, p, 4); return f; }
    case MOE_FLOAT16: { moe::half_t x; std::memcpy(&x.bits, p, 2); return moe::reference::half_to_float(x); }
    case MOE_BFLOAT16: { moe::bfloat16_t x; std::memcpy(&x.bits, p, 2); return moe::reference::bfloat16_to_float(x); }
    case MOE_UINT8: return static_cast<float>(*p);
    default: return fp8_e4m3_to_float(*p);  // 8: MOE_FLOAT8_E4M3 (9, E5M2, is not generated)
  }
}
inline float load_out(moe_dtype_t t, const unsigned char* row, std::int64_t h) { return load_in(t, row, h); }
inline void store_out(moe_dtype_t t, unsigned char* row, std::int64_t h, float v) {
  unsigned char* p = row + h * static_cast<std::int64_t>(moe::dtype_size(t));
  if (t == MOE_FLOAT32) {
    const std::uint32_t u = std::isnan(v) ? 0x7FC00000u : f32_bits(v);
    std::memcpy(p, &u, 4);
  } else if (t == MOE_FLOAT16) {
    const std::uint16_t u = moe::reference::float_to_half(v).bits;
    std::memcpy(p, &u, 2);
  } else {
    const std::uint16_t u = moe::reference::float_to_bfloat16(v).bits;
    std::memcpy(p, &u, 2);
  }
}

// The expert function: the same on the expert's rank and in the single-process run.
inline void expert_fn(std::int32_t expert, moe_dtype_t in_t, const unsigned char* in, const float* scales,
                      std::int32_t spt, moe_dtype_t out_t, unsigned char* out, std::int64_t hidden) {
  const float a = 1.0f + static_cast<float>(expert) / 64.0f, b = static_cast<float>(expert % 7) * 0.125f - 0.25f;
  for (std::int64_t h = 0; h < hidden; ++h) {
    float x = load_in(in_t, in, h);
    if (spt > 0) x = x * scales[h % spt];
    const float y = x * a;
    store_out(out_t, out, h, y + b);
  }
}

// ---- a layer ------------------------------------------------------------------------------------------------------
struct Layer {
  std::int32_t world = 1, num_experts = 8, topk = 1, spt = 0;
  std::int64_t hidden = 1;
  moe_dtype_t in_t = MOE_FLOAT32, out_t = MOE_FLOAT32;
  moe_ep_mode_t mode = MOE_EP_EXACT;
  std::int64_t capacity = 0, slot_capacity = 0;  // capacity mode (filled from the inputs when 0)
  bool explicit_placement = false, explicit_local = false;
  std::vector<std::int32_t> expert_rank, expert_local;  // the placement (always filled)
  bool weights = true, permuted = false, special_values = false;
  std::int32_t block_size = 1;
  float scale = 1.0f;
  std::int64_t max_tokens = 0;
  // per rank r: inputs
  std::vector<std::int64_t> tokens;
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<std::vector<unsigned char>> hidden_rows;
  std::vector<std::vector<float>> scales, topk_weights;

  std::int64_t row_bytes() const { return hidden * static_cast<std::int64_t>(elem_bytes(in_t)); }
  std::int64_t out_row_bytes() const { return hidden * static_cast<std::int64_t>(moe::dtype_size(out_t)); }
  std::int32_t local_of(std::int32_t e) const { return expert_local[static_cast<std::size_t>(e)]; }
  std::vector<std::int32_t> local_experts(std::int32_t r) const {
    std::vector<std::int32_t> g;
    for (std::int32_t e = 0; e < num_experts; ++e)
      if (expert_rank[static_cast<std::size_t>(e)] == r) g.push_back(e);
    std::vector<std::int32_t> out(g.size());
    for (std::int32_t e : g) out[static_cast<std::size_t>(local_of(e))] = e;
    return out;
  }
  moe::ep::Config config() const {
    moe::ep::Config c{};
    c.max_tokens = max_tokens;
    c.hidden = hidden;
    c.dispatch_dtype = in_t;
    c.combine_dtype = out_t;
    c.topk = topk;
    c.scales_per_token = spt;
    c.mode = mode;
    c.capacity = capacity;
    c.slot_capacity = slot_capacity;
    return c;
  }
  // rows and slots rank s sends rank d
  void pair_counts(std::int32_t s, std::int32_t d, std::int64_t* rows, std::int64_t* slots) const {
    *rows = *slots = 0;
    for (std::int64_t t = 0; t < tokens[static_cast<std::size_t>(s)]; ++t) {
      bool any = false;
      for (std::int32_t k = 0; k < topk; ++k) {
        const std::int32_t e = ids[static_cast<std::size_t>(s)][static_cast<std::size_t>(t * topk + k)];
        if (e >= 0 && e < num_experts && expert_rank[static_cast<std::size_t>(e)] == d) ++*slots, any = true;
      }
      if (any) ++*rows;
    }
  }
  void fit_capacity(std::int64_t slack_rows, bool default_slots, std::int64_t slack_slots) {
    std::int64_t mr = 0, ms = 0;
    for (std::int32_t s = 0; s < world; ++s)
      for (std::int32_t d = 0; d < world; ++d) {
        std::int64_t r, q;
        pair_counts(s, d, &r, &q);
        mr = std::max(mr, r), ms = std::max(ms, q);
      }
    capacity = std::max<std::int64_t>(mr + slack_rows, 1);
    slot_capacity = default_slots ? 0 : ms + slack_slots;
  }
};

inline moe_dtype_t pick(std::mt19937_64& rng, std::initializer_list<moe_dtype_t> l) {
  return *(l.begin() + static_cast<std::ptrdiff_t>(rng() % l.size()));
}

// A random layer: every rank calls it with the same seed and gets the same layer.
inline Layer random_layer(std::uint64_t seed, std::int32_t world, std::int64_t max_tokens_cap = 4096) {
  std::mt19937_64 rng(seed);
  auto uni = [&](std::int64_t lo, std::int64_t hi) { return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1)); };
  Layer L;
  L.world = world;
  L.explicit_placement = uni(0, 3) == 0;
  if (L.explicit_placement) {
    L.num_experts = static_cast<std::int32_t>(uni(8, 256));
  } else {
    const std::int64_t lo = (8 + world - 1) / world, hi = std::max<std::int64_t>(lo, 256 / world);
    L.num_experts = static_cast<std::int32_t>(world * uni(lo, hi));
  }
  L.topk = static_cast<std::int32_t>(std::min<std::int64_t>(uni(1, 8), L.num_experts));
  L.hidden = uni(0, 4) == 0 ? uni(1, 7) : uni(8, 96);
  // 1-byte rows: MOE_UINT8 here; once routing.h has issue 27's MOE_FLOAT8_E4M3 (value 8), add it to this list
  // (load_in decodes it).
  L.in_t = pick(rng, {MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16, MOE_UINT8});
  L.out_t = pick(rng, {MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16});
  L.spt = uni(0, 2) == 0 ? static_cast<std::int32_t>(uni(1, 4)) : 0;
  L.mode = uni(0, 1) ? MOE_EP_CAPACITY : MOE_EP_EXACT;
  L.weights = uni(0, 5) != 0;
  L.permuted = uni(0, 1) != 0;
  L.block_size = static_cast<std::int32_t>(uni(0, 1) ? 1 : uni(2, 64));
  L.scale = uni(0, 2) == 0 ? 1.0f : static_cast<float>(uni(1, 1000)) / 300.0f;
  L.special_values = uni(0, 5) == 0;
  // placement
  L.expert_rank.resize(static_cast<std::size_t>(L.num_experts));
  L.expert_local.resize(static_cast<std::size_t>(L.num_experts));
  if (L.explicit_placement) {
    const std::int32_t busy = static_cast<std::int32_t>(uni(1, world));  // ranks beyond hold no experts
    for (auto& r : L.expert_rank) r = static_cast<std::int32_t>(uni(0, busy - 1));
    L.explicit_local = uni(0, 1) != 0;
    for (std::int32_t r = 0; r < world; ++r) {
      std::vector<std::int32_t> mine;
      for (std::int32_t e = 0; e < L.num_experts; ++e)
        if (L.expert_rank[static_cast<std::size_t>(e)] == r) mine.push_back(e);
      std::vector<std::int32_t> perm(mine.size());
      for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int32_t>(i);
      if (L.explicit_local) std::shuffle(perm.begin(), perm.end(), rng);
      for (std::size_t i = 0; i < mine.size(); ++i) L.expert_local[static_cast<std::size_t>(mine[i])] = perm[i];
    }
  } else {
    const std::int32_t per = L.num_experts / world;
    for (std::int32_t e = 0; e < L.num_experts; ++e)
      L.expert_rank[static_cast<std::size_t>(e)] = e / per, L.expert_local[static_cast<std::size_t>(e)] = e % per;
  }
  // routing: uniform, or skewed onto a few experts (some ranks then receive nothing)
  const bool skew = uni(0, 2) == 0;
  const std::int32_t hot = static_cast<std::int32_t>(uni(L.topk, std::max(L.topk, L.num_experts / 4)));
  const bool distinct = uni(0, 4) != 0;
  L.tokens.resize(static_cast<std::size_t>(world));
  for (std::int32_t r = 0; r < world; ++r) {
    const int kind = static_cast<int>(uni(0, 5));
    L.tokens[static_cast<std::size_t>(r)] = kind == 0 ? 0 : kind == 1 ? uni(1, 3) : uni(0, max_tokens_cap);
  }
  L.max_tokens = *std::max_element(L.tokens.begin(), L.tokens.end()) + uni(0, 5);
  L.ids.resize(static_cast<std::size_t>(world));
  L.hidden_rows.resize(static_cast<std::size_t>(world));
  L.scales.resize(static_cast<std::size_t>(world));
  L.topk_weights.resize(static_cast<std::size_t>(world));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (std::int32_t r = 0; r < world; ++r) {
    const auto T = static_cast<std::size_t>(L.tokens[static_cast<std::size_t>(r)]);
    auto& ids = L.ids[static_cast<std::size_t>(r)];
    ids.resize(T * static_cast<std::size_t>(L.topk));
    for (std::size_t t = 0; t < T; ++t) {
      const std::int32_t range = skew ? hot : L.num_experts;
      for (std::int32_t k = 0; k < L.topk; ++k) {
        std::int32_t e;
        for (;;) {
          e = static_cast<std::int32_t>(uni(0, range - 1));  // skewed: the first `hot` experts only
          bool dup = false;
          for (std::int32_t j = 0; j < k; ++j) dup |= ids[t * static_cast<std::size_t>(L.topk) + static_cast<std::size_t>(j)] == e;
          if (!distinct || !dup || range < L.topk) break;
        }
        ids[t * static_cast<std::size_t>(L.topk) + static_cast<std::size_t>(k)] = e;
      }
    }
    auto& rows = L.hidden_rows[static_cast<std::size_t>(r)];
    rows.resize(T * static_cast<std::size_t>(L.row_bytes()));
    for (std::size_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < L.hidden; ++h) {
        unsigned char* p = rows.data() + t * static_cast<std::size_t>(L.row_bytes()) + static_cast<std::size_t>(h) * elem_bytes(L.in_t);
        float v = normal(rng);
        if (L.special_values && uni(0, 200) == 0) v = uni(0, 1) ? f32_from(0x7F800000u) : f32_from(0x7FC00001u);
        if (L.in_t == MOE_FLOAT32) std::memcpy(p, &v, 4);
        else if (L.in_t == MOE_FLOAT16) { auto b = moe::reference::float_to_half(v).bits; std::memcpy(p, &b, 2); }
        else if (L.in_t == MOE_BFLOAT16) { auto b = moe::reference::float_to_bfloat16(v).bits; std::memcpy(p, &b, 2); }
        else *p = static_cast<unsigned char>(rng());
      }
    auto& sc = L.scales[static_cast<std::size_t>(r)];
    sc.resize(T * static_cast<std::size_t>(L.spt));
    for (auto& s : sc) s = static_cast<float>(uni(1, 64)) / 16.0f;
    auto& w = L.topk_weights[static_cast<std::size_t>(r)];
    w.resize(T * static_cast<std::size_t>(L.topk));
    for (auto& x : w) x = normal(rng) / 3.0f;
  }
  if (L.mode == MOE_EP_CAPACITY) L.fit_capacity(uni(0, 3), uni(0, 1) != 0, uni(0, 3));
  return L;
}

// The single-process run of the layer for rank r's tokens: route, the expert function, combine's arithmetic.
inline std::vector<unsigned char> reference_output(const Layer& L, std::int32_t r) {
  const auto T = L.tokens[static_cast<std::size_t>(r)];
  const auto ob = static_cast<std::size_t>(L.out_row_bytes());
  std::vector<unsigned char> out(static_cast<std::size_t>(T) * ob), y(ob);
  const auto& ids = L.ids[static_cast<std::size_t>(r)];
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<std::vector<unsigned char>> rows;
    for (std::int32_t k = 0; k < L.topk; ++k) {
      expert_fn(ids[static_cast<std::size_t>(t * L.topk + k)], L.in_t,
                L.hidden_rows[static_cast<std::size_t>(r)].data() + t * L.row_bytes(),
                L.scales[static_cast<std::size_t>(r)].data() + t * L.spt, L.spt, L.out_t, y.data(), L.hidden);
      rows.push_back(y);
    }
    for (std::int64_t h = 0; h < L.hidden; ++h) {
      float acc = 0.0f;
      for (std::int32_t k = 0; k < L.topk; ++k) {
        const float w = L.weights ? L.topk_weights[static_cast<std::size_t>(r)][static_cast<std::size_t>(t * L.topk + k)] : 1.0f;
        const float x = load_out(L.out_t, rows[static_cast<std::size_t>(k)].data(), h);
        const float p = w * x;
        acc = acc + p;
      }
      const float o = acc * L.scale;
      store_out(L.out_t, out.data() + static_cast<std::size_t>(t) * ob, h, o);
    }
  }
  return out;
}

// What rank `me` must receive: (source, token) pairs in order.
inline std::vector<std::pair<std::int32_t, std::int64_t>> expected_rows(const Layer& L, std::int32_t me,
                                                                        std::vector<std::int64_t>* per_source) {
  std::vector<std::pair<std::int32_t, std::int64_t>> rows;
  per_source->assign(static_cast<std::size_t>(L.world), 0);
  for (std::int32_t s = 0; s < L.world; ++s)
    for (std::int64_t t = 0; t < L.tokens[static_cast<std::size_t>(s)]; ++t) {
      bool mine = false;
      for (std::int32_t k = 0; k < L.topk; ++k)
        mine |= L.expert_rank[static_cast<std::size_t>(L.ids[static_cast<std::size_t>(s)][static_cast<std::size_t>(t * L.topk + k)])] == me;
      if (mine) rows.emplace_back(s, t), ++(*per_source)[static_cast<std::size_t>(s)];
    }
  return rows;
}

template <class T>
moe::device_buffer<T> to_device(const std::vector<T>& v) {
  moe::device_buffer<T> d(v.size());
  moe::copy_to_device(d.data(), v.data(), v.size() * sizeof(T));
  return d;
}
template <class T>
std::vector<T> to_host(const moe::device_buffer<T>& d, std::size_t n) {
  std::vector<T> v(n);
  moe::copy_to_host(v.data(), d.data(), n * sizeof(T));
  return v;
}

// One layer end to end on this rank: layout, dispatch (checked), the experts, combine (checked).
// Returns false (and notes why) at the first mismatch.
// corrupt_rank >= 0: that rank drops the token_positions entry of one present slot (permuted layers): combine
// must then fail on every rank and the token's output at its home must be NaN.
inline void run_layer(World& w, const Layer& L, moe::ep::Handle& handle, Tally& tally, const std::string& name,
                      const moe::ep::Comm& comm, std::int32_t corrupt_rank = -1) {
  const std::int32_t me = w.rank();
  const std::int64_t T = L.tokens[static_cast<std::size_t>(me)];
  void* st = w.stream();
  auto d_ids = to_device(L.ids[static_cast<std::size_t>(me)]);
  auto d_hidden = to_device(L.hidden_rows[static_cast<std::size_t>(me)]);
  auto d_scales = to_device(L.scales[static_cast<std::size_t>(me)]);
  auto d_weights = to_device(L.topk_weights[static_cast<std::size_t>(me)]);
  const bool cap = L.mode == MOE_EP_CAPACITY;
  moe::ep::Handle::Counts counts{};
  w.submit([&] { counts = handle.dispatch_layout(d_ids.data(), T, st); }, cap);
  std::vector<std::int64_t> per_source;
  const auto want = expected_rows(L, me, &per_source);
  const std::int64_t cap_rows = cap ? handle.config().capacity : 0;
  const std::int64_t R = cap ? L.world * cap_rows : static_cast<std::int64_t>(want.size());
  tally.check(counts.recv_rows == R, name + ": recv_rows " + std::to_string(counts.recv_rows) + " != " + std::to_string(R));
  const std::int64_t rows_alloc = std::max<std::int64_t>(R, 1) + 1;  // one spare row: never written
  const auto rb = static_cast<std::size_t>(L.row_bytes());
  std::vector<unsigned char> poison_rows(static_cast<std::size_t>(rows_alloc) * rb, 0xA5);
  auto d_recv = to_device(poison_rows);
  auto d_recv_scales = to_device(std::vector<float>(static_cast<std::size_t>(rows_alloc * L.spt), -7.0f));
  auto d_recv_ids = to_device(std::vector<std::int32_t>(static_cast<std::size_t>(rows_alloc * L.topk), 0x5A5A5A5A));
  auto d_recv_w = to_device(std::vector<float>(static_cast<std::size_t>(rows_alloc * L.topk), -9.0f));
  w.submit([&] {
    handle.dispatch(d_hidden.data(), L.spt > 0 ? d_scales.data() : nullptr, L.weights ? d_weights.data() : nullptr,
                    d_recv.data(), L.spt > 0 ? d_recv_scales.data() : nullptr, d_recv_ids.data(), d_recv_w.data(),
                    rows_alloc, st);
  }, cap);
  moe::synchronize(st);
  const auto recv = to_host(d_recv, static_cast<std::size_t>(rows_alloc) * rb);
  const auto recv_scales = to_host(d_recv_scales, static_cast<std::size_t>(rows_alloc * L.spt));
  const auto recv_ids = to_host(d_recv_ids, static_cast<std::size_t>(rows_alloc * L.topk));
  const auto recv_w = to_host(d_recv_w, static_cast<std::size_t>(rows_alloc * L.topk));

  // the received rows: position of each expected row
  std::vector<std::int64_t> slot_of(want.size());
  {
    std::int64_t i = 0;
    std::vector<std::int64_t> seen(static_cast<std::size_t>(L.world), 0);
    for (const auto& [s, t] : want) {
      slot_of[static_cast<std::size_t>(i)] = cap ? s * cap_rows + seen[static_cast<std::size_t>(s)]++ : i;
      ++i;
    }
  }
  bool rows_ok = true;
  std::string why;
  std::vector<char> is_row(static_cast<std::size_t>(rows_alloc), 0);
  for (std::size_t i = 0; i < want.size() && rows_ok; ++i) {
    const auto [s, t] = want[i];
    const std::int64_t r = slot_of[i];
    is_row[static_cast<std::size_t>(r)] = 1;
    if (std::memcmp(recv.data() + static_cast<std::size_t>(r) * rb,
                    L.hidden_rows[static_cast<std::size_t>(s)].data() + static_cast<std::size_t>(t) * rb, rb) != 0)
      rows_ok = false, why = "hidden row " + std::to_string(r);
    for (std::int32_t j = 0; j < L.spt && rows_ok; ++j)
      if (f32_bits(recv_scales[static_cast<std::size_t>(r * L.spt + j)]) !=
          f32_bits(L.scales[static_cast<std::size_t>(s)][static_cast<std::size_t>(t * L.spt + j)]))
        rows_ok = false, why = "scales of row " + std::to_string(r);
    for (std::int32_t k = 0; k < L.topk && rows_ok; ++k) {
      const std::int32_t e = L.ids[static_cast<std::size_t>(s)][static_cast<std::size_t>(t * L.topk + k)];
      const std::int32_t want_id = L.expert_rank[static_cast<std::size_t>(e)] == me ? L.local_of(e) : -1;
      if (recv_ids[static_cast<std::size_t>(r * L.topk + k)] != want_id)
        rows_ok = false, why = "id of row " + std::to_string(r) + " slot " + std::to_string(k);
      const float ww = L.weights ? L.topk_weights[static_cast<std::size_t>(s)][static_cast<std::size_t>(t * L.topk + k)] : 1.0f;
      if (f32_bits(recv_w[static_cast<std::size_t>(r * L.topk + k)]) != f32_bits(ww))
        rows_ok = false, why = "weight of row " + std::to_string(r) + " slot " + std::to_string(k);
    }
  }
  // padding (capacity) rows: ids -1, weights 0; rows past R untouched
  for (std::int64_t r = 0; r < rows_alloc && rows_ok; ++r) {
    if (is_row[static_cast<std::size_t>(r)]) continue;
    const bool pad = r < R;
    for (std::int32_t k = 0; k < L.topk && rows_ok; ++k) {
      const auto i = static_cast<std::size_t>(r * L.topk + k);
      if (pad ? (recv_ids[i] != -1 || recv_w[i] != 0.0f) : (recv_ids[i] != 0x5A5A5A5A || f32_bits(recv_w[i]) != f32_bits(-9.0f)))
        rows_ok = false, why = (pad ? "padding row " : "row past R ") + std::to_string(r) + " written wrongly";
    }
  }
  tally.check(rows_ok, name + ": dispatch: " + why);

  // the experts: flat [R * topk] rows, or the permuted layout of an align over the received ids
  const auto ob = static_cast<std::size_t>(L.out_row_bytes());
  const std::vector<std::int32_t> local_experts = comm.local_experts();
  const std::int64_t numel = R * L.topk;
  std::vector<std::int32_t> positions;
  std::int64_t out_rows = numel;
  if (L.permuted && !local_experts.empty() && numel > 0) {
    const auto nl = static_cast<std::int32_t>(local_experts.size());
    const auto padded = moe::reference::align_workspace_size(numel, nl, L.block_size);
    std::vector<std::int32_t> sorted(static_cast<std::size_t>(moe::align_max_padded(numel, nl, L.block_size)));
    std::vector<std::int32_t> eids(static_cast<std::size_t>(moe::align_max_blocks(numel, nl, L.block_size)));
    std::vector<unsigned char> ws(padded);
    std::int32_t post = 0;
    moe::reference::align_block_size(recv_ids.data(), numel, nl, L.block_size, sorted.data(), eids.data(), &post,
                                     ws.data(), ws.size());
    positions.assign(static_cast<std::size_t>(numel), -1);
    for (std::int32_t p = 0; p < post; ++p)
      if (sorted[static_cast<std::size_t>(p)] < numel) positions[static_cast<std::size_t>(sorted[static_cast<std::size_t>(p)])] = p;
    out_rows = static_cast<std::int64_t>(sorted.size());
  }
  std::int64_t corrupted = -1;  // flat recv slot whose row is dropped
  if (corrupt_rank == me && !positions.empty())
    for (std::int64_t i = 0; i < numel && corrupted < 0; ++i)
      if (positions[static_cast<std::size_t>(i)] >= 0) corrupted = i, positions[static_cast<std::size_t>(i)] = -1;
  std::vector<unsigned char> expert_out(static_cast<std::size_t>(std::max<std::int64_t>(out_rows, 1)) * ob, 0xFF);  // NaN bytes
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int32_t k = 0; k < L.topk; ++k) {
      const std::int32_t lid = recv_ids[static_cast<std::size_t>(r * L.topk + k)];
      if (lid < 0) continue;
      const std::int64_t row = positions.empty() ? r * L.topk + k : positions[static_cast<std::size_t>(r * L.topk + k)];
      if (row < 0) continue;
      expert_fn(local_experts[static_cast<std::size_t>(lid)], L.in_t, recv.data() + static_cast<std::size_t>(r) * rb,
                recv_scales.data() + r * L.spt, L.spt, L.out_t, expert_out.data() + static_cast<std::size_t>(row) * ob,
                L.hidden);
    }
  auto d_expert_out = to_device(expert_out);
  auto d_positions = to_device(positions);
  std::vector<unsigned char> poison_out((static_cast<std::size_t>(T) + 1) * ob, 0x3C);
  auto d_out = to_device(poison_out);
  const bool corrupt = corrupt_rank >= 0 && w.sum(corrupted >= 0 ? 1 : 0) > 0;
  std::string err;
  try {
    w.submit([&] {
      handle.combine(d_expert_out.data(), positions.empty() ? nullptr : d_positions.data(),
                     L.weights ? d_weights.data() : nullptr, L.scale, d_out.data(), st);
    }, cap);
    moe::synchronize(st);
    if (w.device_path()) handle.check_status(st);
  } catch (const moe::Error& e) {
    err = e.what();
  }
  if (corrupt) {
    tally.check(err.find("negative token_positions") != std::string::npos || (w.device_path() && corrupted < 0),
                name + ": a dropped row must be an error, got '" + err + "'");
    return;
  }
  tally.check(err.empty(), name + ": combine threw '" + err + "'");
  const auto out = to_host(d_out, (static_cast<std::size_t>(T) + 1) * ob);
  const auto ref = reference_output(L, me);
  std::string cwhy;
  for (std::int64_t t = 0; t < T && cwhy.empty(); ++t)
    if (std::memcmp(out.data() + static_cast<std::size_t>(t) * ob, ref.data() + static_cast<std::size_t>(t) * ob, ob) != 0)
      cwhy = "token " + std::to_string(t) + " differs from the single-process run";
  if (std::memcmp(out.data() + static_cast<std::size_t>(T) * ob, poison_out.data(), ob) != 0) cwhy += " (row past T written)";
  tally.check(cwhy.empty(), name + ": combine: " + cwhy);
}

inline std::string describe(const Layer& L) {
  std::string s = "E=" + std::to_string(L.num_experts) + " topk=" + std::to_string(L.topk) + " hidden=" +
                  std::to_string(L.hidden) + " in=" + std::to_string(L.in_t) + " out=" + std::to_string(L.out_t) +
                  " spt=" + std::to_string(L.spt) + (L.mode == MOE_EP_CAPACITY ? " capacity=" + std::to_string(L.capacity) : " exact") +
                  (L.explicit_placement ? " placed" : "") + (L.permuted ? " permuted" : " flat") + " tokens=[";
  for (auto t : L.tokens) s += std::to_string(t) + ",";
  return s + "]";
}

}  // namespace ep_test

namespace ep_test {

inline std::uint64_t text_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h & 0xFFFFF;
}

// f() must throw moe::Error(status) whose text contains `substr` (on `ranks_with_substr`, or every rank when
// that is empty); with `same_text`, every rank must get the very same text.
template <class F>
void expect_error(World& w, Tally& tally, const std::string& name, moe_status_t status, const std::string& substr,
                  bool same_text, F&& f) {
  std::string msg = "(no error)";
  moe_status_t got = MOE_SUCCESS;
  try {
    f();
  } catch (const moe::Error& e) {
    got = e.status();
    msg = e.what();
  }
  tally.check(got == status && msg.find(substr) != std::string::npos,
              name + ": rank " + std::to_string(w.rank()) + " got status " + std::to_string(got) + " '" + msg + "'");
  const auto h = static_cast<std::int64_t>(text_hash(msg));
  const bool all_failed = w.sum(got != MOE_SUCCESS ? 1 : 0) == w.size();
  tally.check(all_failed, name + ": not every rank failed");
  if (same_text) tally.check(w.sum(h) == h * w.size(), name + ": ranks got different texts: '" + msg + "'");
}

inline Layer small_layer(std::int32_t world, std::uint64_t seed, moe_ep_mode_t mode) {
  Layer L = random_layer(seed, world, 64);
  L.mode = mode;
  for (std::int32_t r = 0; r < world; ++r)  // every rank has tokens
    if (L.tokens[static_cast<std::size_t>(r)] == 0) {
      L = random_layer(seed + 1000, world, 64);
      L.mode = mode;
      r = -1;
    }
  if (mode == MOE_EP_CAPACITY) L.fit_capacity(0, true, 0);
  else L.capacity = L.slot_capacity = 0;
  return L;
}

inline void run_error_cases(World& w, Tally& tally) {
  const std::int32_t W = w.size(), me = w.rank();
  const bool host = !w.device_path();
  std::uint64_t seed = 777;
  for (;; ++seed) {  // a layer where every rank has tokens
    Layer L = small_layer(W, seed, MOE_EP_EXACT);
    bool ok = true;
    for (auto t : L.tokens) ok &= t > 0;
    if (ok) break;
  }
  // 1. an id outside the experts on the last rank: every rank fails at the layout, naming it; then the handle works.
  for (moe_ep_mode_t mode : {MOE_EP_EXACT, MOE_EP_CAPACITY}) {
    Layer L = small_layer(W, seed, mode);
    moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
    moe::ep::Handle h(comm, L.config());
    Layer bad = L;
    bad.ids[static_cast<std::size_t>(W - 1)][1 % bad.ids[static_cast<std::size_t>(W - 1)].size()] = L.num_experts + 5;
    auto d_ids = to_device(bad.ids[static_cast<std::size_t>(me)]);
    const std::string name = std::string("bad id (") + (mode == MOE_EP_EXACT ? "exact" : "capacity") + ")";
    const std::string want = "rank " + std::to_string(W - 1) + ": topk_ids[";
    if (host || mode == MOE_EP_EXACT) {
      expect_error(w, tally, name, MOE_ERROR_INVALID_ARGUMENT, want, true,
                   [&] { h.dispatch_layout(d_ids.data(), bad.tokens[static_cast<std::size_t>(me)], w.stream()); });
    } else {  // NCCL capacity: no host sync; the device finds it, outputs NaN, check_status names it
      h.dispatch_layout(d_ids.data(), bad.tokens[static_cast<std::size_t>(me)], w.stream());
      expect_error(w, tally, name, MOE_ERROR_INVALID_ARGUMENT, want, true, [&] { h.check_status(w.stream()); });
    }
    run_layer(w, L, h, tally, name + ": then a good layer", comm);
  }
  // 2. capacity overflow: every rank fails, naming the pair.
  {
    Layer L = small_layer(W, seed, MOE_EP_CAPACITY);
    if (L.capacity >= 2) {
      L.capacity -= 1;
      moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
      moe::ep::Handle h(comm, L.config());
      auto d_ids = to_device(L.ids[static_cast<std::size_t>(me)]);
      if (host) {
        expect_error(w, tally, "capacity overflow", MOE_ERROR_INVALID_ARGUMENT, "capacity exceeded", true,
                     [&] { h.dispatch_layout(d_ids.data(), L.tokens[static_cast<std::size_t>(me)], w.stream()); });
      } else {
        h.dispatch_layout(d_ids.data(), L.tokens[static_cast<std::size_t>(me)], w.stream());
        expect_error(w, tally, "capacity overflow", MOE_ERROR_INVALID_ARGUMENT, "capacity exceeded", true,
                     [&] { h.check_status(w.stream()); });
      }
    }
  }
  // 3. more tokens than max_tokens on rank 0; 4. NULL ids with tokens on the last rank.
  {
    Layer L = small_layer(W, seed, MOE_EP_EXACT);
    moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
    moe::ep::Handle h(comm, L.config());
    std::vector<std::int32_t> ids(static_cast<std::size_t>((L.max_tokens + 1) * L.topk), 0);
    auto d_ids = to_device(ids);
    const std::int64_t T = me == 0 ? L.max_tokens + 1 : 1;
    expect_error(w, tally, "max_tokens", MOE_ERROR_INVALID_ARGUMENT, me == 0 ? "exceeds this handle's max_tokens" : "rank 0: num_tokens",
                 false, [&] { h.dispatch_layout(d_ids.data(), T, w.stream()); });
    expect_error(w, tally, "NULL topk_ids", MOE_ERROR_INVALID_ARGUMENT, me == W - 1 ? "topk_ids is NULL" : "reported invalid arguments",
                 false, [&] { h.dispatch_layout(me == W - 1 ? nullptr : d_ids.data(), 1, w.stream()); });
    run_layer(w, L, h, tally, "after refused layouts", comm);
  }
  // 5. ranks that disagree on the shape: every rank fails at creation, naming the field.
  {
    Layer L = small_layer(W, seed, MOE_EP_EXACT);
    moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
    moe::ep::Config c = L.config();
    if (W > 1 && me == W - 1) c.hidden += 1;
    if (W > 1)
      expect_error(w, tally, "shape mismatch", MOE_ERROR_INVALID_ARGUMENT, "ranks disagree on hidden", true,
                   [&] { moe::ep::Handle h(comm, c); });
    moe::ep::Config bad = L.config();
    bad.topk = 0;
    expect_error(w, tally, "bad config", MOE_ERROR_INVALID_ARGUMENT, "topk must be in [1, 64]", true,
                 [&] { moe::ep::Handle h(comm, bad); });
  }
  // 6. placements: num_experts not a multiple of the world; ranks with different placements.
  if (W > 1) {
    expect_error(w, tally, "num_experts % world", MOE_ERROR_INVALID_ARGUMENT, "is not a multiple of the world size", true,
                 [&] { w.make_comm(8 * W + 1, nullptr, nullptr); });
    std::vector<std::int32_t> er(static_cast<std::size_t>(4 * W));
    for (std::size_t e = 0; e < er.size(); ++e) er[e] = static_cast<std::int32_t>(e % static_cast<std::size_t>(W));
    if (me == 0) std::swap(er[0], er[1]);
    expect_error(w, tally, "placement mismatch", MOE_ERROR_INVALID_ARGUMENT, "disagree on the expert placement", false,
                 [&] { w.make_comm(4 * W, er.data(), nullptr); });
    std::vector<std::int32_t> el(er.size(), 0);  // every rank's locals all 0: invalid
    expect_error(w, tally, "bad local indices", MOE_ERROR_INVALID_ARGUMENT, "expert_local[", true,
                 [&] { w.make_comm(4 * W, er.data(), el.data()); });
  }
  // 7. exact mode: a receive bound too small on rank 0.
  {
    Layer L = small_layer(W, seed, MOE_EP_EXACT);
    std::vector<std::int64_t> per;
    const auto rows0 = static_cast<std::int64_t>(expected_rows(L, 0, &per).size());
    if (rows0 >= 2) {
      moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
      moe::ep::Config c = L.config();
      if (me == 0) c.max_recv_rows = rows0 - 1;
      moe::ep::Handle h(comm, c);
      auto d_ids = to_device(L.ids[static_cast<std::size_t>(me)]);
      expect_error(w, tally, "max_recv_rows", MOE_ERROR_INVALID_ARGUMENT, "rank 0 would receive", true,
                   [&] { h.dispatch_layout(d_ids.data(), L.tokens[static_cast<std::size_t>(me)], w.stream()); });
    }
  }
  // 7b. (NCCL, capacity) a refused layout on rank 0 raises nothing: the layer runs, every output is NaN, and
  // check_status names the argument on every rank.
  if (!host) {
    Layer L = small_layer(W, seed, MOE_EP_CAPACITY);
    moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
    moe::ep::Handle h(comm, L.config());
    const std::int64_t T = me == 0 ? L.max_tokens + 1 : L.tokens[static_cast<std::size_t>(me)];
    std::vector<std::int32_t> ids(static_cast<std::size_t>(T * L.topk), 0);
    std::vector<unsigned char> hid(static_cast<std::size_t>(T * L.row_bytes()), 0);
    std::vector<float> sc(static_cast<std::size_t>(T * L.spt), 1.0f);
    auto d_ids = to_device(ids);
    auto d_hid = to_device(hid);
    auto d_sc = to_device(sc);
    const std::int64_t rows = h.recv_buffer_rows();
    moe::device_buffer<unsigned char> recv(static_cast<std::size_t>(rows * L.row_bytes()));
    moe::device_buffer<float> recv_sc(static_cast<std::size_t>(rows * L.spt));
    moe::device_buffer<std::int32_t> recv_ids(static_cast<std::size_t>(rows * L.topk));
    moe::device_buffer<unsigned char> ex(static_cast<std::size_t>(std::max<std::int64_t>(rows * L.topk, 1) * L.out_row_bytes()));
    moe::device_buffer<unsigned char> out(static_cast<std::size_t>(std::max<std::int64_t>(T, 1) * L.out_row_bytes()));
    std::string err;
    try {
      h.dispatch_layout(d_ids.data(), T, w.stream());
      h.dispatch(d_hid.data(), L.spt ? d_sc.data() : nullptr, nullptr, recv.data(), L.spt ? recv_sc.data() : nullptr,
                 recv_ids.data(), nullptr, rows, w.stream());
      h.combine(ex.data(), nullptr, nullptr, 1.0f, out.data(), w.stream());
    } catch (const moe::Error& e) {
      err = e.what();
    }
    tally.check(err.empty(), "refused capacity layout: raised '" + err + "'");
    moe::synchronize(w.stream());
    const auto o = to_host(out, static_cast<std::size_t>(T * L.out_row_bytes()));
    bool all_nan = true;
    for (std::int64_t i = 0; i < T * L.hidden; ++i)
      all_nan &= std::isnan(load_out(L.out_t, o.data(), i));
    tally.check(all_nan, "refused capacity layout: the output is not all NaN");
    expect_error(w, tally, "refused capacity layout", MOE_ERROR_INVALID_ARGUMENT,
                 me == 0 ? "exceeds this handle's max_tokens" : "rank 0: num_tokens", false, [&] { h.check_status(w.stream()); });
    run_layer(w, L, h, tally, "after a refused capacity layout", comm);
  }
  if (!host) return;
  // 8. (MPI) a receive buffer too small on the last rank: every rank fails before anything moves.
  // 9. (MPI) ranks in different calls: rank 0 in combine while the others dispatch.
  // 10. (MPI) a dropped expert row (token_positions -1): combine fails on every rank.
  {
    Layer L = small_layer(W, seed, MOE_EP_EXACT);
    moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
    moe::ep::Handle h(comm, L.config());
    auto d_ids = to_device(L.ids[static_cast<std::size_t>(me)]);
    auto d_hidden = to_device(L.hidden_rows[static_cast<std::size_t>(me)]);
    auto d_scales = to_device(L.scales[static_cast<std::size_t>(me)]);
    const auto counts = h.dispatch_layout(d_ids.data(), L.tokens[static_cast<std::size_t>(me)], w.stream());
    const std::int64_t rows = std::max<std::int64_t>(counts.recv_rows, 1);
    moe::device_buffer<unsigned char> recv(static_cast<std::size_t>(rows * L.row_bytes()));
    moe::device_buffer<float> recv_scales(static_cast<std::size_t>(rows * L.spt));
    moe::device_buffer<std::int32_t> recv_ids(static_cast<std::size_t>(rows * L.topk));
    std::vector<std::int64_t> per;
    const bool last_receives = !expected_rows(L, W - 1, &per).empty();
    if (last_receives) {
      expect_error(w, tally, "recv_rows too small", MOE_ERROR_INVALID_ARGUMENT,
                   me == W - 1 ? "recv_rows = " : "rank " + std::to_string(W - 1) + " reported invalid arguments", false, [&] {
                     h.dispatch(d_hidden.data(), L.spt ? d_scales.data() : nullptr, nullptr, recv.data(),
                                L.spt ? recv_scales.data() : nullptr, recv_ids.data(), nullptr,
                                me == W - 1 ? counts.recv_rows - 1 : rows, w.stream());
                   });
    }
    moe::device_buffer<unsigned char> out(static_cast<std::size_t>(L.tokens[static_cast<std::size_t>(me)] * L.out_row_bytes()));
    if (W > 1)
      expect_error(w, tally, "different calls", MOE_ERROR_INVALID_ARGUMENT, "not in the same call", false, [&] {
      if (me == 0) h.combine(recv.data(), nullptr, nullptr, 1.0f, out.data(), w.stream());
      else h.dispatch(d_hidden.data(), L.spt ? d_scales.data() : nullptr, nullptr, recv.data(),
                      L.spt ? recv_scales.data() : nullptr, recv_ids.data(), nullptr, rows, w.stream());
    });
    run_layer(w, L, h, tally, "after refused calls", comm);
    Layer P = L;
    P.permuted = true;
    for (std::int32_t r = 0; r < W; ++r) {
      std::vector<std::int64_t> ps;
      if (!expected_rows(P, r, &ps).empty()) {
        run_layer(w, P, h, tally, "dropped row on rank " + std::to_string(r), comm, r);
        break;
      }
    }
    run_layer(w, L, h, tally, "after a dropped row", comm);
  }
}

// Fixed adversarial layers: nobody has tokens; every token to expert 0 (rank 0 receives all, the others
// nothing); every slot of a token on one expert (duplicates); topk = num_experts with all experts on the last rank;
// one token in the whole world. Each in both modes.
inline std::vector<Layer> adversarial_layers(std::int32_t world) {
  std::vector<Layer> out;
  for (moe_ep_mode_t mode : {MOE_EP_EXACT, MOE_EP_CAPACITY})
    for (int kind = 0; kind < 5; ++kind) {
      Layer L = random_layer(4242 + static_cast<std::uint64_t>(kind), world, 300);
      L.mode = mode;
      if (kind == 3) {  // all experts on the last rank, topk = num_experts
        L.num_experts = 8, L.topk = 8, L.explicit_placement = true, L.explicit_local = false;
        L.expert_rank.assign(8, world - 1);
        L.expert_local.resize(8);
        for (std::int32_t e = 0; e < 8; ++e) L.expert_local[static_cast<std::size_t>(e)] = e;
      }
      const auto busiest = static_cast<std::int32_t>(std::max_element(L.tokens.begin(), L.tokens.end()) - L.tokens.begin());
      for (std::int32_t r = 0; r < world; ++r) {
        auto& T = L.tokens[static_cast<std::size_t>(r)];  // only ever lowered: the inputs stay valid
        if (kind == 0) T = 0;
        if (kind == 4) T = r == busiest ? std::min<std::int64_t>(T, 1) : 0;
        L.ids[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(T * L.topk));
        L.topk_weights[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(T * L.topk), 0.5f);
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int32_t k = 0; k < L.topk; ++k) {
            auto& e = L.ids[static_cast<std::size_t>(r)][static_cast<std::size_t>(t * L.topk + k)];
            if (kind == 1) e = 0;
            if (kind == 2) e = static_cast<std::int32_t>((t * 5 + r) % L.num_experts);
            if (kind == 3) e = (k + static_cast<std::int32_t>(t)) % 8;
          }
      }
      if (mode == MOE_EP_CAPACITY) L.fit_capacity(0, kind % 2 == 0, 0);
      else L.capacity = L.slot_capacity = 0;
      out.push_back(L);
    }
  return out;
}

// The random sweep: `count` layers from `seed`, each run on a fresh handle (some twice, reusing it).
inline void run_random_layers(World& w, Tally& tally, std::uint64_t seed, int count, std::int64_t max_tokens) {
  int a = 0;
  for (const Layer& L : adversarial_layers(w.size())) {
    const std::string name = "adversarial " + std::to_string(a++) + " {" + describe(L) + "}";
    try {
      moe::ep::Comm comm = w.make_comm(L.num_experts, L.expert_rank.data(), L.expert_local.data());
      moe::ep::Handle h(comm, L.config());
      run_layer(w, L, h, tally, name, comm);
    } catch (const std::exception& e) {
      tally.check(false, name + ": threw '" + e.what() + "'");
    }
  }
  for (int i = 0; i < count; ++i) {
    const Layer L = random_layer(seed + static_cast<std::uint64_t>(i), w.size(), max_tokens);
    const std::string name = "layer " + std::to_string(i) + " {" + describe(L) + "}";
    try {
      moe::ep::Comm comm = L.explicit_placement
                               ? w.make_comm(L.num_experts, L.expert_rank.data(), L.explicit_local ? L.expert_local.data() : nullptr)
                               : w.make_comm(L.num_experts, nullptr, nullptr);
      moe::ep::Handle h(comm, L.config());
      run_layer(w, L, h, tally, name, comm);
      if (i % 3 == 0) {  // the same handle, another layer of the same shape and fewer tokens
        Layer L2 = random_layer(seed + 5000 + static_cast<std::uint64_t>(i), w.size(), max_tokens);
        L2.num_experts = L.num_experts, L2.topk = L.topk, L2.hidden = L.hidden, L2.in_t = L.in_t, L2.out_t = L.out_t;
        L2.spt = L.spt, L2.mode = L.mode, L2.capacity = L.capacity, L2.slot_capacity = L.slot_capacity;
        L2.expert_rank = L.expert_rank, L2.expert_local = L.expert_local, L2.max_tokens = L.max_tokens;
        L2.explicit_placement = L.explicit_placement;
        L2.tokens = L.tokens, L2.ids = L.ids, L2.topk_weights = L.topk_weights, L2.hidden_rows = L.hidden_rows;
        L2.scales = L.scales;
        for (auto& t : L2.tokens) t /= 2;  // a prefix of each rank's tokens: fits every capacity
        run_layer(w, L2, h, tally, name + " (reused handle, half the tokens)", comm);
      }
    } catch (const std::exception& e) {
      tally.check(false, name + ": threw '" + e.what() + "'");
    }
  }
}

}  // namespace ep_test
