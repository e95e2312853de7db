// Calls from many host threads at once (routing.h: safe on every backend): 8 threads, each running align, sum
// and topk_gating on its own random inputs, every result compared with the reference. On Kokkos, calls share one
// execution space instance and its team scratch (Kokkos::Serial: one per process): before the per-instance lock,
// ~2 % of align results were wrong with 2 threads, and 8 threads hit heap-use-after-free.
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <mutex>
#include <thread>

#include "support.hpp"

using namespace moe_test;

namespace {

struct Failures {
  std::atomic<int> count{0};
  std::mutex mutex;
  std::string first;
  void add(const std::string& what) {
    if (count.fetch_add(1) == 0) {
      const std::lock_guard<std::mutex> lock(mutex);
      first = what;
    }
  }
};

// One align case of a thread: its inputs and outputs in the backend's memory (allocated once, so that the
// calls, not the allocations, fill the time) and the reference's answer.
struct ThreadAlignCase {
  std::int32_t E = 1, bs = 1;
  std::int64_t numel = 0;
  moe_dtype_t dtype = MOE_INT32;
  AlignResult want;
  moe::device_buffer<unsigned char> ids;
  moe::device_buffer<std::int32_t> sorted, experts, post;
  moe::device_buffer<unsigned char> ws;
  std::vector<std::int32_t> poison;

  template <class IdT>
  void init(Rng& rng) {
    static constexpr std::int32_t kExperts[] = {1, 4, 8, 33, 256, 1024, 3000};
    static constexpr std::int32_t kBlocks[] = {1, 3, 16, 64};
    E = kExperts[rng() % 7];
    bs = kBlocks[rng() % 4];
    const std::size_t n = rng() % 4 == 0 ? rng() % 40 : rng() % 20000;
    const auto v = rng() % 3 == 0 ? skewed_ids<IdT>(n, E, rng) : uniform_ids<IdT>(n, E, rng, 0.05);
    numel = static_cast<std::int64_t>(n);
    dtype = moe::dtype_of<IdT>::value;
    want = reference_align(v, E, bs);
    ids = moe::device_buffer<unsigned char>(n * sizeof(IdT));
    moe::copy_to_device(ids.data(), v.data(), ids.size());
    sorted = moe::device_buffer<std::int32_t>(want.sorted_token_ids.size());
    experts = moe::device_buffer<std::int32_t>(want.expert_ids.size());
    post = moe::device_buffer<std::int32_t>(1);
    ws = moe::device_buffer<unsigned char>(moe::align_workspace_size(numel, E, bs));
    poison.assign(std::max(sorted.size(), experts.size()), kPoison);
  }
  std::string run() {  // one call: "" or what differs
    moe::copy_to_device(sorted.data(), poison.data(), sorted.bytes());
    moe::copy_to_device(experts.data(), poison.data(), experts.bytes());
    moe::align_block_size(ids.data(), dtype, numel, E, bs, sorted.data(), experts.data(), post.data(), ws.data(),
                          ws.size());
    moe::synchronize();
    AlignResult got;
    got.sorted_token_ids = to_host(sorted);
    got.expert_ids = to_host(experts);
    got.num_tokens_post_pad = to_host(post)[0];
    if (got == want) return {};
    return "align numel " + std::to_string(numel) + " experts " + std::to_string(E) + " block " + std::to_string(bs) +
           ": " + first_difference(got, want);
  }
};

struct ThreadSumCase {
  std::int64_t tokens = 1, hidden = 1;
  std::int32_t topk = 1;
  std::vector<float> want;
  moe::device_buffer<float> in, out;

