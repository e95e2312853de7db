// ep_bench over NCCL on the CUDA backend: one thread per visible GPU (or --gpus N), ncclCommInitAll, each thread a
// rank on its own GPU and non-blocking stream; one GPU is a world of one (every row goes to itself). The baseline is
// ncclSend/ncclRecv to every peer in one group, of the same bytes per pair, on device buffers. The body and its
// other options: ep_bench.cpp. Exit 0, 1 (a failure) or 77 (no GPU / no NCCL device here).
//   ep_bench_nccl [--gpus N] [--tokens 4096] [--hidden 2048] [--experts 64] [--topk 8] [--dtype bf16|f16|f32]
//                 [--mode exact|capacity] [--iters 20] [--warmup 3] [--untimed-phases]
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ep_bench.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

// The threads' own collectives (the bench's bookkeeping): every rank's bytes gathered under one lock. A rank that
// fails says so, and the others' waits throw instead of waiting for it forever.
struct Shared {
  std::mutex m;
  std::condition_variable cv;
  int n = 1, arrived = 0;
  std::int64_t generation = 0;
  bool failed = false;
  std::vector<std::vector<unsigned char>> slots;
  explicit Shared(int ranks) : n(ranks), slots(static_cast<std::size_t>(ranks)) {}
  void arrive(std::unique_lock<std::mutex>& lock) {
    if (failed) throw std::runtime_error("another rank failed");
    if (++arrived == n) {
      arrived = 0, ++generation;
      cv.notify_all();
      return;
    }
    const std::int64_t g = generation;
    cv.wait(lock, [&] { return generation != g || failed; });
    if (generation == g) throw std::runtime_error("another rank failed");
  }
  void barrier() {
    std::unique_lock<std::mutex> lock(m);
    arrive(lock);
  }
  std::vector<std::vector<unsigned char>> allgather(int rank, const void* p, std::size_t bytes) {
    std::unique_lock<std::mutex> lock(m);
    const auto* b = static_cast<const unsigned char*>(p);
    slots[static_cast<std::size_t>(rank)].assign(b, b + bytes);
    arrive(lock);
    auto all = slots;
    arrive(lock);  // no rank writes its next slot before every rank has read this round
    return all;
  }
  void fail() {
    std::lock_guard<std::mutex> lock(m);
    failed = true;
    cv.notify_all();
  }
};

struct NcclWorld final : ep_bench::World {
  Shared* shared;
  int me, world;
  ncclComm_t comm;
  cudaStream_t st = nullptr;
  NcclWorld(Shared* s, int r, int w, ncclComm_t c) : shared(s), me(r), world(w), comm(c) {}
  int rank() const override { return me; }
  int size() const override { return world; }
  template <class T, class Op>
  void reduce(T* v, int n, Op op) {
    const auto all = shared->allgather(me, v, sizeof(T) * static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      T acc{};
      for (std::size_t r = 0; r < all.size(); ++r) {
        T x;
        std::memcpy(&x, all[r].data() + sizeof(T) * static_cast<std::size_t>(i), sizeof(T));
        acc = r == 0 ? x : op(acc, x);
      }
      v[i] = acc;
    }
  }
  void max(std::int64_t* v, int n) override {
    reduce(v, n, [](std::int64_t a, std::int64_t b) { return std::max(a, b); });
  }
  void sum(std::int64_t* v, int n) override { reduce(v, n, [](std::int64_t a, std::int64_t b) { return a + b; }); }
  void max(double* v, int n) override { reduce(v, n, [](double a, double b) { return std::max(a, b); }); }
  void barrier() override { shared->barrier(); }
  void alltoall_pairs(const std::int64_t* to, std::int64_t* from) override {
    const auto all = shared->allgather(me, to, sizeof(std::int64_t) * 2 * static_cast<std::size_t>(world));
    for (int s = 0; s < world; ++s)
      std::memcpy(from + 2 * s, all[static_cast<std::size_t>(s)].data() + sizeof(std::int64_t) * 2 * me,
                  sizeof(std::int64_t) * 2);
  }
  moe::ep::Comm make_comm(std::int32_t num_experts) override { return moe::ep::Comm::nccl(comm, num_experts); }
  void* stream() const override { return st; }
  const char* baseline_name() const override { return "NCCL send/recv all-to-all x2"; }

