// Runs backends/cuda_hip/topk_gating.cu's kernels on the CPU (gpu_runtime.hpp here) and compares them with the
// reference, bit for bit, on every path: each subwarp configuration (W lanes x V experts), both group layouts,
// the block path (many experts, large topk, unaligned groups), every score, dtype and special value.
// Build and run: tools/gpu_emulate/run.sh (needs a CPU build in build-cpu).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moe/reference.hpp"
#include "ops/topk_gating.hpp"

namespace moe {
namespace backend {
void emu_topk_gating(const detail::TopkGatingShape& shape, const detail::TopkGatingArgs& args, void* stream);
}  // namespace backend
}  // namespace moe

namespace {

int failures = 0, cases = 0;

void check(std::int64_t T, std::int32_t E, moe_gate_t g, const std::vector<float>& bias, moe_dtype_t dtype,
           std::mt19937_64& rng, double specials) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 1e-40f, 88.0f, -120.0f};
  const std::size_t n = static_cast<std::size_t>(T * E), esize = moe::dtype_size(dtype);
  std::vector<unsigned char> logits(n * esize + 16);
  unsigned char* base = logits.data() + (rng() % 2 ? 0 : esize);  // aligned or not
  for (std::size_t i = 0; i < n; ++i) {
    float f = rng() % 4 == 0 ? std::round(d(rng)) : d(rng);  // some ties
    if (specials > 0 && u(rng) < specials) f = special[rng() % 10];
    if (dtype == MOE_FLOAT32) std::memcpy(base + i * 4, &f, 4);
    if (dtype == MOE_FLOAT16) {
      const auto h = moe::reference::float_to_half(f);
      std::memcpy(base + i * 2, &h, 2);
    }
    if (dtype == MOE_BFLOAT16) {
      const auto b = moe::reference::float_to_bfloat16(f);
      std::memcpy(base + i * 2, &b, 2);
    }
  }
  g.correction_bias = bias.empty() ? nullptr : bias.data();
  const std::size_t k = static_cast<std::size_t>(T * g.topk);
  std::vector<std::int32_t> ids(k, 0x5A5A5A5A), ref_ids(k);
  std::vector<float> w(k, -1.0f), ref_w(k);
  moe::reference::topk_gating(base, dtype, T, E, g, ref_ids.data(), ref_w.data());
  const auto shape = moe::detail::make_topk_gating_shape(T, E, &g);
  moe::backend::emu_topk_gating(shape, {base, dtype, g.correction_bias, ids.data(), w.data()}, nullptr);
  ++cases;
  if (ids != ref_ids || std::memcmp(w.data(), ref_w.data(), k * 4) != 0) {
    ++failures;
    std::size_t i = 0;
    while (i < k && ids[i] == ref_ids[i] && std::memcmp(&w[i], &ref_w[i], 4) == 0) ++i;
    std::printf("MISMATCH T=%lld E=%d topk=%d score=%d groups=%d/%d bias=%d renorm=%d dtype=%d: slot %zu id %d vs %d, "
                "w %a vs %a\n",
                static_cast<long long>(T), E, g.topk, static_cast<int>(g.score), g.num_groups, g.topk_groups,
                !bias.empty(), g.renormalize, static_cast<int>(dtype), i, ids[i], ref_ids[i],
                static_cast<double>(w[i]), static_cast<double>(ref_w[i]));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int max_cases = argc > 1 ? std::atoi(argv[1]) : 1 << 30;  // a quick run: the first N cases
  std::mt19937_64 rng(42);
  const moe_dtype_t dtypes[] = {MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16};
  struct Case {
    std::int32_t E, topk, groups, kept;
  };
  // every subwarp configuration (E <= 8, 16, 32, 64, 128, 256, 512, 1024), groups spanning lanes (G >= V) and
  // packed in lanes (G < V), the block path (E > 1024, topk > 32, groups off lane boundaries)
  const Case shapes[] = {{1, 1, 1, 1},     {3, 2, 1, 1},     {8, 2, 1, 1},     {8, 4, 4, 2},    {8, 3, 8, 5},
                         {12, 4, 1, 1},    {16, 16, 2, 2},   {30, 5, 1, 1},    {32, 4, 1, 1},   {32, 6, 16, 3},
                         {60, 4, 1, 1},    {64, 8, 8, 4},    {128, 8, 1, 1},   {128, 8, 16, 4}, {128, 32, 4, 2},
                         {160, 6, 8, 3},   {256, 8, 8, 4},   {256, 8, 32, 4},  {256, 32, 1, 1}, {384, 8, 1, 1},
                         {384, 8, 3, 2},   {512, 8, 64, 7},  {1000, 8, 1, 1},  {1024, 8, 32, 4}, {1024, 32, 128, 9},
                         {1024, 16, 256, 4}, {1025, 8, 1, 1}, {2048, 8, 8, 2},  {128, 33, 1, 1}, {300, 100, 3, 2},
                         {4096, 64, 64, 3}, {60, 60, 1, 1}};
  for (const Case& c : shapes)
    for (moe_score_t score : {MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID, MOE_SCORE_SOFTMAX_TOPK})
      for (int variant = 0; variant < 2 && cases < max_cases; ++variant) {
        moe_gate_t g = moe::make_gate(c.topk, score);
        g.num_groups = c.groups;
        g.topk_groups = c.kept;
        g.renormalize = variant;
        g.routed_scaling_factor = variant ? 2.5f : 1.0f;
        std::vector<float> bias;
        if (variant) {
          std::normal_distribution<float> bd(0.0f, 0.3f);
          for (int e = 0; e < c.E; ++e) bias.push_back(bd(rng));
        }
        const std::int64_t T = c.E > 1024 ? 3 : static_cast<std::int64_t>(1 + rng() % 300);
        check(T, c.E, g, bias, dtypes[rng() % 3], rng, variant ? 0.0 : 0.05);
      }
  std::printf("%d cases, %d mismatches\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
