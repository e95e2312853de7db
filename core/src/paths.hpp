// Internal entry points for the tests and the benchmark, not part of the public API: which implementation
// paths an operation has for a shape on this build and device, and thread-local overrides that make this
// thread's next calls take a given path, or plan as on a device with fewer capabilities. Every path that
// applies to a shape gives results bit-identical to the reference; these entries let the suite check that on
// every path, whatever device it runs on. Each backend defines <operation>_paths; the rest is core (paths.cpp).
#pragma once

#include <string>
#include <vector>

#include "ops/align.hpp"

namespace moe {
namespace backend {

// The paths of align_block_size that can run `shape` with ids of `id_type` on this build and the current device,
// within this thread's caps limits (ScopedForcedCaps); the first is the one a call takes unless one is forced.
// Never empty. CPU: {"reference"}; Kokkos: {"kokkos_four_kernels"} on GPU spaces, {"kokkos_host_counting"} on
// host spaces; CUDA/HIP: backends/cuda_hip/align_policy.hpp.
std::vector<std::string> align_paths(const detail::AlignShape& shape, moe_dtype_t id_type);

}  // namespace backend

namespace detail {

constexpr const char* kAlignOperation = "align_block_size";

// The path this thread's next align_block_size call takes for `shape` and `id_type`: the forced one (throws
// MOE_ERROR_UNSUPPORTED where it does not apply, as the call would), or the backend's choice.
std::string align_path(const AlignShape& shape, moe_dtype_t id_type);

// While it lives, this thread's calls of `operation` take `path` (nested: the innermost wins). A call whose
// shape the path does not apply to fails with MOE_ERROR_UNSUPPORTED, naming the path and those that apply.
class ScopedForcedPath {
 public:
  ScopedForcedPath(std::string operation, std::string path);
  ~ScopedForcedPath();
  ScopedForcedPath(const ScopedForcedPath&) = delete;
  ScopedForcedPath& operator=(const ScopedForcedPath&) = delete;

 private:
  std::string operation_, previous_;
  bool had_previous_ = false;
};

// This thread's forced path of `operation`, or nullptr (cheap: called by every backend call).
const std::string* forced_path(const char* operation);

// For backends: the path to take among `applicable` (the backend's choice first), the forced one if set;
// throws MOE_ERROR_UNSUPPORTED where the forced path is not among them. `shape` names the call in the error.
std::string take_path(const char* operation, const std::vector<std::string>& applicable, const std::string& shape);

// What a GPU backend may use at most, whatever the device has (it never uses more than the device has); host
// backends ignore it. portable(): what HIP on AMD has (no thread-block clusters, no dependent launch), so that
// the plan AMD takes runs, and is tested, on an NVIDIA GPU.
struct CapsLimits {
  bool clusters = true;
  bool dependent_launch = true;
  bool cooperative_launch = true;
  // > 0: plan as if the device had at most this many multiprocessors (a smaller GPU): the cuts by SM count and
  // the cooperative grid's fit; the residency of thread-block clusters stays the device's
  int max_sm_count = 0;
  static CapsLimits portable() {
    CapsLimits l;
    l.clusters = false;
    l.dependent_launch = false;
    return l;
  }
};

// While it lives, this thread's calls plan within `limits` (nested: the innermost wins).
class ScopedForcedCaps {
 public:
  explicit ScopedForcedCaps(const CapsLimits& limits);
  ~ScopedForcedCaps();
  ScopedForcedCaps(const ScopedForcedCaps&) = delete;
  ScopedForcedCaps& operator=(const ScopedForcedCaps&) = delete;

 private:
  CapsLimits previous_;
  bool had_previous_ = false;
};

// This thread's caps limits, or nullptr.
const CapsLimits* forced_caps();

}  // namespace detail
}  // namespace moe
