// moe_permute with Kokkos: a team per row (grid-stride over the rows), its threads copying the row in words of
// 16 bytes where the row bytes and both pointers allow (else 8/4/2/1). The row count,
// min(*num_tokens_post_pad, max_rows), is read inside the kernel (no host read-back): the league is sized for
// max_rows, teams beyond the rows find none.
#include <algorithm>

#include "backend.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

template <class W>
void permute_words(const detail::PermuteShape& s, const detail::PermuteArgs& a, const Exec& exec) {
  using Policy = Kokkos::TeamPolicy<Exec>;
  const W* hidden = static_cast<const W*>(a.hidden);
  W* out = static_cast<W*>(a.permuted);
  const std::int32_t* sorted = a.sorted_token_ids;
  const std::int32_t* post_pad = a.num_tokens_post_pad;
  const std::int64_t row_words = s.row_bytes / static_cast<std::int64_t>(sizeof(W));
  const std::int64_t numel = s.numel(), max_rows = s.max_rows;
  const std::int32_t topk = s.topk;
  const bool host = kHostSpace;
  const int team = host ? 1 : 128;
  const auto league = static_cast<int>(std::min<std::int64_t>(max_rows, host ? 4096 : 65536));
  Kokkos::parallel_for(
      "moe::permute", Policy(exec, league, team), KOKKOS_LAMBDA(const typename Policy::member_type& m) {
        const std::int64_t rows = detail::permute_rows(*post_pad, max_rows);
        for (std::int64_t p = m.league_rank(); p < rows; p += m.league_size()) {
          const std::int64_t id = sorted[p];
          W* dst = out + p * row_words;
          if (id >= 0 && id < numel) {
            const W* src = hidden + (id / topk) * row_words;
            Kokkos::parallel_for(Kokkos::TeamThreadRange(m, row_words), [&](const std::int64_t w) { dst[w] = src[w]; });
          } else {  // padding: a row of zero bytes
            Kokkos::parallel_for(Kokkos::TeamThreadRange(m, row_words), [&](const std::int64_t w) { dst[w] = W{}; });
          }
        }
      });
}

}  // namespace kokkos

namespace backend {

std::size_t permute_workspace_size(const detail::PermuteShape&) { return 0; }

void permute(const detail::PermuteShape& shape, const detail::PermuteArgs& args, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  const int word = detail::permute_word_bytes(shape.row_bytes, args.hidden, args.permuted);
  const auto lock = kokkos::lock_instance(stream);  // a team policy: one call at a time per instance
  detail::dispatch_permute_word(word, [&](auto w) { kokkos::permute_words<decltype(w)>(shape, args, exec); });
}

}  // namespace backend
}  // namespace moe
