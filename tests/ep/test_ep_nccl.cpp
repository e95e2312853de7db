// Expert-parallel dispatch/combine over NCCL on the CUDA backend: one thread per visible GPU (ncclCommInitAll),
// each a rank running the same cases as test_ep_mpi (ep_cases.hpp) on its own non-blocking stream. Capacity-mode
// calls are captured into CUDA graphs and replayed (they never synchronise with the host); exact-mode calls run
// directly (one host synchronisation in the layout). Prints "N passed, M failed"; exit 0, 1 (a failure) or 77
// (no GPU / no NCCL device here).
//   test_ep_nccl [--gpus N] [--layers N] [--seed S] [--max-tokens T] [--no-graphs]
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ep_cases.hpp"

namespace {

struct Shared {  // the threads' own collectives (test bookkeeping only)
  std::mutex m;
  std::condition_variable cv;
  int n = 1, arrived = 0;
  std::int64_t generation = 0, acc = 0, result = 0;
  std::int64_t sum(std::int64_t v) {
    std::unique_lock<std::mutex> lock(m);
    acc += v;
    if (++arrived == n) {
      result = acc, acc = 0, arrived = 0, ++generation;
      cv.notify_all();
    } else {
      const std::int64_t g = generation;
      cv.wait(lock, [&] { return generation != g; });
    }
    return result;
  }
};

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw moe::Error(MOE_ERROR_BACKEND, std::string(what) + ": " + cudaGetErrorString(e));
}

struct NcclWorld final : ep_test::World {
  Shared* shared;
  int me, world;
  ncclComm_t comm;
  cudaStream_t st = nullptr;
  bool graphs;
  NcclWorld(Shared* s, int r, int w, ncclComm_t c, bool g) : shared(s), me(r), world(w), comm(c), graphs(g) {}
  int rank() const override { return me; }
  int size() const override { return world; }
  std::int64_t sum(std::int64_t v) override { return shared->sum(v); }
  moe::ep::Comm make_comm(std::int32_t num_experts, const std::int32_t* er, const std::int32_t* el) override {
    return moe::ep::Comm::nccl(comm, num_experts, er, el);
  }
  bool device_path() const override { return true; }
  void* stream() const override { return st; }
  void submit(const std::function<void()>& f, bool capturable) override {
    if (!graphs || !capturable) return f();
    cuda_check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    cudaGraph_t g = nullptr;
    try {
      f();
    } catch (...) {
      cudaStreamEndCapture(st, &g);
      if (g != nullptr) cudaGraphDestroy(g);
      throw;
    }
    cuda_check(cudaStreamEndCapture(st, &g), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    cuda_check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    cuda_check(cudaGraphLaunch(exec, st), "cudaGraphLaunch");
    cuda_check(cudaStreamSynchronize(st), "graph replay");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int gpus = 0, layers = 32;
  bool graphs = true;
  std::uint64_t seed = 20261206;
  std::int64_t max_tokens = 4096;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-graphs")) graphs = false;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--gpus")) gpus = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--max-tokens")) max_tokens = std::atoll(argv[++i]);
  }
  if (moe_backend_check() != MOE_SUCCESS) {
    std::printf("SKIPPED: %s\n", moe_last_error());
    return 77;
  }
  int visible = 0;
  cudaGetDeviceCount(&visible);
  if (gpus <= 0 || gpus > visible) gpus = visible;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(gpus));
  std::vector<int> devs(static_cast<std::size_t>(gpus));
  for (int i = 0; i < gpus; ++i) devs[static_cast<std::size_t>(i)] = i;
  const ncclResult_t init = ncclCommInitAll(comms.data(), gpus, devs.data());
  if (init != ncclSuccess) {
    std::printf("SKIPPED: ncclCommInitAll: %s\n", ncclGetErrorString(init));
    return 77;
  }
  Shared shared;
  shared.n = gpus;
  std::vector<ep_test::Tally> tallies(static_cast<std::size_t>(gpus));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      NcclWorld w(&shared, r, gpus, comms[static_cast<std::size_t>(r)], graphs);
      auto& tally = tallies[static_cast<std::size_t>(r)];
      try {
        cuda_check(cudaStreamCreateWithFlags(&w.st, cudaStreamNonBlocking), "cudaStreamCreate");
        ep_test::run_error_cases(w, tally);
        ep_test::run_random_layers(w, tally, seed + static_cast<std::uint64_t>(gpus) * 1000003u, layers, max_tokens);
      } catch (const std::exception& e) {
        tally.check(false, std::string("rank threw: ") + e.what());
      }
      if (w.st != nullptr) cudaStreamDestroy(w.st);
    });
  for (auto& t : threads) t.join();
  std::int64_t passed = 0, failed = 0;
  for (int r = 0; r < gpus; ++r) {
    for (const auto& n : tallies[static_cast<std::size_t>(r)].notes) std::printf("rank %d FAILED: %s\n", r, n.c_str());
    passed += tallies[static_cast<std::size_t>(r)].passed;
    failed += tallies[static_cast<std::size_t>(r)].failed;
  }
  for (auto c : comms) ncclCommDestroy(c);
  std::printf("test_ep_nccl (%d GPU ranks, graphs %s): %lld passed, %lld failed\n", gpus, graphs ? "on" : "off",
              static_cast<long long>(passed), static_cast<long long>(failed));
  return failed == 0 ? 0 : 1;
}
