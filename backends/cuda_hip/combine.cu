// moe_combine on the GPU, one source for CUDA and HIP; sum.cu's kernel with each slot's row looked up, its
// presence tested and its weight applied. Memory-bound: each thread owns 16-byte vectors of one token's output,
// loads the vectors of the token's present slots (all loads of a round issued before the first product), and
// accumulates in k order with the scalar rules of combine.hpp (products and sums each rounded: no FMA; the
// library is also built with -fmad=false). An absent slot's row is never read. Positions and weights: topk
// values per token, read by every thread of its blocks (the same addresses: one transaction each).
#include "backend.hpp"
#include "dispatch.hpp"
#include "gpu_runtime.hpp"
#include "numeric.hpp"
#include "primitives.cuh"

namespace moe {
namespace backend {

namespace {

constexpr int kCombineThreads = 128;

struct alignas(16) ZeroVec {
  unsigned int w[4];
};
__device__ const ZeroVec g_zero_vec = {{0u, 0u, 0u, 0u}};  // what an absent slot's load reads (never its row)

template <class Traits>
using Vec = gpu::Vec16<Traits>;  // 16 bytes of values (primitives.cuh)

// grid.x = num_tokens * chunks; each block covers kCombineThreads * kVecs vectors of one token's row. kInFlight:
// slots loaded together (topk up to it in one round, more in rounds). kTopk > 0: topk known at compile time.
// The same instances as moe_sum's (sum.cu: small topk -> 2 vectors per thread in flight, 8 -> 1).
template <class Traits, int kInFlight, int kVecs, int kTopk>
__global__ void __launch_bounds__(kCombineThreads)
    combine_vec_kernel(const Vec<Traits>* __restrict__ rows, Vec<Traits>* __restrict__ out,
                       const std::int32_t* __restrict__ positions, const float* __restrict__ weights, float scale,
                       bool permuted_layout, std::int32_t topk_arg, std::int32_t vecs_per_row, std::int32_t chunks) {
  const std::int32_t topk = kTopk > 0 ? kTopk : topk_arg;
  constexpr int C = Vec<Traits>::kCount;
  const std::int64_t token = blockIdx.x / static_cast<unsigned>(chunks);  // 32-bit division: grid < 2^31
  const int v0 = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks)) * kCombineThreads * kVecs + threadIdx.x;
  float acc[kVecs][C];
#pragma unroll
  for (int u = 0; u < kVecs; ++u)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[u][c] = 0.0f;
  gpu::begin_after_prior_grid();
  for (int k0 = 0; k0 < topk; k0 += kInFlight) {
    std::int64_t r[kInFlight];
    float w[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      r[k] = -1;
      w[k] = 1.0f;
      if (k0 + k < topk) {
        const std::int64_t i = token * topk + k0 + k;
        r[k] = detail::combine_row(i, positions, permuted_layout);
        if (weights != nullptr) w[k] = weights[i];
      }
    }
    // kInFlight >= 4: every load unconditional, its address chosen (an absent slot or a vector past the row reads
    // the zero vector, never its row). Under branches the compiler placed each load's conversion right after it,
    // so the rows came one memory latency after another (SASS of the top-8 instance: 6 of 8 in series; top-8
    // 0.73 -> 0.98 of a copy, perf/NOTES.md step 59). Two loads stay predicated: chosen addresses cost the top-2
    // instance 0.17 us at one token.
    Vec<Traits> x[kVecs][kInFlight];
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        const int v = v0 + u * kCombineThreads;
        if (kInFlight >= 4) {
          const Vec<Traits>* src = r[k] >= 0 && v < vecs_per_row ? rows + r[k] * vecs_per_row + v
                                                                 : reinterpret_cast<const Vec<Traits>*>(&g_zero_vec);
          x[u][k] = *src;
        } else if (r[k] >= 0 && v < vecs_per_row) {
          x[u][k] = rows[r[k] * vecs_per_row + v];
        }
      }
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (r[k] >= 0) {
#pragma unroll
          for (int c = 0; c < C; ++c) acc[u][c] = detail::combine_slot(acc[u][c], w[k], Traits::load(x[u][k].v[c]));
        }
  }
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    if (v0 + u * kCombineThreads >= vecs_per_row) continue;
    Vec<Traits> y;
#pragma unroll
    for (int c = 0; c < C; ++c) y.v[c] = Traits::store(detail::combine_out(acc[u][c], scale));
    out[token * vecs_per_row + v0 + u * kCombineThreads] = y;
  }
}

