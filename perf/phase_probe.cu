// moe_probe: where one align_block_size call's time goes, phase by phase, in the block-resident kernels
// (cooperative_grid, one_cluster, cluster_grid): the reader of the library's perf-only phase probe. Needs a
// library built with -DMOE_PHASE_PROBE=ON (CUDA; backends/cuda_hip/phase_probe.cuh): its kernels record, per
// block, the SM clock at each probe point. Calls are timed as perf/moe_bench times them
// (a CUDA graph of 16 calls rotating 8 input sets, uniform random ids), and after each of 40 replays the last call's
// records are read; the first 10 are dropped. Printed: the graph time per call (the probes' stores make it a few %
// slower than moe_bench's), the spread of the blocks' entries, then for each point the median over replays of the
// median and the max over blocks of the time since the block's dependent-launch wait ended ("waited": since entry),
// and for the last replay the block that left last and block 0, point by point.
//   moe_probe NUM_TOKENS TOPK EXPERTS BLOCK_SIZE
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "moe/routing.h"
#include "phase_probe.cuh"

// the library's perf-only hook (align.cu, probe builds): the device address of the probe's records
extern "C" const void* moe_probe_records();

namespace {
int probe_read(unsigned long long* dst, size_t bytes) {
  const void* records = moe_probe_records();
  return records != nullptr && cudaMemcpy(dst, records, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : 1;
}
}  // namespace

namespace {

using moe::gpu::kProbeMaxBlocks;
using moe::gpu::kProbePoints;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int fail(const char* what) {
  std::fprintf(stderr, "moe_probe: %s: %s\n", what, moe_last_error());
  return 1;
}

constexpr double kClockGhz = 1.98;  // H200 SM clock under load (perf/NOTES.md step 2)

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: moe_probe NUM_TOKENS TOPK EXPERTS BLOCK_SIZE\n");
    return 2;
  }
  const long tokens = std::atol(argv[1]), topk = std::atol(argv[2]);
  const int experts = std::atoi(argv[3]), block_size = std::atoi(argv[4]);
  const long n = tokens * topk;
  constexpr int kSets = 8, kCalls = 16, kReplays = 40, kWarmReplays = 10;
  std::mt19937 rng(42);
  std::vector<void*> ids(kSets);
  for (auto& d : ids) {
    std::vector<int> h(n);
    for (auto& v : h) v = static_cast<int>(rng() % static_cast<unsigned>(experts));
    if (moe_malloc(&d, n * sizeof(int)) || moe_memcpy_to_device(d, h.data(), n * sizeof(int))) return fail("ids");
  }
  const long padded = moe_align_max_padded(n, experts, block_size);
  const long blocks = moe_align_max_blocks(n, experts, block_size);
  size_t ws_bytes = 0;
  void *sorted = nullptr, *expert_ids = nullptr, *post = nullptr, *ws = nullptr;
  if (moe_align_workspace_size(n, experts, block_size, &ws_bytes) || moe_malloc(&sorted, padded * sizeof(int)) ||
      moe_malloc(&expert_ids, blocks * sizeof(int)) || moe_malloc(&post, sizeof(int)) || moe_malloc(&ws, ws_bytes))
    return fail("buffers");
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  const auto call = [&](int set) {
    return moe_align_block_size(ids[set], MOE_INT32, n, experts, block_size, static_cast<int*>(sorted),
                                static_cast<int*>(expert_ids), static_cast<int*>(post), ws, ws_bytes, stream);
  };
  for (int i = 0; i < 3; ++i)
    if (call(i % kSets)) return fail("align");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < kCalls; ++i)
    if (call(i % kSets)) return fail("align (capture)");
  cudaStreamEndCapture(stream, &graph);
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return fail("graph");

  std::vector<unsigned long long> rec(std::size_t{kProbeMaxBlocks} * kProbePoints);
  const auto at = [&](int block, int point) { return rec[std::size_t(block) * kProbePoints + point]; };
  std::vector<std::vector<double>> med(kProbePoints), max(kProbePoints);
  std::vector<double> graph_us, entry_spread;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  int B = 0;
  for (int r = 0; r < kReplays; ++r) {
    cudaEventRecord(t0, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(t1, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) return fail("replay");
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    graph_us.push_back(ms * 1000.0 / kCalls);
    if (probe_read(rec.data(), rec.size() * sizeof(rec[0]))) return fail("probe read (a probe build?)");
    for (B = 0; B < kProbeMaxBlocks && at(B, moe::gpu::kProbeEntry) != 0;) ++B;
    if (B == 0) return fail("no records: this shape takes no block-resident kernel");
    if (r < kWarmReplays) continue;
    double lo = 1e30, hi = 0;
    for (int b = 0; b < B; ++b) {
      lo = std::min(lo, double(at(b, moe::gpu::kProbeEntryTime)));
      hi = std::max(hi, double(at(b, moe::gpu::kProbeEntryTime)));
    }
    entry_spread.push_back(hi - lo);
    for (int p = moe::gpu::kProbeWaited; p <= moe::gpu::kProbeExit; ++p) {
      const int from = p == moe::gpu::kProbeWaited ? moe::gpu::kProbeEntry : moe::gpu::kProbeWaited;
      std::vector<double> d;
      for (int b = 0; b < B; ++b)  // points a kernel does not pass keep 0 (or an old call's clock): skipped
        if (at(b, p) >= at(b, from) && at(b, p) - at(b, from) < 100000000ull)
          d.push_back(double(at(b, p) - at(b, from)) / kClockGhz);
      if (d.empty()) continue;
      med[p].push_back(median(d));
      max[p].push_back(*std::max_element(d.begin(), d.end()));
    }
  }
  std::printf("%ldx%ld E=%d bs=%d: %d blocks, graph %.3f us per call, entries spread over %.0f ns\n", tokens, topk,
              experts, block_size, B, median(graph_us), median(entry_spread));
  std::printf("  %-10s %9s %9s   ns since the wait ended (waited: since entry), median over replays\n", "point",
              "median", "max");
  for (int p = moe::gpu::kProbeWaited; p <= moe::gpu::kProbeExit; ++p)
    if (!med[p].empty())
      std::printf("  %-10s %9.0f %9.0f\n", moe::gpu::kProbeNames[p], median(med[p]), median(max[p]));
  int last = 0;
  for (int b = 0; b < B; ++b)
    if (at(b, moe::gpu::kProbeExitTime) > at(last, moe::gpu::kProbeExitTime)) last = b;
  for (int b : {last, 0}) {
    std::printf("  block %3d:", b);
    for (int p = moe::gpu::kProbeFilled; p <= moe::gpu::kProbeExit; ++p)
      std::printf(" %s %.0f", moe::gpu::kProbeNames[p],
                  at(b, p) >= at(b, moe::gpu::kProbeWaited) && at(b, p) - at(b, moe::gpu::kProbeWaited) < 100000000ull
                      ? double(at(b, p) - at(b, moe::gpu::kProbeWaited)) / kClockGhz
                      : -1.0);
    std::printf("\n");
  }
  return 0;
}
