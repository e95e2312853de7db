// moe_sum with Kokkos: one output element per index of a flat parallel_for, topk adds in order in fp32 with
// the scalar rules of numeric.hpp (compiled for host and device alike, so every space gives the same bits).
#include "backend.hpp"
#include "dispatch.hpp"
#include "numeric.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

template <class Traits>
void sum_values(const detail::SumShape& s, const void* input, void* output, const Exec& exec) {
  using storage = typename Traits::storage;
  const storage* in = static_cast<const storage*>(input);
  storage* out = static_cast<storage*>(output);
  const std::int64_t hidden = s.hidden;
  const std::int32_t topk = s.topk;
  Kokkos::parallel_for(
      "moe::sum", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, s.num_tokens * hidden),
      KOKKOS_LAMBDA(const std::int64_t j) {
        const std::int64_t t = j / hidden, h = j - t * hidden;
        const storage* x = in + t * topk * hidden + h;
        float acc = 0.0f;
        for (std::int32_t k = 0; k < topk; ++k) acc = acc + Traits::load(x[k * hidden]);
        out[j] = Traits::store(acc);
      });
}

}  // namespace kokkos

namespace backend {

void sum(const detail::SumShape& shape, const void* input, moe_dtype_t dtype, void* output, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  detail::dispatch_value_traits(dtype, [&](auto traits) {
    kokkos::sum_values<decltype(traits)>(shape, input, output, exec);
  });
}

}  // namespace backend
}  // namespace moe
