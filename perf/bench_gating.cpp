// moe_topk_gating's benchmark rows: see bench_gating.hpp.
#include "bench_gating.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "moe/reference.hpp"

namespace moe_perf {

namespace {

struct GateCase {
  const char* name;
  std::int32_t experts, topk, groups, kept;
  moe_score_t score;
  bool bias, renormalize;
  float scale;
};

const GateCase kCases[] = {
    {"softmax", 8, 2, 1, 1, MOE_SCORE_SOFTMAX, false, true, 1.0f},            // Mixtral
    {"softmax", 128, 8, 1, 1, MOE_SCORE_SOFTMAX, false, true, 1.0f},          // Qwen3
    {"sigmoid+bias g8/4", 256, 8, 8, 4, MOE_SCORE_SIGMOID, true, true, 2.5f}, // DeepSeek-V3/R1
    {"sigmoid+bias", 384, 8, 1, 1, MOE_SCORE_SIGMOID, true, true, 2.827f},    // Kimi K2
};

const char* dtype_name(moe_dtype_t t) { return t == MOE_FLOAT32 ? "fp32" : t == MOE_FLOAT16 ? "fp16" : "bf16"; }

std::vector<unsigned char> make_logits(std::size_t n, moe_dtype_t dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  const std::size_t esize = moe::dtype_size(dtype);
  std::vector<unsigned char> host(n * esize);
  for (std::size_t i = 0; i < n; ++i) {
    const float f = d(rng);
    if (dtype == MOE_FLOAT32) std::memcpy(&host[i * 4], &f, 4);
    if (dtype == MOE_FLOAT16) {
      const auto h = moe::reference::float_to_half(f);
      std::memcpy(&host[i * 2], &h, 2);
    }
    if (dtype == MOE_BFLOAT16) {
      const auto b = moe::reference::float_to_bfloat16(f);
      std::memcpy(&host[i * 2], &b, 2);
    }
  }
  return host;
}

}  // namespace

std::vector<GatingRow> bench_gating(Measure& m, const std::vector<moe_dtype_t>& dtypes, const std::string& filter) {
  std::vector<GatingRow> rows;
  for (moe_dtype_t dtype : dtypes)
    for (const GateCase& c : kCases)
      for (std::int64_t tokens : {1, 16, 256, 4096, 16384}) {
        char shape[128];
        std::snprintf(shape, sizeof shape, "%lld E=%d k=%d %s %s", static_cast<long long>(tokens), c.experts, c.topk,
                      c.name, dtype_name(dtype));
        if (!filter.empty() && std::string(shape).find(filter) == std::string::npos) continue;
        const std::size_t n = static_cast<std::size_t>(tokens * c.experts);
        const double bytes = static_cast<double>(n * moe::dtype_size(dtype));
        const int sets = std::max(1, std::min(8, static_cast<int>(240e6 / bytes)));
        std::mt19937_64 rng(static_cast<unsigned long>(tokens * 131 + c.experts));
        std::vector<float> bias(static_cast<std::size_t>(c.experts));
        std::normal_distribution<float> bd(0.0f, 0.05f);
        for (auto& b : bias) b = bd(rng);
        moe::device_buffer<float> d_bias(bias.size());
        moe::copy_to_device(d_bias.data(), bias.data(), d_bias.bytes());
        std::vector<std::vector<unsigned char>> host;
        std::vector<moe::device_buffer<unsigned char>> logits;
        std::vector<moe::device_buffer<std::int32_t>> ids;
        std::vector<moe::device_buffer<float>> weights;
        for (int s = 0; s < sets; ++s) {
          host.push_back(make_logits(n, dtype, rng));
          logits.emplace_back(host.back().size());
          moe::copy_to_device(logits.back().data(), host.back().data(), host.back().size());
          ids.emplace_back(static_cast<std::size_t>(tokens * c.topk));
          weights.emplace_back(static_cast<std::size_t>(tokens * c.topk));
        }
        moe_gate_t gate = moe::make_gate(c.topk, c.score);
        gate.num_groups = c.groups;
        gate.topk_groups = c.kept;
        gate.correction_bias = c.bias ? d_bias.data() : nullptr;
        gate.renormalize = c.renormalize ? 1 : 0;
        gate.routed_scaling_factor = c.scale;
        auto call = [&](int s, void* stream) {
          moe::topk_gating(logits[s].data(), dtype, tokens, c.experts, gate, ids[s].data(), weights[s].data(), stream);
        };
        // correctness first: set 0 against the reference
        call(0, nullptr);
        moe::synchronize();
        const std::size_t k = static_cast<std::size_t>(tokens * c.topk);
        std::vector<std::int32_t> got_ids(k), want_ids(k);
        std::vector<float> got_w(k), want_w(k);
        moe::copy_to_host(got_ids.data(), ids[0].data(), k * 4);
        moe::copy_to_host(got_w.data(), weights[0].data(), k * 4);
        moe_gate_t host_gate = gate;
        host_gate.correction_bias = c.bias ? bias.data() : nullptr;
        moe::reference::topk_gating(host[0].data(), dtype, tokens, c.experts, host_gate, want_ids.data(), want_w.data());
        if (got_ids != want_ids || std::memcmp(got_w.data(), want_w.data(), k * 4) != 0) {
          std::fprintf(stderr, "WRONG RESULT for topk_gating %s\n", shape);
          std::exit(1);
        }
        GatingRow r;
        r.shape = shape;
        r.logits_bytes = bytes;
        r.graph_us = m.replay_us(call, sets);
        r.cold_us = m.cold_us(call);
        r.copy_us = m.same_bytes_copy_us(2 * bytes, sets);  // reads the logits' bytes once, writes as many
        rows.push_back(r);
      }
  return rows;
}

void print_gating(const std::vector<GatingRow>& rows, std::FILE* out) {
  std::fprintf(out, "\n%-6s %-40s %10s %10s %10s %9s\n", "op", "shape", "graph_us", "cold_us", "copy_us", "graph/copy");
  for (const auto& r : rows)
    std::fprintf(out, "%-6s %-40s %10.3f %10.3f %10.3f %9.2f\n", "gating", r.shape.c_str(), r.graph_us, r.cold_us,
                 r.copy_us, r.copy_us > 0 ? r.graph_us / r.copy_us : 0.0);
}

void write_gating_csv(const std::vector<GatingRow>& rows, const std::string& device, const std::string& path) {
  std::ofstream f(path);
  f << "device,backend,op,shape,graph_us,cold_us,copy_us,ratio_to_copy,logits_bytes\n";
  for (const auto& r : rows)
    f << '"' << device << "\"," << moe::backend_name() << ",gating,\"" << r.shape << "\"," << r.graph_us << ','
      << r.cold_us << ',' << r.copy_us << ',' << (r.copy_us > 0 ? r.graph_us / r.copy_us : 0.0) << ','
      << r.logits_bytes << '\n';
}

}  // namespace moe_perf
