// TEST SCAFFOLDING (see routing_future.h): plain host loops for the operations of issues 27 and 28, so that a
// -DMOE_PY_FUTURE_STUB=ON build can run the Python layer's tests of them. Not the library, not bit-exact where
// the issues fix the library's own exp; errors are checked only as far as the Python tests need.
#include "routing_future.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "numeric.hpp"

namespace {
thread_local std::string g_error;  // moe_last_error() of the real library is not reachable: raise via status

moe_status_t fail(const char* what) {
  g_error = what;
  // The real library sets moe_last_error(); trigger a genuine failure so its text names the argument.
  (void)moe_align_max_padded(-1, 1, 1);
  return MOE_ERROR_INVALID_ARGUMENT;
}

std::int64_t read_id(const void* p, moe_dtype_t t, std::int64_t i) {
  switch (t) {
    case MOE_INT8: return static_cast<const std::int8_t*>(p)[i];
    case MOE_UINT8: return static_cast<const std::uint8_t*>(p)[i];
    case MOE_INT16: return static_cast<const std::int16_t*>(p)[i];
    case MOE_INT32: return static_cast<const std::int32_t*>(p)[i];
    default: return static_cast<const std::int64_t*>(p)[i];
  }
}

float load(const void* p, moe_dtype_t t, std::int64_t i) {
  using namespace moe::numeric;
  if (t == MOE_FLOAT32) return static_cast<const float*>(p)[i];
  const auto b = static_cast<const std::uint16_t*>(p)[i];
  return t == MOE_FLOAT16 ? f16_to_f32(b) : bf16_to_f32(b);
}

void store(void* p, moe_dtype_t t, std::int64_t i, float v) {
  using namespace moe::numeric;
  if (t == MOE_FLOAT32) {
    const std::uint32_t u = f32_out_bits(v);
    std::memcpy(static_cast<float*>(p) + i, &u, 4);
  } else {
    static_cast<std::uint16_t*>(p)[i] = t == MOE_FLOAT16 ? f32_to_f16(v) : f32_to_bf16(v);
  }
}

std::size_t elem_size(moe_dtype_t t) {
  switch (static_cast<int>(t)) {
    case MOE_INT8: case MOE_UINT8: case 8: case 9: return 1;
    case MOE_INT16: case MOE_FLOAT16: case MOE_BFLOAT16: return 2;
    case MOE_INT32: case MOE_FLOAT32: return 4;
    default: return 8;
  }
}
}  // namespace

extern "C" {

moe_status_t moe_align_workspace_size_ep(int64_t numel, int32_t num_experts, int32_t num_local_experts,
                                         int32_t block_size, size_t* bytes) {
  if (moe_align_max_padded(numel, num_local_experts, block_size) < 0 || num_experts < 1) return MOE_ERROR_INVALID_ARGUMENT;
  *bytes = static_cast<size_t>(num_local_experts) * 4;
  return MOE_SUCCESS;
}

moe_status_t moe_align_block_size_ep(const void* topk_ids, moe_dtype_t id_type, int64_t numel, int32_t num_experts,
                                     const int32_t* expert_map, int32_t num_local, int32_t block_size,
                                     int32_t* sorted, int32_t* expert_ids, int32_t* post, int32_t* counts,
                                     int32_t* positions, void* workspace, size_t workspace_bytes, void*) {
  const int64_t cap = moe_align_max_padded(numel, num_local, block_size);
  if (cap < 0) return MOE_ERROR_INVALID_ARGUMENT;
  if (expert_map == nullptr && num_local != num_experts) return fail("num_local_experts");
  if (workspace_bytes < static_cast<size_t>(num_local) * 4 || workspace == nullptr) return fail("workspace");
  std::vector<std::vector<int32_t>> groups(static_cast<size_t>(num_local));
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t g = read_id(topk_ids, id_type, i);
    int64_t l = -1;
    if (g >= 0 && g < num_experts) l = expert_map ? expert_map[g] : g;
    if (positions) positions[i] = -1;
    if (l >= 0 && l < num_local) groups[static_cast<size_t>(l)].push_back(static_cast<int32_t>(i));
  }
  int64_t p = 0;
  const int64_t blocks = (cap + block_size - 1) / block_size;
  for (int32_t l = 0; l < num_local; ++l) {
    const auto& grp = groups[static_cast<size_t>(l)];
    if (counts) counts[l] = static_cast<int32_t>(grp.size());
    if (grp.empty()) continue;
    const int64_t start = p;
    for (int32_t i : grp) {
      if (positions) positions[i] = static_cast<int32_t>(p);
      sorted[p++] = i;
    }
    while (p % block_size) sorted[p++] = static_cast<int32_t>(numel);
    for (int64_t b = start / block_size; b < p / block_size; ++b) expert_ids[b] = l;
  }
  *post = static_cast<int32_t>(p);
  for (int64_t q = p; q < cap; ++q) sorted[q] = static_cast<int32_t>(numel);
  for (int64_t b = p / block_size; b < blocks; ++b) expert_ids[b] = -1;
  return MOE_SUCCESS;
}

