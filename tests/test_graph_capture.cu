// GPU backends only: every hot call is captured into a graph on a non-default stream and replayed. Capture
// fails if a call allocates or synchronises with the host; the replayed results must equal the reference.
#include "gpu_runtime.hpp"
#include "support.hpp"

using namespace moe_test;

namespace {

namespace gpu = moe::gpu;

struct Graph {
  gpu::stream_t stream{};
  gpu::graph_t graph{};
  gpu::graph_exec_t exec{};
  Graph() { REQUIRE(gpu::stream_create(&stream) == gpu::kSuccess); }
  ~Graph() {
    if (exec) (void)gpu::graph_exec_destroy(exec);
    if (graph) (void)gpu::graph_destroy(graph);
    (void)gpu::stream_destroy(stream);
  }
  template <class F>
  void capture(F&& f) {
    REQUIRE(gpu::begin_capture(stream) == gpu::kSuccess);
    f(static_cast<void*>(stream));
    REQUIRE(gpu::end_capture(stream, &graph) == gpu::kSuccess);
    REQUIRE(gpu::graph_instantiate(&exec, graph) == gpu::kSuccess);
  }
  void replay() {
    REQUIRE(gpu::graph_launch(exec, stream) == gpu::kSuccess);
    REQUIRE(gpu::stream_synchronize(stream) == gpu::kSuccess);
  }
};

}  // namespace

TEST_CASE("graph capture: align_block_size on every path, replayed with new ids") {
  Rng rng(21);
  // shapes of each path: tiny (<= 32 ids, also with 65536 experts), a block per expert, one cluster (CUDA), a
  // grid of clusters (CUDA), cooperative grid, three launches (more ids than a cooperative grid takes), radix
  // (many experts), and numel 0
  struct Shape {
    std::size_t n;
    std::int32_t E, bs;
  };
  const Shape shapes[] = {{8, 256, 64},      {20, 65536, 16},    {1000, 256, 64},      {4096, 64, 16},
                          {40000, 256, 64},  {300000, 256, 64},  {2200000, 256, 64},   {100000, 4096, 128},
                          {5000, 65536, 16}, {0, 8, 16}};
  for (const Shape& shape : shapes) {
    const std::size_t n = shape.n;
    const std::int32_t E = shape.E, bs = shape.bs;
    INFO("numel=" << n << " experts=" << E << " block=" << bs);
    const auto max_padded = static_cast<std::size_t>(moe::align_max_padded(static_cast<std::int64_t>(n), E, bs));
    const auto max_blocks = static_cast<std::size_t>(moe::align_max_blocks(static_cast<std::int64_t>(n), E, bs));
    const std::size_t ws_bytes = moe::align_workspace_size(static_cast<std::int64_t>(n), E, bs);
    moe::device_buffer<std::int32_t> ids(n), sorted(max_padded), experts(max_blocks), post(1);
    moe::device_buffer<unsigned char> ws(ws_bytes);
    Graph g;
    g.capture([&](void* stream) {
      moe::align_block_size(ids.data(), static_cast<std::int64_t>(n), E, bs, sorted.data(), experts.data(),
                            post.data(), ws.data(), ws_bytes, stream);
    });
    for (int rep = 0; rep < 3; ++rep) {  // the same graph, new inputs each replay
      const auto host_ids = rep == 1 ? skewed_ids<std::int32_t>(n, E, rng) : uniform_ids<std::int32_t>(n, E, rng, 0.1);
      moe::copy_to_device(ids.data(), host_ids.data(), ids.bytes());
      g.replay();
      AlignResult got;
      got.sorted_token_ids = to_host(sorted);
      got.expert_ids = to_host(experts);
      got.num_tokens_post_pad = to_host(post)[0];
      const AlignResult ref = reference_align(host_ids, E, bs);
      CHECK_MESSAGE(got == ref, first_difference(got, ref));
    }
  }
}

