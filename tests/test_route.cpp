// moe_route: equal, bit for bit, to moe_topk_gating followed by moe_align_block_size_ep on the backend, and to the
// reference of both; with and without an expert map and token_positions; its workspace and its errors.
#include <sstream>

#include "support.hpp"

using namespace moe_test;

namespace {

struct RouteOut {
  std::vector<std::int32_t> ids, sorted, experts, positions;
  std::vector<std::uint32_t> weight_bits;
  std::int32_t post = -1;
  bool operator==(const RouteOut& o) const {
    return ids == o.ids && weight_bits == o.weight_bits && sorted == o.sorted && experts == o.experts &&
           positions == o.positions && post == o.post;
  }
};

std::vector<std::uint32_t> bits_of(const std::vector<float>& w) {
  std::vector<std::uint32_t> b(w.size());
  if (!w.empty()) std::memcpy(b.data(), w.data(), w.size() * 4);  // no memcpy of NULL, even of 0 bytes
  return b;
}

struct Case {
  std::int64_t T;
  std::int32_t E, topk, groups, kept, local;  // local: experts on this rank (0: no map)
  moe_score_t score;
};

// Runs `how` = 0: moe_route; 1: moe_topk_gating then moe_align_block_size_ep; on the backend, outputs poisoned.
RouteOut on_backend(int how, const Case& c, const std::vector<float>& logits, const std::vector<float>& bias,
                    const std::vector<std::int32_t>& map, bool positions) {
  const std::int64_t numel = c.T * c.topk;
  const std::int32_t L = c.local ? c.local : c.E;
  auto d_logits = to_device(logits);
  auto d_bias = to_device(bias);
  auto d_map = to_device(map);
  moe_gate_t g = moe::make_gate(c.topk, c.score);
  g.num_groups = c.groups;
  g.topk_groups = c.kept;
  g.correction_bias = bias.empty() ? nullptr : d_bias.data();
  g.renormalize = 1;
  g.routed_scaling_factor = 2.5f;
  const auto padded = static_cast<std::size_t>(moe::align_max_padded(numel, L, 16));
  const auto blocks = static_cast<std::size_t>(moe::align_max_blocks(numel, L, 16));
  auto ids = to_device(std::vector<std::int32_t>(static_cast<std::size_t>(numel), kPoison));
  auto w = to_device(std::vector<float>(static_cast<std::size_t>(numel), -1.0f));
  auto sorted = to_device(std::vector<std::int32_t>(padded, kPoison));
  auto experts = to_device(std::vector<std::int32_t>(blocks, kPoison));
  auto pos = to_device(std::vector<std::int32_t>(static_cast<std::size_t>(numel), kPoison));
  auto post = to_device(std::vector<std::int32_t>(1, kPoison));
  const std::int32_t* m = map.empty() ? nullptr : d_map.data();
  std::int32_t* p = positions ? pos.data() : nullptr;
  if (how == 0) {
    const std::size_t ws_bytes = moe::route_workspace_size(c.T, c.E, g, L, 16);
    std::vector<unsigned char> garbage(ws_bytes, 0xA5);
    auto ws = to_device(garbage);
    moe::route(d_logits.data(), MOE_FLOAT32, c.T, c.E, g, m, L, 16, ids.data(), w.data(), sorted.data(),
               experts.data(), post.data(), p, ws.data(), ws_bytes);
  } else {
    moe::topk_gating(d_logits.data(), c.T, c.E, g, ids.data(), w.data());
    const std::size_t ws_bytes = moe::align_workspace_size_ep(numel, c.E, L, 16);
    moe::device_buffer<unsigned char> ws(ws_bytes);
    moe::align_block_size_ep(ids.data(), numel, c.E, m, L, 16, sorted.data(), experts.data(), post.data(), nullptr,
                             p, ws.data(), ws_bytes);
  }
  moe::synchronize();
  RouteOut r{to_host(ids), to_host(sorted), to_host(experts), to_host(pos), bits_of(to_host(w)), to_host(post)[0]};
  return r;
}

RouteOut on_reference(const Case& c, const std::vector<float>& logits, const std::vector<float>& bias,
                      const std::vector<std::int32_t>& map, bool positions) {
  const std::int64_t numel = c.T * c.topk;
  const std::int32_t L = c.local ? c.local : c.E;
  moe_gate_t g = moe::make_gate(c.topk, c.score);
  g.num_groups = c.groups;
  g.topk_groups = c.kept;
  g.correction_bias = bias.empty() ? nullptr : bias.data();
  g.renormalize = 1;
  g.routed_scaling_factor = 2.5f;
  RouteOut r;
  r.ids.assign(static_cast<std::size_t>(numel), kPoison);
  std::vector<float> w(static_cast<std::size_t>(numel), -1.0f);
  r.sorted.assign(static_cast<std::size_t>(moe::align_max_padded(numel, L, 16)), kPoison);
  r.experts.assign(static_cast<std::size_t>(moe::align_max_blocks(numel, L, 16)), kPoison);
  r.positions.assign(static_cast<std::size_t>(numel), kPoison);
  std::vector<unsigned char> ws(moe::reference::route_workspace_size(c.T, c.E, g, L, 16));
  moe::reference::route(logits.data(), MOE_FLOAT32, c.T, c.E, g, map.empty() ? nullptr : map.data(), L, 16,
                        r.ids.data(), w.data(), r.sorted.data(), r.experts.data(), &r.post,
                        positions ? r.positions.data() : nullptr, ws.data(), ws.size());
  r.weight_bits = bits_of(w);
  return r;
}

}  // namespace

