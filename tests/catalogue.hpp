// The one catalogue of cases, shared by the correctness tests, the graph-capture tests and the benchmark
// (perf/bench.cpp), after ggml's test-backend-ops: the shapes the benchmark times are shapes the suite checks, on
// every path that applies to them. Plain structs, named lists and the id generators; no test framework.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "moe/routing.hpp"

namespace moe_catalogue {

using Rng = std::mt19937_64;

// How a case's ids are drawn (make_ids).
enum class Dist {
  kUniform,      // experts uniform in [0, E); a fraction `dropped` of ids out of range (negative, E, far above)
  kSkew,         // half of all ids on the expert `hot`, the rest uniform: a collapsed router
  kEp8,          // expert parallelism over 8 ranks: 7 ids in 8 are -1 (another rank's experts)
  kOneExpert,    // every id on the expert `hot`
  kEvenExperts,  // uniform over the even experts: every odd expert empty
  kRouter,       // each token picks topk distinct experts (topk <= E)
  kGroups,       // every expert present holds `hot` ids (a count here; the last the rest), experts spread, shuffled
};
constexpr std::int32_t kHotLast = -1;  // `hot`: the expert E - 1
constexpr std::int32_t kHotMid = -2;   // `hot`: the expert E / 2

struct AlignCase {
  std::int64_t tokens;
  std::int32_t topk, experts, block_size;
  Dist dist = Dist::kUniform;
  double dropped = 0;          // kUniform
  std::int32_t hot = 0;        // kSkew, kOneExpert: an expert, kHotLast or kHotMid
  moe_dtype_t id_type = MOE_INT32;
  std::int64_t numel() const { return tokens * topk; }
  std::int32_t hot_expert() const { return hot == kHotLast ? experts - 1 : hot == kHotMid ? experts / 2 : hot; }
};

struct SumCase {
  std::int64_t tokens;
  std::int32_t topk;
  std::int64_t hidden;
  moe_dtype_t dtype;
};

inline const char* dist_name(Dist d) {
  switch (d) {
    case Dist::kUniform: return "uniform";
    case Dist::kSkew: return "skew";
    case Dist::kEp8: return "ep8";
    case Dist::kOneExpert: return "one-expert";
    case Dist::kEvenExperts: return "even-experts";
    case Dist::kRouter: return "router";
    case Dist::kGroups: return "groups";
  }
  return "?";
}
inline const char* dtype_name(moe_dtype_t t) {
  switch (t) {
    case MOE_FLOAT32: return "fp32";
    case MOE_FLOAT16: return "fp16";
    case MOE_BFLOAT16: return "bf16";
    case MOE_INT8: return "i8";
    case MOE_UINT8: return "u8";
    case MOE_INT16: return "i16";
    case MOE_INT32: return "i32";
    case MOE_INT64: return "i64";
    case MOE_FLOAT8_E4M3: return "fp8e4m3";
    case MOE_FLOAT8_E5M2: return "fp8e5m2";
    default: return "?";
  }
}

// "TOKENSxTOPK E=EXPERTS bs=BLOCK DIST" (the benchmark's CSV key), then what else sets the case apart
inline std::string name(const AlignCase& c) {
  char text[160];
  std::snprintf(text, sizeof text, "%lldx%d E=%d bs=%d %s", static_cast<long long>(c.tokens), c.topk, c.experts,
                c.block_size, dist_name(c.dist));
  std::string s = text;
  if (c.dropped > 0) s += " dropped=" + std::to_string(c.dropped).substr(0, 5);
  const bool hot = c.dist == Dist::kSkew || c.dist == Dist::kOneExpert;
  if (hot && c.hot != 0) s += " hot=" + std::to_string(c.hot_expert());
  if (c.dist == Dist::kGroups) s += " per=" + std::to_string(c.hot);
  if (c.id_type != MOE_INT32) s += std::string(" ") + dtype_name(c.id_type);
  return s;
}
inline std::string name(const SumCase& c) {
  char text[128];
  std::snprintf(text, sizeof text, "%lldx%dx%lld %s", static_cast<long long>(c.tokens), c.topk,
                static_cast<long long>(c.hidden), dtype_name(c.dtype));
  return text;
}

// ---- id generators -----------------------------------------------------------------------------------------
template <class IdT>
IdT clamp_id(std::int64_t v) {
  const auto lo = static_cast<std::int64_t>(std::numeric_limits<IdT>::min());
  const auto hi = static_cast<std::int64_t>(std::numeric_limits<IdT>::max());
  return static_cast<IdT>(std::min(std::max(v, lo), hi));
}

// An id out of range for E experts, as an IdT (negative, E, beyond E, far beyond; clamped to the type, and -1
// where clamping lands in range).
template <class IdT>
IdT dropped_id(std::int32_t E, Rng& rng) {
  const std::int64_t bad[] = {-1, E, E + 7, -1000000, std::int64_t{1} << 40};
  IdT x = clamp_id<IdT>(bad[rng() % 5]);
  if (static_cast<std::int64_t>(x) >= 0 && static_cast<std::int64_t>(x) < E) x = clamp_id<IdT>(-1);
  return x;
}

// A real router's output: each of `tokens` tokens picks topk distinct experts (topk <= E).
template <class IdT>
std::vector<IdT> router_ids(std::size_t tokens, std::int32_t topk, std::int32_t E, Rng& rng) {
  std::vector<IdT> v;
  std::uniform_int_distribution<std::int32_t> expert(0, E - 1);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::vector<std::int32_t> chosen;
    while (static_cast<std::int32_t>(chosen.size()) < topk) {
      const std::int32_t e = expert(rng);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (auto e : chosen) v.push_back(static_cast<IdT>(e));
  }
  return v;
}

// The ids of case c (its id_type is the caller's IdT). Experts an IdT cannot name are clamped to its range.
template <class IdT>
std::vector<IdT> make_ids(const AlignCase& c, Rng& rng) {
  const std::int32_t E = c.experts;
  if (c.dist == Dist::kRouter) return router_ids<IdT>(static_cast<std::size_t>(c.tokens), c.topk, E, rng);
  if (c.dist == Dist::kGroups) {  // group g on expert g * 7919 mod E: distinct while the groups are <= E (E = 2^k)
    std::vector<IdT> v(static_cast<std::size_t>(c.numel()));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = clamp_id<IdT>(static_cast<std::int64_t>(i) / std::max(c.hot, 1) * 7919 % E);
    std::shuffle(v.begin(), v.end(), rng);
    return v;
  }
  std::uniform_int_distribution<std::int32_t> expert(0, E - 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<IdT> v(static_cast<std::size_t>(c.numel()));
  const std::int32_t hot = c.hot_expert();
  for (auto& x : v) {
    std::int64_t e = expert(rng);
    switch (c.dist) {
      case Dist::kSkew: e = (rng() & 1) ? hot : e; break;
      case Dist::kEp8: e = (rng() % 8) != 0 ? -1 : e; break;
      case Dist::kOneExpert: e = hot; break;
      case Dist::kEvenExperts: e &= ~std::int64_t{1}; break;
      default: break;
    }
    x = c.dropped > 0 && u(rng) < c.dropped ? dropped_id<IdT>(E, rng) : clamp_id<IdT>(e);
  }
  return v;
}

// f(ids) with the ids of case c in its id type.
template <class F>
decltype(auto) with_ids(const AlignCase& c, Rng& rng, F&& f) {
  switch (c.id_type) {
    case MOE_INT8: return f(make_ids<std::int8_t>(c, rng));
    case MOE_UINT8: return f(make_ids<std::uint8_t>(c, rng));
    case MOE_INT16: return f(make_ids<std::int16_t>(c, rng));
    case MOE_INT64: return f(make_ids<std::int64_t>(c, rng));
    default: return f(make_ids<std::int32_t>(c, rng));
  }
}

// ---- the benchmark's lists (perf/bench.cpp --suite NAME); the suite checks them too ----------------------
// The issue-5 target table (block 64) and the shapes tracked beside it.
inline std::vector<AlignCase> align_targets() {
  return {{1, 8, 256, 64},     {256, 8, 256, 64},   {4096, 8, 256, 64},          {16384, 8, 256, 64},
          {65536, 8, 256, 64}, {65536, 8, 256, 64, Dist::kSkew}, {65536, 2, 8, 64}};
}
inline std::vector<AlignCase> align_sweep() {
  std::vector<AlignCase> v;
  for (std::int64_t t : {1, 16, 256, 1024, 4096, 16384, 65536})
    for (std::int32_t k : {2, 8})
      for (std::int32_t e : {8, 64, 256, 512})
        for (std::int32_t b : {16, 64, 128}) v.push_back({t, k, e, b});
  return v;
}
inline std::vector<AlignCase> align_large() {  // many experts, expert-parallel and skewed ids
  std::vector<AlignCase> v;
  for (std::int64_t t : {1, 256, 4096, 65536})
    for (std::int32_t e : {1024, 4096, 65536}) v.push_back({t, 8, e, 64});
  v.push_back({65536, 8, 256, 64, Dist::kEp8});
  v.push_back({262144, 8, 256, 64});
  // few distinct experts per warp step on the cluster grid path (its ranking's cost depends on them)
  v.push_back({4096, 8, 256, 64, Dist::kSkew});
  v.push_back({4096, 8, 256, 64, Dist::kEp8});
  return v;
}
inline std::vector<SumCase> sum_targets() {
  std::vector<SumCase> v;
  for (std::int64_t t : {1, 4096})
    for (std::int32_t k : {2, 8}) v.push_back({t, k, 4096, MOE_BFLOAT16});
  return v;
}
inline std::vector<SumCase> sum_suite(bool quick) {
  std::vector<SumCase> v;
  for (moe_dtype_t d : {MOE_BFLOAT16, MOE_FLOAT16, MOE_FLOAT32})
    for (std::int32_t k : {2, 8})
      for (std::int64_t h : {2048, 4096, 7168})
        for (std::int64_t t : {1, 4096, 16384}) {
          if (quick && t == 16384) continue;
          v.push_back({t, k, h, d});
        }
  return v;
}

// ---- the correctness suite's lists (numel = tokens, topk 1, unless a router) -----------------------------
// Every numel class against every expert class: 5 % of ids dropped, block 64. (20000 experts: a GPU expert scan
// over several loads per warp, its last warp's tile and rows partly filled.)
inline std::vector<AlignCase> numel_by_experts() {
  std::vector<AlignCase> v;
  for (std::int64_t n : {1, 2, 3, 7, 31, 32, 33, 127, 509, 1021, 2053, 4099, 8191, 16411, 65521, 131101})
    for (std::int32_t E : {1, 2, 8, 60, 256, 512, 1024, 1025, 4096, 20000, 65536})
      v.push_back({n, 1, E, 64, Dist::kUniform, 0.05});
  return v;
}
// Expert counts that no range of 2, 4 or 8 experts divides (the GPU's block_per_expert gives a block a range):
// a short last range, the hot expert in it; sizes on both sides of the GPU's path limits and beyond.
inline std::vector<AlignCase> expert_remainders() {
  std::vector<AlignCase> v;
  for (std::int64_t n : {33, 256, 257, 2047, 2048, 2049, 32767, 32768, 32769})
    for (std::int32_t E : {127, 129, 255, 257, 641, 1023}) {
      v.push_back({n, 1, E, 16, Dist::kSkew, 0, kHotLast});
      v.push_back({n, 1, E, 64, Dist::kUniform, 0.05});
    }
  return v;
}
// Sizes where a GPU path changes its blocks or ids per thread (block_per_expert: 128 threads to 512 ids, then
// wider; 1-8 experts per block as experts grow; one_cluster: ids per thread double after 2048 and 4096;
// cluster_grid after 16384 and 32768, then cooperative_grid): last warps, blocks or clusters partly filled or empty.
inline std::vector<AlignCase> path_edges() {
  std::vector<AlignCase> v;
  for (std::int64_t n : {8, 9, 16, 32, 33, 127, 128, 129, 512, 513, 1000, 1024, 1025, 1057, 2048, 2049, 4095, 4096,
                         4097, 6000, 8191, 8192, 8193, 16384, 16385, 32769, 65536, 65537})
    for (std::int32_t E : {8, 256, 257, 513, 1024}) {
      v.push_back({n, 1, E, 64, Dist::kUniform, 0.05});
      v.push_back({n, 1, E, 16, Dist::kSkew, 0, kHotMid});
    }
  return v;
}
// Block sizes that are powers of two (a GPU kernel may shift) and others (it divides).
inline std::vector<AlignCase> block_sizes() {
  std::vector<AlignCase> v;
  for (std::int32_t bs : {1, 3, 16, 48, 64, 100, 128, 256})
    for (std::int64_t n : {1, 20, 100, 2048, 5000, 20000, 70000})
      for (std::int32_t E : {3, 256, 2000}) v.push_back({n, 1, E, bs, Dist::kUniform, 0.01});
  return v;
}
// Every id type, and narrow types with more experts than they can name (all valid but the negative ones).
inline std::vector<AlignCase> id_types() {
  std::vector<AlignCase> v;
  for (std::int64_t n : {1, 777, 40000}) {
    v.push_back({n, 1, 100, 16, Dist::kUniform, 0.1, 0, MOE_INT8});
    v.push_back({n, 1, 200, 16, Dist::kUniform, 0.1, 0, MOE_UINT8});
    v.push_back({n, 1, 3000, 16, Dist::kUniform, 0.1, 0, MOE_INT16});
    v.push_back({n, 1, 256, 16, Dist::kUniform, 0.1, 0, MOE_INT32});
    v.push_back({n, 1, 256, 16, Dist::kUniform, 0.1, 0, MOE_INT64});
    v.push_back({n, 1, 65536, 64, Dist::kUniform, 0.1, 0, MOE_INT8});
  }
  return v;
}
// Skewed, a single expert, every id dropped, expert parallel, odd experts empty.
inline std::vector<AlignCase> adversarial() {
  std::vector<AlignCase> v;
  for (std::int64_t n : {5, 2048, 3000, 20000, 100000, 524288}) {  // 2048: block_sort, many experts
    for (std::int32_t E : {8, 256, 65536}) {
      v.push_back({n, 1, E, 64, Dist::kSkew});
      v.push_back({n, 1, E, 16, Dist::kSkew, 0, kHotLast});
      v.push_back({n, 1, E, 128, Dist::kOneExpert, 0, kHotLast});
      v.push_back({n, 1, E, 64, Dist::kUniform, 1.0});  // every id dropped
      v.push_back({n, 1, E, 64, Dist::kUniform, 0.875});  // expert parallel over 8 ranks, varied foreign ids
    }
    v.push_back({n, 1, 128, 64, Dist::kEvenExperts});
  }
  // block_sort lists an expert's ids up to its kSortListMax (16) of them, and sorts where one expert holds more
  for (std::int32_t per : {1, 16, 17})
    for (std::int64_t n : {1000, 2048}) v.push_back({n, 1, 65536, 64, Dist::kGroups, 0, per});
  return v;
}
inline std::vector<AlignCase> routers() {
  std::vector<AlignCase> v;
  for (std::int64_t tokens : {1, 16, 256, 4096, 16384})
    for (auto [topk, E] : {std::pair<int, int>{2, 8}, {8, 256}, {6, 160}, {8, 512}})
      v.push_back({tokens, topk, E, 64, Dist::kRouter});
  return v;
}
inline std::vector<AlignCase> millions() {
  return {{3000017, 1, 256, 64, Dist::kUniform, 0.02},
          {2000003, 1, 65536, 128, Dist::kSkew, 0, 0, MOE_INT64},
          {1048583, 1, 8, 16, Dist::kUniform, 0, 0, MOE_INT16}};
}
// One of each GPU path (and numel 0), for the graph-capture tests.
inline std::vector<AlignCase> capture_shapes() {
  return {{8, 1, 256, 64},     {20, 1, 65536, 16},   {1000, 1, 256, 64},  {4096, 1, 64, 16},   {40000, 1, 256, 64},
          {300000, 1, 256, 64}, {2200000, 1, 256, 64}, {100000, 1, 4096, 128}, {5000, 1, 65536, 16}, {0, 1, 8, 16}};
}

// moe_sum: every topk a GPU kernel is built for (2, 4, 8) and those between and beyond, odd and vector hidden.
inline std::vector<SumCase> sum_sweep(moe_dtype_t dtype) {
  std::vector<SumCase> v;
  for (std::int64_t tokens : {1, 3, 17, 257})
    for (std::int32_t topk : {1, 2, 3, 4, 5, 8, 9})
      for (std::int64_t hidden : {1, 7, 8, 9, 64, 2051, 7168}) v.push_back({tokens, topk, hidden, dtype});
  return v;
}
inline std::vector<SumCase> sum_large() {
  return {{4096, 8, 2048, MOE_BFLOAT16}, {1000, 2, 7168, MOE_FLOAT16}, {513, 4, 4099, MOE_FLOAT32}};
}

}  // namespace moe_catalogue
