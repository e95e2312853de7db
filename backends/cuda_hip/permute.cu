// moe_permute on the GPU, one source for CUDA and HIP. A copy of bytes, memory-bound: rows are cut into items of
// kGroupThreads * kUnroll words (a word: 16 bytes where the row bytes and both pointers allow, else 8/4/2/1);
// each group of kGroupThreads threads copies one item (all its loads issued before its stores), then strides
// over the grid. The number of rows, min(*num_tokens_post_pad, max_rows), is read on the device: no host sync,
// and a grid sized for max_rows whose surplus groups find no item. A group's next source row id is loaded while
// it copies the current item, so that the dependent load (sorted_token_ids, then hidden) is not exposed once per
// item.
#include <algorithm>

#include "backend.hpp"
#include "device_caps.hpp"
#include "gpu_runtime.hpp"

namespace moe {
namespace backend {

namespace {

constexpr int kPermuteThreads = 128;
constexpr int kGroupThreads = 32;  // threads of one item: a fixed group, not the warp (no warp intrinsics used)
constexpr int kGroups = kPermuteThreads / kGroupThreads;
constexpr int kUnroll = 4;  // words per thread per item: 2 KiB per item with 16-byte words
constexpr int kItemWords = kGroupThreads * kUnroll;

template <class W>
__global__ void __launch_bounds__(kPermuteThreads)
    permute_kernel(const W* __restrict__ hidden, const std::int32_t* __restrict__ sorted_token_ids,
                   const std::int32_t* __restrict__ num_tokens_post_pad, W* __restrict__ permuted, std::int64_t numel,
                   std::int32_t topk, std::int64_t max_rows, std::int64_t row_words, std::int64_t chunks) {
  gpu::begin_after_prior_grid();
  const std::int64_t items = detail::permute_rows(*num_tokens_post_pad, max_rows) * chunks;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kGroups;
  const int lane = static_cast<int>(threadIdx.x) % kGroupThreads;
  std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kGroups + static_cast<int>(threadIdx.x) / kGroupThreads;
  std::int32_t id = item < items ? sorted_token_ids[item / chunks] : 0;
  while (item < items) {
    const std::int64_t next = item + stride;
    const std::int32_t next_id = next < items ? sorted_token_ids[next / chunks] : 0;  // in flight meanwhile
    const std::int64_t p = item / chunks;
    const std::int64_t w0 = (item - p * chunks) * kItemWords + lane;
    W* dst = permuted + p * row_words;
    if (id >= 0 && id < numel) {
      const W* src = hidden + (id / topk) * row_words;
      W x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (w0 + u * kGroupThreads < row_words) x[u] = src[w0 + u * kGroupThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (w0 + u * kGroupThreads < row_words) dst[w0 + u * kGroupThreads] = x[u];
    } else {  // padding (or any id outside [0, numel)): a row of zero bytes
      const W zero{};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (w0 + u * kGroupThreads < row_words) dst[w0 + u * kGroupThreads] = zero;
    }
    item = next;
    id = next_id;
  }
}

template <class W>
void permute_words(const detail::PermuteShape& s, const detail::PermuteArgs& a, gpu::stream_t stream) {
  constexpr auto kernel = permute_kernel<W>;
  // resident blocks a multiprocessor holds: asked once per kernel instance (not a stream operation)
  static const int per_sm = [] {
    int n = 0;
    gpu::check(gpu::max_active_blocks(&n, kernel, kPermuteThreads, 0), "moe_permute occupancy query");
    return std::max(n, 1);
  }();
  const std::int64_t row_words = s.row_bytes / static_cast<std::int64_t>(sizeof(W));
  const std::int64_t chunks = (row_words + kItemWords - 1) / kItemWords;
  // enough groups for every item of max_rows rows, at most one full wave of resident blocks
  const std::int64_t wanted = (s.max_rows * chunks + kGroups - 1) / kGroups;
  const std::int64_t grid = std::min<std::int64_t>(wanted, std::int64_t{per_sm} * gpu::device_sm_count());
  gpu::launch<kernel>("moe_permute kernel", static_cast<unsigned>(grid), kPermuteThreads, 0, stream,
                      static_cast<const W*>(a.hidden), a.sorted_token_ids, a.num_tokens_post_pad,
                      static_cast<W*>(a.permuted), s.numel(), s.topk, s.max_rows, row_words, chunks);
}

}  // namespace

std::size_t permute_workspace_size(const detail::PermuteShape&) { return 0; }

void permute(const detail::PermuteShape& shape, const detail::PermuteArgs& args, void* stream) {
  const int word = detail::permute_word_bytes(shape.row_bytes, args.hidden, args.permuted);
  detail::dispatch_permute_word(word, [&](auto w) { permute_words<decltype(w)>(shape, args, gpu::to_stream(stream)); });
}

}  // namespace backend
}  // namespace moe
