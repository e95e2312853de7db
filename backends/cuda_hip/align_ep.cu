// align_block_size_ep on the GPU, by composition with align_block_size (align.cu), one source for CUDA and HIP:
//   map     a kernel maps each id through expert_map to its local index as int32, or -1 when dropped, into the
//           first region of the workspace (skipped when expert_map is NULL: align then takes the caller's ids,
//           which the identity drops exactly as align does);
//   align   backend::align on those ids with num_local_experts groups and the rest of the workspace: the
//           layout, bit for bit the reference's (stable counting sort by local index, sentinel numel);
//   finish  (only when expert_counts or token_positions is wanted) one kernel: token_positions[i] = -1 for a
//           dropped entry, token_positions[sorted[p]] = p for p < num_tokens_post_pad (read on the device) below
//           the sentinel, and each local expert's count from the layout (a binary search of expert_ids, which
//           ascend, for its first and last block, and of its last block for the sentinel): no atomics, each
//           value written by one thread.
// Where the local shape's align path is warp_tiny (<= 32 ids) or block_per_expert (<= 2048 ids, 32- or 64-bit ids)
// all three are one launch instead (align_ep_one_launch, in align.cu beside the align kernels): 1x8 and 256x8 took
// 3.1x align's time as three (perf/RESULTS.md).
// Every kernel on `stream`, in stream order (each waits for the one before it: gpu_runtime.hpp, "dependent
// launch"); no allocation, no host synchronisation: graph-capturable.
#include <algorithm>
#include <type_traits>

#include "align/common.cuh"
#include "backend.hpp"
#include "dispatch.hpp"
#include "device_caps.hpp"
#include "gpu_runtime.hpp"

namespace moe {
namespace backend {

// align.cu: the whole call in one launch where it can (returns false, launching nothing, where it cannot).
bool align_ep_one_launch(const detail::AlignEpShape& shape, const detail::AlignEpArgs& args, void* stream);

namespace {

constexpr int kEpThreads = 256;
constexpr std::size_t kEpAlign = 256;  // the align workspace keeps the alignment of the caller's
constexpr int kEpBlocksPerSm = 8;      // grid-stride kernels: at most this many blocks per SM

// Bytes of the mapped-ids region at the start of the workspace: numel int32, rounded up to kEpAlign. Reserved
// whether expert_map is NULL or not: the workspace size is a function of the shape alone.
std::size_t mapped_bytes(const detail::AlignEpShape& s) {
  const std::size_t bytes = static_cast<std::size_t>(s.numel) * sizeof(std::int32_t);
  return (bytes + kEpAlign - 1) / kEpAlign * kEpAlign;
}

unsigned grid_for(std::int64_t work) {
  const std::int64_t blocks = (work + kEpThreads - 1) / kEpThreads;
  const std::int64_t cap = std::int64_t{kEpBlocksPerSm} * gpu::device_sm_count();
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(blocks, cap)));
}

// mapped[i] = expert_map[ids[i]] when ids[i] is in [0, num_experts) and that entry in [0, num_local_experts),
// else -1. The map is read only at kept global ids.
template <class IdT>
__global__ void __launch_bounds__(kEpThreads)
    ep_map_kernel(const IdT* __restrict__ ids, std::int32_t n, std::int32_t num_experts,
                  const std::int32_t* __restrict__ expert_map, std::int32_t num_local_experts,
                  std::int32_t* __restrict__ mapped) {
  gpu::wait_prior_grid();
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < static_cast<std::uint32_t>(n); i += stride) {
    const IdT v = ids[i];
    std::int32_t local = -1;
    if (gpu::in_range(v, num_experts)) {
      const std::int32_t m = expert_map[static_cast<std::int64_t>(v)];
      local = gpu::in_range(m, num_local_experts) ? m : -1;
    }
    mapped[i] = local;
  }
  gpu::allow_next_grid();  // after the work: align's first kernel may be scheduled as this one drains
}

