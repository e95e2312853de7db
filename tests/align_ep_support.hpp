// Test support for align_block_size_ep (shared by test_align_ep.cpp and the GPU graph-capture tests): the
// configured backend through moe_malloc'd buffers (outputs poisoned, workspace garbage), the reference, an
// independent oracle (a stable sort by local index), the optional outputs derived from a layout alone, and maps.
#pragma once

#include <climits>

#include "support.hpp"

namespace moe_test {

// An expert map as the tests pass it: `null` means expert_map = NULL (the identity).
struct EpMap {
  std::vector<std::int32_t> entries;
  bool null = false;
  const std::int32_t* host() const { return null ? nullptr : entries.data(); }
};

inline EpMap null_map() { return EpMap{{}, true}; }

// Rank `rank` of E / L ranks holds the experts [rank * L, rank * L + L): local = global - rank * L, else -1.
inline EpMap rank_map(std::int32_t E, std::int32_t L, std::int32_t rank) {
  EpMap m;
  for (std::int32_t g = 0; g < E; ++g) {
    const std::int64_t l = std::int64_t{g} - std::int64_t{rank} * L;
    m.entries.push_back(l >= 0 && l < L ? static_cast<std::int32_t>(l) : -1);
  }
  return m;
}

// Random entries: a fraction `remote` -1, a fraction `bad` out of range in every other way (L, L + 5, INT32_MAX,
// INT32_MIN, -2), the rest uniform in [0, L) (many-to-one wherever E > L, and in no particular order).
inline EpMap random_map(std::int32_t E, std::int32_t L, Rng& rng, double remote, double bad) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<std::int32_t> local(0, L - 1);
  const std::int32_t bads[] = {L, static_cast<std::int32_t>(std::min<std::int64_t>(std::int64_t{L} + 5, INT32_MAX)),
                               INT32_MAX, INT32_MIN, -2};
  EpMap m;
  for (std::int32_t g = 0; g < E; ++g) {
    const double r = u(rng);
    m.entries.push_back(r < remote ? -1 : r < remote + bad ? bads[rng() % 5] : local(rng));
  }
  return m;
}

// A permutation of [0, L) onto the first L globals (E >= L), the rest -1: local order unlike global order.
inline EpMap permuted_map(std::int32_t E, std::int32_t L, Rng& rng) {
  std::vector<std::int32_t> perm(static_cast<std::size_t>(L));
  for (std::int32_t l = 0; l < L; ++l) perm[static_cast<std::size_t>(l)] = l;
  std::shuffle(perm.begin(), perm.end(), rng);
  EpMap m;
  for (std::int32_t g = 0; g < E; ++g) m.entries.push_back(g < L ? perm[static_cast<std::size_t>(g)] : -1);
  return m;
}

struct EpResult {
  AlignResult align;
  std::vector<std::int32_t> counts;     // empty when not asked for
  std::vector<std::int32_t> positions;  // empty when not asked for
  bool operator==(const EpResult& o) const {
    return align == o.align && counts == o.counts && positions == o.positions;
  }
};

inline std::string first_difference(const EpResult& a, const EpResult& b) {
  if (!(a.align == b.align)) return first_difference(a.align, b.align);
  if (a.counts.size() != b.counts.size()) return "expert_counts sizes differ";
  for (std::size_t l = 0; l < a.counts.size(); ++l)
    if (a.counts[l] != b.counts[l])
      return "expert_counts[" + std::to_string(l) + "] " + std::to_string(a.counts[l]) + " vs " +
             std::to_string(b.counts[l]);
  if (a.positions.size() != b.positions.size()) return "token_positions sizes differ";
  for (std::size_t i = 0; i < a.positions.size(); ++i)
    if (a.positions[i] != b.positions[i])
      return "token_positions[" + std::to_string(i) + "] " + std::to_string(a.positions[i]) + " vs " +
             std::to_string(b.positions[i]);
  return "equal";
}

