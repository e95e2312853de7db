// The CUDA/HIP backend's memory helpers and availability check. Written once; gpu_runtime.hpp picks CUDA or HIP.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend.hpp"
#include "device_caps.hpp"
#include "gpu_runtime.hpp"

namespace moe {
namespace gpu {

DeviceCaps query_device_caps() {
  int dev = 0, warp = 0, sms = 0, cooperative = 0, major = 0;
  const bool known = current_device(&dev) == kSuccess && warp_size_attribute(&warp, dev) == kSuccess &&
                     sm_count_attribute(&sms, dev) == kSuccess &&
                     cooperative_launch_attribute(&cooperative, dev) == kSuccess &&
                     compute_capability_major(&major, dev) == kSuccess;
  (void)get_last_error();
  if (!known || (warp != 32 && warp != 64) || sms <= 0)
    detail::throw_backend(std::string("cannot query the device's warp size and multiprocessors (") + kRuntimeName +
                          " device missing?)");
  DeviceCaps c;
  c.sm_count = sms;
  c.warp_size = warp;
  c.cooperative_launch = cooperative != 0;
  c.clusters = kHasClusters && major >= 9;
  c.dependent_launch = dependent_launch_allowed() && major >= 9;
  return c;
}

int device_sm_count() {
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices] = {};
  int dev = 0;
  const bool known = current_device(&dev) == kSuccess && dev >= 0 && dev < kDevices;
  (void)get_last_error();
  if (known && cached[dev].load(std::memory_order_relaxed) > 0) return cached[dev].load(std::memory_order_relaxed);
  const int n = query_device_caps().sm_count;
  if (known) cached[dev].store(n, std::memory_order_relaxed);
  return n;
}

bool dependent_launch_allowed() {
  const char* env = std::getenv("MOE_ROUTING_LAUNCH_OVERLAP");  // "0": plain launches (A/B, debugging)
  return kHasDependentLaunch && !(env != nullptr && std::strcmp(env, "0") == 0);
}

bool launch_overlap_enabled(const void* kernel) {
  if (!dependent_launch_allowed()) return false;
  int dev = 0, major = 0, ptx = 0;
  const bool known = current_device(&dev) == kSuccess && compute_capability_major(&major, dev) == kSuccess &&
                     ptx_version(&ptx, kernel) == kSuccess;
  (void)get_last_error();
  return known && major >= 9 && ptx >= 90;
}

}  // namespace gpu

namespace {
__global__ void probe_kernel(int* p) {
  if (p != nullptr) *p = 1;
}
}  // namespace

namespace backend {

const char* name() noexcept { return gpu::kBackendName; }

std::string unavailable_reason() {
  int n = 0;
  const gpu::error_t e = gpu::device_count(&n);
  if (e != gpu::kSuccess) {
    (void)gpu::get_last_error();
    return std::string("no usable GPU (") + gpu::kRuntimeName + ": " + gpu::error_string(e) + ")";
  }
  if (n == 0) return "no GPU visible";
  // A kernel image for this device must exist (e.g. a build for sm_90 on an older GPU has none).
  const gpu::error_t k = gpu::get_last_error();
  if (k != gpu::kSuccess) return std::string("runtime error: ") + gpu::error_string(k);
  probe_kernel<<<1, 32>>>(nullptr);
  const gpu::error_t launch = gpu::get_last_error();
  if (launch != gpu::kSuccess)
    return std::string("kernels do not run on this GPU (") + gpu::error_string(launch) +
           "): rebuild with its architecture in MOE_CUDA_ARCHITECTURES / MOE_HIP_ARCHITECTURES";
  gpu::check(gpu::stream_synchronize(nullptr), "availability check");
  return {};
}

namespace {
// A failed allocation or copy also sets the runtime's last error, which a later launch check of another call
// would read as its own (HIP launches report through it): cleared here, the failure is this call's alone.
void check_own(gpu::error_t e, const char* what) {
  if (e != gpu::kSuccess) (void)gpu::get_last_error();
  gpu::check(e, what);
}
}  // namespace

void* allocate(std::size_t bytes) {
  void* p = nullptr;
  check_own(gpu::malloc(&p, bytes), "moe_malloc");  // e.g. out of memory: MOE_ERROR_BACKEND, later calls unaffected
  return p;
}
void deallocate(void* ptr) noexcept {
  (void)gpu::free(ptr);
  (void)gpu::get_last_error();
}
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  check_own(gpu::copy_to_device(dst, src, bytes), "moe_memcpy_to_device");
  // From pageable memory the copy may return before the data lands; the contract says it has landed
  // (work on any stream may use it next), so wait for it.
  gpu::check(gpu::stream_synchronize(nullptr), "moe_memcpy_to_device");
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  check_own(gpu::copy_to_host(dst, src, bytes), "moe_memcpy_to_host");
}
void synchronize(void* stream) { gpu::check(gpu::stream_synchronize(gpu::to_stream(stream)), "moe_synchronize"); }

}  // namespace backend
}  // namespace moe
