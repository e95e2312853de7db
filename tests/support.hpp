// Test support, shared by every test file: round trips through the configured backend (poisoned outputs,
// garbage workspace), the reference, an independent second oracle, and every align case run on every path that
// applies to it (the cases and their generators: catalogue.hpp).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catalogue.hpp"
#include "moe/reference.hpp"
#include "moe/routing.hpp"
#include "paths.hpp"  // internal (core/src): the paths of each shape, and forcing one

// Calls a C function; checks its status and that moe_last_error() contains `needle` (the argument at fault).
#define CHECK_C_ERROR(call, status, needle)                                                                    \
  do {                                                                                                         \
    const moe_status_t st_ = (call);                                                                           \
    CHECK_MESSAGE(st_ == (status), #call << " gave " << moe_status_string(st_) << ": " << moe_last_error());   \
    CHECK_MESSAGE(std::string(moe_last_error()).find(needle) != std::string::npos,                             \
                  #call << " text '" << moe_last_error() << "' lacks '" << (needle) << "'");                   \
  } while (0)

namespace moe_test {

using moe_catalogue::AlignCase;
using moe_catalogue::Dist;
using moe_catalogue::Rng;
using moe_catalogue::SumCase;

constexpr std::int32_t kPoison = 0x5A5A5A5A;  // never a valid output value in these tests

// What a C caller can pass: any int where an enum is expected (out-of-range values included).
template <class Enum>
Enum enum_from_int(int v) {
  Enum e;
  static_assert(sizeof e == sizeof v, "C enums are int-sized here");
  std::memcpy(&e, &v, sizeof e);
  return e;
}

template <class T>
moe::device_buffer<T> to_device(const std::vector<T>& host) {
  moe::device_buffer<T> d(host.size());
  moe::copy_to_device(d.data(), host.data(), host.size() * sizeof(T));
  return d;
}

template <class T>
std::vector<T> to_host(const moe::device_buffer<T>& d) {
  std::vector<T> h(d.size());
  moe::copy_to_host(h.data(), d.data(), d.bytes());
  return h;
}

struct AlignResult {
  std::vector<std::int32_t> sorted_token_ids;  // full capacity: max_padded
  std::vector<std::int32_t> expert_ids;        // full capacity: max_blocks
  std::int32_t num_tokens_post_pad = -1;
  bool operator==(const AlignResult& o) const {
    return num_tokens_post_pad == o.num_tokens_post_pad && sorted_token_ids == o.sorted_token_ids &&
           expert_ids == o.expert_ids;
  }
};

inline std::string describe(const AlignResult& r, std::size_t max_items = 48) {
  std::string s = "post_pad=" + std::to_string(r.num_tokens_post_pad) + " sorted=[";
  for (std::size_t i = 0; i < r.sorted_token_ids.size() && i < max_items; ++i)
    s += std::to_string(r.sorted_token_ids[i]) + ",";
  s += "...] expert_ids=[";
  for (std::size_t i = 0; i < r.expert_ids.size() && i < max_items; ++i) s += std::to_string(r.expert_ids[i]) + ",";
  return s + "...]";
}

// Index of the first difference between two results, for messages (-1 if equal).
inline std::string first_difference(const AlignResult& a, const AlignResult& b) {
  if (a.num_tokens_post_pad != b.num_tokens_post_pad)
    return "num_tokens_post_pad " + std::to_string(a.num_tokens_post_pad) + " vs " +
           std::to_string(b.num_tokens_post_pad);
  for (std::size_t i = 0; i < std::min(a.sorted_token_ids.size(), b.sorted_token_ids.size()); ++i)
    if (a.sorted_token_ids[i] != b.sorted_token_ids[i])
      return "sorted_token_ids[" + std::to_string(i) + "] " + std::to_string(a.sorted_token_ids[i]) + " vs " +
             std::to_string(b.sorted_token_ids[i]);
  for (std::size_t i = 0; i < std::min(a.expert_ids.size(), b.expert_ids.size()); ++i)
    if (a.expert_ids[i] != b.expert_ids[i])
      return "expert_ids[" + std::to_string(i) + "] " + std::to_string(a.expert_ids[i]) + " vs " +
             std::to_string(b.expert_ids[i]);
  return "sizes differ";
}

// The configured backend, through moe_malloc'd buffers: outputs poisoned, workspace filled with garbage, so
// an element the backend forgets to write, or a workspace it assumes zeroed, shows up.
template <class IdT>
AlignResult backend_align(const std::vector<IdT>& ids, std::int32_t num_experts, std::int32_t block_size,
                          void* stream = nullptr) {
  const auto numel = static_cast<std::int64_t>(ids.size());
  const auto max_padded = static_cast<std::size_t>(moe::align_max_padded(numel, num_experts, block_size));
  const auto max_blocks = static_cast<std::size_t>(moe::align_max_blocks(numel, num_experts, block_size));
  const std::size_t ws_bytes = moe::align_workspace_size(numel, num_experts, block_size);

  auto d_ids = to_device(ids);
  auto d_sorted = to_device(std::vector<std::int32_t>(max_padded, kPoison));
  auto d_experts = to_device(std::vector<std::int32_t>(max_blocks, kPoison));
  auto d_post = to_device(std::vector<std::int32_t>(1, kPoison));
  std::vector<unsigned char> garbage(ws_bytes);
  std::mt19937 rng(static_cast<unsigned>(ws_bytes * 2654435761u + ids.size()));
  for (auto& g : garbage) g = static_cast<unsigned char>(rng());
  auto d_ws = to_device(garbage);

  moe::align_block_size(d_ids.data(), numel, num_experts, block_size, d_sorted.data(), d_experts.data(),
                        d_post.data(), d_ws.data(), ws_bytes, stream);
  moe::synchronize(stream);
  AlignResult r;
  r.sorted_token_ids = to_host(d_sorted);
  r.expert_ids = to_host(d_experts);
  r.num_tokens_post_pad = to_host(d_post)[0];
  return r;
}

template <class IdT>
AlignResult reference_align(const std::vector<IdT>& ids, std::int32_t num_experts, std::int32_t block_size) {
  const auto numel = static_cast<std::int64_t>(ids.size());
  AlignResult r;
  r.sorted_token_ids.assign(static_cast<std::size_t>(moe::align_max_padded(numel, num_experts, block_size)), kPoison);
  r.expert_ids.assign(static_cast<std::size_t>(moe::align_max_blocks(numel, num_experts, block_size)), kPoison);
  std::vector<unsigned char> ws(moe::reference::align_workspace_size(numel, num_experts, block_size));
  moe::reference::align_block_size(ids.data(), numel, num_experts, block_size, r.sorted_token_ids.data(),
                                   r.expert_ids.data(), &r.num_tokens_post_pad, ws.data(), ws.size());
  return r;
}

// A second oracle by another road: std::stable_sort of (expert, index) pairs, then the padded layout.
// Guards the reference itself (on the CPU backend, backend == reference by construction).
template <class IdT>
AlignResult stable_sort_align(const std::vector<IdT>& ids, std::int32_t num_experts, std::int32_t block_size) {
  const auto numel = static_cast<std::int64_t>(ids.size());
  std::vector<std::pair<std::int64_t, std::int32_t>> pairs;
  for (std::int64_t i = 0; i < numel; ++i) {
    const auto v = static_cast<std::int64_t>(ids[static_cast<std::size_t>(i)]);
    if (v >= 0 && v < num_experts) pairs.emplace_back(v, static_cast<std::int32_t>(i));
  }
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  AlignResult r;
  const auto sentinel = static_cast<std::int32_t>(numel);
  for (std::size_t j = 0; j < pairs.size(); ++j) {
    r.sorted_token_ids.push_back(pairs[j].second);
    const bool group_ends = j + 1 == pairs.size() || pairs[j + 1].first != pairs[j].first;
    if (group_ends) {
      while (r.sorted_token_ids.size() % static_cast<std::size_t>(block_size) != 0)
        r.sorted_token_ids.push_back(sentinel);
    }
  }
  r.num_tokens_post_pad = static_cast<std::int32_t>(r.sorted_token_ids.size());
  for (std::size_t b = 0; b * static_cast<std::size_t>(block_size) < r.sorted_token_ids.size(); ++b) {
    const std::int32_t first = r.sorted_token_ids[b * static_cast<std::size_t>(block_size)];
    r.expert_ids.push_back(static_cast<std::int32_t>(ids[static_cast<std::size_t>(first)]));
  }
  r.sorted_token_ids.resize(static_cast<std::size_t>(moe::align_max_padded(numel, num_experts, block_size)), sentinel);
  r.expert_ids.resize(static_cast<std::size_t>(moe::align_max_blocks(numel, num_experts, block_size)), -1);
  return r;
}

// The paths of align_block_size that apply to this shape and id type on this build and device (the policy's
// choice first).
template <class IdT>
std::vector<std::string> paths_of(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  const auto shape = moe::detail::make_align_shape(numel, num_experts, block_size);
  return moe::backend::align_paths(shape, moe::dtype_of<IdT>::value);
}

// The paths the correctness tests run: paths_of's list, narrowed for slow tools (racecheck, memcheck) by
// MOE_TEST_PATHS: "policy", the policy's choice only; a path's name, that path alone where it applies, else the
// policy's choice (so the first entry is not always the policy's: check_align forces it then). A misspelt name
// tests only the policy's choices: check the tool's log names the path.
inline std::vector<std::string> narrowed(std::vector<std::string> paths) {
  const char* only = std::getenv("MOE_TEST_PATHS");
  if (only == nullptr || *only == 0) return paths;
  const auto named = std::find(paths.begin(), paths.end(), std::string(only));
  if (named != paths.end()) return {*named};
  paths.resize(1);
  return paths;
}
template <class IdT>
std::vector<std::string> paths_to_test(std::int64_t numel, std::int32_t num_experts, std::int32_t block_size) {
  return narrowed(paths_of<IdT>(numel, num_experts, block_size));
}

// The check every align test makes: backend == reference == independent oracle, bit for bit, on every path
// that applies (the first, the policy's choice, as a plain call, the others forced).
template <class IdT>
void check_align(const std::vector<IdT>& ids, std::int32_t num_experts, std::int32_t block_size) {
  INFO("numel=" << ids.size() << " experts=" << num_experts << " block_size=" << block_size
                << " id bytes=" << sizeof(IdT));
  const AlignResult ref = reference_align(ids, num_experts, block_size);
  const AlignResult oracle = stable_sort_align(ids, num_experts, block_size);
  REQUIRE_MESSAGE(ref == oracle, "reference vs stable_sort oracle: " << first_difference(ref, oracle));
  const auto all = paths_of<IdT>(static_cast<std::int64_t>(ids.size()), num_experts, block_size);
  const auto paths = narrowed(all);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const bool plain = paths[i] == all.front();  // the policy's choice as a plain call, every other path forced
    INFO("path " << paths[i] << (plain ? " (the policy's)" : " (forced)"));
    AlignResult got;
    if (plain) {
      got = backend_align(ids, num_experts, block_size);
    } else {
      const moe::detail::ScopedForcedPath force(moe::detail::kAlignOperation, paths[i]);
      got = backend_align(ids, num_experts, block_size);
    }
    REQUIRE_MESSAGE(got == ref, moe::backend_name() << " vs reference: " << first_difference(got, ref) << "\n got "
                                                    << describe(got) << "\n ref " << describe(ref));
  }
}

// check_align on the ids of a catalogue case, drawn with rng.
inline void check_case(const AlignCase& c, Rng& rng) {
  INFO("case " << moe_catalogue::name(c));
  moe_catalogue::with_ids(c, rng, [&](const auto& ids) { check_align(ids, c.experts, c.block_size); });
}

// ---- plain generators (the catalogue's cases use moe_catalogue::make_ids) -----------------------------------
using moe_catalogue::clamp_id;
using moe_catalogue::router_ids;

// Uniform experts in [0, E), with a fraction `invalid` of ids out of range (negative, == E, far above).
template <class IdT>
std::vector<IdT> uniform_ids(std::size_t n, std::int32_t E, Rng& rng, double invalid = 0.0) {
  std::uniform_int_distribution<std::int64_t> expert(0, E - 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<IdT> v(n);
  const std::int64_t bad[] = {-1, E, E + 7, -1000000, std::int64_t{1} << 40};
  for (auto& x : v) {
    if (invalid > 0 && u(rng) < invalid) {
      x = clamp_id<IdT>(bad[rng() % 5]);
      if (static_cast<std::int64_t>(x) >= 0 && static_cast<std::int64_t>(x) < E) x = clamp_id<IdT>(-1);
    } else {
      x = clamp_id<IdT>(expert(rng));
    }
  }
  return v;
}

// Half of all ids on one expert, the rest uniform: the adversarial shape of a collapsed router.
template <class IdT>
std::vector<IdT> skewed_ids(std::size_t n, std::int32_t E, Rng& rng, std::int32_t hot = 0) {
  auto v = uniform_ids<IdT>(n, E, rng);
  for (std::size_t i = 0; i < n; ++i)
    if (rng() & 1) v[i] = static_cast<IdT>(hot);
  return v;
}

}  // namespace moe_test
