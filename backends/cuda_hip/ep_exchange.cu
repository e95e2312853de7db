// Expert parallelism on the GPU, part 2: packing rows for the exchange, unpacking what arrived, packing expert
// outputs back, and the weighted reduction at the tokens' home (ep/weighted_sum.hpp: moe_combine's arithmetic,
// __fmul_rn / __fadd_rn, no FMA). Rows are copied by a block each, 16 bytes per thread where alignment allows.
// In capacity mode every kernel reads the device-side verdict and skips its work after an error (the reduction
// then writes canonical NaN): nothing here synchronises with the host.
#include "backend.hpp"
#include "dispatch.hpp"
#include "ep/ep_kernels.hpp"
#include "ep/ops.hpp"
#include "gpu_runtime.hpp"
#include "primitives.cuh"

namespace moe {
namespace ep {
namespace ops {

namespace k = kernels;

namespace {

constexpr int kRowThreads = 128;
constexpr int kThreads = 256;

unsigned blocks(std::int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

// dst[0, bytes) = src[0, bytes), by the threads of one block.
__device__ __forceinline__ void copy_row(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                                         std::int64_t bytes) {
  if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src) |
        static_cast<std::uintptr_t>(bytes)) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (std::int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
  } else if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src) |
               static_cast<std::uintptr_t>(bytes)) & 3) == 0) {
    const std::uint32_t* s = reinterpret_cast<const std::uint32_t*>(src);
    std::uint32_t* d = reinterpret_cast<std::uint32_t*>(dst);
    for (std::int64_t i = threadIdx.x; i < bytes / 4; i += blockDim.x) d[i] = s[i];
  } else {
    for (std::int64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void __launch_bounds__(kRowThreads) pack_dispatch_kernel(k::PackView v) {
  gpu::begin_after_prior_grid();
  const std::int64_t p = blockIdx.x;
  const std::int64_t t = k::pack_token(v, p);
  if (t < 0) return;
  copy_row(v.send_rows + p * v.row_bytes, v.hidden + t * v.row_bytes, v.row_bytes);
  for (std::int64_t j = threadIdx.x; j < v.scales_per_token; j += kRowThreads)
    v.send_scales[p * v.scales_per_token + j] = v.scales[t * v.scales_per_token + j];
  if (threadIdx.x == 0) k::pack_weights(v, p, t);
}

__global__ void __launch_bounds__(kThreads) unpack_kernel(k::UnpackView v, std::int64_t rows) {
  gpu::begin_after_prior_grid();
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r < rows) k::unpack_row(v, r);
}

template <class Traits>
__global__ void __launch_bounds__(kRowThreads) pack_combine_kernel(k::CombinePackView v, const void* expert_out,
                                                                   std::int64_t hidden, void* csend,
                                                                   std::int32_t* missing) {
  using storage = typename Traits::storage;
  gpu::begin_after_prior_grid();
  const std::int64_t q = blockIdx.x;
  const std::int64_t row = k::combine_source_row(v, q);
  if (row == -1) return;
  storage* out = static_cast<storage*>(csend) + q * hidden;
  if (row == -2) {  // a present slot with no row: NaN, never a silently missing term
    const storage nan = Traits::store(numeric::f32_from_bits(numeric::kCanonicalNanF32));
    for (std::int64_t h = threadIdx.x; h < hidden; h += kRowThreads) out[h] = nan;
    if (threadIdx.x == 0) *missing = 1;
    return;
  }
  copy_row(reinterpret_cast<unsigned char*>(out),
           reinterpret_cast<const unsigned char*>(static_cast<const storage*>(expert_out) + row * hidden),
           hidden * static_cast<std::int64_t>(sizeof(storage)));
}

// One output element per thread, a block of threads per chunk of one token's row.
template <class Traits>
__global__ void __launch_bounds__(kThreads) reduce_kernel(k::ReduceView<Traits> v, std::int64_t chunks) {
  gpu::begin_after_prior_grid();
  const std::int64_t t = blockIdx.x / chunks;
  const std::int64_t h = (blockIdx.x % chunks) * kThreads + threadIdx.x;
  if (h < v.hidden) k::reduce_element(v, t, h);
}

// 16 bytes of one token's output per thread: the token's rows loaded kInFlight at a time, every load
// unconditional (past topk it reloads the round's first row, unused), then reduced element by element in k
// order with WeightedSum: the operations and order of reduce_element. Needs 16-byte aligned rows.
template <class Traits, int kInFlight>
__global__ void __launch_bounds__(kThreads) reduce_vec_kernel(k::ReduceView<Traits> v, std::int32_t vecs,
                                                              std::int32_t chunks) {
  using storage = typename Traits::storage;
  constexpr int C = 16 / sizeof(storage);
  gpu::begin_after_prior_grid();
  const std::int64_t t = blockIdx.x / static_cast<unsigned>(chunks);
  const int vec = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks)) * kThreads + static_cast<int>(threadIdx.x);
  if (vec >= vecs) return;
  gpu::Vec16<Traits>* out = reinterpret_cast<gpu::Vec16<Traits>*>(v.output + t * v.hidden) + vec;
  gpu::Vec16<Traits> y;
  if (!k::reduce_token_ok(v, t)) {  // as reduce_element: canonical NaN, the status says why
#pragma unroll
    for (int c = 0; c < C; ++c) y.v[c] = Traits::store(numeric::f32_from_bits(numeric::kCanonicalNanF32));
    *out = y;
    return;
  }
  const std::int32_t* src = v.combine_src + t * v.topk;
  const float* w = v.weights != nullptr ? v.weights + t * v.topk : nullptr;
  WeightedSum acc[C];
  for (std::int32_t k0 = 0; k0 < v.topk; k0 += kInFlight) {
    gpu::Vec16<Traits> x[kInFlight];
    float wk[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const std::int32_t kk = k0 + j < v.topk ? k0 + j : k0;
      x[j] = reinterpret_cast<const gpu::Vec16<Traits>*>(v.crecv + static_cast<std::int64_t>(src[kk]) * v.hidden)[vec];
      wk[j] = w != nullptr ? w[kk] : 1.0f;
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j)
      if (k0 + j < v.topk) {  // (no break: clang will not unroll a loop that leaves early)
#pragma unroll
        for (int c = 0; c < C; ++c) acc[c].add(wk[j], Traits::load(x[j].v[c]));
      }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) y.v[c] = Traits::store(acc[c].finish(v.scale));
  *out = y;
}

}  // namespace

