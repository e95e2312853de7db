// One MoE layer with expert parallelism, the library's whole routing stage around the caller's grouped GEMM:
//
//   route    logits -> each token's top-k experts and weights, grouped by THIS rank's experts (expert_map),
//            padded to the GEMM tile, with each slot's row in that layout (token_positions; -1: another rank's)
//   permute  hidden rows -> the expert-grouped layout (padding rows zeroed)
//   GEMM     the caller's: block b of rows goes through local expert expert_ids[b] (here a plain loop on the host)
//   combine  each token's weighted sum of its rows on this rank, read straight from the grouped layout
//
// Two ranks, each holding half of the 8 experts, are run one after the other in this process; the layer's output
// is the sum of the ranks' partial outputs (what moe/ep.h's combine, or an all-reduce, does across processes).
// Checked against a dense reference computed here. Runs on every backend: buffers live in the backend's memory;
// the GEMM copies them to the host. Exits 0 on success, 77 without a usable device, 1 on a wrong answer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <moe/routing.hpp>

namespace {

constexpr std::int64_t kTokens = 5, kHidden = 16;
constexpr std::int32_t kExperts = 8, kTopk = 2, kRanks = 2, kLocal = kExperts / kRanks, kBlock = 4;

template <class T>
std::vector<T> to_host(const moe::device_buffer<T>& d) {
  std::vector<T> h(d.size());
  moe::copy_to_host(h.data(), d.data(), d.bytes());
  return h;
}
template <class T>
moe::device_buffer<T> to_device(const std::vector<T>& h) {
  moe::device_buffer<T> d(h.size());
  moe::copy_to_device(d.data(), h.data(), d.bytes());
  return d;
}

// y = W_e x for one row; W: [kExperts][kHidden][kHidden]
void expert_forward(const std::vector<float>& W, std::int32_t e, const float* x, float* y) {
  for (std::int64_t i = 0; i < kHidden; ++i) {
    double acc = 0;
    for (std::int64_t j = 0; j < kHidden; ++j) acc += double(W[(e * kHidden + i) * kHidden + j]) * x[j];
    y[i] = static_cast<float>(acc);
  }
}

// This rank's part of the layer: partial[t] = sum over t's slots on this rank of w * expert(x_t).
std::vector<float> rank_forward(std::int32_t rank, const moe::device_buffer<float>& logits,
                                const moe::device_buffer<float>& hidden, const std::vector<float>& W) {
  // expert_map: global expert -> local index on this rank, -1 elsewhere (those slots are dropped here)
  std::vector<std::int32_t> map(kExperts, -1);
  for (std::int32_t l = 0; l < kLocal; ++l) map[rank * kLocal + l] = l;
  const auto d_map = to_device(map);

  moe_gate_t gate = moe::make_gate(kTopk, MOE_SCORE_SOFTMAX);  // Mixtral: softmax, top-2, renormalised
  gate.renormalize = 1;
  const std::int64_t numel = kTokens * kTopk;
  const std::int64_t max_rows = moe::align_max_padded(numel, kLocal, kBlock);  // sizes fixed per shape
  moe::device_buffer<std::int32_t> topk_ids(numel), sorted(max_rows), positions(numel), post_pad(1),
      expert_ids(moe::align_max_blocks(numel, kLocal, kBlock));
  moe::device_buffer<float> weights(numel);
  moe::device_buffer<unsigned char> ws(moe::route_workspace_size(kTokens, kExperts, gate, kLocal, kBlock));

  // 1. route: gating + align over the local experts, one workspace, no host sync
  moe::route(logits.data(), MOE_FLOAT32, kTokens, kExperts, gate, d_map.data(), kLocal, kBlock, topk_ids.data(),
             weights.data(), sorted.data(), expert_ids.data(), post_pad.data(), positions.data(), ws.data(),
             ws.size());
  // 2. permute: hidden rows into the grouped layout; the row count is read on the device
  moe::device_buffer<float> permuted(static_cast<std::size_t>(max_rows * kHidden));
  moe::permute(hidden.data(), kTokens, kHidden, kTopk, sorted.data(), post_pad.data(), max_rows, permuted.data());
  // 3. the caller's grouped GEMM over the first *num_tokens_post_pad rows, block by block
  moe::synchronize();
  std::int32_t rows = 0;
  moe::copy_to_host(&rows, post_pad.data(), sizeof rows);
  const auto h_in = to_host(permuted);
  const auto h_blocks = to_host(expert_ids);
  std::vector<float> h_out(h_in.size(), std::nanf(""));  // rows past `rows` are never read by combine
  for (std::int32_t r = 0; r < rows; ++r)
    expert_forward(W, rank * kLocal + h_blocks[r / kBlock], &h_in[r * kHidden], &h_out[r * kHidden]);
  const auto expert_out = to_device(h_out);
  // 4. combine: weighted sum per token straight from the grouped rows; other ranks' slots (-1) are not read
  moe::device_buffer<float> partial(kTokens * kHidden);
  moe::combine(expert_out.data(), MOE_ROWS_PERMUTED, kTokens, kTopk, kHidden, positions.data(), weights.data(), 1.0f,
               partial.data());
  return to_host(partial);
}

}  // namespace

int main() {
  try {
    moe::check_backend();
  } catch (const moe::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(kTokens * kExperts), x(kTokens * kHidden), W(kExperts * kHidden * kHidden);
  for (float& v : logits) v = normal(rng);
  for (float& v : x) v = normal(rng);
  for (float& v : W) v = normal(rng) / 4.0f;
  const auto d_logits = to_device(logits);
  const auto d_hidden = to_device(x);

  std::vector<float> out(kTokens * kHidden, 0.0f);
  for (std::int32_t rank = 0; rank < kRanks; ++rank) {
    const auto partial = rank_forward(rank, d_logits, d_hidden, W);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += partial[i];
  }

  // dense reference: softmax, the top-2, renormalised, the two experts' outputs weighted
  double worst = 0;
  for (std::int64_t t = 0; t < kTokens; ++t) {
    const float* l = &logits[t * kExperts];
    std::vector<std::int32_t> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return l[a] > l[b]; });
    const double z = std::exp(double(l[order[1]]) - l[order[0]]);  // renormalised softmax over the two
    const double w[2] = {1.0 / (1.0 + z), z / (1.0 + z)};
    std::vector<float> y(kHidden);
    for (int k = 0; k < kTopk; ++k) {
      expert_forward(W, order[k], &x[t * kHidden], y.data());
      for (std::int64_t h = 0; h < kHidden; ++h) out[t * kHidden + h] -= static_cast<float>(w[k] * y[h]);
    }
    for (std::int64_t h = 0; h < kHidden; ++h) {
      const double d = std::fabs(double(out[t * kHidden + h]));
      worst = std::isnan(d) || std::isnan(worst) ? NAN : std::max(worst, d);  // a NaN anywhere fails
    }
  }
  std::printf("backend %s: %lld tokens, %d experts on %d ranks, top-%d: max |layer - dense reference| = %.2e\n",
              moe::backend_name(), static_cast<long long>(kTokens), kExperts, kRanks, kTopk, worst);
  return worst < 1e-4 ? 0 : 1;  // NaN fails too
}
