// align_block_size on the GPU: the launches of the path the policy picks (align_policy.hpp), on the caller's
// stream. No allocation, no host synchronisation: graph-capturable. Written once for CUDA and HIP.
#include <type_traits>

#include "align/block_per_expert.cuh"
#include "align/block_sort.cuh"
#include "align/caps.cuh"
#include "align/cluster.cuh"
#include "align/cooperative_grid.cuh"
#include "align/three_launches.cuh"
#include "align/two_digit_radix.cuh"
#include "align/warp_tiny.cuh"
#include "align_policy.hpp"
#include "align_workspace.hpp"
#include "backend.hpp"
#include "dispatch.hpp"
#include "paths.hpp"

namespace moe {
namespace backend {

std::size_t align_workspace_size(const detail::AlignShape& shape) { return gpu::align_workspace(shape).bytes; }

namespace {

using gpu::AlignCaps;
using gpu::AlignOut;
using gpu::AlignPath;
using gpu::AlignPolicy;
using gpu::AlignWorkspace;
using gpu::Digit;
using gpu::LaunchShape;

template <class T>
T* region(void* workspace, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<unsigned char*>(workspace) + offset);
}

std::size_t ints(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(std::int32_t); }

// The current device's caps for ids of type IdT (cached), within this thread's limits (paths.hpp).
template <class IdT>
AlignCaps caps_for_this_call() {
  AlignCaps caps = gpu::align_caps<IdT>();
  if (const detail::CapsLimits* limits = detail::forced_caps()) caps.device = gpu::within(caps.device, *limits);
  return caps;
}

std::vector<std::string> path_names(const detail::AlignShape& shape, const AlignCaps& caps) {
  std::vector<std::string> names;
  for (AlignPath p : gpu::align_paths(shape, caps)) names.emplace_back(gpu::path_name(p));
  return names;
}

// The policy's choice, or the forced path (paths.hpp) where it applies.
AlignPolicy policy_for_this_call(const detail::AlignShape& shape, const AlignCaps& caps) {
  if (detail::forced_path(detail::kAlignOperation) == nullptr) return gpu::select_align_policy(shape, caps);
  const std::string name = detail::take_path(
      detail::kAlignOperation, path_names(shape, caps),
      "numel " + std::to_string(shape.numel) + ", num_experts " + std::to_string(shape.num_experts));
  for (AlignPath p : gpu::kAllAlignPaths)
    if (name == gpu::path_name(p)) return gpu::align_policy_for(p, shape, caps);
  detail::throw_backend("align_block_size: unknown path " + name);
}

// The three multi-block phases (rank, scan, scatter) over the policy's warp segments, on `grid` blocks.
// sentinels: the count kernel also writes them (a pass before the one that places ids in sorted_token_ids).
template <bool kFill, class Src, class Sink>
void counting_pass(const AlignPolicy& p, const gpu::DeviceCaps& d, unsigned grid, const Src& src, bool sentinels,
                   int buckets, std::int32_t pad, std::int32_t* table, std::int32_t* totals, std::uint16_t* rank,
                   const Sink& sink, const AlignOut& out, std::int32_t* kept, std::int32_t* expert_hist,
                   gpu::stream_t stream) {
  const int warps = gpu::kThreads / d.warp_size;
  const std::size_t rows = ints(std::int64_t{warps} * (buckets + 1));
  const unsigned block = gpu::kThreads;
  gpu::launch<gpu::count_kernel<Src>>("count_kernel", LaunchShape{grid, block, rows, 0, false, p.overlap}, stream, src,
                                      p.segment, p.segments, buckets, table, rank, expert_hist, p.digits.key_bits,
                                      sentinels, out);
  gpu::launch<gpu::row_scan_kernel>("row_scan_kernel",
                                    LaunchShape{static_cast<unsigned>(buckets), block, 0, 0, false, p.overlap}, stream,
                                    table, p.segments, totals);
  const std::size_t smem = rows + ints(std::int64_t{buckets} + std::int64_t{gpu::kBucketScanRows} * warps);
  gpu::launch<gpu::scatter_kernel<kFill, Src, Sink>>("scatter_kernel",
                                                     LaunchShape{grid, block, smem, 0, false, p.overlap}, stream, src,
                                                     p.segment, p.segments, buckets, pad, table, totals, rank, sink,
                                                     out, kept);
}

// f(std::integral_constant<int, P>), and its result, for the smallest power of two P >= steps (steps <= kMax, a
// power of two; P == steps where steps is one): kernels that hold `steps` warp steps of ids in registers are
// instantiated for P steps only, and block_per_expert for its power-of-two experts per block. One body for 16
// steps that skips the unused ones still fetches their instructions (align_policy.hpp, [code-size]).
template <int kMax, class F>
auto with_steps(int steps, F&& f) {
  if constexpr (kMax > 1) {
    if (steps <= kMax / 2) return with_steps<kMax / 2>(steps, f);
  }
  return f(std::integral_constant<int, kMax>{});
}

// f(std::bool_constant<flag>), and its result.
template <class F>
auto with_flag(bool flag, F&& f) {
  return flag ? f(std::true_type{}) : f(std::false_type{});
}

// The launches of warp_tiny and block_per_expert, for align (NoExtras) and align_ep's one launch (EpExtras).
template <class Src, class Extras>
void launch_tiny(const AlignPolicy& p, gpu::stream_t stream, const Src& src, const AlignOut& out, const Extras& extras,
                 const char* name) {
  with_flag(p.pow2, [&](auto pow2) {
    gpu::launch<gpu::tiny_kernel<decltype(pow2)::value, Src, Extras>>(
        name, LaunchShape{p.grid, p.block, 0, 0, false, p.overlap}, stream, src, out, extras);
  });
}
template <class Src, class Extras>
void launch_owned(const AlignPolicy& p, const gpu::DeviceCaps& d, gpu::stream_t stream, const Src& src,
                  const AlignOut& out, const Extras& extras, const char* name) {
  const int warps = static_cast<int>(p.block) / d.warp_size;
  const std::size_t smem = gpu::owned_smem_bytes(warps, out.num_experts, p.experts_per_block);
  with_steps<gpu::kOwnedItems>(p.per, [&](auto per) {
    // experts_per_block is a power of two: P == it
    with_steps<gpu::AlignTuning::kOwnedMaxExpertsPerBlock>(p.experts_per_block, [&](auto experts) {
      with_flag(p.pow2, [&](auto pow2) {  // the block size's form fixed: no branch per padded size
        gpu::launch<gpu::owned_kernel<decltype(per)::value, decltype(experts)::value, decltype(pow2)::value, Src,
                                      Extras>>(name, LaunchShape{p.grid, p.block, smem, 0, false, p.overlap}, stream,
                                               src, p.per, out, extras);
      });
    });
  });
}

template <class IdT>
void align_typed(const detail::AlignShape& s, const detail::AlignArgs& a, gpu::stream_t stream) {
  const AlignCaps caps = caps_for_this_call<IdT>();
  const AlignPolicy p = policy_for_this_call(s, caps);
  const gpu::DeviceCaps& d = caps.device;
  const AlignWorkspace w = gpu::align_workspace(s);
  const auto* ids = static_cast<const IdT*>(a.topk_ids);
  const int shift = p.pow2 ? gpu::bits_for(s.block_size) : -1;
  const AlignOut out{a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, static_cast<std::int32_t>(s.numel),
                     s.num_experts,     s.block_size, shift,        s.max_padded,          s.max_blocks};
  void* ws = a.workspace;
  // the caller's ids, bucket = expert (every path but two_digit_radix, which sorts by one digit at a time)
  const gpu::IdSource<IdT> src{ids, s.numel, s.num_experts, Digit{0, gpu::bits_for(s.num_experts)}};
  // shared memory of the block-resident kernels (one_cluster, cluster_grid, cooperative_grid)
  const auto resident_smem = [&] { return gpu::resident_smem_bytes(gpu::kThreads / d.warp_size, s.num_experts); };
  switch (p.path) {
    case AlignPath::kEmpty:
      gpu::check(gpu::memset_async(a.num_tokens_post_pad, 0, sizeof(std::int32_t), stream), "memset post_pad");
      return;
    case AlignPath::kWarpTiny: launch_tiny(p, stream, src, out, gpu::NoExtras{}, "tiny_kernel"); return;
    case AlignPath::kBlockPerExpert: launch_owned(p, d, stream, src, out, gpu::NoExtras{}, "owned_kernel"); return;
    case AlignPath::kBlockSort:
      with_flag(p.pow2, [&](auto pow2) {
        gpu::launch<gpu::sort_kernel<decltype(pow2)::value, gpu::IdSource<IdT>>>(
            "sort_kernel", LaunchShape{p.grid, p.block, 0, 0, false, p.overlap}, stream, src, p.fill, out);
      });
      return;
    case AlignPath::kOneCluster:
    case AlignPath::kClusterGrid:
      if constexpr (gpu::kHasClusters) {  // the policy takes these paths only where the device holds the clusters
        const bool many = p.path == AlignPath::kClusterGrid;  // several clusters: cooperative, one grid barrier
        with_steps<gpu::kClusterMaxPer>(p.per, [&](auto per) {
          with_flag(many, [&](auto grid) {
            // no one-cluster instance of its own for 1 id per thread (the 2's runs it): the policy's one cluster
            // holds more than 2048 ids, only a forced one fewer
            constexpr int kPer = !decltype(grid)::value && decltype(per)::value == 1 ? 2 : decltype(per)::value;
            gpu::launch<gpu::cluster_kernel<kPer, decltype(grid)::value, gpu::IdSource<IdT>>>(
                many ? "cluster_kernel (cooperative grid of clusters)" : "cluster_kernel",
                LaunchShape{p.grid, p.block, resident_smem(), p.cluster, p.cooperative, p.overlap}, stream, src, p.per,
                many ? region<std::int32_t>(ws, w.grid_table) : nullptr, out);
          });
        });
      }
      return;
    case AlignPath::kCooperativeGrid:
      with_steps<gpu::kGridItems>(p.per, [&](auto per) {
        gpu::launch<gpu::grid_kernel<decltype(per)::value, gpu::IdSource<IdT>>>(
            "grid_kernel (cooperative launch)", LaunchShape{p.grid, p.block, resident_smem(), 0, true, p.overlap},
            stream, src, p.per, region<std::int32_t>(ws, w.grid_table), region<std::int32_t>(ws, w.grid_totals), out);
      });
      return;
    case AlignPath::kThreeLaunches:
      counting_pass<true>(p, d, p.grid, src, true, s.num_experts, s.block_size, region<std::int32_t>(ws, w.table),
                          region<std::int32_t>(ws, w.totals), region<std::uint16_t>(ws, w.rank),
                          gpu::SortedSink{a.sorted_token_ids}, out, nullptr, nullptr, stream);
      return;
    case AlignPath::kTwoDigitRadix: {
      auto* count = region<std::int32_t>(ws, w.expert_count);
      auto* start = region<std::int32_t>(ws, w.expert_start);
      auto* padded = region<std::int32_t>(ws, w.expert_padded_start);
      auto* keys = region<std::int32_t>(ws, w.pair_keys);
      auto* values = region<std::int32_t>(ws, w.pair_values);
      auto* scalars = region<std::int32_t>(ws, w.scalars);
      const int lo = p.digits.lo_bits, hi = p.digits.hi_bits;
      gpu::check(gpu::memset_async(count, 0, ints(s.num_experts), stream), "memset expert counts");
      // pass 1: by the low digit, keeping (expert, index) of every kept id; counts per expert on the side
      const gpu::IdSource<IdT> low{ids, s.numel, s.num_experts, Digit{0, lo}};
      counting_pass<false>(p, d, p.grid, low, true, 1 << lo, 1, region<std::int32_t>(ws, w.table1),
                           region<std::int32_t>(ws, w.totals1), region<std::uint16_t>(ws, w.rank),
                           gpu::PairSink{keys, values}, out, &scalars[0], count, stream);
      gpu::launch<gpu::expert_scan_kernel>("expert_scan_kernel",
                                           LaunchShape{1, gpu::kScanThreads, 0, 0, false, p.overlap}, stream, count,
                                           start, padded, scalars, out);
      // pass 2: by the high digit, stable, so the order is by expert then index; written padded
      const gpu::PairSource pairs{keys, values, &scalars[0], Digit{lo, hi}};
      counting_pass<false>(p, d, p.grid2, pairs, false, 1 << hi, 1, region<std::int32_t>(ws, w.table2),
                           region<std::int32_t>(ws, w.totals2), region<std::uint16_t>(ws, w.rank),
                           gpu::PaddedSink{a.sorted_token_ids, start, padded}, out, nullptr, nullptr, stream);
      gpu::launch<gpu::fill_kernel>("fill_kernel", LaunchShape{p.fill_grid, p.block, 0, 0, false, p.overlap}, stream,
                                    padded, scalars, out);
      return;
    }
  }
}

}  // namespace

// align_block_size_ep in one launch where the local shape's path (the policy's or a forced one) is warp_tiny or
// block_per_expert: the ids mapped as they load, the counts and positions written by the kernel that places the ids
// (align_ep.cu). block_per_expert's form for 32- and 64-bit ids (the others: the three kernels).
template <class IdT>
bool align_ep_one_launch_typed(const detail::AlignEpShape& s, const detail::AlignEpArgs& a, gpu::stream_t stream) {
  const detail::AlignShape local = detail::local_align_shape(s);
  // before the policy: no host cost where no one-launch form applies
  constexpr bool kOwnedForm = sizeof(IdT) == 4 || sizeof(IdT) == 8;
  if (local.numel > (kOwnedForm ? gpu::AlignTuning::kOwnedMaxIds : gpu::AlignTuning::kTinyMaxIds)) return false;
  const AlignCaps caps = caps_for_this_call<IdT>();
  const AlignPolicy p = policy_for_this_call(local, caps);
  const std::int32_t L = s.num_local_experts;
  const AlignOut out{a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, static_cast<std::int32_t>(s.numel),
                     L,  s.block_size,   p.pow2 ? gpu::bits_for(s.block_size) : -1, local.max_padded, local.max_blocks};
  const gpu::MappedSource<IdT> src{static_cast<const IdT*>(a.topk_ids), s.numel, s.num_experts, a.expert_map, L,
                                   Digit{0, gpu::bits_for(L)}};
  const gpu::EpExtras extras{a.expert_counts, a.token_positions, L};
  if (p.path == AlignPath::kWarpTiny) {
    launch_tiny(p, stream, src, out, extras, "tiny_kernel (align_ep)");
    return true;
  }
  if constexpr (kOwnedForm) {
    if (p.path == AlignPath::kBlockPerExpert) {
      launch_owned(p, caps.device, stream, src, out, extras, "owned_kernel (align_ep)");
      return true;
    }
  }
  return false;
}

bool align_ep_one_launch(const detail::AlignEpShape& shape, const detail::AlignEpArgs& args, void* stream) {
  return detail::dispatch_id_type(
      args.id_type,
      [&](auto tag) { return align_ep_one_launch_typed<decltype(tag)>(shape, args, gpu::to_stream(stream)); });
}

void align(const detail::AlignShape& shape, const detail::AlignArgs& args, void* stream) {
  detail::dispatch_id_type(args.id_type,
                           [&](auto tag) { align_typed<decltype(tag)>(shape, args, gpu::to_stream(stream)); });
}

std::vector<std::string> align_paths(const detail::AlignShape& shape, moe_dtype_t id_type) {
  return detail::dispatch_id_type(id_type,
                                  [&](auto tag) { return path_names(shape, caps_for_this_call<decltype(tag)>()); });
}

}  // namespace backend
}  // namespace moe

#if defined(MOE_PROBE)
// Perf-only hook (CMake MOE_PHASE_PROBE, CUDA): where the phase probe's records are, for perf/moe_probe.
extern "C" const void* moe_probe_records() { return moe::gpu::probe_records(); }
#endif
