// Runs the CUDA/HIP block_sort align kernel (backends/cuda_hip/align/block_sort.cuh) on the CPU and compares its
// outputs with the reference, bit for bit: ids up to 2048, 1 to 65536 experts, block sizes that are powers of two
// and not, uniform, skewed, one-expert and all-dropped ids, 16 or 17 ids on each expert present (block_sort lists,
// or sorts), one block and several blocks per call (each block writes its own strip of the outputs). Then
// align_ep's one-launch forms (warp_tiny, block_per_expert) against reference::align_block_size_ep. Built for
// 32-lane warps and for 64 (-DMOE_EMULATE_WARP=64: AMD's wavefronts). Build and run: tools/gpu_emulate/run.sh
// align (needs a CPU build).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "align/block_per_expert.cuh"
#include "align/block_sort.cuh"
#include "align/warp_tiny.cuh"
#include "moe/reference.hpp"

namespace {

int failures = 0, cases = 0;

void check(std::int64_t n, std::int32_t E, std::int32_t bs, int dist, int blocks, std::mt19937_64& rng) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  const std::int32_t hot = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(E));
  for (auto& id : ids) {
    const std::uint64_t r = rng() % 100;
    switch (dist) {
      case 0: id = r < 10 ? (r % 2 ? -1 : E + static_cast<std::int32_t>(r)) : static_cast<std::int32_t>(rng() % E); break;
      case 1: id = r < 90 ? hot : static_cast<std::int32_t>(rng() % E); break;       // skewed
      case 2: id = E - 1; break;                                                      // one expert, the last
      case 3: id = r % 2 ? -1 - static_cast<std::int32_t>(r) : E; break;              // every id dropped
      case 4: id = static_cast<std::int32_t>(rng() % std::min<std::uint64_t>(E, 3)); break;  // few experts, ties
      default:  // dist - 4 ids on each expert present (16: listed, 17: sorted), shuffled
        id = static_cast<std::int32_t>((&id - ids.data()) / (dist - 4) * 7919 % E);
    }
  }
  if (dist > 4) std::shuffle(ids.begin(), ids.end(), rng);
  const auto shape = moe::detail::make_align_shape(n, E, bs);
  std::vector<std::int32_t> sorted(static_cast<std::size_t>(shape.max_padded), 0x5A5A5A5A),
      eids(static_cast<std::size_t>(shape.max_blocks), 0x5A5A5A5A), ref_sorted(sorted.size()), ref_eids(eids.size());
  std::int32_t post = -7, ref_post = -8;
  std::vector<unsigned char> ws(moe::reference::align_workspace_size(n, E, bs));
  moe::reference::align_block_size(ids.data(), MOE_INT32, n, E, bs, ref_sorted.data(), ref_eids.data(), &ref_post,
                                   ws.data(), ws.size());
  const bool pow2 = (bs & (bs - 1)) == 0;
  const moe::gpu::AlignOut out{sorted.data(), eids.data(), &post, static_cast<std::int32_t>(n), E, bs,
                               pow2 ? moe::gpu::bits_for(bs) : -1, shape.max_padded, shape.max_blocks};
  const moe::gpu::IdSource<std::int32_t> src{ids.data(), n, E, moe::gpu::Digit{0, moe::gpu::bits_for(E)}};
  // `blocks` strips of sorted_token_ids (multiples of 4), as the policy's fill gives
  const std::int64_t fill = ((shape.max_padded + blocks - 1) / blocks + 3) / 4 * 4;
  const auto grid = static_cast<unsigned>((shape.max_padded + fill - 1) / fill);
  moe::gpu::g_max_blocks = grid;
  if (pow2)
    moe::gpu::launch<moe::gpu::sort_kernel<true, moe::gpu::IdSource<std::int32_t>>>(
        "sort_kernel", grid, moe::gpu::kSortThreads, 0, nullptr, src, static_cast<std::int32_t>(fill), out);
  else
    moe::gpu::launch<moe::gpu::sort_kernel<false, moe::gpu::IdSource<std::int32_t>>>(
        "sort_kernel", grid, moe::gpu::kSortThreads, 0, nullptr, src, static_cast<std::int32_t>(fill), out);
  ++cases;
  if (sorted != ref_sorted || eids != ref_eids || post != ref_post) {
    ++failures;
    std::size_t i = 0, j = 0;
    while (i < sorted.size() && sorted[i] == ref_sorted[i]) ++i;
    while (j < eids.size() && eids[j] == ref_eids[j]) ++j;
    std::printf("MISMATCH n=%lld E=%d bs=%d dist=%d grid=%u: post %d vs %d; sorted[%zu] %d vs %d; expert_ids[%zu] "
                "%d vs %d\n",
                static_cast<long long>(n), E, bs, dist, grid, post, ref_post, i, i < sorted.size() ? sorted[i] : 0,
                i < sorted.size() ? ref_sorted[i] : 0, j, j < eids.size() ? eids[j] : 0,
                j < eids.size() ? ref_eids[j] : 0);
  }
}

