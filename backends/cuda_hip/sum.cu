// moe_sum on the GPU, one source for CUDA and HIP. Memory-bound: each thread owns one 16-byte vector of one
// token's output and reads the topk matching input vectors (all loads issued before the first add), adds in
// fp32 in k order with IEEE adds (no contraction, no reassociation), rounds once via numeric.hpp's rules.
#include "backend.hpp"
#include "dispatch.hpp"
#include "gpu_runtime.hpp"
#include "numeric.hpp"
#include "primitives.cuh"

namespace moe {
namespace backend {

namespace {

// The tuning of moe_sum, each row with the measurement behind it (perf/NOTES.md step N, H200).
struct SumTuning {
  static constexpr int kThreads = 128;  // a block of 128 threads, each one 16-byte vector (kVecs) of a token's row
  // topk <= 2: 2 input vectors in flight and 2 outputs per thread; <= 4: 4 and 1; more: 8 and 1, in rounds. One
  // kernel for every topk held 8 in flight (72 registers): bf16 4096x2x4096 0.71 -> 0.935 of the copy (step 9);
  // 4 outputs per thread for topk <= 2 took 1.16x at 4096x2x2048, 1.29x with one token (step 19)
  static constexpr int kSmallInFlight = 2, kSmallVecs = 2, kMidInFlight = 4, kLargeInFlight = 8;
  // an instance per common topk (a compile-time constant, no k loop): one token 0.79-0.91 of the general
  // instance's time (1x8x4096 bf16 1.37 -> 1.09 us), >= 4096 tokens 0.99-1.00 (step 36, with the index arithmetic
  // before the dependent-launch wait)
  static constexpr int kSmallTopk = 2, kMidTopk = 4, kLargeTopk = 8;
};
constexpr int kSumThreads = SumTuning::kThreads;

template <class Traits>
using Vec = gpu::Vec16<Traits>;  // 16 bytes of values (primitives.cuh)

__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }

// grid.x = num_tokens * chunks; each block covers kSumThreads * kVecs vectors of one token's row; each thread
// kVecs vectors kSumThreads apart. kInFlight: input vectors loaded together (topk up to it in one round,
// more in rounds). Small topk gets small kInFlight (fewer registers, more threads resident) and kVecs 2 (loads
// in flight per thread): what a memory-bound kernel needs. kTopk > 0: topk known at compile time (2, 4, 8): no
// k loop, no per-k tests, a smaller kernel: a one-token call is little more than fetching the kernel's code (ncu:
// instruction-fetch stalls; SumTuning).
template <class Traits, int kInFlight, int kVecs, int kTopk>
__global__ void __launch_bounds__(kSumThreads) sum_vec_kernel(const Vec<Traits>* __restrict__ in, Vec<Traits>* __restrict__ out,
                                                             std::int32_t topk_arg, std::int32_t vecs_per_row,
                                                             std::int32_t chunks) {
  const std::int32_t topk = kTopk > 0 ? kTopk : topk_arg;
  constexpr int C = Vec<Traits>::kCount;
  const std::int64_t token = blockIdx.x / static_cast<unsigned>(chunks);  // 32-bit division: grid < 2^31
  const int v0 = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks)) * kSumThreads * kVecs + threadIdx.x;
  const Vec<Traits>* src = in + token * topk * vecs_per_row;
  float acc[kVecs][C];
#pragma unroll
  for (int u = 0; u < kVecs; ++u)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[u][c] = 0.0f;
  gpu::begin_after_prior_grid();  // the index arithmetic above overlaps the end of the call before
  for (int k0 = 0; k0 < topk; k0 += kInFlight) {
    Vec<Traits> x[kVecs][kInFlight];
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (k0 + k < topk && v0 + u * kSumThreads < vecs_per_row)
          x[u][k] = src[static_cast<std::int64_t>(k0 + k) * vecs_per_row + v0 + u * kSumThreads];
#pragma unroll
    for (int u = 0; u < kVecs; ++u)
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (k0 + k < topk) {
#pragma unroll
          for (int c = 0; c < C; ++c) acc[u][c] = add(acc[u][c], Traits::load(x[u][k].v[c]));
        }
  }
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    if (v0 + u * kSumThreads >= vecs_per_row) continue;
    Vec<Traits> y;
#pragma unroll
    for (int c = 0; c < C; ++c) y.v[c] = Traits::store(acc[u][c]);
    out[token * vecs_per_row + v0 + u * kSumThreads] = y;
  }
}