// First index in [lo, hi) whose value is >= key, in an ascending array.
__device__ __forceinline__ std::int32_t lower_bound(const std::int32_t* a, std::int32_t lo, std::int32_t hi,
                                                    std::int32_t key) {
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (a[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// ids: the ids align grouped (the mapped ones, limit = num_local_experts; or the caller's, limit = num_experts).
// Work items x < max(numel, max_padded) for the positions, x < num_local_experts for the counts.
template <class IdT>
__global__ void __launch_bounds__(kEpThreads)
    ep_finish_kernel(const IdT* __restrict__ ids, std::int32_t limit, std::int32_t n,
                     const std::int32_t* __restrict__ sorted, const std::int32_t* __restrict__ expert_ids,
                     const std::int32_t* __restrict__ post_pad, std::int32_t block_size,
                     std::int32_t num_local_experts, std::int64_t work, std::int32_t* __restrict__ counts,
                     std::int32_t* __restrict__ positions) {
  gpu::begin_after_prior_grid();
  const std::int32_t total = *post_pad;
  const std::int32_t blocks = total / block_size;  // a multiple of block_size
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t x = blockIdx.x * blockDim.x + threadIdx.x; x < static_cast<std::uint32_t>(work); x += stride) {
    const auto xi = static_cast<std::int32_t>(x);
    if (positions != nullptr) {
      if (xi < n && !gpu::in_range(ids[xi], limit)) positions[xi] = -1;
      if (xi < total) {
        const std::int32_t i = sorted[xi];
        if (i < n) positions[i] = xi;
      }
    }
    if (counts != nullptr && xi < num_local_experts) {
      const std::int32_t first = lower_bound(expert_ids, 0, blocks, xi);
      std::int32_t count = 0;
      if (first < blocks && expert_ids[first] == xi) {
        const std::int32_t last = lower_bound(expert_ids, first, blocks, xi + 1) - 1;
        // its last block: entries below the sentinel, then sentinels; at least one entry
        const std::int32_t* b = sorted + static_cast<std::int64_t>(last) * block_size;
        std::int32_t lo = 1, hi = block_size;  // first sentinel in [lo, hi]
        while (lo < hi) {
          const std::int32_t mid = lo + (hi - lo) / 2;
          if (b[mid] < n) lo = mid + 1;
          else hi = mid;
        }
        count = (last - first) * block_size + lo;
      }
      counts[xi] = count;
    }
  }
}

template <class IdT>
void finish(const detail::AlignEpShape& s, const detail::AlignEpArgs& a, const IdT* ids, std::int32_t limit,
            gpu::stream_t stream) {
  std::int64_t work = 0;
  if (a.token_positions != nullptr) work = std::max(s.numel, s.max_padded);
  if (a.expert_counts != nullptr) work = std::max<std::int64_t>(work, s.num_local_experts);
  gpu::launch<ep_finish_kernel<IdT>>("align_ep finish_kernel", grid_for(work), kEpThreads, 0, stream, ids, limit,
                                     static_cast<std::int32_t>(s.numel), a.sorted_token_ids, a.expert_ids,
                                     a.num_tokens_post_pad, s.block_size, s.num_local_experts, work, a.expert_counts,
                                     a.token_positions);
}

}  // namespace

std::size_t align_ep_workspace_size(const detail::AlignEpShape& shape) {
  if (shape.numel == 0) return align_workspace_size(detail::local_align_shape(shape));
  return mapped_bytes(shape) + align_workspace_size(detail::local_align_shape(shape));
}

void align_ep(const detail::AlignEpShape& s, const detail::AlignEpArgs& a, void* stream_arg) {
  const gpu::stream_t stream = gpu::to_stream(stream_arg);
  const detail::AlignShape local = detail::local_align_shape(s);
  const bool extras = a.expert_counts != nullptr || a.token_positions != nullptr;
  if (s.numel == 0) {  // num_tokens_post_pad = 0 (align's empty call), every count 0
    align(local, detail::AlignArgs{a.topk_ids, a.id_type, a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad,
                                   a.workspace, a.workspace_bytes},
          stream_arg);
    const std::size_t count_bytes = sizeof(std::int32_t) * static_cast<std::size_t>(s.num_local_experts);
    if (a.expert_counts != nullptr)
      gpu::check(gpu::memset_async(a.expert_counts, 0, count_bytes, stream), "memset expert_counts");
    return;
  }
  if (align_ep_one_launch(s, a, stream_arg)) return;
  const std::size_t head = mapped_bytes(s);
  void* rest = static_cast<unsigned char*>(a.workspace) + head;
  const std::size_t rest_bytes = a.workspace_bytes - head;
  if (a.expert_map == nullptr) {  // the identity (num_local_experts == num_experts): align on the caller's ids
    align(local, detail::AlignArgs{a.topk_ids, a.id_type, a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad,
                                   rest, rest_bytes},
          stream_arg);
    if (extras)
      detail::dispatch_id_type(a.id_type, [&](auto tag) {
        finish(s, a, static_cast<const decltype(tag)*>(a.topk_ids), s.num_experts, stream);
      });
    return;
  }
  auto* mapped = static_cast<std::int32_t*>(a.workspace);
  detail::dispatch_id_type(a.id_type, [&](auto tag) {
    using IdT = decltype(tag);
    gpu::launch<ep_map_kernel<IdT>>("align_ep map_kernel", grid_for(s.numel), kEpThreads, 0, stream,
                                    static_cast<const IdT*>(a.topk_ids), static_cast<std::int32_t>(s.numel),
                                    s.num_experts, a.expert_map, s.num_local_experts, mapped);
  });
  align(local, detail::AlignArgs{mapped, MOE_INT32, a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, rest,
                                 rest_bytes},
        stream_arg);
  if (extras) finish(s, a, static_cast<const std::int32_t*>(mapped), s.num_local_experts, stream);
}

}  // namespace backend
}  // namespace moe
