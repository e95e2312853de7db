// moe_sum with Kokkos: 16 bytes of outputs (or one element) per index of a flat parallel_for, topk adds in order in fp32 with
// the scalar rules of numeric.hpp (compiled for host and device alike, so every space gives the same bits).
#include <type_traits>

#include "backend.hpp"
#include "dispatch.hpp"
#include "numeric.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

template <class Storage>
struct alignas(16) Pack {  // 16 bytes of values: one vector load/store on GPUs
  static constexpr int kCount = 16 / sizeof(Storage);
  Storage v[kCount];
};

// Each index: Pack::kCount consecutive outputs when hidden and both pointers allow 16-byte access, else one.
template <class Traits, int kCount>
void sum_run(const detail::SumShape& s, const void* input, void* output, const Exec& exec) {
  using storage = typename Traits::storage;
  using Item = std::conditional_t<kCount == 1, storage, Pack<storage>>;
  const Item* in = static_cast<const Item*>(input);
  Item* out = static_cast<Item*>(output);
  const std::int64_t row = s.hidden / kCount;
  const std::int32_t topk = s.topk;
  Kokkos::parallel_for(
      "moe::sum", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, s.num_tokens * row),
      KOKKOS_LAMBDA(const std::int64_t j) {
        const std::int64_t t = j / row, h = j - t * row;
        const Item* x = in + t * topk * row + h;
        float acc[kCount] = {};
        for (std::int32_t k = 0; k < topk; ++k) {
          const Item v = x[k * row];
          const storage* e = reinterpret_cast<const storage*>(&v);
          for (int c = 0; c < kCount; ++c) acc[c] = acc[c] + Traits::load(e[c]);
        }
        Item y;
        storage* o = reinterpret_cast<storage*>(&y);
        for (int c = 0; c < kCount; ++c) o[c] = Traits::store(acc[c]);
        out[j] = y;
      });
}

template <class Traits>
void sum_values(const detail::SumShape& s, const void* input, void* output, const Exec& exec) {
  constexpr int C = Pack<typename Traits::storage>::kCount;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(input) | reinterpret_cast<std::uintptr_t>(output)) % 16 == 0;
  if (aligned && s.hidden % C == 0) sum_run<Traits, C>(s, input, output, exec);
  else sum_run<Traits, 1>(s, input, output, exec);
}

}  // namespace kokkos

namespace backend {

std::size_t sum_workspace_size(const detail::SumShape&) { return 0; }

void sum(const detail::SumShape& shape, const detail::SumArgs& args, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  std::unique_lock<std::mutex> lock;  // a range policy only: serialised where range launches are not re-entrant
  if (!kokkos::kRangeLaunchReentrant) lock = kokkos::lock_instance(stream);
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    kokkos::sum_values<decltype(traits)>(shape, args.input, args.output, exec);
  });
}

}  // namespace backend
}  // namespace moe
