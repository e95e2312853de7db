// moe_bench_align_ep: align_block_size_ep beside plain align_block_size on the same ids, on the issue-27 target
// shapes (issue 5's tokens x topk 8, block 64; expert parallel: 256 global experts, this rank's 32 local, ids of
// the other ranks in the input). Each call is checked against the reference before it is timed.
//   moe_bench_align_ep [--csv FILE] [--timing device|host] [--rank R] [--tokens T]...
// Rows per shape (ratio: graph time / plain align's on the same ids, 256 experts):
//   align          moe_align_block_size(ids, 256 experts): the baseline of the target (within 1.1x)
//   align-local    moe_align_block_size on the ids already mapped to local indices (-1 remote), 32 experts: the
//                  align step inside align_ep alone
//   ep             moe_align_block_size_ep with the map, expert_counts and token_positions NULL
//   ep+counts+pos  moe_align_block_size_ep with both optional outputs (the target row)
// Same method as moe_bench: median us per call in a graph of 16 calls rotating 8 input sets (GPU), and a
// single call with a cold L2.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "measure.hpp"
#include "paths.hpp"
#include "moe/reference.hpp"

namespace {

constexpr std::int32_t kExperts = 256, kLocal = 32, kTopk = 8, kBlock = 64;
constexpr int kSets = 8;

struct Row {
  std::string op, shape, path;
  double graph_us, cold_us;
};

[[noreturn]] void wrong(const char* what, std::int64_t tokens) {
  std::fprintf(stderr, "WRONG RESULT for %s at %lld tokens\n", what, static_cast<long long>(tokens));
  std::exit(1);
}

struct Outputs {  // one input set's outputs, in the backend's memory
  moe::device_buffer<std::int32_t> sorted, experts, post, counts, positions;
};

void run_shape(moe_perf::Measure& m, std::int64_t tokens, std::int32_t rank, std::vector<Row>& rows) {
  const std::int64_t numel = tokens * kTopk;
  char shape[96];
  std::snprintf(shape, sizeof shape, "%lldx%d E=%d L=%d bs=%d", static_cast<long long>(tokens), kTopk, kExperts,
                kLocal, kBlock);
  std::vector<std::int32_t> map(kExperts, -1);
  for (std::int32_t l = 0; l < kLocal; ++l) map[static_cast<std::size_t>(rank * kLocal + l)] = l;
  auto d_map = moe::device_buffer<std::int32_t>(map.size());
  moe::copy_to_device(d_map.data(), map.data(), d_map.bytes());

  std::mt19937_64 rng(static_cast<unsigned long>(numel * 31 + 7));
  std::uniform_int_distribution<std::int32_t> expert(0, kExperts - 1);
  std::vector<std::vector<std::int32_t>> host_ids(kSets), host_local(kSets);
  std::vector<moe::device_buffer<std::int32_t>> ids, local_ids;
  for (int s = 0; s < kSets; ++s) {
    for (std::int64_t i = 0; i < numel; ++i) {
      const std::int32_t e = expert(rng);
      host_ids[s].push_back(e);
      host_local[s].push_back(map[static_cast<std::size_t>(e)]);
    }
    ids.emplace_back(host_ids[s].size());
    moe::copy_to_device(ids.back().data(), host_ids[s].data(), ids.back().bytes());
    local_ids.emplace_back(host_local[s].size());
    moe::copy_to_device(local_ids.back().data(), host_local[s].data(), local_ids.back().bytes());
  }
  auto outputs = [&](std::int32_t groups) {
    std::vector<Outputs> v;
    for (int s = 0; s < kSets; ++s)
      v.push_back({moe::device_buffer<std::int32_t>(static_cast<std::size_t>(moe::align_max_padded(numel, groups, kBlock))),
                   moe::device_buffer<std::int32_t>(static_cast<std::size_t>(moe::align_max_blocks(numel, groups, kBlock))),
                   moe::device_buffer<std::int32_t>(1), moe::device_buffer<std::int32_t>(static_cast<std::size_t>(groups)),
                   moe::device_buffer<std::int32_t>(static_cast<std::size_t>(numel))});
    return v;
  };
  std::vector<Outputs> out_global = outputs(kExperts), out_local = outputs(kLocal);
  const std::size_t ws_plain = moe::align_workspace_size(numel, kExperts, kBlock);
  const std::size_t ws_local = moe::align_workspace_size(numel, kLocal, kBlock);
  const std::size_t ws_ep = moe::align_workspace_size_ep(numel, kExperts, kLocal, kBlock);
  moe::device_buffer<unsigned char> ws(std::max({ws_plain, ws_local, ws_ep}));

  const moe_perf::Call plain = [&](int s, void* stream) {
    moe::align_block_size(ids[s].data(), numel, kExperts, kBlock, out_global[s].sorted.data(),
                          out_global[s].experts.data(), out_global[s].post.data(), ws.data(), ws_plain, stream);
  };
  const moe_perf::Call local = [&](int s, void* stream) {
    moe::align_block_size(local_ids[s].data(), numel, kLocal, kBlock, out_local[s].sorted.data(),
                          out_local[s].experts.data(), out_local[s].post.data(), ws.data(), ws_local, stream);
  };
  auto ep_call = [&](bool extras) -> moe_perf::Call {
    return [&, extras](int s, void* stream) {
      moe::align_block_size_ep(ids[s].data(), numel, kExperts, d_map.data(), kLocal, kBlock,
                               out_local[s].sorted.data(), out_local[s].experts.data(), out_local[s].post.data(),
                               extras ? out_local[s].counts.data() : nullptr,
                               extras ? out_local[s].positions.data() : nullptr, ws.data(), ws_ep, stream);
    };
  };

  // correctness first: set 0 of each call against the reference
  auto fetch = [](const moe::device_buffer<std::int32_t>& d) {
    std::vector<std::int32_t> h(d.size());
    moe::copy_to_host(h.data(), d.data(), d.bytes());
    return h;
  };
  const auto n = static_cast<std::size_t>(numel);
  std::vector<std::int32_t> sorted(static_cast<std::size_t>(moe::align_max_padded(numel, kExperts, kBlock)));
  std::vector<std::int32_t> experts(static_cast<std::size_t>(moe::align_max_blocks(numel, kExperts, kBlock)));
  std::int32_t post = 0;
  std::vector<unsigned char> rws(moe::reference::align_workspace_size(numel, kExperts, kBlock));
  plain(0, nullptr);
  moe::synchronize();
  moe::reference::align_block_size(host_ids[0].data(), numel, kExperts, kBlock, sorted.data(), experts.data(), &post,
                                   rws.data(), rws.size());
  if (fetch(out_global[0].sorted) != sorted || fetch(out_global[0].experts) != experts ||
      fetch(out_global[0].post)[0] != post)
    wrong("align", tokens);
  sorted.assign(static_cast<std::size_t>(moe::align_max_padded(numel, kLocal, kBlock)), 0);
  experts.assign(static_cast<std::size_t>(moe::align_max_blocks(numel, kLocal, kBlock)), 0);
  std::vector<std::int32_t> counts(kLocal), positions(n);
  std::vector<unsigned char> rws_ep(moe::reference::align_workspace_size_ep(numel, kExperts, kLocal, kBlock));
  moe::reference::align_block_size_ep(host_ids[0].data(), numel, kExperts, map.data(), kLocal, kBlock, sorted.data(),
                                      experts.data(), &post, counts.data(), positions.data(), rws_ep.data(),
                                      rws_ep.size());
  auto check_local = [&](const char* what, bool extras) {
    moe::synchronize();
    if (fetch(out_local[0].sorted) != sorted || fetch(out_local[0].experts) != experts ||
        fetch(out_local[0].post)[0] != post)
      wrong(what, tokens);
    if (extras && (fetch(out_local[0].counts) != counts || fetch(out_local[0].positions) != positions))
      wrong(what, tokens);
  };
  local(0, nullptr);
  check_local("align-local", false);
  ep_call(false)(0, nullptr);
  check_local("ep", false);
  ep_call(true)(0, nullptr);
  check_local("ep+counts+pos", true);

  const auto path_of = [&](std::int32_t num_experts) {
    return moe::detail::align_path(moe::detail::make_align_shape(numel, num_experts, kBlock), MOE_INT32);
  };
  const std::string path = path_of(kExperts), local_path = path_of(kLocal);
  rows.push_back({"align", shape, path, m.replay_us(plain, kSets), m.cold_us(plain)});
  rows.push_back({"align-local", shape, local_path, m.replay_us(local, kSets), m.cold_us(local)});
  rows.push_back({"ep", shape, local_path, m.replay_us(ep_call(false), kSets), m.cold_us(ep_call(false))});
  rows.push_back({"ep+counts+pos", shape, local_path, m.replay_us(ep_call(true), kSets), m.cold_us(ep_call(true))});
}

constexpr const char* kUsage = "usage: moe_bench_align_ep [--csv FILE] [--timing device|host] [--rank R] [--tokens T]...";

}  // namespace