// Any hidden / alignment: one element per thread.
template <class Traits>
__global__ void __launch_bounds__(kCombineThreads)
    combine_scalar_kernel(const typename Traits::storage* __restrict__ rows, typename Traits::storage* __restrict__ out,
                          const std::int32_t* __restrict__ positions, const float* __restrict__ weights, float scale,
                          bool permuted_layout, std::int32_t topk, std::int64_t hidden, std::int64_t chunks) {
  gpu::begin_after_prior_grid();
  const std::int64_t token = blockIdx.x / chunks;
  const std::int64_t h = (blockIdx.x % chunks) * kCombineThreads + threadIdx.x;
  if (h >= hidden) return;
  float acc = 0.0f;
  for (int k = 0; k < topk; ++k) {
    const std::int64_t i = token * topk + k;
    const std::int64_t r = detail::combine_row(i, positions, permuted_layout);
    if (r < 0) continue;
    const float w = weights != nullptr ? weights[i] : 1.0f;
    acc = detail::combine_slot(acc, w, Traits::load(rows[r * hidden + h]));
  }
  out[token * hidden + h] = Traits::store(detail::combine_out(acc, scale));
}

template <class Traits, int kInFlight, int kVecsPerThread, int kTopk = 0>
struct VecKernel {  // a combine_vec_kernel instance and its geometry, as one type
  static constexpr int kVecs = kVecsPerThread;
  static constexpr auto kKernel = combine_vec_kernel<Traits, kInFlight, kVecsPerThread, kTopk>;
};

template <class Traits>
void combine_typed(const detail::CombineShape& s, const detail::CombineArgs& a, gpu::stream_t stream) {
  using storage = typename Traits::storage;
  constexpr int C = Vec<Traits>::kCount;
  const bool permuted_layout = a.layout == MOE_ROWS_PERMUTED;
  const auto addresses = reinterpret_cast<std::uintptr_t>(a.rows) | reinterpret_cast<std::uintptr_t>(a.output);
  const bool aligned = addresses % 16 == 0;
  if (aligned && s.hidden % C == 0) {
    const auto vecs = static_cast<std::int32_t>(s.hidden / C);
    auto launch = [&](auto kernel) {
      constexpr int kVecs = decltype(kernel)::kVecs;
      const std::int32_t chunks = (vecs + kCombineThreads * kVecs - 1) / (kCombineThreads * kVecs);
      gpu::launch<decltype(kernel)::kKernel>("moe_combine kernel", static_cast<unsigned>(s.num_tokens * chunks),
                                             kCombineThreads, 0, stream, static_cast<const Vec<Traits>*>(a.rows),
                                             static_cast<Vec<Traits>*>(a.output), a.token_positions, a.topk_weights,
                                             a.scale, permuted_layout, s.topk, vecs, chunks);
    };
    switch (s.topk) {  // the counts routers use have an instance each (kTopk)
      case 2: launch(VecKernel<Traits, 2, 2, 2>{}); break;
      case 4: launch(VecKernel<Traits, 4, 1, 4>{}); break;
      case 8: launch(VecKernel<Traits, 8, 1, 8>{}); break;
      default:
        if (s.topk < 2) launch(VecKernel<Traits, 2, 2>{});
        else if (s.topk < 4) launch(VecKernel<Traits, 4, 1>{});
        else launch(VecKernel<Traits, 8, 1>{});
    }
  } else {
    const std::int64_t chunks = (s.hidden + kCombineThreads - 1) / kCombineThreads;
    gpu::launch<combine_scalar_kernel<Traits>>("moe_combine kernel", static_cast<unsigned>(s.num_tokens * chunks),
                                               kCombineThreads, 0, stream, static_cast<const storage*>(a.rows),
                                               static_cast<storage*>(a.output), a.token_positions, a.topk_weights,
                                               a.scale, permuted_layout, s.topk, s.hidden, chunks);
  }
}

}  // namespace

std::size_t combine_workspace_size(const detail::CombineShape&) { return 0; }

void combine(const detail::CombineShape& shape, const detail::CombineArgs& args, void* stream) {
  const std::int64_t chunks = (shape.hidden + kCombineThreads - 1) / kCombineThreads;
  if (shape.num_tokens * chunks > 0x7FFFFFFF)
    throw Error(MOE_ERROR_UNSUPPORTED,
                "moe_combine: num_tokens * ceil(hidden / 128) exceeds the GPU grid (2^31 - 1)");
  if (shape.hidden > 0x7FFFFFFF)
    throw Error(MOE_ERROR_UNSUPPORTED, "moe_combine: hidden >= 2^31 is not supported on GPUs");
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    combine_typed<decltype(traits)>(shape, args, gpu::to_stream(stream));
  });
}

}  // namespace backend
}  // namespace moe
