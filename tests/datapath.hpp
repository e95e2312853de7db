// Test support of moe_permute and moe_combine (test_permute.cpp, test_combine.cpp, test_graph_capture.cu): the
// align layout and token positions on the host, element conversions, buffers at chosen misalignments, a second
// oracle for combine written apart from the reference, and random values with planted specials.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.hpp"

namespace moe_test {
namespace dp {

using moe::bfloat16_t;
using moe::half_t;

inline float to_float(float x) { return x; }
inline float to_float(half_t x) { return moe::reference::half_to_float(x); }
inline float to_float(bfloat16_t x) { return moe::reference::bfloat16_to_float(x); }
template <class T> T from_float(float f);
template <> inline float from_float<float>(float f) { return f; }
template <> inline half_t from_float<half_t>(float f) { return moe::reference::float_to_half(f); }
template <> inline bfloat16_t from_float<bfloat16_t>(float f) { return moe::reference::float_to_bfloat16(f); }

template <class T>
std::uint32_t bits(T x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}
inline float f32_of_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A plain align on the host (the reference), and the token positions of its output: for p < post_pad with
// sorted[p] < numel, positions[sorted[p]] = p; every other entry -1 (dropped ids).
struct Layout {
  std::vector<std::int32_t> sorted;  // max_padded entries
  std::int32_t post_pad = 0;
  std::int64_t max_padded = 0;
  std::vector<std::int32_t> positions;  // numel entries
};

inline std::vector<std::int32_t> positions_from_sorted(const std::vector<std::int32_t>& sorted, std::int32_t post_pad,
                                                       std::int64_t numel) {
  std::vector<std::int32_t> pos(static_cast<std::size_t>(numel), -1);
  for (std::int32_t p = 0; p < post_pad; ++p) {
    const std::int32_t id = sorted[static_cast<std::size_t>(p)];
    if (id < numel) pos[static_cast<std::size_t>(id)] = p;
  }
  return pos;
}

inline Layout host_layout(const std::vector<std::int32_t>& ids, std::int32_t experts, std::int32_t block) {
  const auto numel = static_cast<std::int64_t>(ids.size());
  const AlignResult r = reference_align(ids, experts, block);
  Layout l;
  l.sorted = r.sorted_token_ids;
  l.post_pad = r.num_tokens_post_pad;
  l.max_padded = moe::align_max_padded(numel, experts, block);
  l.positions = positions_from_sorted(l.sorted, l.post_pad, numel);
  return l;
}

// Router ids: each token picks topk distinct experts when topk <= E (else any), a fraction `dropped` of them
// replaced by -1 (another rank's expert).
inline std::vector<std::int32_t> route(std::int64_t tokens, std::int32_t topk, std::int32_t experts, Rng& rng,
                                       double dropped = 0.0) {
  std::vector<std::int32_t> ids;
  if (topk <= experts) ids = router_ids<std::int32_t>(static_cast<std::size_t>(tokens), topk, experts, rng);
  else ids = uniform_ids<std::int32_t>(static_cast<std::size_t>(tokens * topk), experts, rng);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& x : ids)
    if (dropped > 0 && u(rng) < dropped) x = -1;
  return ids;
}

// A device buffer of `bytes` whose data() is `offset` bytes past an allocation (16-byte aligned at worst + 0),
// to reach every alignment path of the backends. Host contents are copied in at that offset.
struct Offset {
  moe::device_buffer<unsigned char> buf;
  std::size_t offset = 0, bytes = 0;
  Offset(std::size_t n, std::size_t off) : buf(n + off + 16), offset(off), bytes(n) {}
  unsigned char* data() const { return buf.data() + offset; }
  void put(const void* host, std::size_t n) { moe::copy_to_device(data(), host, n); }
  template <class T>
  void put(const std::vector<T>& v) { put(v.data(), v.size() * sizeof(T)); }
  std::vector<unsigned char> get() const {
    std::vector<unsigned char> h(bytes);
    moe::copy_to_host(h.data(), data(), bytes);
    return h;
  }
};

template <class T>
std::vector<T> random_values(std::size_t n, Rng& rng, float sd = 4.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<T> v(n);
  for (auto& x : v) x = from_float<T>(d(rng));
  return v;
}

// Weights as routers give them (positive, summing to about 1), or any sign, with exact specials: 0, -0, 1, -1,
// subnormal, huge.
inline std::vector<float> random_weights(std::size_t n, Rng& rng, bool any_sign) {
  std::uniform_real_distribution<float> u(any_sign ? -2.0f : 0.0f, 1.0f);
  std::vector<float> w(n);
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::denorm_min(), 3e38f, 0.5f};
  for (auto& x : w) x = (any_sign && rng() % 16 == 0) ? special[rng() % 7] : u(rng);
  return w;
}

// What the library writes for an fp32 result: the value, a NaN as the canonical 0x7FC00000.
template <class T>
T store(float y) {
  if (std::is_same<T, float>::value && std::isnan(y)) return from_float<T>(f32_of_bits(0x7FC00000u));
  return from_float<T>(y);
}

// The combine oracle, written apart from the reference: gather each token's present (weight, row) pairs first,
// then per element fp32 products and sums in k order (the test TU is built with -ffp-contract=off too).
template <class T>
std::vector<T> oracle_combine(const std::vector<T>& rows, moe_rows_layout_t layout, std::int64_t tokens,
                              std::int32_t topk, std::int64_t hidden, const std::int32_t* positions,
                              const float* weights, float scale) {
  std::vector<T> out(static_cast<std::size_t>(tokens * hidden));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::vector<std::pair<float, std::int64_t>> slots;
    for (std::int32_t k = 0; k < topk; ++k) {
      const std::int64_t i = t * topk + k;
      std::int64_t r = i;
      if (positions != nullptr) {
        if (positions[i] < 0) continue;
        if (layout == MOE_ROWS_PERMUTED) r = positions[i];
      }
      slots.emplace_back(weights != nullptr ? weights[i] : 1.0f, r);
    }
    for (std::int64_t h = 0; h < hidden; ++h) {
      float acc = 0.0f;
      for (const auto& s : slots) {
        const float product = s.first * to_float(rows[static_cast<std::size_t>(s.second * hidden + h)]);
        acc = acc + product;
      }
      const float y = acc * scale;
      out[static_cast<std::size_t>(t * hidden + h)] = store<T>(y);
    }
  }
  return out;
}

// First element whose bits differ, for messages; -1 when equal.
template <class T>
std::int64_t first_diff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) return static_cast<std::int64_t>(i);
  return -1;
}

}  // namespace dp
}  // namespace moe_test
