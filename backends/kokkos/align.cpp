// align_block_size with Kokkos patterns: the GPU family's algorithm (backends/cuda_hip/align_policy.hpp) in
// four labelled kernels on one execution space instance:
//   rank     TeamPolicy, one team per segment of consecutive ids, walking it in order: a per-team row of
//            counters in scratch memory; within a step, an id's rank among the step's equal ids comes from
//            comparing the step's keys in scratch (Kokkos has no ballots); rank[i] and table[expert][segment].
//   rows     TeamPolicy, one team per expert: team parallel_scan over segments (in place), the expert's total.
//   starts   one team's parallel_scan over experts of the padded totals: where each expert starts.
//   scatter_fill  parallel_for: id i to start + segment prefix + rank (no order left to keep), and output
//            block b's expert_ids, padding and tail.
// No host synchronisation (no scan or reduce returns to the host). One path for every expert count: the
// per-team row lives in level-0 scratch while it fits, in level-1 (global) scratch beyond.
#include <algorithm>

#include "backend.hpp"
#include "dispatch.hpp"
#include "padded_layout.hpp"
#include "paths.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

namespace {

constexpr std::size_t kAlign = 256;
constexpr std::int64_t kMaxSegments = 1 << 16;
// Host spaces: a team is one thread, so a few long segments (one thread walking each with a plain counter)
// beat many short ones: a call takes one per thread of the instance, at most this many. The workspace holds
// rows for this many whatever the machine, so it still depends on the shape alone.
constexpr std::int64_t kHostSegments = 64;
// Host spaces: counters of up to this many experts live on the thread's stack (16 KiB) during a pass.
constexpr std::int32_t kHostLocalExperts = 4096;

struct Plan {
  std::int64_t segment = 0, segments = 0;
  std::size_t table = 0, totals = 0, starts = 0, rank = 0, scalars = 0, bytes = 0;
};

Plan make_plan(const detail::AlignShape& s) {
  Plan p;
  if (s.numel == 0) return p;
  const std::int64_t max_segments = kHostSpace ? kHostSegments : kMaxSegments;
  p.segment = layout::segment_length(s.numel, s.num_experts, max_segments);
  p.segments = (s.numel + p.segment - 1) / p.segment;
  std::size_t cursor = 0;
  auto take = [&](std::int64_t count) {
    const std::size_t at = cursor;
    cursor += (static_cast<std::size_t>(count) * sizeof(std::int32_t) + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  p.table = take(p.segments * s.num_experts);
  p.totals = take(s.num_experts);
  p.starts = take(s.num_experts);
  p.rank = take(s.numel);
  p.scalars = take(1);
  p.bytes = cursor;
  return p;
}

using Team = Kokkos::TeamPolicy<Exec>::member_type;
using ScratchInts = Kokkos::View<std::int32_t*, Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;

}  // namespace

template <class IdT>
void align_ids(const detail::AlignShape& s, const detail::AlignArgs& a, const Plan& p, const Exec& exec) {
  const IdT* ids = static_cast<const IdT*>(a.topk_ids);
  char* ws = static_cast<char*>(a.workspace);
  std::int32_t* table = reinterpret_cast<std::int32_t*>(ws + p.table);
  std::int32_t* totals = reinterpret_cast<std::int32_t*>(ws + p.totals);
  std::int32_t* starts = reinterpret_cast<std::int32_t*>(ws + p.starts);
  std::int32_t* rank = reinterpret_cast<std::int32_t*>(ws + p.rank);
  std::int32_t* scalars = reinterpret_cast<std::int32_t*>(ws + p.scalars);
  std::int32_t* sorted = a.sorted_token_ids;
  std::int32_t* expert_ids = a.expert_ids;
  std::int32_t* post_pad = a.num_tokens_post_pad;
  const std::int64_t n = s.numel, segment = p.segment, S = p.segments, max_padded = s.max_padded;
  const std::int32_t E = s.num_experts, bs = s.block_size, sentinel = static_cast<std::int32_t>(s.numel);

  // rank
  const int T = team_size();
  Kokkos::TeamPolicy<Exec> rank_policy(exec, static_cast<int>(S), T);
  const std::size_t scratch = ScratchInts::shmem_size(E) + ScratchInts::shmem_size(T);
  const int level = scratch <= static_cast<std::size_t>(rank_policy.scratch_size_max(0)) ? 0 : 1;
  Kokkos::parallel_for(
      "moe::align::rank", rank_policy.set_scratch_size(level, Kokkos::PerTeam(static_cast<int>(scratch))),
      KOKKOS_LAMBDA(const Team& team) {
        ScratchInts row(team.team_scratch(level), E);
        ScratchInts keys(team.team_scratch(level), team.team_size());
        const int t = team.team_rank(), size = team.team_size();
        for (std::int32_t e = t; e < E; e += size) row(e) = 0;
        team.team_barrier();
        const std::int64_t seg = team.league_rank(), begin = seg * segment;
        const std::int64_t end = begin + segment < n ? begin + segment : n;
        if (size == 1) {  // host: one thread walks the segment, a running count per expert is the rank
          for (std::int64_t i = begin; i < end; ++i) {
            const auto v = static_cast<std::int64_t>(ids[i]);
            if (v >= 0 && v < E) rank[i] = row(static_cast<std::int32_t>(v))++;
          }
        }
        for (std::int64_t base = begin; size > 1 && base < end; base += size) {
          const std::int64_t i = base + t;
          std::int32_t k = -1;
          if (i < end) {
            const auto v = static_cast<std::int64_t>(ids[i]);
            k = (v >= 0 && v < E) ? static_cast<std::int32_t>(v) : -1;
          }
          keys(t) = k;
          team.team_barrier();
          std::int32_t below = 0;
          bool last = true;
          if (k >= 0)
            for (int u = 0; u < size; ++u)
              if (keys(u) == k) {
                if (u < t) ++below;
                if (u > t) last = false;
              }
          const std::int32_t before = k >= 0 ? row(k) : 0;
          team.team_barrier();
          if (k >= 0) {
            rank[i] = before + below;
            if (last) row(k) = before + below + 1;
          }
          team.team_barrier();
        }
        for (std::int32_t e = t; e < E; e += size) table[e * S + seg] = row(e);
      });

  // rows: per expert, exclusive prefix over segments in place, and the expert's total
  Kokkos::parallel_for(
      "moe::align::rows", Kokkos::TeamPolicy<Exec>(exec, E, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const std::int32_t e = team.league_rank();
        std::int32_t* r = table + e * S;
        std::int32_t total = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, static_cast<int>(S)), [&](int j, std::int32_t& acc) { acc += r[j]; }, total);
        team.team_barrier();
        Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, static_cast<int>(S)),
                              [&](int j, std::int32_t& prefix, bool final) {
                                const std::int32_t v = r[j];
                                if (final) r[j] = prefix;
                                prefix += v;
                              });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { totals[e] = total; });
      });

  // starts: padded exclusive prefix over experts, by one team (a RangePolicy scan is two launches on GPUs);
  // the last expert also writes the padded total
  Kokkos::parallel_for(
      "moe::align::starts", Kokkos::TeamPolicy<Exec>(exec, 1, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, E), [&](const std::int32_t e, std::int32_t& prefix,
                                                                    const bool final) {
          const std::int32_t padded = layout::round_up(totals[e], bs);
          if (final) {
            starts[e] = prefix;
            if (e == E - 1) {
              scalars[0] = prefix + padded;
              *post_pad = prefix + padded;
            }
          }
          prefix += padded;
        });
      });

  // scatter (index i < numel: id i to its place) and fill (index b < max_blocks: expert_ids[b], its padding
  // or tail): independent of each other, so one launch
  const auto segment32 = static_cast<std::int32_t>(segment);  // 32-bit division: numel < 2^31
  const std::int64_t max_blocks = s.max_blocks, work = n > max_blocks ? n : max_blocks;
  Kokkos::parallel_for(
      "moe::align::scatter_fill", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, work),
      KOKKOS_LAMBDA(const std::int64_t x) {
        if (x < n) {
          const auto i = static_cast<std::int32_t>(x);
          const auto v = static_cast<std::int64_t>(ids[i]);
          if (v >= 0 && v < E) {
            const auto e = static_cast<std::int32_t>(v);
            sorted[starts[e] + table[e * S + i / segment32] + rank[i]] = i;
          }
        }
        if (x >= max_blocks) return;
        const std::int64_t b = x;
        const std::int32_t total = scalars[0];
        // 64-bit: the block's end p0 + bs passes INT32_MAX for the last blocks when block_size nears 2^30
        const std::int64_t p0 = b * bs, end = p0 + bs;
        const std::int64_t p1 = end < max_padded ? end : max_padded;
        if (p0 >= total) {
          expert_ids[b] = -1;
          for (std::int64_t q = p0; q < p1; ++q) sorted[q] = sentinel;
          return;
        }
        const std::int32_t e = layout::expert_at(starts, E, static_cast<std::int32_t>(p0));  // p0 < total
        expert_ids[b] = e;
        const std::int64_t ids_end = std::int64_t{starts[e]} + totals[e];
        for (std::int64_t q = ids_end > p0 ? ids_end : p0; q < end; ++q) sorted[q] = sentinel;
      });
}

