// Where each scratch array of align_block_size sits in the caller's workspace. A function of the shape alone
// (never of the device), so that the size the caller queried once stays valid: it holds what every path that
// may run for the shape on any device needs (align_path_applies, align_policy.hpp):
//   warp_tiny, block_per_expert, block_sort, one_cluster, empty: nothing.
//   over 2048 ids with <= 1024 experts: three_launches' regions (table, totals, rank), and where a cooperative
//     grid may run (<= kGridMaxBlocks blocks) its own (grid_table, grid_totals) before them; cluster_grid's
//     table of clusters x experts lies in grid_table (fewer clusters than the grid's blocks).
//   two_digit_radix: both passes' tables and totals, the per-expert arrays, the (expert, index) pairs between
//     the passes, two scalars and the ranks.
// Plain host C++.
#pragma once

#include <cstddef>
#include <cstdint>

#include "align_policy.hpp"

namespace moe {
namespace gpu {

struct AlignWorkspace {
  std::size_t grid_table = 0, grid_totals = 0;  // cooperative_grid (cluster_grid: grid_table)
  std::size_t table = 0, totals = 0, rank = 0;   // three_launches; rank: u16 per id (two_digit_radix too)
  std::size_t table1 = 0, totals1 = 0, table2 = 0, totals2 = 0;  // two_digit_radix, by pass
  std::size_t expert_count = 0, expert_start = 0, expert_padded_start = 0, pair_keys = 0, pair_values = 0,
              scalars = 0;  // scalars: [0] ids kept after dropping, [1] padded total
  std::size_t bytes = 0;
};

inline AlignWorkspace align_workspace(const detail::AlignShape& s) {
  AlignWorkspace w;
  const std::int64_t n = s.numel;
  const std::int32_t E = s.num_experts;
  std::size_t cursor = 0;
  auto take = [&](std::int64_t count, std::size_t elem) {
    const std::size_t at = cursor;
    constexpr std::size_t kAlign = AlignTuning::kAlign;
    cursor += (static_cast<std::size_t>(count) * elem + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  if (E <= kDirectMaxExperts && n > AlignTuning::kOwnedMaxIds) {
    const Cut grid = grid_cut(n);
    if (grid.blocks <= kGridMaxBlocks) {
      w.grid_table = take(std::int64_t{grid.blocks} * E, sizeof(std::int32_t));
      w.grid_totals = take(E, sizeof(std::int32_t));
    }
    const std::int64_t segment = segment_for(n, E), segments = (n + segment - 1) / segment;
    w.table = take(segments * E, sizeof(std::int32_t));
    w.totals = take(E, sizeof(std::int32_t));
    w.rank = take(n, sizeof(std::uint16_t));
  } else if (E > kDirectMaxExperts && n > AlignTuning::kTinyMaxIds) {
    const Digits d = radix_digits(E);
    const std::int64_t segment = segment_for(n, std::int64_t{1} << d.hi_bits);
    const std::int64_t segments = (n + segment - 1) / segment;
    w.table1 = take(segments << d.lo_bits, sizeof(std::int32_t));
    w.totals1 = take(std::int64_t{1} << d.lo_bits, sizeof(std::int32_t));
    w.table2 = take(segments << d.hi_bits, sizeof(std::int32_t));
    w.totals2 = take(std::int64_t{1} << d.hi_bits, sizeof(std::int32_t));
    w.expert_count = take(E, sizeof(std::int32_t));
    w.expert_start = take(E, sizeof(std::int32_t));
    w.expert_padded_start = take(E, sizeof(std::int32_t));
    w.pair_keys = take(n, sizeof(std::int32_t));
    w.pair_values = take(n, sizeof(std::int32_t));
    w.scalars = take(2, sizeof(std::int32_t));
    w.rank = take(n, sizeof(std::uint16_t));
  }
  w.bytes = cursor;
  return w;
}

}  // namespace gpu
}  // namespace moe
