// GPU timing (CUDA or HIP through tests/gpu_test_runtime.hpp): graphs of 16 calls, device events, medians.
#include <algorithm>
#include <vector>

#include "gpu_test_runtime.hpp"
#include "measure.hpp"

namespace moe_perf {
namespace {

namespace gpu = moe_gpu_test;

__global__ void empty_kernel() {}
__global__ void empty_dependent_kernel() { moe::gpu::begin_after_prior_grid(); }  // launched as the library launches

__global__ void spin_kernel(long long cycles, long long* took) {  // busy for `cycles` SM clocks
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) *took = clock64() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kCallsPerGraph = 16;
constexpr int kReplays = 25;

struct GpuMeasure final : Measure {
  gpu::stream_t stream{};
  gpu::event_t start{}, stop{};
  void* flush = nullptr;
  std::size_t flush_bytes = 0;

  GpuMeasure() {
    gpu::check(gpu::stream_create(&stream), "stream");
    gpu::check(gpu::event_create(&start), "event");
    gpu::check(gpu::event_create(&stop), "event");
    int dev = 0, l2 = 0;
    gpu::check(gpu::current_device(&dev), "device");
    gpu::check(gpu::l2_cache_bytes(&l2, dev), "L2 size");
    flush_bytes = std::size_t{4} * static_cast<std::size_t>(l2);
    gpu::check(gpu::malloc(&flush, flush_bytes), "flush buffer");
  }
  ~GpuMeasure() override {
    (void)gpu::free(flush);
    (void)gpu::event_destroy(start);
    (void)gpu::event_destroy(stop);
    (void)gpu::stream_destroy(stream);
  }

  std::string device() override {
    int dev = 0;
    std::string name;
    gpu::check(gpu::current_device(&dev), "device");
    gpu::check(gpu::device_name(&name, dev), "device name");
    return name;
  }

  template <class Body>  // median ms of body() between two events
  double time_ms(Body&& body, int reps) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      gpu::check(gpu::event_record(start, stream), "record");
      body();
      gpu::check(gpu::event_record(stop, stream), "record");
      gpu::check(gpu::event_synchronize(stop), "sync");
      float ms = 0;
      gpu::check(gpu::event_elapsed_ms(&ms, start, stop), "elapsed");
      t.push_back(ms);
    }
    return median(t);
  }

  template <class Capture>
  double graph_us(Capture&& capture) {
    gpu::graph_t graph{};
    gpu::graph_exec_t exec{};
    gpu::check(gpu::begin_capture(stream), "begin capture");
    capture();
    gpu::check(gpu::end_capture(stream, &graph), "end capture");
    gpu::check(gpu::graph_instantiate(&exec, graph), "instantiate");
    for (int w = 0; w < 3; ++w) gpu::check(gpu::graph_launch(exec, stream), "warm-up");
    const double ms = time_ms([&] { gpu::check(gpu::graph_launch(exec, stream), "graph launch"); }, kReplays);
    gpu::check(gpu::graph_exec_destroy(exec), "graph exec destroy");
    gpu::check(gpu::graph_destroy(graph), "graph destroy");
    return ms * 1000.0 / kCallsPerGraph;
  }

  double replay_us(const Call& call, int sets) override {
    return graph_us([&] {
      for (int j = 0; j < kCallsPerGraph; ++j) call(j % sets, stream);
    });
  }

  double cold_us(const Call& call) override {
    call(0, stream);  // warm-up (module load)
    std::vector<double> t;
    for (int r = 0; r < 10; ++r) {
      gpu::check(gpu::memset_async(flush, r, flush_bytes, stream), "L2 flush");
      t.push_back(time_ms([&] { call(0, stream); }, 1) * 1000.0);
    }
    return median(t);
  }

  double empty_node_us() override {
    return graph_us([&] {
      for (int j = 0; j < kCallsPerGraph; ++j) empty_kernel<<<1, 32, 0, stream>>>();
    });
  }

  double empty_library_node_us() override {
    return graph_us([&] {
      for (int j = 0; j < kCallsPerGraph; ++j)
        moe::gpu::launch<empty_dependent_kernel>("empty kernel", 1, 32, 0, stream);
    });
  }

  double same_bytes_copy_us(double bytes, int sets) override {
    const auto half = static_cast<std::size_t>(bytes / 2);
    std::vector<void*> src(static_cast<std::size_t>(sets)), dst(src.size());
    for (int s = 0; s < sets; ++s) {
      gpu::check(gpu::malloc(&src[s], half), "copy src");
      gpu::check(gpu::malloc(&dst[s], half), "copy dst");
      gpu::check(gpu::memset_async(src[s], 1, half, stream), "init");
    }
    const double us = graph_us([&] {
      for (int j = 0; j < kCallsPerGraph; ++j) gpu::check(gpu::copy_async(dst[j % sets], src[j % sets], half, stream), "copy");
    });
    for (int s = 0; s < sets; ++s) {
      gpu::check(gpu::free(src[s]), "free");
      gpu::check(gpu::free(dst[s]), "free");
    }
    return us;
  }

  double copy_bandwidth_gbs() override {
    const std::size_t n = std::size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    gpu::check(gpu::malloc(&a, n), "copy src");
    gpu::check(gpu::malloc(&b, n), "copy dst");
    gpu::check(gpu::memset_async(a, 1, n, stream), "init");
    gpu::check(gpu::copy_async(b, a, n, stream), "warm-up copy");
    const double ms = time_ms([&] { gpu::check(gpu::copy_async(b, a, n, stream), "copy"); }, 10);
    gpu::check(gpu::free(a), "free");
    gpu::check(gpu::free(b), "free");
    return 2.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9;
  }

  double warm_up_mhz(double ms) override {
    long long* took = nullptr;
    gpu::check(gpu::malloc(reinterpret_cast<void**>(&took), sizeof(long long)), "spin");
    const long long cycles = 20000000;  // 10 ms at 2 GHz
    double mhz = 0;
    for (double spent = 0; spent < ms;) {
      const double t = time_ms([&] { spin_kernel<<<264, 128, 0, stream>>>(cycles, took); }, 1);
      spent += t;
      mhz = static_cast<double>(cycles) / (t * 1e3);
    }
    gpu::check(gpu::free(took), "free");
    return mhz;
  }
};

}  // namespace

std::unique_ptr<Measure> make_measure() { return std::make_unique<GpuMeasure>(); }

}  // namespace moe_perf