// Host spaces (Kokkos::Serial, OpenMP, Threads): the classic stable counting sort, in two parallel passes over
// the same segments, one per thread of the instance (the workspace holds kHostSegments rows, so it is still a
// function of the shape):
//   count    RangePolicy over segments: each segment walks its ids in order into its own row of counters
//            (table[segment * E + expert]; no atomics, no team scratch);
//   scan     on the calling thread, after a fence: per expert, each segment's row entry becomes its first
//            write position (expert start + the earlier segments' counts); expert_ids, padding, tail and the
//            padded total are written here too (O(E * segments + max_blocks + padding), small next to numel);
//   scatter  RangePolicy over segments: each segment walks its ids in order again, id i to its row's next
//            position: stable by slot index, so the layout is the reference's, bit for bit.
// The GPU path's rank array, totals and starts regions of the plan are left unused.
template <class IdT>
void align_ids_host(const detail::AlignShape& s, const detail::AlignArgs& a, const Plan& p, const Exec& exec) {
  const IdT* ids = static_cast<const IdT*>(a.topk_ids);
  std::int32_t* table = reinterpret_cast<std::int32_t*>(static_cast<char*>(a.workspace) + p.table);
  std::int32_t* sorted = a.sorted_token_ids;
  std::int32_t* expert_ids = a.expert_ids;
  // One segment per thread of the instance (at most the plan's): each thread's writes for an expert are then one
  // long run (a segment's 1/threads of the expert's ids), not 64 runs of a few cache lines shared with the
  // neighbouring segments' runs (false sharing and partial lines between threads). The result does not depend on
  // the count (stable either way), the workspace is the plan's.
  const std::int64_t n = s.numel;
  const std::int64_t threads = std::max<std::int64_t>(1, std::min<std::int64_t>(exec.concurrency(), p.segments));
  const std::int64_t segment = (n + threads - 1) / threads, S = (n + segment - 1) / segment;
  const std::int32_t E = s.num_experts, bs = s.block_size, sentinel = static_cast<std::int32_t>(s.numel);
  using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>, Kokkos::Schedule<Kokkos::Static>>;

  Kokkos::parallel_for(
      "moe::align::host_count", Range(exec, 0, S), KOKKOS_LAMBDA(const std::int64_t seg) {
        // the counters on the thread's stack while they fit: rows of few experts share cache lines with the
        // next segment's, which another thread counts into at the same time
        std::int32_t local[kHostLocalExperts];
        std::int32_t* row = E <= kHostLocalExperts ? local : table + seg * E;
        for (std::int32_t e = 0; e < E; ++e) row[e] = 0;
        const std::int64_t begin = seg * segment, end = begin + segment < n ? begin + segment : n;
        for (std::int64_t i = begin; i < end; ++i) {
          const auto v = static_cast<std::int64_t>(ids[i]);
          if (v >= 0 && v < E) ++row[v];
        }
        if (row == local) std::copy(local, local + E, table + seg * E);
      });
  exec.fence();

  std::int64_t pos = 0;  // < max_padded < 2^31
  for (std::int32_t e = 0; e < E; ++e) {
    std::int32_t count = 0;
    for (std::int64_t seg = 0; seg < S; ++seg) {
      std::int32_t& slot = table[seg * E + e];
      const std::int32_t c = slot;
      slot = static_cast<std::int32_t>(pos) + count;
      count += c;
    }
    const std::int64_t padded = layout::round_up(count, bs);
    std::fill(expert_ids + pos / bs, expert_ids + (pos + padded) / bs, e);
    std::fill(sorted + pos + count, sorted + pos + padded, sentinel);
    pos += padded;
  }
  std::fill(expert_ids + pos / bs, expert_ids + s.max_blocks, -1);
  std::fill(sorted + pos, sorted + s.max_padded, sentinel);
  *a.num_tokens_post_pad = static_cast<std::int32_t>(pos);

  Kokkos::parallel_for(
      "moe::align::host_scatter", Range(exec, 0, S), KOKKOS_LAMBDA(const std::int64_t seg) {
        std::int32_t local[kHostLocalExperts];
        std::int32_t* row = table + seg * E;
        if (E <= kHostLocalExperts) row = std::copy(row, row + E, local) - E;
        const std::int64_t begin = seg * segment, end = begin + segment < n ? begin + segment : n;
        for (std::int64_t i = begin; i < end; ++i) {
          const auto v = static_cast<std::int64_t>(ids[i]);
          if (v >= 0 && v < E) {
            std::int32_t* at = sorted + row[v]++;
            *at = static_cast<std::int32_t>(i);
            // an expert's run is written in order: ask for its line two ahead now, so that the store there
            // finds it in cache (with many experts the hardware prefetcher does not follow that many streams)
            prefetch_for_write(at + 32);
          }
        }
      });
}

}  // namespace kokkos

