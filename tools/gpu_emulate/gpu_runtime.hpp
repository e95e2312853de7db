// A CPU stand-in for backends/cuda_hip/gpu_runtime.hpp, for tools/gpu_emulate only: runs the CUDA/HIP kernel
// source of an operation on the host, one std::thread per GPU thread, the warp collectives (shuffles, ballots)
// and __syncthreads as barriers. It checks the kernels' logic (indexing, lane ownership, the order of every
// operation, the warp-uniform control flow that shuffles need: a divergent collective hangs here) on a machine
// without a GPU. It says nothing about speed, memory ordering beyond barriers, or compiler behaviour on devices.
// Blocks run one after the other (so `__shared__` can be a static); launches are capped at a few blocks, which the
// kernels' grid-stride loops must absorb.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "contract.hpp"

using std::max;
using std::min;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct EmuDim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local EmuDim3 threadIdx, blockIdx;
inline EmuDim3 gridDim, blockDim;

namespace moe {
namespace gpu {

#ifndef MOE_EMULATE_WARP
#define MOE_EMULATE_WARP 32  // 64: AMD's CDNA wavefronts (run.sh builds both)
#endif
constexpr int kWarpSize = MOE_EMULATE_WARP;
using lane_mask_t = std::conditional_t<kWarpSize == 64, std::uint64_t, std::uint32_t>;
using stream_t = void*;
#define MOE_DEVICE inline

struct Emulation {
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::uint64_t> slots;
  std::vector<std::int32_t> dynamic_smem;  // the launch's dynamic shared memory (run.sh rewrites `extern __shared__`)
};
inline Emulation* g_emulation = nullptr;
inline unsigned g_max_blocks = 3;  // blocks actually run per launch

inline stream_t to_stream(void* s) { return s; }
inline std::int32_t* dynamic_smem() { return g_emulation->dynamic_smem.data(); }
inline int lane_id() { return static_cast<int>(threadIdx.x) % kWarpSize; }
inline int warp_id() { return static_cast<int>(threadIdx.x) / kWarpSize; }
inline int warps_per_block() { return static_cast<int>(blockDim.x) / kWarpSize; }
inline int lowest_lane(std::uint32_t m) { return __builtin_ffs(static_cast<int>(m)) - 1; }
inline int lowest_lane(std::uint64_t m) { return __builtin_ffsll(static_cast<long long>(m)) - 1; }
inline lane_mask_t lanes_below() { return (lane_mask_t{1} << lane_id()) - 1; }
inline int popc(std::uint32_t m) { return __builtin_popcount(m); }
inline int popc(std::uint64_t m) { return __builtin_popcountll(m); }
inline void begin_after_prior_grid() {}
inline void wait_prior_grid() {}
inline void allow_next_grid() {}
#define MOE_GPU_HAS_MATCH_ANY 0  // the kernels' ballot forms (as on AMD)
#define MOE_GPU_HAS_REDUX_ADD 0

// Every lane of the warp publishes `v`, then reads lane `src` (modulo the warp, as __shfl_sync does).
template <class T>
T exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "one slot per lane");
  Emulation& e = *g_emulation;
  const int w = warp_id();
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  e.slots[threadIdx.x] = bits;
  e.warps[static_cast<std::size_t>(w)]->arrive_and_wait();
  const std::uint64_t o = e.slots[static_cast<std::size_t>(w * kWarpSize + (src & (kWarpSize - 1)))];
  e.warps[static_cast<std::size_t>(w)]->arrive_and_wait();
  T r;
  std::memcpy(&r, &o, sizeof r);
  return r;
}
template <class T> T shfl(T v, int src) { return exchange(v, src); }
template <class T> T shfl_xor(T v, int mask) { return exchange(v, lane_id() ^ mask); }
template <class T> T shfl_up(T v, int delta) {  // a lane below delta keeps its own value
  const T up = exchange(v, lane_id() - delta);
  return lane_id() >= delta ? up : v;
}
inline void sync_warp() { g_emulation->warps[static_cast<std::size_t>(warp_id())]->arrive_and_wait(); }
inline lane_mask_t ballot(bool p) {
  lane_mask_t m = 0;
  for (int l = 0; l < kWarpSize; ++l)
    if (exchange(static_cast<std::uint32_t>(p), l)) m |= lane_mask_t{1} << l;
  return m;
}

template <auto Kernel, class... Args>
void launch(const char*, unsigned grid, unsigned block, std::size_t smem_bytes, stream_t, Args... args) {
  const unsigned blocks = std::min(grid, g_max_blocks);
  gridDim.x = blocks;  // the kernels' grid-stride loops cover the rest
  blockDim.x = block;
  for (unsigned b = 0; b < blocks; ++b) {
    Emulation e;
    e.block = std::make_unique<std::barrier<>>(static_cast<std::ptrdiff_t>(block));
    for (unsigned w = 0; w < block / kWarpSize; ++w) e.warps.push_back(std::make_unique<std::barrier<>>(kWarpSize));
    e.slots.assign(block, 0);
    e.dynamic_smem.assign((smem_bytes + 3) / 4, 0x5A5A5A5A);  // garbage, as on a device
    g_emulation = &e;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([=] {
        threadIdx.x = t;
        blockIdx.x = b;
        Kernel(args...);
      });
    for (auto& th : threads) th.join();
    g_emulation = nullptr;
  }
}

}  // namespace gpu
}  // namespace moe

inline void __syncthreads() { moe::gpu::g_emulation->block->arrive_and_wait(); }
inline int __syncthreads_or(int p) {  // a flag set before the first barrier, read between it and the second
  static std::atomic<int> flag{0};
  auto& block = *moe::gpu::g_emulation->block;
  if (p) flag.store(1);
  block.arrive_and_wait();
  const int any = flag.load();
  block.arrive_and_wait();
  if (threadIdx.x == 0) flag.store(0);
  block.arrive_and_wait();  // cleared before any thread's next call sets it
  return any;
}
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(static_cast<unsigned>(v)); }
struct int4 {
  int x, y, z, w;
};
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
template <class T> T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