struct EpWant {
  bool counts = true, positions = true;
};

template <class IdT>
EpResult backend_align_ep(const std::vector<IdT>& ids, std::int32_t E, const EpMap& map, std::int32_t L,
                          std::int32_t bs, EpWant want = {}, void* stream = nullptr) {
  const auto numel = static_cast<std::int64_t>(ids.size());
  const auto max_padded = static_cast<std::size_t>(moe::align_max_padded(numel, L, bs));
  const auto max_blocks = static_cast<std::size_t>(moe::align_max_blocks(numel, L, bs));
  const std::size_t ws_bytes = moe::align_workspace_size_ep(numel, E, L, bs);

  auto d_ids = to_device(ids);
  auto d_map = to_device(map.entries);
  auto d_sorted = to_device(std::vector<std::int32_t>(max_padded, kPoison));
  auto d_experts = to_device(std::vector<std::int32_t>(max_blocks, kPoison));
  auto d_post = to_device(std::vector<std::int32_t>(1, kPoison));
  auto d_counts = to_device(std::vector<std::int32_t>(want.counts ? static_cast<std::size_t>(L) : 0, kPoison));
  auto d_pos = to_device(std::vector<std::int32_t>(want.positions ? ids.size() : 0, kPoison));
  std::vector<unsigned char> garbage(ws_bytes);
  std::mt19937 rng(static_cast<unsigned>(ws_bytes * 2654435761u + ids.size() + static_cast<std::size_t>(L)));
  for (auto& g : garbage) g = static_cast<unsigned char>(rng());
  auto d_ws = to_device(garbage);

  moe::align_block_size_ep(d_ids.data(), numel, E, map.null ? nullptr : d_map.data(), L, bs, d_sorted.data(),
                           d_experts.data(), d_post.data(), want.counts ? d_counts.data() : nullptr,
                           want.positions ? d_pos.data() : nullptr, d_ws.data(), ws_bytes, stream);
  moe::synchronize(stream);
  EpResult r;
  r.align.sorted_token_ids = to_host(d_sorted);
  r.align.expert_ids = to_host(d_experts);
  r.align.num_tokens_post_pad = to_host(d_post)[0];
  if (want.counts) r.counts = to_host(d_counts);
  if (want.positions) r.positions = to_host(d_pos);
  return r;
}

template <class IdT>
EpResult reference_align_ep(const std::vector<IdT>& ids, std::int32_t E, const EpMap& map, std::int32_t L,
                            std::int32_t bs) {
  const auto numel = static_cast<std::int64_t>(ids.size());
  EpResult r;
  r.align.sorted_token_ids.assign(static_cast<std::size_t>(moe::align_max_padded(numel, L, bs)), kPoison);
  r.align.expert_ids.assign(static_cast<std::size_t>(moe::align_max_blocks(numel, L, bs)), kPoison);
  r.counts.assign(static_cast<std::size_t>(L), kPoison);
  r.positions.assign(ids.size(), kPoison);
  std::vector<unsigned char> ws(moe::reference::align_workspace_size_ep(numel, E, L, bs));
  moe::reference::align_block_size_ep(ids.data(), numel, E, map.host(), L, bs, r.align.sorted_token_ids.data(),
                                      r.align.expert_ids.data(), &r.align.num_tokens_post_pad, r.counts.data(),
                                      r.positions.data(), ws.data(), ws.size());
  return r;
}

// The local index of each id by the contract's words, computed here independently of the library.
template <class IdT>
std::vector<std::int64_t> local_indices(const std::vector<IdT>& ids, std::int32_t E, const EpMap& map,
                                        std::int32_t L) {
  std::vector<std::int64_t> out;
  for (IdT id : ids) {
    const auto v = static_cast<std::int64_t>(id);
    std::int64_t l = -1;
    if (v >= 0 && v < E) l = map.null ? v : map.entries[static_cast<std::size_t>(v)];
    out.push_back(l >= 0 && l < L ? l : -1);
  }
  return out;
}