namespace backend {

std::size_t align_workspace_size(const detail::AlignShape& shape) { return kokkos::make_plan(shape).bytes; }

// GPU spaces: the four kernels above (team ranking, row scans, expert starts, scatter and fill). Host spaces: the
// counting sort of align_ids_host, and the four kernels as a forceable second path, so that host builds (CI's
// Kokkos Serial) keep testing the GPU algorithm bit for bit.
std::vector<std::string> align_paths(const detail::AlignShape&, moe_dtype_t) {
  if (kokkos::kHostSpace) return {"kokkos_host_counting", "kokkos_four_kernels"};
  return {"kokkos_four_kernels"};
}

void align(const detail::AlignShape& shape, const detail::AlignArgs& args, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  const kokkos::Plan plan = kokkos::make_plan(shape);
  const auto lock = kokkos::lock_instance(stream);  // team scratch: one call at a time per instance
  if (shape.numel == 0) {
    std::int32_t* post_pad = args.num_tokens_post_pad;
    Kokkos::parallel_for(
        "moe::align::empty", Kokkos::RangePolicy<kokkos::Exec>(exec, 0, 1), KOKKOS_LAMBDA(int) { *post_pad = 0; });
    return;
  }
  const std::string* forced = detail::forced_path(detail::kAlignOperation);  // checked by the core entry
  const bool four_kernels = !kokkos::kHostSpace || (forced != nullptr && *forced == "kokkos_four_kernels");
  detail::dispatch_id_type(args.id_type, [&](auto tag) {
    if constexpr (kokkos::kHostSpace) {
      if (!four_kernels) return kokkos::align_ids_host<decltype(tag)>(shape, args, plan, exec);
    }
    kokkos::align_ids<decltype(tag)>(shape, args, plan, exec);
  });
}

}  // namespace backend
}  // namespace moe
