// moe_sum with Kokkos: on GPU spaces 16 bytes of outputs (or one element) per index of a flat parallel_for (host
// spaces: sum_host, chunks of a token's row), topk adds in order in fp32 with
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

// Host spaces: one index per (token, chunk of kHostChunk outputs; runtime.hpp), the chunk's fp32 accumulators on
// the stack, topk passes over contiguous values (loops the compiler vectorises; the per-index Pack loop above it
// did not). The same adds in the same order from the same 0, so the same bits.
template <class Traits>
void sum_host(const detail::SumShape& s, const void* input, void* output, const Exec& exec) {
  using storage = typename Traits::storage;
  const storage* in = static_cast<const storage*>(input);
  storage* out = static_cast<storage*>(output);
  const std::int64_t hidden = s.hidden;
  const std::int32_t topk = s.topk;
  for_each_host_chunk(
      "moe::sum::host", exec, s.num_tokens, hidden, [=](std::int64_t t, std::int64_t h0, std::int64_t len) {
        const storage* x = in + t * topk * hidden + h0;
        float acc[kHostChunk];
        for (std::int64_t h = 0; h < len; ++h) acc[h] = 0.0f;
        for (std::int32_t k = 0; k < topk; ++k) {
          const storage* xk = x + k * hidden;
          for (std::int64_t h = 0; h < len; ++h) acc[h] = acc[h] + Traits::load(xk[h]);
        }
        storage* o = out + t * hidden + h0;
        for (std::int64_t h = 0; h < len; ++h) o[h] = Traits::store(acc[h]);
      });
}

template <class Traits>
void sum_values(const detail::SumShape& s, const void* input, void* output, const Exec& exec) {
  if constexpr (kHostSpace) {
    sum_host<Traits>(s, input, output, exec);
  } else {
    constexpr int C = Pack<typename Traits::storage>::kCount;
    const bool aligned =
        (reinterpret_cast<std::uintptr_t>(input) | reinterpret_cast<std::uintptr_t>(output)) % 16 == 0;
    if (aligned && s.hidden % C == 0) sum_run<Traits, C>(s, input, output, exec);
    else sum_run<Traits, 1>(s, input, output, exec);
  }
}

}  // namespace kokkos

namespace backend {

std::size_t sum_workspace_size(const detail::SumShape&) { return 0; }

void sum(const detail::SumShape& shape, const detail::SumArgs& args, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  const auto lock = kokkos::lock_for_range_kernels(stream);
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    kokkos::sum_values<decltype(traits)>(shape, args.input, args.output, exec);
  });
}

}  // namespace backend
}  // namespace moe
