// GPU backends only: every hot call is captured into a graph on a non-default stream and replayed, on every
// align path that applies. Capture fails if a call allocates or synchronises with the host; the replayed results
// must equal the reference.
#include "gpu_test_runtime.hpp"
#include "support.hpp"

using namespace moe_test;

namespace {

namespace gpu = moe_gpu_test;

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
  // a shape of each path (catalogue.hpp), each captured on every path that applies to it
  for (const AlignCase& shape : moe_catalogue::capture_shapes()) {
    for (const std::string& path : paths_of<std::int32_t>(shape.numel(), shape.experts, shape.block_size)) {
      const auto n = static_cast<std::size_t>(shape.numel());
      const std::int32_t E = shape.experts, bs = shape.block_size;
      INFO("numel=" << n << " experts=" << E << " block=" << bs << " path " << path);
      const moe::detail::ScopedForcedPath force(moe::detail::kAlignOperation, path);
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
        AlignCase c = shape;
        c.dist = rep == 1 ? Dist::kSkew : Dist::kUniform;
        c.dropped = rep == 1 ? 0.0 : 0.1;
        const auto host_ids = moe_catalogue::make_ids<std::int32_t>(c, rng);
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
  // 300000 ids over 256 experts: the cooperative grid path, then three launches (each path that applies to every
  // call of the chain, forced); later calls keep only the ids below 256
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
  const std::vector<std::int32_t> ids0 = moe_catalogue::make_ids<std::int32_t>({numel[0], 1, E, bs}, rng);
  std::vector<std::int32_t> ids = ids0;
  AlignResult ref;
  for (int i = 0; i < steps; ++i) {
    ref = reference_align(ids, E, bs);
    ids = ref.sorted_token_ids;  // numel[i + 1] of them
  }
  std::vector<std::string> paths = paths_of<std::int32_t>(numel[0], E, bs);
  for (int i = 1; i < steps; ++i) {
    const auto those = paths_of<std::int32_t>(numel[i], E, bs);
    const auto absent = [&](const std::string& p) { return std::find(those.begin(), those.end(), p) == those.end(); };
    paths.erase(std::remove_if(paths.begin(), paths.end(), absent), paths.end());
  }
  REQUIRE(!paths.empty());
  for (const std::string& path : paths) {
    for (bool in_graph : {false, true}) {
      INFO((in_graph ? "graph" : "stream") << " path " << path);
      const moe::detail::ScopedForcedPath force(moe::detail::kAlignOperation, path);
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