// Any hidden / alignment: one element per thread.
template <class Traits>
__global__ void __launch_bounds__(kSumThreads) sum_scalar_kernel(const typename Traits::storage* __restrict__ in,
                                                                typename Traits::storage* __restrict__ out,
                                                                std::int32_t topk, std::int64_t hidden,
                                                                std::int64_t chunks) {
  gpu::begin_after_prior_grid();
  const std::int64_t token = blockIdx.x / chunks;
  const std::int64_t h = (blockIdx.x % chunks) * kSumThreads + threadIdx.x;
  if (h >= hidden) return;
  const auto* src = in + token * topk * hidden + h;
  float acc = 0.0f;
  for (int k = 0; k < topk; ++k) acc = add(acc, Traits::load(src[k * hidden]));
  out[token * hidden + h] = Traits::store(acc);
}

template <class Traits, int kInFlight, int kVecsPerThread, int kTopk = 0>
struct VecKernel {  // a sum_vec_kernel instance and its geometry, as one type
  static constexpr int kVecs = kVecsPerThread;
  static constexpr auto kKernel = sum_vec_kernel<Traits, kInFlight, kVecsPerThread, kTopk>;
};

template <class Traits>
void sum_typed(const detail::SumShape& s, const void* input, void* output, gpu::stream_t stream) {
  using storage = typename Traits::storage;
  constexpr int C = Vec<Traits>::kCount;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(input) | reinterpret_cast<std::uintptr_t>(output)) % 16 == 0;
  if (aligned && s.hidden % C == 0) {
    const auto vecs = static_cast<std::int32_t>(s.hidden / C);
    auto launch = [&](auto kernel) {
      constexpr int kVecs = decltype(kernel)::kVecs;
      const std::int32_t chunks = (vecs + kSumThreads * kVecs - 1) / (kSumThreads * kVecs);
      gpu::launch<decltype(kernel)::kKernel>("moe_sum kernel", static_cast<unsigned>(s.num_tokens * chunks), kSumThreads, 0,
                                             stream, static_cast<const Vec<Traits>*>(input),
                                             static_cast<Vec<Traits>*>(output), s.topk, vecs, chunks);
    };
    using T = SumTuning;
    switch (s.topk) {  // the counts routers use have an instance each (kTopk)
      case T::kSmallTopk: launch(VecKernel<Traits, T::kSmallInFlight, T::kSmallVecs, T::kSmallTopk>{}); break;
      case T::kMidTopk: launch(VecKernel<Traits, T::kMidInFlight, 1, T::kMidTopk>{}); break;
      case T::kLargeTopk: launch(VecKernel<Traits, T::kLargeInFlight, 1, T::kLargeTopk>{}); break;
      default:
        if (s.topk < T::kSmallTopk) launch(VecKernel<Traits, T::kSmallInFlight, T::kSmallVecs>{});
        else if (s.topk < T::kMidTopk) launch(VecKernel<Traits, T::kMidInFlight, 1>{});
        else launch(VecKernel<Traits, T::kLargeInFlight, 1>{});
    }
  } else {
    const std::int64_t chunks = (s.hidden + kSumThreads - 1) / kSumThreads;
    gpu::launch<sum_scalar_kernel<Traits>>("moe_sum kernel", static_cast<unsigned>(s.num_tokens * chunks), kSumThreads, 0,
                                           stream, static_cast<const storage*>(input), static_cast<storage*>(output),
                                           s.topk, s.hidden, chunks);
  }
}

}  // namespace

std::size_t sum_workspace_size(const detail::SumShape&) { return 0; }

void sum(const detail::SumShape& shape, const detail::SumArgs& args, void* stream) {
  const std::int64_t chunks = (shape.hidden + kSumThreads - 1) / kSumThreads;
  if (shape.num_tokens * chunks > 0x7FFFFFFF)
    throw Error(MOE_ERROR_UNSUPPORTED, "moe_sum: num_tokens * ceil(hidden / 128) exceeds the GPU grid (2^31 - 1)");
  if (shape.hidden > 0x7FFFFFFF) throw Error(MOE_ERROR_UNSUPPORTED, "moe_sum: hidden >= 2^31 is not supported on GPUs");
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    sum_typed<decltype(traits)>(shape, args.input, args.output, gpu::to_stream(stream));
  });
}

}  // namespace backend
}  // namespace moe