// The oracle by another road: the ids replaced by their local index (dropped ones by -1) go through the
// stable-sort oracle of plain align with L experts; counts by counting; positions by inverting the layout.
template <class IdT>
EpResult oracle_align_ep(const std::vector<IdT>& ids, std::int32_t E, const EpMap& map, std::int32_t L,
                         std::int32_t bs) {
  const std::vector<std::int64_t> local = local_indices(ids, E, map, L);
  EpResult r;
  r.align = stable_sort_align(local, L, bs);
  r.counts.assign(static_cast<std::size_t>(L), 0);
  for (std::int64_t l : local)
    if (l >= 0) ++r.counts[static_cast<std::size_t>(l)];
  r.positions.assign(ids.size(), -1);
  for (std::size_t p = 0; p < r.align.sorted_token_ids.size(); ++p) {
    const std::int32_t i = r.align.sorted_token_ids[p];
    if (i < static_cast<std::int32_t>(ids.size())) r.positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(p);
  }
  return r;
}

// expert_counts and token_positions as the contract defines them, from a layout alone (sorted_token_ids and
// expert_ids): what any backend's optional outputs must agree with, whatever produced the layout.
inline void derive_extras(const AlignResult& a, std::size_t numel, std::int32_t L, std::int32_t bs,
                          std::vector<std::int32_t>* counts, std::vector<std::int32_t>* positions) {
  counts->assign(static_cast<std::size_t>(L), 0);
  positions->assign(numel, -1);
  for (std::int32_t p = 0; p < a.num_tokens_post_pad; ++p) {
    const std::int32_t i = a.sorted_token_ids[static_cast<std::size_t>(p)];
    if (i < 0 || static_cast<std::size_t>(i) >= numel) continue;
    if ((*positions)[static_cast<std::size_t>(i)] != -1) FAIL("entry " << i << " placed twice");
    (*positions)[static_cast<std::size_t>(i)] = p;
    const std::int32_t l = a.expert_ids[static_cast<std::size_t>(p / bs)];
    if (l < 0 || l >= L) FAIL("block " << p / bs << " of entry " << i << " has expert " << l);
    ++(*counts)[static_cast<std::size_t>(l)];
  }
}

// The check every align_ep test makes: reference == oracle; the reference's optional outputs == those derived
// from its layout; the backend == reference bit for bit (with both optional outputs, or with the ones `want`
// names and NULL for the others).
template <class IdT>
void check_align_ep(const std::vector<IdT>& ids, std::int32_t E, const EpMap& map, std::int32_t L,
                    std::int32_t bs, EpWant want = {}) {
  INFO("numel=" << ids.size() << " experts=" << E << " local=" << L << " block_size=" << bs << " map="
                << (map.null ? "NULL" : "given") << " id bytes=" << sizeof(IdT) << " counts=" << want.counts
                << " positions=" << want.positions);
  const EpResult ref = reference_align_ep(ids, E, map, L, bs);
  const EpResult oracle = oracle_align_ep(ids, E, map, L, bs);
  REQUIRE_MESSAGE(ref == oracle, "reference vs oracle: " << first_difference(ref, oracle));
  std::vector<std::int32_t> counts, positions;
  derive_extras(ref.align, ids.size(), L, bs, &counts, &positions);
  REQUIRE(counts == ref.counts);
  REQUIRE(positions == ref.positions);
  EpResult expect = ref;
  if (!want.counts) expect.counts.clear();
  if (!want.positions) expect.positions.clear();
  const EpResult got = backend_align_ep(ids, E, map, L, bs, want);
  REQUIRE_MESSAGE(got == expect, moe::backend_name() << " vs reference: " << first_difference(got, expect)
                                                     << "\n got " << describe(got.align) << "\n ref "
                                                     << describe(expect.align));
}

}  // namespace moe_test
