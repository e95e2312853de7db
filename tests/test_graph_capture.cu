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
  // shapes of each path: tiny (<= 32 ids, also with 65536 experts), one block, cooperative grid, three
  // launches (more ids than a cooperative grid takes), radix (many experts), and numel 0
  struct Shape {
    std::size_t n;
    std::int32_t E, bs;
  };
  const Shape shapes[] = {{8, 256, 64},       {20, 65536, 16},     {1000, 256, 64},   {4096, 64, 16},
                          {300000, 256, 64},  {2200000, 256, 64},  {100000, 4096, 128}, {5000, 65536, 16},
                          {0, 8, 16}};
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
