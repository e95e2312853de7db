// Expert parallelism on the GPU, part 1: the layout (which token goes where) and the device-side verdict of the
// NCCL capacity mode. Small kernels over ep_kernels.hpp's bodies, all on the caller's stream: no allocation, no
// host synchronisation (graph-capturable). One thread walks a chunk of kChunk tokens in order, so the order of
// rows is the reference's by construction; the layout is a few microseconds next to any transfer.
#include "backend.hpp"
#include "ep/ep_kernels.hpp"
#include "ep/ops.hpp"
#include "gpu_runtime.hpp"

namespace moe {
namespace ep {
namespace ops {

namespace k = kernels;

namespace {

constexpr int kThreads = 128;
constexpr int kDeriveThreads = 256;

unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void __launch_bounds__(kThreads) layout_count_kernel(k::LayoutView v) {
  gpu::begin_after_prior_grid();
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c < v.num_chunks) k::layout_count_chunk(v, c);
}
__global__ void __launch_bounds__(kThreads) layout_scan_kernel(k::LayoutView v) {
  gpu::begin_after_prior_grid();
  const std::int64_t d = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (d < v.world) k::layout_scan_dest(v, static_cast<std::int32_t>(d));
}
__global__ void layout_finish_kernel(k::LayoutView v) {
  gpu::begin_after_prior_grid();
  if (threadIdx.x == 0) k::layout_finish(v);
}
__global__ void layout_place_kernel(k::LayoutView v) {
  gpu::begin_after_prior_grid();
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c < v.num_chunks) k::layout_place_chunk(v, c);
}

// One block: every (source, destination) pair checked by some thread, the smallest error key kept, then one
// thread writes the offsets. Every rank runs it on the same gathered descriptors: the same verdict everywhere.
__global__ void __launch_bounds__(kDeriveThreads) derive_kernel(const std::int64_t* g, std::int32_t world,
                                                                std::int32_t me, std::int64_t* derived) {
  __shared__ unsigned long long best;
  gpu::begin_after_prior_grid();
  if (threadIdx.x == 0) best = k::kOk;
  __syncthreads();
  std::uint64_t key = k::kOk;
  const std::int64_t pairs = static_cast<std::int64_t>(world) * world;
  for (std::int64_t i = threadIdx.x; i < pairs; i += kDeriveThreads)
    key = k::key_min(key, k::derive_check(g, world, static_cast<std::int32_t>(i / world), static_cast<std::int32_t>(i % world)));
  atomicMin(&best, static_cast<unsigned long long>(key));
  __syncthreads();
  if (threadIdx.x == 0) k::derive_offsets(g, world, me, static_cast<std::uint64_t>(best), derived);
}

}  // namespace

void layout(const k::LayoutView& v, void* stream) {
  const gpu::stream_t s = gpu::to_stream(stream);
  if (v.num_chunks > 0) gpu::launch<layout_count_kernel>("ep layout_count", blocks(v.num_chunks), kThreads, 0, s, v);
  gpu::launch<layout_scan_kernel>("ep layout_scan", blocks(v.world), kThreads, 0, s, v);
  gpu::launch<layout_finish_kernel>("ep layout_finish", 1, 32, 0, s, v);
  if (v.num_chunks > 0) gpu::launch<layout_place_kernel>("ep layout_place", blocks(v.num_chunks), kThreads, 0, s, v);
}

void derive(const std::int64_t* g, std::int32_t world, std::int32_t me, std::int64_t* derived, void* stream) {
  gpu::launch<derive_kernel>("ep derive", 1, kDeriveThreads, 0, gpu::to_stream(stream), g, world, me, derived);
}

}  // namespace ops
}  // namespace ep
}  // namespace moe
