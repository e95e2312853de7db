// How the benchmark times calls on the configured backend. GPU builds (measure_gpu.cu): CUDA/HIP graphs of
// 16 calls rotating input sets, device events, medians, an L2 flush for cold calls, and the two floors
// (an empty kernel as a graph node, device copy bandwidth) measured in the same run. Other builds
// (measure_host.cpp): host clock around the calls plus moe::synchronize.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "moe/routing.hpp"

namespace moe_perf {

using Call = std::function<void(int set, void* stream)>;  // one library call on input set `set`

struct Measure {
  virtual ~Measure() = default;
  virtual std::string device() = 0;
  // median microseconds per call, calls replayed back to back (a graph of 16 on GPUs), rotating `sets`
  virtual double replay_us(const Call& call, int sets) = 0;
  // median microseconds of one call with a cold cache (launch included)
  virtual double cold_us(const Call& call) = 0;
  virtual double empty_node_us() = 0;          // an empty kernel as a plain graph node (0 on host backends)
  // Floor of any call: an empty kernel launched as the library launches its kernels (on sm_90+ CUDA, with
  // programmatic serialisation: it may be scheduled while the node before it runs). Plain where it has none.
  virtual double empty_library_node_us() { return empty_node_us(); }
  virtual double copy_bandwidth_gbs() = 0;     // bytes read + written per second by a large device copy
  // Median us per device-to-device copy that reads and writes `bytes` in all (bytes / 2 each way), replayed
  // as calls are (a graph of 16, rotating `sets` buffer pairs): the floor of a memory-bound call of that size,
  // start-up and drain included. 0 where not measured (host backends).
  virtual double same_bytes_copy_us(double bytes, int sets) { (void)bytes, (void)sets; return 0.0; }
  // Runs the device busy for about `ms` (clocks ramp up from idle), then returns the SM clock in MHz it
  // measured while doing so (0 where unknown). Benchmarks report it: latency-bound kernels scale with it.
  virtual double warm_up_mhz(double ms) = 0;
};

std::unique_ptr<Measure> make_measure();       // the backend's own timing (graphs + events on GPUs)
std::unique_ptr<Measure> make_host_measure();  // host clock around calls + moe::synchronize, any backend

}  // namespace moe_perf
