// Expert parallelism on the CPU backend: the per-index bodies of ep_kernels.hpp in plain loops, in index order.
#include <cstring>
#include <vector>

#include "dispatch.hpp"
#include "ep/ep_kernels.hpp"
#include "ep/ops.hpp"

namespace moe {
namespace ep {
namespace ops {

namespace k = kernels;

void layout(const k::LayoutView& v, void*) {
  for (std::int64_t c = 0; c < v.num_chunks; ++c) k::layout_count_chunk(v, c);
  for (std::int32_t d = 0; d < v.world; ++d) k::layout_scan_dest(v, d);
  k::layout_finish(v);
  for (std::int64_t c = 0; c < v.num_chunks; ++c) k::layout_place_chunk(v, c);
}

void derive(const std::int64_t* g, std::int32_t world, std::int32_t me, std::int64_t* derived, void*) {
  std::uint64_t key = k::kOk;
  for (std::int32_t s = 0; s < world; ++s)
    for (std::int32_t d = 0; d < world; ++d) key = k::key_min(key, k::derive_check(g, world, s, d));
  k::derive_offsets(g, world, me, key, derived);
}

void pack_dispatch(const k::PackView& v, std::int64_t rows, void*) {
  const auto rb = static_cast<std::size_t>(v.row_bytes);
  const auto sb = static_cast<std::size_t>(v.scales_per_token) * sizeof(float);
  for (std::int64_t p = 0; p < rows; ++p) {
    const std::int64_t t = k::pack_token(v, p);
    if (t < 0) continue;
    std::memcpy(v.send_rows + p * v.row_bytes, v.hidden + t * v.row_bytes, rb);
    if (sb > 0) std::memcpy(v.send_scales + p * v.scales_per_token, v.scales + t * v.scales_per_token, sb);
    k::pack_weights(v, p, t);
  }
}

void unpack_dispatch(const k::UnpackView& v, std::int64_t rows, void*) {
  for (std::int64_t r = 0; r < rows; ++r) k::unpack_row(v, r);
}

void pack_combine(const k::CombinePackView& v, std::int64_t slots, const void* expert_out, moe_dtype_t dtype,
                  std::int64_t hidden, void* csend, std::int32_t* missing, void*) {
  detail::dispatch_value_traits(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    using storage = typename Traits::storage;
    const storage* in = static_cast<const storage*>(expert_out);
    storage* out = static_cast<storage*>(csend);
    const storage nan = Traits::store(numeric::f32_from_bits(numeric::kCanonicalNanF32));
    for (std::int64_t q = 0; q < slots; ++q) {
      const std::int64_t row = k::combine_source_row(v, q);
      if (row == -1) continue;
      if (row == -2) {
        for (std::int64_t h = 0; h < hidden; ++h) out[q * hidden + h] = nan;
        *missing = 1;
        continue;
      }
      std::memcpy(out + q * hidden, in + row * hidden, static_cast<std::size_t>(hidden) * sizeof(storage));
    }
  });
}

void reduce(const ReduceArgs& a, void*) {
  detail::dispatch_value_traits(a.dtype, [&](auto traits) {
    using Traits = decltype(traits);
    using storage = typename Traits::storage;
    const k::ReduceView<Traits> v{a.topk,  a.hidden, a.derived, a.combine_src, static_cast<const storage*>(a.crecv),
                                  a.weights, a.scale, static_cast<storage*>(a.output)};
    std::vector<WeightedSum> acc(static_cast<std::size_t>(a.hidden));
    for (std::int64_t t = 0; t < a.num_tokens; ++t) k::reduce_token_row(v, t, acc.data());
  });
}

}  // namespace ops
}  // namespace ep
}  // namespace moe
