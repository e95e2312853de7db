// The CUDA/HIP backend's memory helpers and availability check. Written once; gpu_runtime.hpp picks CUDA or HIP.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "backend.hpp"
#include "gpu_runtime.hpp"

namespace moe {
namespace gpu {

int device_warp_size() {
  static int cached = 0;
  static std::once_flag once;
  std::call_once(once, [] {
    int dev = 0, ws = 0;
    if (current_device(&dev) == kSuccess && warp_size_attribute(&ws, dev) == kSuccess) cached = ws;
    (void)get_last_error();
  });
  if (cached != 32 && cached != 64)
    detail::throw_backend(std::string("cannot query the device's warp size (") + kRuntimeName + " device missing?)");
  return cached;
}

int device_sm_count() {
  static int cached = 0;
  static std::once_flag once;
  std::call_once(once, [] {
    int dev = 0, n = 0;
    if (current_device(&dev) == kSuccess && sm_count_attribute(&n, dev) == kSuccess) cached = n;
    (void)get_last_error();
  });
  if (cached <= 0)
    detail::throw_backend(std::string("cannot query the device's multiprocessor count (") + kRuntimeName +
                          " device missing?)");
  return cached;
}

bool launch_overlap_enabled(const void* kernel) {
#if defined(MOE_GPU_HIP)
  (void)kernel;
  return false;
#else
  const char* env = std::getenv("MOE_ROUTING_LAUNCH_OVERLAP");  // "0": plain launches (A/B, debugging)
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  int dev = 0, major = 0, ptx = 0;
  const bool known = current_device(&dev) == kSuccess &&
                     cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == kSuccess &&
                     ptx_version(&ptx, kernel) == kSuccess;
  (void)get_last_error();
  return known && major >= 9 && ptx >= 90;
#endif
}

#if !defined(MOE_GPU_HIP)
int max_active_clusters(const void* kernel, unsigned cluster, unsigned block, std::size_t smem) {
  // the answer is fixed per device, kernel and configuration: asked of the driver once, not on every call
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, unsigned, unsigned, std::size_t>, int> known;
  int dev = 0, major = 0, ptx = 0, clusters = 0;
  if (current_device(&dev) != kSuccess) {
    (void)get_last_error();
    return 0;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(dev, kernel, cluster, block, smem);
  const auto hit = known.find(key);
  if (hit != known.end()) return hit->second;
  const bool able = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == kSuccess && major >= 9 &&
                    ptx_version(&ptx, kernel) == kSuccess && ptx >= 90;
  if (able) {
    cudaLaunchAttribute attr[3];
    const cudaLaunchConfig_t cfg = launch_config(cluster, block, smem, nullptr, attr, false, cluster, false);
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != kSuccess) clusters = 0;
  }
  (void)get_last_error();  // a refused query is an answer here, not an error of a later call
  known.emplace(key, clusters);
  return clusters;
}
#endif

}  // namespace gpu

namespace {
__global__ void probe_kernel(int* p) {
  if (p != nullptr) *p = 1;
}
}  // namespace

namespace backend {

const char* name() noexcept {
#if defined(MOE_GPU_HIP)
  return "hip";
#else
  return "cuda";
#endif
}

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
