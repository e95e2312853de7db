// The one place where CUDA and HIP differ for this backend: a small namespaced layer (moe::gpu) over the
// runtime calls and warp intrinsics the library uses, and the capability constants that say what each has.
// Kernels, host glue and the path policy are written once against it; no other file of the backend tests a
// vendor macro. (Streams, events and graphs, which only tests and the benchmark create: tests/gpu_test_runtime.hpp.)
// Runtime API:  MOE_GPU_HIP defined -> hip* names from hip/hip_runtime.h: ROCm's on AMD, or for the
//               HIP-on-NVIDIA build our own mapping onto CUDA (backends/cuda_hip/hip_on_nvidia/);
//               otherwise the CUDA runtime.
// Capabilities: kHasClusters, kHasDependentLaunch (host: the runtime has the launch at all; whether the device
//               does is asked at run time, once: align/caps.cuh); MOE_GPU_HAS_MATCH_ANY, MOE_GPU_HAS_REDUX_ADD,
//               MOE_GPU_CLUSTER_CODE (device pass: the intrinsic exists for the target being compiled).
// Device code:  by platform: AMD intrinsics (64-bit ballots, wavefront fences) or NVIDIA's.
// Warp size: a compile-time DEVICE value (kWarpSize: 32 on NVIDIA, the wavefront size on AMD) for kernels,
// and a run-time HOST query (DeviceCaps::warp_size, device_caps.hpp) for launch geometry. Never mixed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#if defined(MOE_GPU_HIP)
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>
#else
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#endif

#include "contract.hpp"