TEST_CASE("graph capture: moe_sum") {
  Rng rng(22);
  const std::int64_t tokens = 33, hidden = 4096;
  const std::int32_t topk = 8;
  std::vector<moe::bfloat16_t> x(static_cast<std::size_t>(tokens * topk * hidden));
  std::normal_distribution<float> d;
  for (auto& v : x) v = moe::reference::float_to_bfloat16(d(rng));
  auto in = to_device(x);
  moe::device_buffer<moe::bfloat16_t> out(static_cast<std::size_t>(tokens * hidden));
  Graph g;
  g.capture([&](void* stream) { moe::sum(in.data(), tokens, topk, hidden, out.data(), stream); });
  g.replay();
  std::vector<moe::bfloat16_t> ref(out.size());
  moe::reference::sum(x.data(), tokens, topk, hidden, ref.data());
  const auto got = to_host(out);
  CHECK(std::memcmp(got.data(), ref.data(), got.size() * sizeof(moe::bfloat16_t)) == 0);
}

// Stream order across calls. On sm_90+ CUDA each kernel may be scheduled while the one before it still runs
// (programmatic serialisation, gpu_runtime.hpp) and must wait before touching memory. In these chains each
// call reads what the call before wrote (read after write) and writes what the call before read (write after
// read: ping-pong buffers), so a call that started early would see a buffer of two steps before. Run on a
// stream and as a replayed graph; compared with the same chain on the reference.
namespace {
template <class Chain>
void run_chain(bool in_graph, Chain&& chain) {
  Graph g;
  if (in_graph) {
    g.capture(chain);
    g.replay();
  } else {  // its stream only
    chain(static_cast<void*>(g.stream));
    REQUIRE(gpu::stream_synchronize(g.stream) == gpu::kSuccess);
  }
}
}  // namespace

TEST_CASE("stream order: align_block_size chained (sorted_token_ids of one call are the ids of the next)") {
  Rng rng(23);
  // 300000 ids over 256 experts: the cooperative grid path; later calls keep only the ids below 256
  const std::int32_t E = 256, bs = 16;
  const int steps = 4;
  std::vector<std::int64_t> numel{300000};
  for (int i = 0; i < steps; ++i) numel.push_back(moe::align_max_padded(numel.back(), E, bs));
  const auto cap = static_cast<std::size_t>(numel.back());
  std::size_t ws_bytes = 0;
  for (int i = 0; i < steps; ++i) ws_bytes = std::max(ws_bytes, moe::align_workspace_size(numel[i], E, bs));
  moe::device_buffer<std::int32_t> buf0(cap), buf1(cap);
  moe::device_buffer<std::int32_t>* buf[2] = {&buf0, &buf1};
  moe::device_buffer<std::int32_t> experts(static_cast<std::size_t>(moe::align_max_blocks(numel.back(), E, bs)));
  moe::device_buffer<std::int32_t> post(1);
  moe::device_buffer<unsigned char> ws(ws_bytes);
  const std::vector<std::int32_t> ids0 = uniform_ids<std::int32_t>(static_cast<std::size_t>(numel[0]), E, rng);
  std::vector<std::int32_t> ids = ids0;
  AlignResult ref;
  for (int i = 0; i < steps; ++i) {
    ref = reference_align(ids, E, bs);
    ids = ref.sorted_token_ids;  // numel[i + 1] of them
  }
  for (bool in_graph : {false, true}) {
    INFO((in_graph ? "graph" : "stream"));
    std::vector<std::int32_t> start(cap, kPoison);
    std::copy(ids0.begin(), ids0.end(), start.begin());
    moe::copy_to_device(buf0.data(), start.data(), buf0.bytes());
    const std::vector<std::int32_t> poison(cap, kPoison);
    moe::copy_to_device(buf1.data(), poison.data(), buf1.bytes());
    moe::synchronize();  // the chain runs on a non-blocking stream
    run_chain(in_graph, [&](void* stream) {
      for (int i = 0; i < steps; ++i)
        moe::align_block_size(buf[i % 2]->data(), numel[i], E, bs, buf[(i + 1) % 2]->data(), experts.data(),
                              post.data(), ws.data(), ws_bytes, stream);
    });
    std::vector<std::int32_t> got = to_host(*buf[steps % 2]);
    got.resize(static_cast<std::size_t>(numel[steps]));
    CHECK(got == ref.sorted_token_ids);
    CHECK(to_host(post)[0] == ref.num_tokens_post_pad);
  }
}

