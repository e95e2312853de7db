// The reference's grouping, shared by align and align_ep: a stable counting sort of slot indices by group, each
// group padded to the block size, serial, in the most obvious order. The two operations differ only in which
// group an id goes to (align: the expert; align_ep: the expert's local index through expert_map).
#pragma once

#include <algorithm>
#include <cstdint>

namespace moe {
namespace detail {

struct GroupingOutputs {
  std::int32_t* sorted_token_ids;   // [max_padded], sentinel n where nothing lands
  std::int32_t* expert_ids;         // [max_blocks], -1 past the used blocks
  std::int32_t* num_tokens_post_pad;
  std::int32_t* counts;             // [groups] or NULL
  std::int32_t* positions;          // [n] (the slot's index in sorted_token_ids, -1 if dropped) or NULL
};

// group_of(i): the group of slot i in [0, groups), or -1 for a dropped slot. cursor: [groups] scratch.
template <class GroupOf>
void reference_group_and_pad(std::int64_t n, std::int32_t groups, std::int32_t block_size, std::int64_t max_padded,
                             std::int64_t max_blocks, GroupOf group_of, std::int32_t* cursor,
                             const GroupingOutputs& out) {
  std::fill(cursor, cursor + groups, 0);  // count, then the next write position
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t g = group_of(i);
    if (g >= 0) ++cursor[g];
  }
  if (out.counts != nullptr) std::copy(cursor, cursor + groups, out.counts);

  std::fill(out.sorted_token_ids, out.sorted_token_ids + max_padded, static_cast<std::int32_t>(n));
  std::fill(out.expert_ids, out.expert_ids + max_blocks, -1);
  std::int64_t pos = 0;
  for (std::int32_t g = 0; g < groups; ++g) {
    const std::int64_t blocks = (cursor[g] + static_cast<std::int64_t>(block_size) - 1) / block_size;
    std::fill(out.expert_ids + pos / block_size, out.expert_ids + pos / block_size + blocks, g);
    cursor[g] = static_cast<std::int32_t>(pos);
    pos += blocks * block_size;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t g = group_of(i);
    const std::int32_t p = g >= 0 ? cursor[g]++ : -1;
    if (p >= 0) out.sorted_token_ids[p] = static_cast<std::int32_t>(i);
    if (out.positions != nullptr) out.positions[i] = p;
  }
  *out.num_tokens_post_pad = static_cast<std::int32_t>(pos);
}

}  // namespace detail
}  // namespace moe