  void init(Rng& rng) {
    tokens = 1 + static_cast<std::int64_t>(rng() % 64);
    hidden = 1 + static_cast<std::int64_t>(rng() % 300);
    topk = static_cast<std::int32_t>(1 + rng() % 8);
    std::vector<float> x(static_cast<std::size_t>(tokens * topk * hidden));
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (auto& v : x) v = u(rng);
    in = to_device(x);
    out = moe::device_buffer<float>(static_cast<std::size_t>(tokens * hidden));
    want.resize(out.size());
    moe::reference::sum(x.data(), tokens, topk, hidden, want.data());
  }
  std::string run() {
    moe::sum(in.data(), tokens, topk, hidden, out.data());
    moe::synchronize();
    const std::vector<float> got = to_host(out);
    if (std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0) return {};
    return "sum " + std::to_string(tokens) + "x" + std::to_string(topk) + "x" + std::to_string(hidden) + " differs";
  }
};

// Gating with small topk (Kokkos host spaces: the host form) and topk above 64 (the team form, with team scratch).
struct ThreadGatingCase {
  std::int64_t tokens = 1;
  std::int32_t E = 8;
  moe_gate_t gate{};
  std::vector<std::int32_t> want_ids;
  std::vector<float> want_w;
  moe::device_buffer<float> logits, weights;
  moe::device_buffer<std::int32_t> ids;

  void init(Rng& rng) {
    tokens = 1 + static_cast<std::int64_t>(rng() % 48);
    static constexpr std::int32_t kExperts[] = {8, 64, 300};
    E = kExperts[rng() % 3];
    gate.topk = E == 300 && rng() % 2 == 0 ? 80 : static_cast<std::int32_t>(1 + rng() % 8);
    gate.score = rng() % 2 == 0 ? MOE_SCORE_SOFTMAX : MOE_SCORE_SIGMOID;
    gate.num_groups = 1;
    gate.topk_groups = 1;
    gate.renormalize = 1;
    gate.routed_scaling_factor = 1.0f;
    std::vector<float> x(static_cast<std::size_t>(tokens * E));
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (auto& v : x) v = d(rng);
    logits = to_device(x);
    const auto n = static_cast<std::size_t>(tokens * gate.topk);
    ids = moe::device_buffer<std::int32_t>(n);
    weights = moe::device_buffer<float>(n);
    want_ids.resize(n);
    want_w.resize(n);
    moe::reference::topk_gating(x.data(), MOE_FLOAT32, tokens, E, gate, want_ids.data(), want_w.data());
  }
  std::string run() {
    moe::topk_gating(logits.data(), tokens, E, gate, ids.data(), weights.data());
    moe::synchronize();
    const std::vector<std::int32_t> got_ids = to_host(ids);
    const std::vector<float> got_w = to_host(weights);
    if (got_ids == want_ids && std::memcmp(got_w.data(), want_w.data(), want_w.size() * sizeof(float)) == 0) return {};
    return "topk_gating " + std::to_string(tokens) + " tokens, " + std::to_string(E) + " experts, topk " +
           std::to_string(gate.topk) + " differs";
  }
};

}  // namespace

TEST_CASE("threads: 8 host threads calling align, sum and topk_gating at once, every result checked") {
  constexpr int kThreads = 8, kAlignCases = 3, kRounds = 24;
  Failures failures;
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&failures, t] {
      try {
        Rng rng(7919 * static_cast<unsigned>(t + 1));
        ThreadAlignCase align[kAlignCases];
        for (int c = 0; c < kAlignCases; ++c) {
          switch (rng() % 3) {
            case 0: align[c].init<std::int32_t>(rng); break;
            case 1: align[c].init<std::int64_t>(rng); break;
            default: align[c].init<std::int16_t>(rng); break;
          }
        }
        ThreadSumCase sum;
        sum.init(rng);
        ThreadGatingCase gating;
        gating.init(rng);
        for (int r = 0; r < kRounds; ++r) {
          for (int c = 0; c < kAlignCases; ++c) {
            const std::string why = align[c].run();
            if (!why.empty()) failures.add("thread " + std::to_string(t) + " round " + std::to_string(r) + ": " + why);
          }
          for (const std::string& why : {sum.run(), gating.run()})
            if (!why.empty()) failures.add("thread " + std::to_string(t) + " round " + std::to_string(r) + ": " + why);
        }
      } catch (const std::exception& e) {
        failures.add("thread " + std::to_string(t) + " threw: " + e.what());
      }
    });
  for (auto& th : pool) th.join();
  CHECK_MESSAGE(failures.count.load() == 0, failures.count.load() << " failed calls; first: " << failures.first);
}
