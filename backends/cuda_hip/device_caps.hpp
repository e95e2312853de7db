// What the CUDA/HIP backend knows of a device: asked once per device (query_device_caps, backend.cu) and
// handed to the path policies as data. Plain host C++, so that the policies' tests can make devices up.
#pragma once

#include <algorithm>
#include <cstdint>

#include "paths.hpp"

namespace moe {
namespace gpu {

struct DeviceCaps {
  int sm_count = 0;                 // multiprocessors (compute units on AMD)
  int warp_size = 32;               // lanes of a warp (of a wavefront on AMD): for launch geometry
  bool cooperative_launch = false;  // grids whose blocks are all resident at once, with grid-wide barriers
  bool clusters = false;            // thread-block clusters: CUDA on sm_90+
  bool dependent_launch = false;    // programmatic dependent launch: CUDA on sm_90+, kernels built for it
};

// How many blocks (or clusters) of one block-resident kernel instance the device holds at once, by expert count
// (their shared memory grows with the experts): max_experts[k - 1] is the most experts at which k are resident,
// 0 where not even one fits (or the instance cannot run: e.g. a cluster kernel built without sm_90 code).
struct Residency {
  static constexpr int kLevels = 8;
  std::int32_t max_experts[kLevels] = {};
  int at(std::int32_t experts) const {  // how many are resident with `experts` experts (at most kLevels)
    int k = 0;
    while (k < kLevels && experts <= max_experts[k]) ++k;
    return k;
  }
};

// The current device's capabilities (throws MOE_ERROR_BACKEND where they cannot be asked: no device).
DeviceCaps query_device_caps();

// The current device's multiprocessor count, cached per device (for the launch geometry of the simple kernels).
int device_sm_count();

// caps within a thread's limits (paths.hpp, ScopedForcedCaps): never more than the device has.
inline DeviceCaps within(DeviceCaps caps, const detail::CapsLimits& limits) {
  caps.clusters = caps.clusters && limits.clusters;
  caps.dependent_launch = caps.dependent_launch && limits.dependent_launch;
  caps.cooperative_launch = caps.cooperative_launch && limits.cooperative_launch;
  if (limits.max_sm_count > 0) caps.sm_count = std::min(caps.sm_count, limits.max_sm_count);
  return caps;
}

}  // namespace gpu
}  // namespace moe