// warp_tiny's align_ep form (one launch: ids mapped as they load, counts and positions beside the layout) against
// reference::align_block_size_ep: maps with remote (-1), out-of-range and many-to-one entries, or the identity.
// path: 0 warp_tiny, 1 block_per_expert (128 threads, <= 4 ids each, kK experts a block)
template <int kK>
void check_ep(int path, std::int64_t n, std::int32_t E, std::int32_t L, bool identity, std::int32_t bs, bool extras,
              std::mt19937_64& rng) {
  if (identity) L = E;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n)), map(static_cast<std::size_t>(E));
  for (auto& m : map) {
    const std::uint64_t r = rng() % 10;
    m = r < 4 ? -1 : r == 4 ? L + static_cast<std::int32_t>(rng() % 3) : static_cast<std::int32_t>(rng() % L);
  }
  for (auto& id : ids) {
    const std::uint64_t r = rng() % 10;
    id = r == 0 ? -1 - static_cast<std::int32_t>(rng() % 3) : r == 1 ? E : static_cast<std::int32_t>(rng() % E);
  }
  const auto shape = moe::detail::make_align_shape(n, L, bs);
  const auto S = static_cast<std::size_t>(shape.max_padded), B = static_cast<std::size_t>(shape.max_blocks);
  std::vector<std::int32_t> sorted(S, 0x5A5A5A5A), eids(B, 0x5A5A5A5A), counts(static_cast<std::size_t>(L), 77),
      pos(static_cast<std::size_t>(n), 77), ref_sorted(S), ref_eids(B), ref_counts(counts.size()), ref_pos(pos.size());
  std::int32_t post = -7, ref_post = -8;
  std::vector<unsigned char> ws(moe::reference::align_workspace_size_ep(n, E, L, bs));
  const std::int32_t* m = identity ? nullptr : map.data();
  moe::reference::align_block_size_ep(ids.data(), MOE_INT32, n, E, m, L, bs, ref_sorted.data(), ref_eids.data(),
                                      &ref_post, ref_counts.data(), ref_pos.data(), ws.data(), ws.size());
  const bool pow2 = (bs & (bs - 1)) == 0;
  const moe::gpu::AlignOut out{sorted.data(), eids.data(), &post, static_cast<std::int32_t>(n), L, bs,
                               pow2 ? moe::gpu::bits_for(bs) : -1, shape.max_padded, shape.max_blocks};
  const moe::gpu::MappedSource<std::int32_t> src{ids.data(), n, E, m, L, moe::gpu::Digit{0, moe::gpu::bits_for(L)}};
  const moe::gpu::EpExtras ex{extras ? counts.data() : nullptr, extras ? pos.data() : nullptr, L};
  using Src = moe::gpu::MappedSource<std::int32_t>;
  using moe::gpu::EpExtras;
  if (path == 0) {
    moe::gpu::g_max_blocks = 2;
    if (pow2)
      moe::gpu::launch<moe::gpu::tiny_kernel<true, Src, EpExtras>>("tiny", 2, moe::gpu::kThreads, 0, nullptr, src, out, ex);
    else
      moe::gpu::launch<moe::gpu::tiny_kernel<false, Src, EpExtras>>("tiny", 2, moe::gpu::kThreads, 0, nullptr, src, out, ex);
  } else {  // every block owns kK experts: all of them run
    const unsigned threads = 128, grid = static_cast<unsigned>((L + kK - 1) / kK);
    const int per = static_cast<int>((n + threads - 1) / threads);  // <= 4
    moe::gpu::g_max_blocks = grid;
    const std::size_t smem = moe::gpu::owned_smem_bytes(static_cast<int>(threads) / moe::gpu::kWarpSize, L, kK);
    if (pow2)
      moe::gpu::launch<moe::gpu::owned_kernel<4, kK, true, Src, EpExtras>>("owned", grid, threads, smem, nullptr, src,
                                                                            per, out, ex);
    else
      moe::gpu::launch<moe::gpu::owned_kernel<4, kK, false, Src, EpExtras>>("owned", grid, threads, smem, nullptr, src,
                                                                             per, out, ex);
  }
  ++cases;
  const bool extras_ok = !extras || (counts == ref_counts && pos == ref_pos);
  const bool untouched = extras || (std::all_of(counts.begin(), counts.end(), [](int v) { return v == 77; }) &&
                                    std::all_of(pos.begin(), pos.end(), [](int v) { return v == 77; }));
  const bool ok = sorted == ref_sorted && eids == ref_eids && post == ref_post && extras_ok && untouched;
  if (!ok) ++failures;
  std::printf("%s ep n=%lld E=%d L=%d %s bs=%d extras=%d: %s\n", path ? "owned" : "tiny", static_cast<long long>(n), E, L,
              identity ? "identity" : "map", bs, extras ? 1 : 0, ok ? "ok" : "MISMATCH");
}

}  // namespace