void pack_dispatch(const k::PackView& v, std::int64_t rows, void* stream) {
  if (rows <= 0) return;
  gpu::launch<pack_dispatch_kernel>("ep pack_dispatch", static_cast<unsigned>(rows), kRowThreads, 0,
                                    gpu::to_stream(stream), v);
}

void unpack_dispatch(const k::UnpackView& v, std::int64_t rows, void* stream) {
  if (rows <= 0) return;
  gpu::launch<unpack_kernel>("ep unpack", blocks(rows, kThreads), kThreads, 0, gpu::to_stream(stream), v, rows);
}

void pack_combine(const k::CombinePackView& v, std::int64_t slots, const void* expert_out, moe_dtype_t dtype,
                  std::int64_t hidden, void* csend, std::int32_t* missing, void* stream) {
  if (slots <= 0) return;
  detail::dispatch_value_traits(dtype, [&](auto traits) {
    gpu::launch<pack_combine_kernel<decltype(traits)>>("ep pack_combine", static_cast<unsigned>(slots), kRowThreads, 0,
                                                       gpu::to_stream(stream), v, expert_out, hidden, csend, missing);
  });
}

void reduce(const ReduceArgs& a, void* stream) {
  if (a.num_tokens * a.hidden <= 0) return;
  const std::int64_t chunks = (a.hidden + kThreads - 1) / kThreads;
  if (a.num_tokens * chunks > 0x7FFFFFFF)
    throw Error(MOE_ERROR_UNSUPPORTED, "moe_ep_combine: num_tokens * ceil(hidden / 256) exceeds the GPU grid");
  detail::dispatch_value_traits(a.dtype, [&](auto traits) {
    using Traits = decltype(traits);
    using storage = typename Traits::storage;
    const k::ReduceView<Traits> v{a.topk,    a.hidden, a.derived, a.combine_src, static_cast<const storage*>(a.crecv),
                                  a.weights, a.scale,  static_cast<storage*>(a.output)};
    constexpr int C = 16 / sizeof(storage);
    const bool aligned =
        ((reinterpret_cast<std::uintptr_t>(a.crecv) | reinterpret_cast<std::uintptr_t>(a.output)) & 15) == 0;
    if (aligned && a.hidden % C == 0 && a.hidden / C <= 0x7FFFFFFF) {  // 16-byte vectors
      const auto vecs = static_cast<std::int32_t>(a.hidden / C);
      const std::int32_t vchunks = (vecs + kThreads - 1) / kThreads;
      const auto grid = static_cast<unsigned>(a.num_tokens * vchunks);
      if (a.topk <= 4)
        gpu::launch<reduce_vec_kernel<Traits, 4>>("ep reduce", grid, kThreads, 0, gpu::to_stream(stream), v, vecs,
                                                  vchunks);
      else
        gpu::launch<reduce_vec_kernel<Traits, 8>>("ep reduce", grid, kThreads, 0, gpu::to_stream(stream), v, vecs,
                                                  vchunks);
      return;
    }
    gpu::launch<reduce_kernel<Traits>>("ep reduce", static_cast<unsigned>(a.num_tokens * chunks), kThreads, 0,
                                       gpu::to_stream(stream), v, chunks);
  });
}

}  // namespace ops
}  // namespace ep
}  // namespace moe
