// align_block_size_ep with Kokkos, by composition with align_block_size (align.cpp), as the GPU backend does
// (backends/cuda_hip/align_ep.cu says why each step is what it is):
//   map     parallel_for: each id's local index as int32, or -1 when dropped, into the workspace's first region
//           (skipped when expert_map is NULL: align takes the caller's ids);
//   align   backend::align on those ids with num_local_experts groups and the rest of the workspace;
//   finish  parallel_for (only when expert_counts or token_positions is wanted): positions, -1 for the dropped,
//           and each local expert's count from the layout by binary searches; each value written once.
// One execution space instance, in order; nothing returns to the host.
#include <algorithm>

#include "backend.hpp"
#include "dispatch.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

namespace {

constexpr std::size_t kEpAlign = 256;

std::size_t mapped_bytes(const detail::AlignEpShape& s) {
  const std::size_t bytes = static_cast<std::size_t>(s.numel) * sizeof(std::int32_t);
  return (bytes + kEpAlign - 1) / kEpAlign * kEpAlign;
}

using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>;

// An id is kept when in [0, limit).
template <class IdT>
KOKKOS_INLINE_FUNCTION bool kept(IdT v, std::int32_t limit) {
  const auto w = static_cast<std::int64_t>(v);
  return w >= 0 && w < limit;
}

KOKKOS_INLINE_FUNCTION std::int32_t lower_bound(const std::int32_t* a, std::int32_t lo, std::int32_t hi,
                                                std::int32_t key) {
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (a[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace

template <class IdT>
void map_ids(const detail::AlignEpShape& s, const detail::AlignEpArgs& a, std::int32_t* mapped, const Exec& exec) {
  const IdT* ids = static_cast<const IdT*>(a.topk_ids);
  const std::int32_t* map = a.expert_map;
  const std::int32_t E = s.num_experts, L = s.num_local_experts;
  Kokkos::parallel_for(
      "moe::align_ep::map", Range(exec, 0, s.numel), KOKKOS_LAMBDA(const std::int64_t i) {
        const IdT v = ids[i];
        std::int32_t local = -1;
        if (kept(v, E)) {
          const std::int32_t m = map[static_cast<std::int64_t>(v)];
          local = kept(m, L) ? m : -1;
        }
        mapped[i] = local;
      });
}

// ids: the ids align grouped, kept when in [0, limit).
template <class IdT>
void finish(const detail::AlignEpShape& s, const detail::AlignEpArgs& a, const IdT* ids, std::int32_t limit,
            const Exec& exec) {
  const std::int32_t n = static_cast<std::int32_t>(s.numel), bs = s.block_size, L = s.num_local_experts;
  const std::int32_t* sorted = a.sorted_token_ids;
  const std::int32_t* expert_ids = a.expert_ids;
  const std::int32_t* post_pad = a.num_tokens_post_pad;
  std::int32_t* counts = a.expert_counts;
  std::int32_t* positions = a.token_positions;
  std::int64_t work = 0;
  if (positions != nullptr) work = std::max(s.numel, s.max_padded);
  if (counts != nullptr) work = std::max<std::int64_t>(work, L);
  Kokkos::parallel_for(
      "moe::align_ep::finish", Range(exec, 0, work), KOKKOS_LAMBDA(const std::int64_t x64) {
        const auto x = static_cast<std::int32_t>(x64);
        const std::int32_t total = *post_pad;
        if (positions != nullptr) {
          if (x < n && !kept(ids[x], limit)) positions[x] = -1;
          if (x < total) {
            const std::int32_t i = sorted[x];
            if (i < n) positions[i] = x;
          }
        }
        if (counts != nullptr && x < L) {
          const std::int32_t blocks = total / bs;
          const std::int32_t first = lower_bound(expert_ids, 0, blocks, x);
          std::int32_t count = 0;
          if (first < blocks && expert_ids[first] == x) {
            const std::int32_t last = lower_bound(expert_ids, first, blocks, x + 1) - 1;
            const std::int32_t* b = sorted + static_cast<std::int64_t>(last) * bs;
            std::int32_t lo = 1, hi = bs;  // the first sentinel of the last block is in [lo, hi]
            while (lo < hi) {
              const std::int32_t mid = lo + (hi - lo) / 2;
              if (b[mid] < n) lo = mid + 1;
              else hi = mid;
            }
            count = (last - first) * bs + lo;
          }
          counts[x] = count;
        }
      });
}

}  // namespace kokkos

namespace backend {

std::size_t align_ep_workspace_size(const detail::AlignEpShape& shape) {
  const std::size_t head = shape.numel == 0 ? 0 : kokkos::mapped_bytes(shape);
  return head + align_workspace_size(detail::local_align_shape(shape));
}

void align_ep(const detail::AlignEpShape& s, const detail::AlignEpArgs& a, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  const detail::AlignShape local = detail::local_align_shape(s);
  const bool extras = a.expert_counts != nullptr || a.token_positions != nullptr;
  if (s.numel == 0) {  // num_tokens_post_pad = 0 (align's empty call), every count 0
    align(local, detail::AlignArgs{a.topk_ids, a.id_type, a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad,
                                   a.workspace, a.workspace_bytes},
          stream);
    std::int32_t* counts = a.expert_counts;
    const auto lock = kokkos::lock_for_range_kernels(stream);  // after align's call, which locks itself
    if (counts != nullptr)
      Kokkos::parallel_for(
          "moe::align_ep::zero_counts", Kokkos::RangePolicy<kokkos::Exec>(exec, 0, s.num_local_experts),
          KOKKOS_LAMBDA(const int l) { counts[l] = 0; });
    return;
  }
  const std::size_t head = kokkos::mapped_bytes(s);
  void* rest = static_cast<unsigned char*>(a.workspace) + head;
  const std::size_t rest_bytes = a.workspace_bytes - head;
  if (a.expert_map == nullptr) {  // the identity (num_local_experts == num_experts): align on the caller's ids
    align(local, detail::AlignArgs{a.topk_ids, a.id_type, a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad,
                                   rest, rest_bytes},
          stream);
    const auto lock = kokkos::lock_for_range_kernels(stream);
    if (extras)
      detail::dispatch_id_type(a.id_type, [&](auto tag) {
        kokkos::finish(s, a, static_cast<const decltype(tag)*>(a.topk_ids), s.num_experts, exec);
      });
    return;
  }
  auto* mapped = static_cast<std::int32_t*>(a.workspace);
  {
    const auto lock = kokkos::lock_for_range_kernels(stream);
    detail::dispatch_id_type(a.id_type, [&](auto tag) { kokkos::map_ids<decltype(tag)>(s, a, mapped, exec); });
  }
  align(local, detail::AlignArgs{mapped, MOE_INT32, a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, rest,
                                 rest_bytes},
        stream);
  const auto lock = kokkos::lock_for_range_kernels(stream);
  if (extras) kokkos::finish(s, a, static_cast<const std::int32_t*>(mapped), s.num_local_experts, exec);
}

}  // namespace backend
}  // namespace moe