  // One all-to-all: a send and a receive per peer with bytes (zero-byte pairs skipped on both sides alike: the
  // receive counts are the peers' send counts), in one group so that NCCL runs them together.
  void alltoall(const ep_bench::PairBytes& p, const unsigned char* send, unsigned char* recv) {
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    std::int64_t so = 0, ro = 0;
    for (int d = 0; d < world; ++d) {
      const auto i = static_cast<std::size_t>(d);
      const auto sn = static_cast<std::size_t>(p.send[i]), rn = static_cast<std::size_t>(p.recv[i]);
      if (sn > 0) nccl_check(ncclSend(send + so, sn, ncclUint8, d, comm, st), "ncclSend");
      if (rn > 0) nccl_check(ncclRecv(recv + ro, rn, ncclUint8, d, comm, st), "ncclRecv");
      so += p.send[i], ro += p.recv[i];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }
  static std::size_t total(const std::vector<std::int64_t>& v) {
    std::int64_t t = 0;
    for (auto x : v) t += x;
    return static_cast<std::size_t>(t);
  }
  double baseline_seconds(const ep_bench::PairBytes& dispatch, const ep_bench::PairBytes& combine, int warmup,
                          int iters) override {
    moe::device_buffer<unsigned char> ds(total(dispatch.send)), dr(total(dispatch.recv));
    moe::device_buffer<unsigned char> cs(total(combine.send)), cr(total(combine.recv));
    auto once = [&] {
      alltoall(dispatch, ds.data(), dr.data());
      alltoall(combine, cs.data(), cr.data());
    };
    for (int i = 0; i < warmup; ++i) once();
    cuda_check(cudaStreamSynchronize(st), "baseline warmup");
    shared->barrier();
    const double t0 = now();
    for (int i = 0; i < iters; ++i) once();
    cuda_check(cudaStreamSynchronize(st), "baseline");
    return (now() - t0) / iters;
  }
};

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // never NVLink multicast (the device machines' rule), unless set otherwise
  int gpus = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--gpus")) gpus = std::atoi(argv[i + 1]);
  if (moe_backend_check() != MOE_SUCCESS) {
    std::printf("SKIPPED: %s\n", moe_last_error());
    return 77;
  }
  int visible = 0;
  cudaGetDeviceCount(&visible);
  if (gpus <= 0 || gpus > visible) gpus = visible;
  if (gpus == 0) {
    std::printf("SKIPPED: no GPU visible\n");
    return 77;
  }
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(gpus));
  std::vector<int> devs(static_cast<std::size_t>(gpus));
  for (int i = 0; i < gpus; ++i) devs[static_cast<std::size_t>(i)] = i;
  const ncclResult_t init = ncclCommInitAll(comms.data(), gpus, devs.data());
  if (init != ncclSuccess) {
    std::printf("SKIPPED: ncclCommInitAll: %s\n", ncclGetErrorString(init));
    return 77;
  }
  Shared shared(gpus);
  std::vector<int> rcs(static_cast<std::size_t>(gpus), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] {
      int& rc = rcs[static_cast<std::size_t>(r)];
      NcclWorld w(&shared, r, gpus, comms[static_cast<std::size_t>(r)]);
      try {
        cuda_check(cudaSetDevice(r), "cudaSetDevice");  // before anything: buffers and streams on this rank's GPU
        cuda_check(cudaStreamCreateWithFlags(&w.st, cudaStreamNonBlocking), "cudaStreamCreate");
        rc = ep_bench::run_ep_bench(w, argc, argv);
      } catch (const std::exception& e) {
        std::printf("rank %d: %s\n", r, e.what());
        rc = 1;
      }
      if (rc != 0) shared.fail();
      if (w.st != nullptr) cudaStreamDestroy(w.st);
    });
  for (auto& t : threads) t.join();
  for (auto c : comms) ncclCommDestroy(c);
  return *std::max_element(rcs.begin(), rcs.end());
}