TEST_CASE("stream order: moe_sum chained (each output, read as [tokens, 2, hidden / 2], is the next input)") {
  Rng rng(24);
  // fp32, 2048 tokens, hidden 8192 halving each step: the first calls run for tens of microseconds
  const std::int64_t tokens = 2048;
  const int steps = 6;
  std::vector<float> x(static_cast<std::size_t>(tokens * 8192));
  std::normal_distribution<float> d;
  for (auto& v : x) v = d(rng);
  std::vector<float> ref = x;
  for (int i = 0, h = 4096; i < steps; ++i, h /= 2) {
    std::vector<float> next(static_cast<std::size_t>(tokens * h));
    moe::reference::sum(ref.data(), tokens, 2, h, next.data());
    ref = next;
  }
  moe::device_buffer<float> buf0(x.size()), buf1(x.size());
  moe::device_buffer<float>* buf[2] = {&buf0, &buf1};
  for (bool in_graph : {false, true}) {
    INFO((in_graph ? "graph" : "stream"));
    moe::copy_to_device(buf0.data(), x.data(), buf0.bytes());
    const std::vector<float> poison(x.size(), -1.0f);
    moe::copy_to_device(buf1.data(), poison.data(), buf1.bytes());
    moe::synchronize();  // the chain runs on a non-blocking stream
    run_chain(in_graph, [&](void* stream) {
      for (int i = 0, h = 4096; i < steps; ++i, h /= 2)
        moe::sum(buf[i % 2]->data(), tokens, 2, h, buf[(i + 1) % 2]->data(), stream);
    });
    std::vector<float> got = to_host(*buf[steps % 2]);
    got.resize(ref.size());
    CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("graph capture: topk_gating on both paths, replayed with new logits") {
  Rng rng(25);
  struct Shape {
    std::int64_t tokens;
    std::int32_t experts, topk, groups, kept;
    moe_score_t score;
  };
  // the subwarp path (Mixtral, DeepSeek-V3 grouped, Kimi K2) and the block path (many experts, large topk)
  const Shape shapes[] = {{300, 8, 2, 1, 1, MOE_SCORE_SOFTMAX},  {77, 256, 8, 8, 4, MOE_SCORE_SIGMOID},
                          {5, 384, 8, 1, 1, MOE_SCORE_SIGMOID},  {3, 4096, 8, 1, 1, MOE_SCORE_SOFTMAX},
                          {4, 128, 64, 1, 1, MOE_SCORE_SOFTMAX_TOPK}};
  for (const Shape& s : shapes) {
    INFO("tokens=" << s.tokens << " experts=" << s.experts << " topk=" << s.topk);
    const auto n = static_cast<std::size_t>(s.tokens * s.experts);
    std::vector<float> bias(static_cast<std::size_t>(s.experts));
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (auto& b : bias) b = d(rng) * 0.05f;
    auto d_bias = to_device(bias);
    moe::device_buffer<moe::bfloat16_t> logits(n);
    moe::device_buffer<std::int32_t> ids(static_cast<std::size_t>(s.tokens * s.topk));
    moe::device_buffer<float> weights(ids.size());
    moe_gate_t gate = moe::make_gate(s.topk, s.score);
    gate.num_groups = s.groups;
    gate.topk_groups = s.kept;
    gate.correction_bias = s.score == MOE_SCORE_SIGMOID ? d_bias.data() : nullptr;
    gate.renormalize = 1;
    gate.routed_scaling_factor = 2.5f;
    Graph g;
    g.capture([&](void* stream) {
      moe::topk_gating(logits.data(), s.tokens, s.experts, gate, ids.data(), weights.data(), stream);
    });
    for (int rep = 0; rep < 2; ++rep) {  // the same graph, new logits each replay
      std::vector<moe::bfloat16_t> host(n);
      for (auto& v : host) v = moe::reference::float_to_bfloat16(d(rng));
      moe::copy_to_device(logits.data(), host.data(), logits.bytes());
      g.replay();
      std::vector<std::int32_t> ref_ids(ids.size());
      std::vector<float> ref_w(ids.size());
      moe_gate_t host_gate = gate;
      host_gate.correction_bias = gate.correction_bias ? bias.data() : nullptr;
      moe::reference::topk_gating(host.data(), s.tokens, s.experts, host_gate, ref_ids.data(), ref_w.data());
      CHECK(to_host(ids) == ref_ids);
      const auto got_w = to_host(weights);
      CHECK(std::memcmp(got_w.data(), ref_w.data(), ref_w.size() * sizeof(float)) == 0);
    }
  }
}
