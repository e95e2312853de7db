// GPU backends only: every hot call is captured into a graph on a non-default stream and replayed, on every
// align path that applies. Capture fails if a call allocates or synchronises with the host; the replayed results
// must equal the reference.
#include "datapath.hpp"
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
    for (const std::string& path : paths_to_test<std::int32_t>(shape.numel(), shape.experts, shape.block_size)) {
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
  std::vector<std::string> paths = paths_to_test<std::int32_t>(numel[0], E, bs);
  for (int i = 1; i < steps; ++i) {
    const auto those = paths_to_test<std::int32_t>(numel[i], E, bs);
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

// ---- align_block_size_ep (its map and finish kernels around align's) ----------------------------------------
#include "align_ep_support.hpp"

namespace {
EpResult read_ep(const moe::device_buffer<std::int32_t>& sorted, const moe::device_buffer<std::int32_t>& experts,
                 const moe::device_buffer<std::int32_t>& post, const moe::device_buffer<std::int32_t>& counts,
                 const moe::device_buffer<std::int32_t>& positions) {
  EpResult r;
  r.align.sorted_token_ids = to_host(sorted);
  r.align.expert_ids = to_host(experts);
  r.align.num_tokens_post_pad = to_host(post)[0];
  r.counts = to_host(counts);
  r.positions = to_host(positions);
  return r;
}
}  // namespace

TEST_CASE("graph capture: align_block_size_ep on every path, replayed with new ids and a new map") {
  Rng rng(25);
  // the local grouping picks align's path: tiny, tiny with > 256 local experts, a block per expert, one cluster,
  // a grid of clusters, cooperative grid, three launches, radix (> 1024 local), numel 0
  struct Shape {
    std::size_t n;
    std::int32_t E, L, bs;
  };
  const Shape shapes[] = {{8, 256, 32, 64},         {20, 65536, 4096, 16}, {1000, 256, 32, 64},
                          {4096, 256, 64, 16},      {40000, 256, 32, 64},  {300000, 256, 32, 64},
                          {2200000, 256, 32, 64},   {100000, 8192, 4096, 128}, {5000, 65536, 65536, 16},
                          {0, 8, 4, 16}};
  for (const Shape& shape : shapes)
    for (int mode = 0; mode < 3; ++mode) {  // 0: a map, counts and positions; 1: a map only; 2: NULL map (L = E)
      const std::size_t n = shape.n;
      const std::int32_t E = shape.E, L = mode == 2 ? shape.E : shape.L, bs = shape.bs;
      const bool extras = mode != 1;
      INFO("numel=" << n << " experts=" << E << " local=" << L << " block=" << bs << " mode=" << mode);
      const auto numel = static_cast<std::int64_t>(n);
      const auto max_padded = static_cast<std::size_t>(moe::align_max_padded(numel, L, bs));
      const auto max_blocks = static_cast<std::size_t>(moe::align_max_blocks(numel, L, bs));
      const std::size_t ws_bytes = moe::align_workspace_size_ep(numel, E, L, bs);
      moe::device_buffer<std::int32_t> ids(n), map(static_cast<std::size_t>(E)), sorted(max_padded),
          experts(max_blocks), post(1), counts(static_cast<std::size_t>(L)), positions(n);
      moe::device_buffer<unsigned char> ws(ws_bytes);
      Graph g;
      g.capture([&](void* stream) {
        moe::align_block_size_ep(ids.data(), numel, E, mode == 2 ? nullptr : map.data(), L, bs, sorted.data(),
                                 experts.data(), post.data(), extras ? counts.data() : nullptr,
                                 extras ? positions.data() : nullptr, ws.data(), ws_bytes, stream);
      });
      for (int rep = 0; rep < 3; ++rep) {  // the same graph, new ids and a new map each replay
        const auto host_ids = rep == 1 ? skewed_ids<std::int32_t>(n, E, rng) : uniform_ids<std::int32_t>(n, E, rng, 0.1);
        const EpMap host_map = mode == 2 ? null_map() : rep == 2 ? random_map(E, L, rng, 0.5, 0.1)
                                                                 : rank_map(E, L, static_cast<std::int32_t>(rng() % (E / L)));
        moe::copy_to_device(ids.data(), host_ids.data(), ids.bytes());
        if (mode != 2) moe::copy_to_device(map.data(), host_map.entries.data(), map.bytes());
        const std::vector<std::int32_t> poison(std::max(n, static_cast<std::size_t>(L)), kPoison);
        moe::copy_to_device(counts.data(), poison.data(), counts.bytes());
        moe::copy_to_device(positions.data(), poison.data(), positions.bytes());
        g.replay();
        EpResult got = read_ep(sorted, experts, post, counts, positions);
        EpResult ref = reference_align_ep(host_ids, E, host_map, L, bs);
        if (!extras) {  // not written: still poisoned
          CHECK(got.counts == std::vector<std::int32_t>(static_cast<std::size_t>(L), kPoison));
          CHECK(got.positions == std::vector<std::int32_t>(n, kPoison));
          got.counts.clear(), got.positions.clear(), ref.counts.clear(), ref.positions.clear();
        }
        CHECK_MESSAGE(got == ref, first_difference(got, ref));
      }
    }
}

TEST_CASE("stream order: align_block_size_ep chained (token_positions of one call are the ids of the next)") {
  // each call's map kernel reads what the finish kernel of the call before wrote, and its finish kernel writes
  // the buffer the call before read (ping-pong); 300000 ids: align's cooperative grid between them
  Rng rng(26);
  const std::int32_t E = 4096, L = 512, bs = 16;
  const std::size_t n = 300000;
  const int steps = 4;
  const auto numel = static_cast<std::int64_t>(n);
  const EpMap host_map = random_map(E, L, rng, 0.3, 0.1);
  const std::size_t ws_bytes = moe::align_workspace_size_ep(numel, E, L, bs);
  moe::device_buffer<std::int32_t> buf0(n), buf1(n);
  moe::device_buffer<std::int32_t>* buf[2] = {&buf0, &buf1};
  moe::device_buffer<std::int32_t> sorted(static_cast<std::size_t>(moe::align_max_padded(numel, L, bs)));
  moe::device_buffer<std::int32_t> experts(static_cast<std::size_t>(moe::align_max_blocks(numel, L, bs)));
  moe::device_buffer<std::int32_t> post(1), counts(static_cast<std::size_t>(L));
  moe::device_buffer<unsigned char> ws(ws_bytes);
  auto map = to_device(host_map.entries);
  const std::vector<std::int32_t> ids0 = uniform_ids<std::int32_t>(n, E, rng, 0.05);
  std::vector<std::int32_t> ids = ids0;
  EpResult ref;
  for (int i = 0; i < steps; ++i) {
    ref = reference_align_ep(ids, E, host_map, L, bs);
    ids = ref.positions;  // positions in [-1, max_padded): those below E are ids of the next call
  }
  for (bool in_graph : {false, true}) {
    INFO((in_graph ? "graph" : "stream"));
    moe::copy_to_device(buf0.data(), ids0.data(), buf0.bytes());
    const std::vector<std::int32_t> poison(n, kPoison);
    moe::copy_to_device(buf1.data(), poison.data(), buf1.bytes());
    moe::synchronize();  // the chain runs on a non-blocking stream
    run_chain(in_graph, [&](void* stream) {
      for (int i = 0; i < steps; ++i)
        moe::align_block_size_ep(buf[i % 2]->data(), numel, E, map.data(), L, bs, sorted.data(), experts.data(),
                                 post.data(), counts.data(), buf[(i + 1) % 2]->data(), ws.data(), ws_bytes, stream);
    });
    CHECK(to_host(*buf[steps % 2]) == ref.positions);
    CHECK(to_host(sorted) == ref.align.sorted_token_ids);
    CHECK(to_host(counts) == ref.counts);
    CHECK(to_host(post)[0] == ref.align.num_tokens_post_pad);
  }
}

TEST_CASE("graph capture: align -> permute (bf16 rows, fp8 rows, fp32 per-token scales) -> combine, replayed") {
  // One graph of the data path: the row count of permute is read on the device from the align captured before it;
  // each replay gets new ids (some dropped), rows, positions and weights.
  Rng rng(25);
  struct Shape {
    std::int64_t tokens;
    std::int32_t topk;
    std::int64_t hidden;
    std::int32_t E, bs;
  };
  const Shape shapes[] = {{1, 8, 2048, 256, 64}, {333, 8, 1024, 256, 64}, {64, 2, 7168, 8, 16}, {5, 4, 13, 16, 4}};
  for (const Shape& sh : shapes) {
    INFO("tokens=" << sh.tokens << " topk=" << sh.topk << " hidden=" << sh.hidden << " E=" << sh.E << " bs=" << sh.bs);
    const std::int64_t numel = sh.tokens * sh.topk, H = sh.hidden;
    const std::int64_t cap = moe::align_max_padded(numel, sh.E, sh.bs);
    const std::size_t ws_bytes = moe::align_workspace_size(numel, sh.E, sh.bs);
    moe::device_buffer<std::int32_t> ids(static_cast<std::size_t>(numel)), sorted(static_cast<std::size_t>(cap)),
        experts(static_cast<std::size_t>(moe::align_max_blocks(numel, sh.E, sh.bs))), post(1),
        positions(static_cast<std::size_t>(numel));
    moe::device_buffer<unsigned char> ws(ws_bytes);
    const auto token_elems = static_cast<std::size_t>(sh.tokens * H), row_elems = static_cast<std::size_t>(cap * H);
    moe::device_buffer<moe::bfloat16_t> x(token_elems), permuted(row_elems), out(token_elems);
    moe::device_buffer<moe::float8_e4m3_t> q(token_elems), q_perm(row_elems);
    moe::device_buffer<float> scales(static_cast<std::size_t>(sh.tokens)), scales_perm(static_cast<std::size_t>(cap)),
        weights(static_cast<std::size_t>(numel));
    const float scale = 0.5f;
    Graph g;
    g.capture([&](void* stream) {
      moe::align_block_size(ids.data(), numel, sh.E, sh.bs, sorted.data(), experts.data(), post.data(), ws.data(),
                            ws_bytes, stream);
      moe::permute(x.data(), sh.tokens, H, sh.topk, sorted.data(), post.data(), cap, permuted.data(), stream);
      moe::permute(q.data(), sh.tokens, H, sh.topk, sorted.data(), post.data(), cap, q_perm.data(), stream);
      moe::permute(scales.data(), sh.tokens, 1, sh.topk, sorted.data(), post.data(), cap, scales_perm.data(), stream);
      moe::combine(permuted.data(), MOE_ROWS_PERMUTED, sh.tokens, sh.topk, H, positions.data(), weights.data(), scale,
                   out.data(), stream);
    });
    for (int rep = 0; rep < 3; ++rep) {
      const auto h_ids = dp::route(sh.tokens, sh.topk, sh.E, rng, rep == 1 ? 0.5 : 0.0);
      const dp::Layout l = dp::host_layout(h_ids, sh.E, sh.bs);
      const auto h_x = dp::random_values<moe::bfloat16_t>(static_cast<std::size_t>(sh.tokens * H), rng);
      std::vector<moe::float8_e4m3_t> h_q(static_cast<std::size_t>(sh.tokens * H));
      for (auto& v : h_q) v.bits = static_cast<std::uint8_t>(rng());
      const auto h_scales = dp::random_values<float>(static_cast<std::size_t>(sh.tokens), rng);
      const auto h_w = dp::random_weights(static_cast<std::size_t>(numel), rng, true);
      moe::copy_to_device(ids.data(), h_ids.data(), ids.bytes());
      moe::copy_to_device(positions.data(), l.positions.data(), positions.bytes());
      moe::copy_to_device(x.data(), h_x.data(), x.bytes());
      moe::copy_to_device(q.data(), h_q.data(), q.bytes());
      moe::copy_to_device(scales.data(), h_scales.data(), scales.bytes());
      moe::copy_to_device(weights.data(), h_w.data(), weights.bytes());
      g.replay();
      // the reference of each step, from the reference's own layout
      std::vector<moe::bfloat16_t> want_perm(permuted.size());
      std::vector<moe::float8_e4m3_t> want_q(q_perm.size());
      std::vector<float> want_scales(scales_perm.size());
      moe::reference::permute(h_x.data(), sh.tokens, H, sh.topk, l.sorted.data(), &l.post_pad, cap, want_perm.data());
      moe::reference::permute(h_q.data(), sh.tokens, H, sh.topk, l.sorted.data(), &l.post_pad, cap, want_q.data());
      moe::reference::permute(h_scales.data(), sh.tokens, 1, sh.topk, l.sorted.data(), &l.post_pad, cap,
                              want_scales.data());
      const auto rows = static_cast<std::size_t>(l.post_pad);
      CHECK(to_host(post)[0] == l.post_pad);
      const auto got_perm = to_host(permuted);
      const auto got_q = to_host(q_perm);
      const auto got_scales = to_host(scales_perm);
      CHECK(std::memcmp(got_perm.data(), want_perm.data(), rows * static_cast<std::size_t>(H) * 2) == 0);
      CHECK(std::memcmp(got_q.data(), want_q.data(), rows * static_cast<std::size_t>(H)) == 0);
      CHECK(std::memcmp(got_scales.data(), want_scales.data(), rows * 4) == 0);
      std::vector<moe::bfloat16_t> want_out(out.size());
      moe::reference::combine(want_perm.data(), MOE_ROWS_PERMUTED, sh.tokens, sh.topk, H, l.positions.data(),
                              h_w.data(), scale, want_out.data());
      const auto got_out = to_host(out);
      CHECK(std::memcmp(got_out.data(), want_out.data(), got_out.size() * 2) == 0);
    }
  }
}

TEST_CASE("stream order: permute and combine chained (each call reads what the one before wrote)") {
  // hidden -> permute -> combine (FLAT over a permuted buffer read as tokens' rows) -> permute ... on one stream
  // and as a graph: a call that started before its predecessor finished would read stale rows.
  Rng rng(26);
  const std::int64_t tokens = 2048, H = 2048;
  const std::int32_t topk = 2, E = 8, bs = 16;
  const auto ids = dp::route(tokens, topk, E, rng);
  const dp::Layout l = dp::host_layout(ids, E, bs);
  const std::int64_t cap = l.max_padded;
  const auto x0 = dp::random_values<float>(static_cast<std::size_t>(tokens * H), rng);
  auto d_sorted = to_device(l.sorted);
  auto d_post = to_device(std::vector<std::int32_t>{l.post_pad});
  auto d_pos = to_device(l.positions);
  const int steps = 3;
  // reference chain
  std::vector<float> ref = x0, perm(static_cast<std::size_t>(cap * H));
  for (int i = 0; i < steps; ++i) {
    moe::reference::permute(ref.data(), tokens, H, topk, l.sorted.data(), &l.post_pad, cap, perm.data());
    moe::reference::combine(perm.data(), MOE_ROWS_PERMUTED, tokens, topk, H, l.positions.data(), nullptr, 0.5f,
                            ref.data());
  }
  moe::device_buffer<float> x(x0.size()), p(perm.size());
  for (bool in_graph : {false, true}) {
    INFO((in_graph ? "graph" : "stream"));
    moe::copy_to_device(x.data(), x0.data(), x.bytes());
    const std::vector<float> poison(perm.size(), -7.0f);
    moe::copy_to_device(p.data(), poison.data(), p.bytes());
    moe::synchronize();
    run_chain(in_graph, [&](void* stream) {
      for (int i = 0; i < steps; ++i) {
        moe::permute(x.data(), tokens, H, topk, d_sorted.data(), d_post.data(), cap, p.data(), stream);
        moe::combine(p.data(), MOE_ROWS_PERMUTED, tokens, topk, H, d_pos.data(), nullptr, 0.5f, x.data(), stream);
      }
    });
    const auto got = to_host(x);
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