int run(int argc, char** argv) {
  std::string csv = "moe_bench_align_ep.csv", timing = "device";
  std::int32_t rank = 3;
  std::vector<std::int64_t> tokens;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--timing" && i + 1 < argc) timing = argv[++i];
    else if (a == "--rank" && i + 1 < argc) rank = std::atoi(argv[++i]);
    else if (a == "--tokens" && i + 1 < argc) tokens.push_back(std::atoll(argv[++i]));
    else {
      std::fprintf(stderr, "%s\n", kUsage);
      return 2;
    }
  }
  if (rank < 0 || rank >= kExperts / kLocal || std::any_of(tokens.begin(), tokens.end(), [](std::int64_t t) { return t < 1; })) {
    std::fprintf(stderr, "--rank must be in [0, %d), --tokens >= 1\n%s\n", kExperts / kLocal, kUsage);
    return 2;
  }
  if (tokens.empty()) tokens = {1, 256, 4096, 16384, 65536};
  try {
    moe::check_backend();
  } catch (const moe::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  auto m = timing == "host" ? moe_perf::make_host_measure() : moe_perf::make_measure();
  const double mhz = m->warm_up_mhz(1500);
  std::printf("device: %s, backend %s, SM clock after warm-up %.0f MHz; this rank %d of %d\n", m->device().c_str(),
              moe::backend_name(), mhz, rank, kExperts / kLocal);
  std::vector<Row> rows;
  for (std::int64_t t : tokens) run_shape(*m, t, rank, rows);
  std::printf("\nSM clock at the end: %.0f MHz\n", m->warm_up_mhz(20));
  std::printf("\n%-14s %-28s %-12s %10s %10s %8s\n", "op", "shape", "align path", "graph_us", "cold_us", "/align");
  std::ofstream out(csv);
  out << "device,backend,op,shape,path,graph_us,cold_us,ratio_to_align\n";
  double base = 0;
  for (const auto& r : rows) {
    if (r.op == "align") base = r.graph_us;
    std::printf("%-14s %-28s %-12s %10.3f %10.3f %8.2f\n", r.op.c_str(), r.shape.c_str(), r.path.c_str(), r.graph_us,
                r.cold_us, r.graph_us / base);
    out << '"' << m->device() << "\"," << moe::backend_name() << ',' << r.op << ",\"" << r.shape << "\"," << r.path
        << ',' << r.graph_us << ',' << r.cold_us << ',' << r.graph_us / base << '\n';
  }
  std::printf("\nCSV: %s\n", csv.c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const moe::Error& e) {
    std::fprintf(stderr, "moe_bench_align_ep: %s\n", e.what());
    return 1;
  }
}
