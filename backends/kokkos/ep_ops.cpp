// Expert parallelism on the Kokkos backend: the per-index bodies of ep_kernels.hpp in parallel_for over their
// ranges, on the execution space instance of the caller's stream (any Kokkos space: host or device). The engine
// waits for the instance before MPI touches the buffers.
#include <cstdint>

#include "backend.hpp"
#include "dispatch.hpp"
#include "ep/ep_kernels.hpp"
#include "ep/ops.hpp"
#include "runtime.hpp"

namespace moe {
namespace ep {
namespace ops {

namespace k = kernels;
using kokkos::Exec;
using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>;

namespace {
Exec exec_of(void* stream) {
  kokkos::ensure_initialized();
  return kokkos::instance_for(stream);
}
// A call's lock: range kernels only (runtime.hpp, lock_for_range_kernels), Kokkos initialised first.
std::unique_lock<std::mutex> lock_of(void* stream) {
  kokkos::ensure_initialized();
  return kokkos::lock_for_range_kernels(stream);
}
}  // namespace

void layout(const k::LayoutView& v, void* stream) {
  const auto lock = lock_of(stream);
  const Exec exec = exec_of(stream);
  if (v.num_chunks > 0)
    Kokkos::parallel_for("moe::ep::layout_count", Range(exec, 0, v.num_chunks),
                         KOKKOS_LAMBDA(const std::int64_t c) { k::layout_count_chunk(v, c); });
  Kokkos::parallel_for("moe::ep::layout_scan", Range(exec, 0, v.world),
                       KOKKOS_LAMBDA(const std::int64_t d) { k::layout_scan_dest(v, static_cast<std::int32_t>(d)); });
  Kokkos::parallel_for("moe::ep::layout_finish", Range(exec, 0, 1), KOKKOS_LAMBDA(const std::int64_t) { k::layout_finish(v); });
  if (v.num_chunks > 0)
    Kokkos::parallel_for("moe::ep::layout_place", Range(exec, 0, v.num_chunks),
                         KOKKOS_LAMBDA(const std::int64_t c) { k::layout_place_chunk(v, c); });
}

void derive(const std::int64_t* g, std::int32_t world, std::int32_t me, std::int64_t* derived, void* stream) {
  const auto lock = lock_of(stream);
  Kokkos::parallel_for("moe::ep::derive", Range(exec_of(stream), 0, 1), KOKKOS_LAMBDA(const std::int64_t) {
    std::uint64_t key = k::kOk;
    for (std::int32_t s = 0; s < world; ++s)
      for (std::int32_t d = 0; d < world; ++d) key = k::key_min(key, k::derive_check(g, world, s, d));
    k::derive_offsets(g, world, me, key, derived);
  });
}

void pack_dispatch(const k::PackView& v, std::int64_t rows, void* stream) {
  const auto lock = lock_of(stream);
  if (rows <= 0) return;
  Kokkos::parallel_for("moe::ep::pack_dispatch", Range(exec_of(stream), 0, rows), KOKKOS_LAMBDA(const std::int64_t p) {
    const std::int64_t t = k::pack_token(v, p);
    if (t < 0) return;
    for (std::int64_t b = 0; b < v.row_bytes; ++b) v.send_rows[p * v.row_bytes + b] = v.hidden[t * v.row_bytes + b];
    for (std::int64_t j = 0; j < v.scales_per_token; ++j)
      v.send_scales[p * v.scales_per_token + j] = v.scales[t * v.scales_per_token + j];
    k::pack_weights(v, p, t);
  });
}

void unpack_dispatch(const k::UnpackView& v, std::int64_t rows, void* stream) {
  const auto lock = lock_of(stream);
  if (rows <= 0) return;
  Kokkos::parallel_for("moe::ep::unpack_dispatch", Range(exec_of(stream), 0, rows),
                       KOKKOS_LAMBDA(const std::int64_t r) { k::unpack_row(v, r); });
}

void pack_combine(const k::CombinePackView& v, std::int64_t slots, const void* expert_out, moe_dtype_t dtype,
                  std::int64_t hidden, void* csend, std::int32_t* missing, void* stream) {
  const auto lock = lock_of(stream);
  if (slots <= 0) return;
  const Exec exec = exec_of(stream);
  detail::dispatch_value_traits(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    using storage = typename Traits::storage;
    const storage* in = static_cast<const storage*>(expert_out);
    storage* out = static_cast<storage*>(csend);
    Kokkos::parallel_for("moe::ep::pack_combine", Range(exec, 0, slots), KOKKOS_LAMBDA(const std::int64_t q) {
      const std::int64_t row = k::combine_source_row(v, q);
      if (row == -1) return;
      if (row == -2) {
        const storage nan = Traits::store(numeric::f32_from_bits(numeric::kCanonicalNanF32));
        for (std::int64_t h = 0; h < hidden; ++h) out[q * hidden + h] = nan;
        *missing = 1;  // every writer writes the same value
        return;
      }
      for (std::int64_t h = 0; h < hidden; ++h) out[q * hidden + h] = in[row * hidden + h];
    });
  });
}

void reduce(const ReduceArgs& a, void* stream) {
  const auto lock = lock_of(stream);
  if (a.num_tokens * a.hidden <= 0) return;
  const Exec exec = exec_of(stream);
  detail::dispatch_value_traits(a.dtype, [&](auto traits) {
    using Traits = decltype(traits);
    using storage = typename Traits::storage;
    const k::ReduceView<Traits> v{a.topk,    a.hidden, a.derived, a.combine_src, static_cast<const storage*>(a.crecv),
                                  a.weights, a.scale,  static_cast<storage*>(a.output)};
    const std::int64_t hidden = a.hidden;
    Kokkos::parallel_for("moe::ep::reduce", Range(exec, 0, a.num_tokens * hidden), KOKKOS_LAMBDA(const std::int64_t i) {
      k::reduce_element(v, i / hidden, i % hidden);
    });
  });
}

}  // namespace ops
}  // namespace ep
}  // namespace moe