int main(int argc, char** argv) {
  const int max_cases = argc > 1 ? std::atoi(argv[1]) : 1 << 30;  // a quick run: the first N cases
  std::mt19937_64 rng(42);
  struct Case {
    std::int64_t n;
    std::int32_t E, bs;
    int dist, blocks;
  };
  const Case shapes[] = {{1, 65536, 64, 0, 1},  {2, 1, 1, 4, 1},        {33, 1025, 16, 0, 1},  {100, 7, 3, 4, 2},
                         {1000, 4096, 64, 1, 3}, {2047, 65536, 48, 0, 2}, {2048, 65536, 64, 1, 3}, {2048, 2, 1, 4, 1},
                         {2048, 65536, 128, 2, 1}, {777, 20000, 16, 3, 2}, {2048, 1025, 1, 0, 3}, {500, 300, 5, 1, 2},
                         {64, 131, 100, 0, 3},   {2048, 8, 64, 0, 2},
                         {2048, 65536, 64, 20, 2}, {1000, 4096, 16, 21, 1}};
  for (const Case& c : shapes) {
    if (cases >= max_cases) break;
    check(c.n, c.E, c.bs, c.dist, c.blocks, rng);
    std::printf("n=%lld E=%d bs=%d dist=%d: %s\n", static_cast<long long>(c.n), c.E, c.bs, c.dist,
                failures ? "failures so far" : "ok");
    std::fflush(stdout);
  }
  const struct {
    std::int64_t n;
    std::int32_t E, L;
    bool identity;
    std::int32_t bs;
    bool extras;
  } ep[] = {{1, 256, 32, false, 64, true}, {8, 256, 32, false, 16, true}, {32, 64, 5, false, 3, true},
            {17, 1000, 1, false, 1, true}, {8, 256, 32, false, 64, false}, {20, 9, 9, true, 48, true},
            {32, 65536, 65536, true, 128, true}};
  for (const auto& c : ep)
    if (cases < max_cases) check_ep<1>(0, c.n, c.E, c.L, c.identity, c.bs, c.extras, rng);
  for (const auto& c : {ep[0], ep[1], ep[2], ep[4], ep[5]}) {  // block_per_expert's form: 1 and 2 experts a block
    if (cases < max_cases) check_ep<1>(1, c.n * 15, c.E, c.L, c.identity, c.bs, c.extras, rng);
    if (cases < max_cases) check_ep<2>(1, c.n * 15 + 7, c.E, c.L, c.identity, c.bs, c.extras, rng);
  }
  std::printf("%d cases, %d mismatches\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