moe_status_t moe_permute(const void* hidden, moe_dtype_t dtype, int64_t num_tokens, int64_t hidden_size,
                         int32_t topk, const int32_t* sorted, const int32_t* post, int64_t max_rows,
                         void* permuted, void*) {
  if (topk < 1) return fail("topk");
  const size_t row = elem_size(dtype) * static_cast<size_t>(hidden_size);
  if (*post > max_rows) return fail("max_rows");
  for (int64_t p = 0; p < *post; ++p) {
    char* dst = static_cast<char*>(permuted) + static_cast<size_t>(p) * row;
    const int64_t i = sorted[p];
    if (i < num_tokens * topk)
      std::memcpy(dst, static_cast<const char*>(hidden) + static_cast<size_t>(i / topk) * row, row);
    else
      std::memset(dst, 0, row);
  }
  return MOE_SUCCESS;
}

moe_status_t moe_combine(const void* rows, moe_dtype_t dtype, moe_rows_layout_t layout, int64_t num_tokens,
                         int32_t topk, int64_t hidden, const int32_t* positions, const float* weights, float scale,
                         void* output, void*) {
  if (topk < 1) return fail("topk");
  if (layout == MOE_ROWS_PERMUTED && positions == nullptr) return fail("token_positions");
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) {
      float acc = 0.0f;
      for (int32_t k = 0; k < topk; ++k) {
        const int64_t slot = t * topk + k;
        int64_t r = slot;
        if (positions && positions[slot] < 0) continue;
        if (layout == MOE_ROWS_PERMUTED) r = positions[slot];
        const float x = load(rows, dtype, r * hidden + h);
        volatile float term = weights ? weights[slot] * x : x;
        acc = acc + term;
      }
      volatile float out = acc * scale;
      store(output, dtype, t * hidden + h, out);
    }
  }
  return MOE_SUCCESS;
}