namespace moe {
namespace gpu {

// ---- capability constants --------------------------------------------------------------------------------
#if defined(MOE_GPU_HIP)
constexpr bool kHasClusters = false;         // thread-block clusters: CUDA only
constexpr bool kHasDependentLaunch = false;  // programmatic dependent launch: CUDA only
constexpr const char* kBackendName = "hip";
#else
constexpr bool kHasClusters = true;          // where the device is sm_90+ and the kernel built for it
constexpr bool kHasDependentLaunch = true;   // likewise
constexpr const char* kBackendName = "cuda";
#endif

// ---- host: runtime calls ---------------------------------------------------------------------------------
#if defined(MOE_GPU_HIP)
using error_t = hipError_t;
using stream_t = hipStream_t;
constexpr error_t kSuccess = hipSuccess;
constexpr const char* kRuntimeName = "HIP";
inline const char* error_string(error_t e) { return hipGetErrorString(e); }
inline error_t get_last_error() { return hipGetLastError(); }
inline error_t device_count(int* n) { return hipGetDeviceCount(n); }
inline error_t current_device(int* d) { return hipGetDevice(d); }
inline error_t warp_size_attribute(int* v, int dev) {
  return hipDeviceGetAttribute(v, hipDeviceAttributeWarpSize, dev);
}
inline error_t sm_count_attribute(int* v, int dev) {
  return hipDeviceGetAttribute(v, hipDeviceAttributeMultiprocessorCount, dev);
}
inline error_t cooperative_launch_attribute(int* v, int dev) {
  return hipDeviceGetAttribute(v, hipDeviceAttributeCooperativeLaunch, dev);
}
// NVIDIA's compute capability and a kernel's PTX version gate CUDA-only launches: none on HIP.
inline error_t compute_capability_major(int* v, int) {
  *v = 0;
  return kSuccess;
}
inline error_t ptx_version(int* v, const void*) {
  *v = 0;
  return kSuccess;
}
inline error_t malloc(void** p, std::size_t n) { return hipMalloc(p, n); }
inline error_t free(void* p) { return hipFree(p); }
inline error_t copy_to_device(void* d, const void* s, std::size_t n) { return hipMemcpy(d, s, n, hipMemcpyHostToDevice); }
inline error_t copy_to_host(void* d, const void* s, std::size_t n) { return hipMemcpy(d, s, n, hipMemcpyDeviceToHost); }
inline error_t memset_async(void* p, int v, std::size_t n, stream_t s) { return hipMemsetAsync(p, v, n, s); }
inline error_t stream_synchronize(stream_t s) { return hipStreamSynchronize(s); }
template <class Kernel>
error_t max_active_blocks(int* n, Kernel kernel, int threads, std::size_t smem) {
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void*>(kernel), threads, smem);
}
inline error_t max_active_clusters(int* n, const void*, unsigned, unsigned, std::size_t) {  // no clusters
  *n = 0;
  return kSuccess;
}
#else
using error_t = cudaError_t;
using stream_t = cudaStream_t;
constexpr error_t kSuccess = cudaSuccess;
constexpr const char* kRuntimeName = "CUDA";
inline const char* error_string(error_t e) { return cudaGetErrorString(e); }
inline error_t get_last_error() { return cudaGetLastError(); }
inline error_t device_count(int* n) { return cudaGetDeviceCount(n); }
inline error_t current_device(int* d) { return cudaGetDevice(d); }
inline error_t warp_size_attribute(int* v, int dev) { return cudaDeviceGetAttribute(v, cudaDevAttrWarpSize, dev); }
inline error_t sm_count_attribute(int* v, int dev) { return cudaDeviceGetAttribute(v, cudaDevAttrMultiProcessorCount, dev); }
inline error_t cooperative_launch_attribute(int* v, int dev) {
  return cudaDeviceGetAttribute(v, cudaDevAttrCooperativeLaunch, dev);
}
inline error_t compute_capability_major(int* v, int dev) {
  return cudaDeviceGetAttribute(v, cudaDevAttrComputeCapabilityMajor, dev);
}
inline error_t ptx_version(int* v, const void* kernel) {
  cudaFuncAttributes a{};
  const error_t e = cudaFuncGetAttributes(&a, kernel);
  if (e == kSuccess) *v = a.ptxVersion;
  return e;
}
inline error_t malloc(void** p, std::size_t n) { return cudaMalloc(p, n); }
inline error_t free(void* p) { return cudaFree(p); }
inline error_t copy_to_device(void* d, const void* s, std::size_t n) { return cudaMemcpy(d, s, n, cudaMemcpyHostToDevice); }
inline error_t copy_to_host(void* d, const void* s, std::size_t n) { return cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost); }
inline error_t memset_async(void* p, int v, std::size_t n, stream_t s) { return cudaMemsetAsync(p, v, n, s); }
inline error_t stream_synchronize(stream_t s) { return cudaStreamSynchronize(s); }
template <class Kernel>
error_t max_active_blocks(int* n, Kernel kernel, int threads, std::size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void*>(kernel), threads, smem);
}
// Launch with the attributes of this backend's kernels: cooperative (all blocks resident, for sync_grid), a
// cluster size (> 0: thread-block clusters of that many blocks) and/or programmatic stream serialisation (see
// "dependent launch" below). args: pointers to the arguments.
inline cudaLaunchConfig_t launch_config(unsigned grid, unsigned block, std::size_t smem, stream_t s,
                                        cudaLaunchAttribute (&attr)[3], bool cooperative, unsigned cluster, bool overlap) {
  unsigned n = 0;
  if (cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  if (cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  if (overlap) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cfg;
}
inline error_t launch_ex(const void* kernel, unsigned grid, unsigned block, void** args, std::size_t smem, stream_t s,
                         bool cooperative, unsigned cluster, bool overlap) {
  cudaLaunchAttribute attr[3];
  const cudaLaunchConfig_t cfg = launch_config(grid, block, smem, s, attr, cooperative, cluster, overlap);
  return cudaLaunchKernelExC(&cfg, kernel, args);
}
// How many clusters of `cluster` (<= 8) blocks of this kernel the device holds at once (the device must be
// sm_90+ and the kernel built for it: ask compute_capability_major and ptx_version first).
inline error_t max_active_clusters(int* n, const void* kernel, unsigned cluster, unsigned block, std::size_t smem) {
  cudaLaunchAttribute attr[3];
  const cudaLaunchConfig_t cfg = launch_config(cluster, block, smem, nullptr, attr, false, cluster, false);
  return cudaOccupancyMaxActiveClusters(n, kernel, &cfg);
}
#endif

// Throws moe::Error(MOE_ERROR_BACKEND) naming what failed.
inline void check(error_t e, const char* what) {
  if (e != kSuccess)
    detail::throw_backend(std::string(kRuntimeName) + " error in " + what + ": " + error_string(e));
}

// ---- dependent launch ------------------------------------------------------------------------------------
// On sm_90+ with CUDA, every kernel of this backend is launched with programmatic stream serialisation: it may
// be scheduled while the kernel before it in the stream is still running, and (nearly) its first statement,
// begin_after_prior_grid(), waits until that kernel has completed and its memory is visible. No global memory
// is read or written before that wait (at most a block's own shared memory: block_per_expert clears it first),
// so stream order holds exactly as for a plain launch; what overlaps is the launch latency and block scheduling.
// A kernel compiled for an older PTX target (a JIT-run binary without sm_90 code) lacks the wait, so the
// attribute is only set where the kernel's PTX version is >= 9.0. MOE_ROUTING_LAUNCH_OVERLAP=0 turns it off.
// HIP has no such launch: plain launches there.
bool dependent_launch_allowed();                  // kHasDependentLaunch, and not turned off by the environment
bool launch_overlap_enabled(const void* kernel);  // that, and the current device and this kernel can: cached

#if defined(__CUDACC__) || defined(__HIPCC__)
// How a kernel is launched: grid, block and dynamic shared memory, and the attributes of this backend's
// kernels: thread-block clusters of `cluster` blocks (> 0: kHasClusters only, and where the device holds them),
// cooperative (all blocks resident at once, for kernels that call sync_grid()), overlap (programmatic
// dependent launch where the kernel can: launch_overlap_enabled).
struct LaunchShape {
  unsigned grid = 1, block = 1;
  std::size_t smem = 0;
  unsigned cluster = 0;
  bool cooperative = false;
  bool overlap = true;
};

// One launch; the arguments are converted to the kernel's parameter types first (the void** form needs them
// exact).
template <class... Params, class... Args>
error_t launch_with(void (*kernel)(Params...), unsigned grid, unsigned block, std::size_t smem, stream_t s,
                    bool cooperative, unsigned cluster, bool overlap, Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
  std::tuple<Params...> held(static_cast<Params>(args)...);
  return std::apply(
      [&](auto&... a) -> error_t {
        void* ptrs[] = {static_cast<void*>(&a)..., nullptr};
        const void* k = reinterpret_cast<const void*>(kernel);
#if defined(MOE_GPU_HIP)
        (void)overlap, (void)cluster;
        if (cooperative) return hipLaunchCooperativeKernel(k, dim3(grid), dim3(block), ptrs, static_cast<unsigned>(smem), s);
        kernel<<<grid, block, smem, s>>>(a...);
        return get_last_error();
#else
        return launch_ex(k, grid, block, ptrs, smem, s, cooperative, cluster, overlap);
#endif
      },
      held);
}

// Kernel<<<shape>>>(args...); throws on a launch error (configuration errors only: no host synchronisation,
// legal under graph capture).
template <auto Kernel, class... Args>
void launch(const char* what, const LaunchShape& l, stream_t s, Args... args) {
  static const bool able = launch_overlap_enabled(reinterpret_cast<const void*>(Kernel));
  check(launch_with(Kernel, l.grid, l.block, l.smem, s, l.cooperative, l.cluster, able && l.overlap, args...), what);
}
// A plain grid, with programmatic serialisation where enabled.
template <auto Kernel, class... Args>
void launch(const char* what, unsigned grid, unsigned block, std::size_t smem, stream_t s, Args... args) {
  launch<Kernel>(what, LaunchShape{grid, block, smem}, s, args...);
}
#endif

inline stream_t to_stream(void* s) { return static_cast<stream_t>(s); }

// ---- device: warp intrinsics -----------------------------------------------------------------------------
#if defined(__HIP_PLATFORM_AMD__) && defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;  // device pass: 64 on CDNA (gfx90a, gfx94x), 32 on RDNA
#elif defined(__HIP_PLATFORM_AMD__)
constexpr int kWarpSize = 64;  // host pass of an AMD build: kernels are not executed here
#else
constexpr int kWarpSize = 32;
#endif
using lane_mask_t = std::conditional_t<kWarpSize == 64, std::uint64_t, std::uint32_t>;

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MOE_DEVICE __device__ __forceinline__

MOE_DEVICE int lane_id() { return static_cast<int>(threadIdx.x) & (kWarpSize - 1); }
MOE_DEVICE int warp_id() { return static_cast<int>(threadIdx.x) / kWarpSize; }
MOE_DEVICE int warps_per_block() { return static_cast<int>(blockDim.x) / kWarpSize; }
MOE_DEVICE lane_mask_t lanes_below() { return (lane_mask_t{1} << lane_id()) - 1; }

MOE_DEVICE int popc(std::uint32_t m) { return __popc(m); }
MOE_DEVICE int popc(std::uint64_t m) { return __popcll(m); }
MOE_DEVICE int lowest_lane(std::uint32_t m) { return __ffs(m) - 1; }
MOE_DEVICE int lowest_lane(std::uint64_t m) { return __ffsll(static_cast<unsigned long long>(m)) - 1; }

#if defined(__HIP_PLATFORM_AMD__)
MOE_DEVICE lane_mask_t ballot(bool p) { return static_cast<lane_mask_t>(__ballot(p)); }
template <class T> MOE_DEVICE T shfl_up(T v, int delta) { return __shfl_up(v, static_cast<unsigned>(delta)); }
template <class T> MOE_DEVICE T shfl(T v, int src) { return __shfl(v, src); }
template <class T> MOE_DEVICE T shfl_xor(T v, int mask) { return __shfl_xor(v, mask); }
// A wavefront runs in lockstep; what __syncwarp adds is ordering of its lanes' memory accesses, which on
// AMD is a wavefront-scope fence (ROCm 5.2 has no __syncwarp).
MOE_DEVICE void sync_warp() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
MOE_DEVICE void device_trap() { __builtin_trap(); }
#define MOE_GPU_HAS_MATCH_ANY 0  // no match.any: ballots (primitives.cuh)
#else  // NVIDIA: CUDA, or HIP on NVIDIA (compiled by nvcc): the same device intrinsics
MOE_DEVICE lane_mask_t ballot(bool p) { return __ballot_sync(0xFFFFFFFFu, p); }
template <class T> MOE_DEVICE T shfl_up(T v, int delta) { return __shfl_up_sync(0xFFFFFFFFu, v, delta); }
template <class T> MOE_DEVICE T shfl(T v, int src) { return __shfl_sync(0xFFFFFFFFu, v, src); }
template <class T> MOE_DEVICE T shfl_xor(T v, int mask) { return __shfl_xor_sync(0xFFFFFFFFu, v, mask); }
MOE_DEVICE void sync_warp() { __syncwarp(); }
MOE_DEVICE void device_trap() { __trap(); }
#define MOE_GPU_HAS_MATCH_ANY 1  // the lanes holding the same value as mine, in one instruction
MOE_DEVICE lane_mask_t match_any(int v) { return __match_any_sync(0xFFFFFFFFu, v); }
#endif

#if !defined(__HIP_PLATFORM_AMD__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MOE_GPU_HAS_REDUX_ADD 1  // NVIDIA sm_80+: a warp's sum in one instruction
MOE_DEVICE std::int32_t reduce_add(std::int32_t v) { return __reduce_add_sync(0xFFFFFFFFu, v); }
#else
#define MOE_GPU_HAS_REDUX_ADD 0
#endif

// Thread-block clusters, device side: code for them exists in the CUDA sm_90+ device pass only (elsewhere a
// cluster kernel's body is a trap, and the host never launches it: align/caps.cuh).
#if !defined(MOE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MOE_GPU_CLUSTER_CODE 1
// Arrive at the cluster barrier without release semantics (cooperative_groups' barrier_arrive orders every
// earlier memory access of the block first); the barrier's wait (barrier_wait) keeps its acquire.
MOE_DEVICE void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
#else
#define MOE_GPU_CLUSTER_CODE 0
#endif

// Barrier of the whole grid, with its memory made visible. Only in kernels launched cooperative.
MOE_DEVICE void sync_grid() { cooperative_groups::this_grid().sync(); }

// Dependent launch, device side (see "dependent launch"); no-ops for plain launches, on HIP, and below sm_90.
// wait_prior_grid: until the kernel before this one in the stream has completed, its memory visible.
// allow_next_grid: the kernel after this one may be scheduled once every block of this one has called it
// (or exited); it then waits in its turn. begin_after_prior_grid: both, the first statement of most kernels
// (warp_tiny allows before it waits; block_per_expert clears its shared memory and moe_sum does its index
// arithmetic first: see there). The three kernels of three_launches and two_digit_radix (count, row_scan,
// scatter) only wait (align_policy.hpp, [early-allow]).
MOE_DEVICE void wait_prior_grid() {
#if !defined(MOE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
MOE_DEVICE void allow_next_grid() {
#if !defined(MOE_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
MOE_DEVICE void begin_after_prior_grid() {
  wait_prior_grid();
  allow_next_grid();
}
#endif  // device compilers

}  // namespace gpu
}  // namespace moe
