// Host-clock timing, for backends without device graphs (CPU, Kokkos).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "measure.hpp"

namespace moe_perf {
namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct HostMeasure final : Measure {
  std::string device() override { return std::string("host (backend ") + moe::backend_name() + ")"; }
  double replay_us(const Call& call, int sets) override {
    for (int s = 0; s < sets; ++s) call(s, nullptr);  // warm-up
    moe::synchronize();
    std::vector<double> t;
    for (int rep = 0; rep < 7; ++rep) {
      const auto t0 = clock_type::now();
      for (int j = 0; j < 16; ++j) call(j % sets, nullptr);
      moe::synchronize();
      t.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / 16);
    }
    return median(t);
  }
  double cold_us(const Call& call) override {
    std::vector<char> flush(256 << 20);
    std::vector<double> t;
    for (int rep = 0; rep < 5; ++rep) {
      std::memset(flush.data(), rep, flush.size());
      const auto t0 = clock_type::now();
      call(0, nullptr);
      moe::synchronize();
      t.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    return median(t);
  }
  // A plain parallel copy of bytes/2 into bytes/2 (read + write = bytes), replayed like the calls: 16 copies per
  // sample, split over OMP_NUM_THREADS threads (else every hardware thread), each thread its slice of each copy.
  // The host's memory-bandwidth floor for moe_sum with the threads a Kokkos-OpenMP build uses. Host backends
  // only (GPU builds' data is in device memory: not measured there).
#if !defined(MOE_PERF_DEVICE_TIMING)
  double same_bytes_copy_us(double bytes, int sets) override {
    const auto half = static_cast<std::size_t>(bytes / 2);
    const char* env = std::getenv("OMP_NUM_THREADS");
    int threads = env != nullptr ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(threads, 1);
    std::vector<std::vector<char>> src, dst;
    for (int s = 0; s < sets; ++s) src.emplace_back(half, 1), dst.emplace_back(half, 0);
    auto batch = [&](int calls) {
      std::vector<std::thread> pool;
      for (int w = 0; w < threads; ++w)
        pool.emplace_back([&, w] {
          const std::size_t lo = half * w / threads, hi = half * (w + 1) / threads;
          for (int j = 0; j < calls; ++j) std::memcpy(dst[j % sets].data() + lo, src[j % sets].data() + lo, hi - lo);
        });
      for (auto& t : pool) t.join();
    };
    batch(sets);  // warm-up
    std::vector<double> t;
    for (int rep = 0; rep < 7; ++rep) {
      const auto t0 = clock_type::now();
      batch(16);
      t.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / 16);
    }
    return median(t);
  }
#endif
  double empty_node_us() override { return 0.0; }
  double warm_up_mhz(double) override { return 0.0; }
  double copy_bandwidth_gbs() override {
    const std::size_t n = std::size_t{512} << 20;
    void* a = moe::malloc(n);
    void* b = moe::malloc(n);
    std::vector<char> h(n, 1);
    moe::copy_to_device(a, h.data(), n);
    std::vector<double> t;
    for (int rep = 0; rep < 5; ++rep) {  // a device-to-device copy through the host helpers: host memcpy
      const auto t0 = clock_type::now();
      moe::copy_to_host(h.data(), a, n);
      t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    moe::free(a);
    moe::free(b);
    return 2.0 * n / median(t) / 1e9;
  }
};

}  // namespace

std::unique_ptr<Measure> make_host_measure() { return std::make_unique<HostMeasure>(); }
#if !defined(MOE_PERF_DEVICE_TIMING)
std::unique_ptr<Measure> make_measure() { return make_host_measure(); }
#endif

}  // namespace moe_perf
