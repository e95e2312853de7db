// align_block_size on the GPU: the launches of each path (align_plan.hpp) on the caller's stream. No
// allocation, no host synchronisation: graph-capturable. Written once for CUDA and HIP.
#include <type_traits>

#include "align_kernels.cuh"
#include "align_plan.hpp"
#include "backend.hpp"
#include "dispatch.hpp"

namespace moe {
namespace backend {

std::size_t align_workspace_size(const detail::AlignShape& shape) { return gpu::make_align_plan(shape).bytes; }

namespace {

using gpu::AlignOut;
using gpu::AlignPlan;
using gpu::Digit;

template <class T>
T* region(void* workspace, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<unsigned char*>(workspace) + offset);
}

std::size_t ints(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(std::int32_t); }

unsigned blocks_for(std::int64_t work, std::int64_t per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

// kGrid needs all its blocks resident at once (cooperative launch); otherwise the caller takes kDirect. At most
// kGridMaxBlocksPerSm of them per SM: 4 per SM (512 blocks at 262144x8, once kGrid's registers allowed it) took
// 1.07x kDirect's time (H200, perf/NOTES.md step 47).
constexpr int kGridMaxBlocksPerSm = 3;
template <class Kernel>
bool grid_fits(const AlignPlan& p, std::size_t smem, Kernel kernel) {
  int per_sm = 0;
  gpu::check(gpu::max_active_blocks(&per_sm, kernel, gpu::kThreads, smem), "occupancy query");
  return std::int64_t{std::min(per_sm, kGridMaxBlocksPerSm)} * gpu::device_sm_count() >= p.grid_blocks;
}

// The three multi-block phases (rank, scan, scatter) over the plan's warp segments.
// sentinels: the count kernel also writes them (a pass before the one that places ids in sorted_token_ids).
template <bool kFill, class Src, class Sink>
void counting_pass(const AlignPlan& p, const Src& src, bool sentinels, int buckets, std::int32_t pad, std::int32_t* table,
                   std::int32_t* totals, std::uint16_t* rank, const Sink& sink, const AlignOut& out,
                   std::int32_t* kept, std::int32_t* expert_hist, gpu::stream_t stream) {
  const int warps = gpu::kThreads / gpu::device_warp_size();
  // a block per `warps` segments; where it also writes the sentinels, at least a block per kFillPerBlock of them
  // (at 2048 ids and 65536 experts one block wrote the 512 KB alone: that kernel took 23 us under ncu, 14 with
  // 8 blocks, perf/NOTES.md step 40)
  constexpr std::int64_t kFillPerBlock = std::int64_t{gpu::kThreads} * 64;
  const unsigned grid =
      std::max(blocks_for(p.segments, warps), sentinels ? blocks_for(out.max_padded, kFillPerBlock) : 1u);
  const std::size_t rows = ints(std::int64_t{warps} * (buckets + 1));
  gpu::launch<gpu::count_kernel<Src>>("count_kernel", grid, gpu::kThreads, rows, stream, src, p.segment, p.segments,
                                      buckets, table, rank, expert_hist, p.key_bits, sentinels, out);
  gpu::launch<gpu::row_scan_kernel>("row_scan_kernel", static_cast<unsigned>(buckets), gpu::kThreads, 0, stream, table,
                                    p.segments, totals);
  const std::size_t smem = rows + ints(std::int64_t{buckets} + std::int64_t{gpu::kBucketScanRows} * warps);
  gpu::launch<gpu::scatter_kernel<kFill, Src, Sink>>("scatter_kernel", grid, gpu::kThreads, smem, stream, src, p.segment,
                                                     p.segments, buckets, pad, table, totals, rank, sink, out, kept);
}

// f(std::integral_constant<int, P>), and its result, for the smallest power of two P >= steps (steps <= kMax, a
// power of two; P == steps where steps is one): kernels that hold `steps` warp steps of ids in registers are
// instantiated for P steps only, and kOwned for its power-of-two experts per block.
// One body for 16 steps that skips the unused ones still fetches their instructions: a 110 KB unrolled kernel
// was 2-3 us slower per call than a 26 KB one doing the same work (H200, perf/NOTES.md step 20).
template <int kMax, class F>
auto with_steps(int steps, F&& f) {
  if constexpr (kMax > 1) {
    if (steps <= kMax / 2) return with_steps<kMax / 2>(steps, f);
  }
  return f(std::integral_constant<int, kMax>{});
}

// kOwned: experts per block, the fewest (a power of two) that keep the grid within kOwnedWarpsPerSm warps per
// SM. Each block reads all ids, so past that the SMs' issue slots, not latency, set the time: at 2048 ids in
// blocks of 512 threads, 256 / 512 / 1024 experts in 128 blocks took 0.92 / 0.78 / 0.57 of the time of a block
// per expert; with 8-64 experts, 2 per block took 1.08-1.10 (perf/NOTES.md step 37).
constexpr int kOwnedWarpsPerSm = 16, kOwnedMaxExpertsPerBlock = 8;
int owned_experts_per_block(std::int32_t experts, int warps_per_block) {
  const std::int64_t budget = std::int64_t{kOwnedWarpsPerSm} * gpu::device_sm_count();
  int k = 1;
  while (k < kOwnedMaxExpertsPerBlock && (experts + k - 1) / k * std::int64_t{warps_per_block} > budget) k *= 2;
  return k;
}

// f(std::bool_constant<flag>), and its result.
template <class F>
auto with_flag(bool flag, F&& f) {
  return flag ? f(std::true_type{}) : f(std::false_type{});
}

template <class IdT>
void align_typed(const detail::AlignShape& s, const detail::AlignArgs& a, const AlignPlan& p, gpu::stream_t stream) {
  const auto* ids = static_cast<const IdT*>(a.topk_ids);
  const int shift = (s.block_size & (s.block_size - 1)) == 0 ? gpu::bits_for(s.block_size) : -1;
  const AlignOut out{a.sorted_token_ids, a.expert_ids, a.num_tokens_post_pad, static_cast<std::int32_t>(s.numel),
                     s.num_experts,     s.block_size, shift,        s.max_padded,          s.max_blocks};
  void* ws = a.workspace;
  // the caller's ids, bucket = expert (every path but kRadix, which sorts by one digit at a time)
  const gpu::IdSource<IdT> src{ids, s.numel, s.num_experts, Digit{0, gpu::bits_for(s.num_experts)}};
  // shared memory of the block-resident kernels (kCluster, kClusterGrid, kGrid); asked only on their paths
  const auto resident_smem = [&] {
    return gpu::resident_smem_bytes(gpu::kThreads / gpu::device_warp_size(), s.num_experts);
  };
  gpu::AlignPath path = p.path;
  if (path == gpu::AlignPath::kCluster || path == gpu::AlignPath::kClusterGrid) {
#if !defined(MOE_GPU_HIP)
    const bool grid = path == gpu::AlignPath::kClusterGrid;  // several clusters: cooperative, one grid barrier
    const std::size_t smem = resident_smem();
    const bool launched = with_steps<gpu::kClusterMaxPer>(p.cluster_per, [&](auto per) {
      return with_flag(grid, [&](auto many) {
        // one cluster takes >= 2049 ids, never 1 per thread: no instance of its own for that (the 2 holds 1)
        constexpr int kPer = !decltype(many)::value && decltype(per)::value == 1 ? 2 : decltype(per)::value;
        constexpr auto kernel = gpu::cluster_kernel<kPer, decltype(many)::value, gpu::IdSource<IdT>>;
        const auto blocks = static_cast<unsigned>(p.cluster_blocks);
        const unsigned cluster = grid ? gpu::kClusterMaxBlocks : blocks;  // blocks is a multiple of it
        const int fit = gpu::max_active_clusters(reinterpret_cast<const void*>(kernel), cluster, gpu::kThreads, smem);
        if (std::int64_t{fit} * cluster < blocks) return false;  // all clusters resident at once, or not this path
        gpu::launch_cluster<kernel>(grid ? "cluster_kernel (cooperative grid of clusters)" : "cluster_kernel", blocks,
                                    cluster, gpu::kThreads, smem, stream, grid, src, p.cluster_per,
                                    grid ? region<std::int32_t>(ws, p.grid_table) : nullptr, out);
        return true;
      });
    });
    if (launched) return;
#endif
    path = p.fallback;
  }
  switch (path) {
    case gpu::AlignPath::kCluster:  // never: replaced by their fallback above
    case gpu::AlignPath::kClusterGrid:
      detail::throw_backend("align_block_size: cluster path without a fallback");
    case gpu::AlignPath::kEmpty:
      gpu::check(gpu::memset_async(a.num_tokens_post_pad, 0, sizeof(std::int32_t), stream), "memset post_pad");
      return;
    case gpu::AlignPath::kTiny: {
      // about 16 16-byte stores per thread for the sentinel tail
      const unsigned grid = std::min(2048u, blocks_for(std::max(s.max_padded, s.max_blocks), gpu::kThreads * 64));
      with_flag(shift >= 0, [&](auto pow2) {
        gpu::launch<gpu::tiny_kernel<decltype(pow2)::value, gpu::IdSource<IdT>>>("tiny_kernel", grid, gpu::kThreads, 0,
                                                                                  stream, src, out);
      });
      return;
    }
    case gpu::AlignPath::kOwned: {
      const int warps = p.owned_threads / gpu::device_warp_size();
      const int k = owned_experts_per_block(s.num_experts, warps);
      const auto blocks = static_cast<unsigned>((s.num_experts + k - 1) / k);
      with_steps<gpu::kOwnedItems>(p.owned_per, [&](auto per) {
        with_steps<kOwnedMaxExpertsPerBlock>(k, [&](auto experts) {  // k is a power of two: P == k
          with_flag(shift >= 0, [&](auto pow2) {  // the block size's form fixed: no branch per padded size
            gpu::launch<gpu::owned_kernel<decltype(per)::value, decltype(experts)::value, decltype(pow2)::value,
                                          gpu::IdSource<IdT>>>(
                "owned_kernel", blocks, static_cast<unsigned>(p.owned_threads),
                gpu::owned_smem_bytes(warps, s.num_experts, k), stream, src, p.owned_per, out);
          });
        });
      });
      return;
    }
    case gpu::AlignPath::kGrid:
    case gpu::AlignPath::kDirect: {
      // kGrid where its blocks fit the device at once (returns whether it launched); otherwise kDirect
      const auto launch_grid = [&](auto per) {
        constexpr auto kernel = gpu::grid_kernel<decltype(per)::value, gpu::IdSource<IdT>>;
        const std::size_t smem = resident_smem();
        if (!grid_fits(p, smem, kernel)) return false;
        gpu::launch_cooperative<kernel>("grid_kernel (cooperative launch)", static_cast<unsigned>(p.grid_blocks),
                                        gpu::kThreads, smem, stream, src, p.grid_per,
                                        region<std::int32_t>(ws, p.grid_table), region<std::int32_t>(ws, p.grid_totals), out);
        return true;
      };
      if (path == gpu::AlignPath::kGrid && with_steps<gpu::kGridItems>(p.grid_per, launch_grid)) return;
      counting_pass<true>(p, src, true, s.num_experts, s.block_size, region<std::int32_t>(ws, p.table),
                          region<std::int32_t>(ws, p.totals), region<std::uint16_t>(ws, p.rank), gpu::SortedSink{a.sorted_token_ids}, out, nullptr,
                          nullptr, stream);
      return;
    }
    case gpu::AlignPath::kRadix: {
      auto* count = region<std::int32_t>(ws, p.expert_count);
      auto* start = region<std::int32_t>(ws, p.expert_start);
      auto* padded = region<std::int32_t>(ws, p.expert_padded_start);
      auto* keys = region<std::int32_t>(ws, p.pair_keys);
      auto* values = region<std::int32_t>(ws, p.pair_values);
      auto* scalars = region<std::int32_t>(ws, p.scalars);
      gpu::check(gpu::memset_async(count, 0, ints(s.num_experts), stream), "memset expert counts");
      // pass 1: by the low digit, keeping (expert, index) of every kept id; counts per expert on the side
      const gpu::IdSource<IdT> low{ids, s.numel, s.num_experts, Digit{0, p.lo_bits}};
      counting_pass<false>(p, low, true, 1 << p.lo_bits, 1, region<std::int32_t>(ws, p.table1),
                           region<std::int32_t>(ws, p.totals1), region<std::uint16_t>(ws, p.rank), gpu::PairSink{keys, values}, out, &scalars[0],
                           count, stream);
      gpu::launch<gpu::expert_scan_kernel>("expert_scan_kernel", 1, gpu::kScanThreads, 0, stream, count, start, padded,
                                           scalars, out);
      // pass 2: by the high digit, stable, so the order is by expert then index; written padded
      const gpu::PairSource pairs{keys, values, &scalars[0], Digit{p.lo_bits, p.hi_bits}};
      counting_pass<false>(p, pairs, false, 1 << p.hi_bits, 1, region<std::int32_t>(ws, p.table2),
                           region<std::int32_t>(ws, p.totals2), region<std::uint16_t>(ws, p.rank), gpu::PaddedSink{a.sorted_token_ids, start, padded},
                           out, nullptr, nullptr, stream);
      // a warp per 32 experts, and about 16 values of the -1 tail per thread
      const unsigned grid =
          std::max(blocks_for(s.num_experts, gpu::kThreads), blocks_for(s.max_blocks, gpu::kThreads * 16));
      gpu::launch<gpu::fill_kernel>("fill_kernel", grid, gpu::kThreads, 0, stream, padded, scalars, out);
      return;
    }
  }
}

}  // namespace

void align(const detail::AlignShape& shape, const detail::AlignArgs& args, void* stream) {
  const AlignPlan plan = gpu::make_align_plan(shape);
  detail::dispatch_id_type(args.id_type, [&](auto tag) {
    align_typed<decltype(tag)>(shape, args, plan, gpu::to_stream(stream));
  });
}

}  // namespace backend
}  // namespace moe

#ifdef MOE_PROBE
// perf/moe_probe's access to the records of the phase probe (phase_probe.cuh): probe builds only.
extern "C" int moe_probe_read(unsigned long long* dst, std::size_t bytes) {
  return cudaMemcpyFromSymbol(dst, moe::gpu::probe_record, bytes) == cudaSuccess ? 0 : 1;
}
#endif
