// The arithmetic of align_block_size's padded layout and of its work split, written once for the GPU family
// and Kokkos (host and device). The CPU reference keeps its own plain form: it is the oracle.
#pragma once

#include <algorithm>
#include <cstdint>

#include "host_device.hpp"

namespace moe {
namespace layout {

MOE_HD std::int32_t round_up(std::int32_t v, std::int32_t m) { return (v + m - 1) / m * m; }

// The expert whose padded range holds position p < total, given each expert's padded start (ascending):
// the largest e with start[e] <= p. Empty experts have zero width, so they are never the answer.
MOE_HD std::int32_t expert_at(const std::int32_t* start, std::int32_t num_experts, std::int32_t p) {
  std::int32_t lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const std::int32_t mid = (lo + hi + 1) / 2;
    if (start[mid] <= p) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Ids per segment (one warp or team walks each in order): at least 256 and at least `buckets`, so the
// buckets x segments count table stays about numel or smaller; long enough that there are at most
// `max_segments`; a multiple of 64. Below 65536 for every numel < 2^31 with max_segments >= 2^16.
inline std::int64_t segment_length(std::int64_t numel, std::int64_t buckets, std::int64_t max_segments) {
  const std::int64_t seg = std::max({std::int64_t{256}, buckets, (numel + max_segments - 1) / max_segments});
  return (seg + 63) / 64 * 64;
}

}  // namespace layout
}  // namespace moe
