// moe_combine with Kokkos: sum.cpp's pattern (on GPU spaces 16 bytes of outputs, or one element, per index of a
// flat parallel_for; host spaces: combine_host, chunks of a token's row) with each slot's row looked up, its
// presence tested and its weight applied, in k order, by the scalar rules of combine.hpp (compiled for host and
// device alike: every space gives the reference's bits).
#include <type_traits>

#include "backend.hpp"
#include "dispatch.hpp"
#include "numeric.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

template <class Storage>
struct alignas(16) CombinePack {  // 16 bytes of values: one vector load/store on GPUs
  static constexpr int kCount = 16 / sizeof(Storage);
  Storage v[kCount];
};

template <class Traits, int kCount>
void combine_run(const detail::CombineShape& s, const detail::CombineArgs& a, const Exec& exec) {
  using storage = typename Traits::storage;
  using Item = std::conditional_t<kCount == 1, storage, CombinePack<storage>>;
  const Item* rows = static_cast<const Item*>(a.rows);
  Item* out = static_cast<Item*>(a.output);
  const std::int32_t* positions = a.token_positions;
  const float* weights = a.topk_weights;
  const float scale = a.scale;
  const bool permuted = a.layout == MOE_ROWS_PERMUTED;
  const std::int64_t row = s.hidden / kCount;
  const std::int32_t topk = s.topk;
  Kokkos::parallel_for(
      "moe::combine", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, s.num_tokens * row),
      KOKKOS_LAMBDA(const std::int64_t j) {
        const std::int64_t t = j / row, h = j - t * row;
        float acc[kCount] = {};
        for (std::int32_t k = 0; k < topk; ++k) {
          const std::int64_t i = t * topk + k;
          const std::int64_t r = detail::combine_row(i, positions, permuted);
          if (r < 0) continue;  // absent: never read
          const float w = weights != nullptr ? weights[i] : 1.0f;
          const Item v = rows[r * row + h];
          const storage* e = reinterpret_cast<const storage*>(&v);
          for (int c = 0; c < kCount; ++c) acc[c] = detail::combine_slot(acc[c], w, Traits::load(e[c]));
        }
        Item y;
        storage* o = reinterpret_cast<storage*>(&y);
        for (int c = 0; c < kCount; ++c) o[c] = Traits::store(detail::combine_out(acc[c], scale));
        out[j] = y;
      });
}

// Host spaces: sum.cpp's sum_host with the slots' rows, presence and weights (one index per token and chunk of
// kHostChunk outputs, fp32 accumulators on the stack, a contiguous pass per present slot that the compiler
// vectorises). The same operations per output in the same k order, so the same bits.
template <class Traits>
void combine_host(const detail::CombineShape& s, const detail::CombineArgs& a, const Exec& exec) {
  using storage = typename Traits::storage;
  const storage* rows = static_cast<const storage*>(a.rows);
  storage* out = static_cast<storage*>(a.output);
  const std::int32_t* positions = a.token_positions;
  const float* weights = a.topk_weights;
  const float scale = a.scale;
  const bool permuted = a.layout == MOE_ROWS_PERMUTED;
  const std::int64_t hidden = s.hidden;
  const std::int32_t topk = s.topk;
  for_each_host_chunk(
      "moe::combine::host", exec, s.num_tokens, hidden, [=](std::int64_t t, std::int64_t h0, std::int64_t len) {
        float acc[kHostChunk];
        for (std::int64_t h = 0; h < len; ++h) acc[h] = 0.0f;
        for (std::int32_t k = 0; k < topk; ++k) {
          const std::int64_t i = t * topk + k;
          const std::int64_t r = detail::combine_row(i, positions, permuted);
          if (r < 0) continue;  // absent: never read
          const float w = weights != nullptr ? weights[i] : 1.0f;
          const storage* x = rows + r * hidden + h0;
          for (std::int64_t h = 0; h < len; ++h) acc[h] = detail::combine_slot(acc[h], w, Traits::load(x[h]));
        }
        storage* o = out + t * hidden + h0;
        for (std::int64_t h = 0; h < len; ++h) o[h] = Traits::store(detail::combine_out(acc[h], scale));
      });
}

template <class Traits>
void combine_values(const detail::CombineShape& s, const detail::CombineArgs& a, const Exec& exec) {
  if constexpr (kHostSpace) {
    combine_host<Traits>(s, a, exec);
  } else {
    constexpr int C = CombinePack<typename Traits::storage>::kCount;
    const auto addresses = reinterpret_cast<std::uintptr_t>(a.rows) | reinterpret_cast<std::uintptr_t>(a.output);
    const bool aligned = addresses % 16 == 0;
    if (aligned && s.hidden % C == 0) combine_run<Traits, C>(s, a, exec);
    else combine_run<Traits, 1>(s, a, exec);
  }
}

}  // namespace kokkos

namespace backend {

std::size_t combine_workspace_size(const detail::CombineShape&) { return 0; }

void combine(const detail::CombineShape& shape, const detail::CombineArgs& args, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  const auto lock = kokkos::lock_for_range_kernels(stream);
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    kokkos::combine_values<decltype(traits)>(shape, args, exec);
  });
}

}  // namespace backend
}  // namespace moe