moe_status_t moe_topk_gating(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
                             const moe_gate_t* gate, int32_t* topk_ids, float* topk_weights, void*) {
  if (dtype != MOE_FLOAT32 && dtype != MOE_FLOAT16 && dtype != MOE_BFLOAT16) return MOE_ERROR_UNSUPPORTED;
  const int32_t k = gate->topk, G = gate->num_groups;
  if (k < 1 || k > num_experts || G < 1 || num_experts % G) return fail("topk");
  std::vector<float> l(static_cast<size_t>(num_experts)), s(l.size()), b(l.size());
  for (int64_t t = 0; t < num_tokens; ++t) {
    float m = -INFINITY;
    for (int32_t e = 0; e < num_experts; ++e) {
      l[e] = load(logits, dtype, t * num_experts + e);
      m = std::max(m, l[e]);
    }
    float sum = 0.0f;
    for (int32_t e = 0; e < num_experts; ++e) {
      if (gate->score == MOE_SCORE_SOFTMAX) {
        s[e] = std::exp(l[e] - m);
        sum += s[e];
      } else if (gate->score == MOE_SCORE_SIGMOID) {
        s[e] = 1.0f / (1.0f + std::exp(-l[e]));
      } else {
        s[e] = l[e];
      }
    }
    for (int32_t e = 0; e < num_experts; ++e) {
      if (gate->score == MOE_SCORE_SOFTMAX) s[e] = s[e] / sum;
      b[e] = s[e] + (gate->correction_bias ? gate->correction_bias[e] : 0.0f);
    }
    std::vector<int32_t> cand;
    if (G > 1) {
      const int32_t g = num_experts / G;
      std::vector<std::pair<float, int32_t>> gs;
      for (int32_t gi = 0; gi < G; ++gi) {
        std::vector<float> v(b.begin() + gi * g, b.begin() + (gi + 1) * g);
        std::sort(v.rbegin(), v.rend());
        gs.push_back({v[0] + (g > 1 ? v[1] : 0.0f), gi});
      }
      std::stable_sort(gs.begin(), gs.end(), [](auto& x, auto& y) { return x.first > y.first; });
      for (int32_t j = 0; j < gate->topk_groups; ++j)
        for (int32_t e = gs[j].second * g; e < (gs[j].second + 1) * g; ++e) cand.push_back(e);
      std::sort(cand.begin(), cand.end());
    } else {
      for (int32_t e = 0; e < num_experts; ++e) cand.push_back(e);
    }
    if (static_cast<int32_t>(cand.size()) < k) return fail("topk");
    std::stable_sort(cand.begin(), cand.end(), [&](int32_t x, int32_t y) { return b[x] > b[y]; });
    float wsum = 0.0f, mx = -INFINITY;
    for (int32_t j = 0; j < k; ++j) mx = std::max(mx, l[cand[j]]);
    for (int32_t j = 0; j < k; ++j) {
      topk_ids[t * k + j] = cand[j];
      float w = gate->score == MOE_SCORE_SOFTMAX_TOPK ? std::exp(l[cand[j]] - mx) : s[cand[j]];
      topk_weights[t * k + j] = w;
      wsum += w;
    }
    for (int32_t j = 0; j < k; ++j) {
      float w = topk_weights[t * k + j];
      if (gate->renormalize || gate->score == MOE_SCORE_SOFTMAX_TOPK) w = w / wsum;
      topk_weights[t * k + j] = w * gate->routed_scaling_factor;
    }
  }
  return MOE_SUCCESS;
}

moe_status_t moe_route_workspace_size(int64_t num_tokens, int32_t num_experts, const moe_gate_t* gate,
                                      int32_t num_local_experts, int32_t block_size, size_t* bytes) {
  return moe_align_workspace_size_ep(num_tokens * gate->topk, num_experts, num_local_experts, block_size, bytes);
}

moe_status_t moe_route(const void* logits, moe_dtype_t dtype, int64_t num_tokens, int32_t num_experts,
                       const moe_gate_t* gate, const int32_t* expert_map, int32_t num_local_experts, int32_t block_size,
                       int32_t* topk_ids, float* topk_weights, int32_t* sorted, int32_t* expert_ids, int32_t* post,
                       int32_t* positions, void* workspace, size_t workspace_bytes, void* stream) {
  moe_status_t s = moe_topk_gating(logits, dtype, num_tokens, num_experts, gate, topk_ids, topk_weights, stream);
  if (s != MOE_SUCCESS) return s;
  return moe_align_block_size_ep(topk_ids, MOE_INT32, num_tokens * gate->topk, num_experts, expert_map,
                                 num_local_experts, block_size, sorted, expert_ids, post, nullptr, positions,
                                 workspace, workspace_bytes, stream);
}

}  // extern "C"