TEST_CASE("route: equal to gating then align_ep, on the backend and in the reference") {
  Rng rng(31);
  const Case cases[] = {{1, 8, 2, 1, 1, 0, MOE_SCORE_SOFTMAX},      {16, 256, 8, 8, 4, 0, MOE_SCORE_SIGMOID},
                        {16, 256, 8, 8, 4, 64, MOE_SCORE_SIGMOID},  {256, 384, 8, 1, 1, 48, MOE_SCORE_SIGMOID},
                        {4099, 128, 8, 1, 1, 0, MOE_SCORE_SOFTMAX}, {33, 32, 4, 1, 1, 8, MOE_SCORE_SOFTMAX_TOPK},
                        {0, 256, 8, 8, 4, 64, MOE_SCORE_SIGMOID},   {5, 2048, 40, 1, 1, 0, MOE_SCORE_SOFTMAX}};
  for (const Case& c : cases)
    for (bool positions : {false, true}) {
      INFO("T=" << c.T << " E=" << c.E << " topk=" << c.topk << " local=" << c.local << " positions=" << positions);
      std::normal_distribution<float> d(0.0f, 2.0f);
      std::vector<float> logits(static_cast<std::size_t>(c.T * c.E));
      for (auto& x : logits) x = d(rng);
      std::vector<float> bias;
      if (c.score == MOE_SCORE_SIGMOID)
        for (std::int32_t e = 0; e < c.E; ++e) bias.push_back(d(rng) * 0.05f);
      std::vector<std::int32_t> map;  // this rank holds a contiguous slice of the experts, the others -1
      if (c.local)
        for (std::int32_t e = 0; e < c.E; ++e) map.push_back(e >= c.local && e < 2 * c.local ? e - c.local : -1);
      const RouteOut ref = on_reference(c, logits, bias, map, positions);
      const RouteOut fused = on_backend(0, c, logits, bias, map, positions);
      const RouteOut two = on_backend(1, c, logits, bias, map, positions);
      CHECK(fused == two);
      CHECK(fused == ref);
      CHECK(fused.post == ref.post);
      if (c.T > 0) CHECK(fused.ids != std::vector<std::int32_t>(fused.ids.size(), kPoison));
    }
}

TEST_CASE("route errors: each argument named") {
  const std::int64_t T = 4;
  const std::int32_t E = 16, K = 2;
  moe::device_buffer<float> logits(T * E), w(T * K);
  moe::device_buffer<std::int32_t> ids(T * K), sorted(64), experts(64), post(1), pos(T * K);
  moe_gate_t g = moe::make_gate(K, MOE_SCORE_SOFTMAX);
  std::size_t bytes = 0;
  REQUIRE(moe_route_workspace_size(T, E, &g, E, 4, &bytes) == MOE_SUCCESS);
  moe::device_buffer<unsigned char> ws(bytes + 512);
  auto call = [&](const moe_gate_t* gate, std::size_t ws_bytes, float* weights = nullptr, std::int32_t local = 16) {
    return moe_route(logits.data(), MOE_FLOAT32, T, E, gate, nullptr, local, 4, ids.data(),
                     weights ? weights : w.data(), sorted.data(), experts.data(), post.data(), pos.data(), ws.data(),
                     ws_bytes, nullptr);
  };
  CHECK(call(&g, bytes) == MOE_SUCCESS);
  auto expect = [](moe_status_t st, const char* needle) {
    CHECK(st == MOE_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(moe_last_error()).find(needle) != std::string::npos, moe_last_error());
  };
  expect(call(nullptr, bytes), "gate");
  if (bytes > 0) expect(call(&g, bytes - 1), "workspace");
  expect(call(&g, bytes, nullptr, 8), "expert_map");  // NULL map needs num_local_experts == num_experts
  expect(call(&g, bytes, reinterpret_cast<float*>(sorted.data())), "overlaps");
  moe_gate_t bad = g;
  bad.topk = 17;
  expect(call(&bad, bytes), "topk");
  expect(moe_route_workspace_size(T, E, &g, E, 0, &bytes), "block_size");
  expect(moe_route_workspace_size(T, E, nullptr, E, 4, &bytes), "gate");
}
