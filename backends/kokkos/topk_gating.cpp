// moe_topk_gating with Kokkos: one team per token (TeamPolicy; a team is a warp's worth of threads on GPUs, one
// thread on host spaces), the CUDA/HIP backend's general path (backends/cuda_hip/topk_gating.cu, kBlock) in team
// patterns: the arithmetic of gating_rules.hpp in the reference's order, keys recomputed from the logits in every
// pass, the kept groups and then the chosen experts found by a radix select over the 48-bit order keys (counts in
// team scratch), the chosen gathered into the output row and sorted there by a one-direction bitonic network, the
// weights computed in place; every order-dependent sum serial in one thread. Scratch: level 0, a few KiB per team,
// whatever the shape. No host synchronisation. Host spaces take gating_host where topk and topk_groups are small: a
// token per index, the reference's steps in one pass each, the chosen kept in a sorted list on the stack.
#include "backend.hpp"
#include "dispatch.hpp"
#include "gating_rules.hpp"
#include "numeric.hpp"
#include "numeric_exp.hpp"
#include "runtime.hpp"

namespace moe {
namespace kokkos {

namespace {

using Team = Kokkos::TeamPolicy<Exec>::member_type;
using gating::order_key;
using gating::score_key;
using gating::Top2;

constexpr int kMaxGroupWords = 65536 / 32;
constexpr int kChunk = 1024;  // softmax terms staged per step of the serial sum

struct Scratch {  // one team's shared scratch
  std::uint32_t hist[256];
  std::uint32_t kept[kMaxGroupWords];
  float chunk[kChunk];
  std::uint64_t prefix;
  std::uint32_t remaining, count, max_key;
  float sum;
};

// The k-th largest of n distinct non-zero keys (zeros besides allowed), most significant byte first.
template <class KeyOf>
KOKKOS_INLINE_FUNCTION std::uint64_t team_select(const Team& team, int n, int k, const KeyOf& key_of, Scratch& sh) {
  std::uint64_t prefix = 0;
  std::uint32_t remaining = static_cast<std::uint32_t>(k);
  for (int shift = 40; shift >= 0; shift -= 8) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 256), [&](int i) { sh.hist[i] = 0; });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](int i) {
      const std::uint64_t kk = key_of(i);
      if ((kk >> (shift + 8)) == prefix) Kokkos::atomic_fetch_add(&sh.hist[(kk >> shift) & 255u], 1u);
    });
    team.team_barrier();
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      std::uint32_t above = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (above + sh.hist[b] >= remaining) break;
        above += sh.hist[b];
      }
      sh.prefix = (prefix << 8) | static_cast<std::uint32_t>(b);
      sh.remaining = remaining - above;
    });
    team.team_barrier();
    prefix = sh.prefix;
    remaining = sh.remaining;
    team.team_barrier();
  }
  return prefix;
}

// Max of the values v(i), i < n, over the team (order-free: integer max).
template <class ValueOf>
KOKKOS_INLINE_FUNCTION std::uint32_t team_max(const Team& team, int n, const ValueOf& value_of, Scratch& sh) {
  Kokkos::single(Kokkos::PerTeam(team), [&]() { sh.max_key = 0; });
  team.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                       [&](int i) { Kokkos::atomic_fetch_max(&sh.max_key, static_cast<std::uint32_t>(value_of(i))); });
  team.team_barrier();
  const std::uint32_t m = sh.max_key;
  team.team_barrier();
  return m;
}

// One thread adds v[0..n) in order; every thread gets the sum.
KOKKOS_INLINE_FUNCTION float team_serial_sum(const Team& team, const std::uint32_t* v, int n, Scratch& sh) {
  team.team_barrier();
  Kokkos::single(Kokkos::PerTeam(team), [&]() {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc = numeric::add_f32(acc, numeric::f32_from_bits(v[i]));
    sh.sum = acc;
  });
  team.team_barrier();
  const float s = sh.sum;
  team.team_barrier();
  return s;
}

// Host spaces: one index per token, the reference's steps in its order on the thread's stack, no team: the softmax's
// max and sum (the terms of a chunk of kHostChunkExperts staged, then added in ascending e), the group keys (the
// top two selection keys of each group) and the kept groups, then one pass over the experts of kept groups
// keeping the topk largest order keys in a descending list (an insertion where a key beats the last: few after
// the first experts), the weights from the list. The keys are the reference's (gating_rules.hpp), each unique, so
// the list holds what its partial sort chooses, in its order. Was the team form with a team of one thread:
// six radix-select passes over 256 counters and every key recomputed per pass, 3-9x the reference's time at
// 4096 tokens (perf/NOTES.md step 70).
constexpr int kHostMaxTopk = 64;  // topk and topk_groups up to this on the stack; more: the team form
constexpr int kHostChunkExperts = 256;
constexpr int kHostKeyExperts = 1024;  // 8 KiB of keys on the stack

// list[0, n) descending; inserts k (unique) where it beats list[n - 1], dropping the last.
KOKKOS_INLINE_FUNCTION void insert_descending(std::uint64_t* list, int n, std::uint64_t k) {
  if (k <= list[n - 1]) return;
  int i = n - 1;
  for (; i > 0 && list[i - 1] < k; --i) list[i] = list[i - 1];
  list[i] = k;
}

template <class Traits>
void gating_host(const detail::TopkGatingShape& s, const detail::TopkGatingArgs& a, const Exec& exec) {
  using storage = typename Traits::storage;
  const storage* logits = static_cast<const storage*>(a.logits);
  const float* bias = a.correction_bias;
  std::int32_t* out_ids = a.topk_ids;
  float* out_w = a.topk_weights;
  const std::int32_t E = s.num_experts, K = s.topk, G = s.group_size, groups = s.num_groups, kept_groups = s.topk_groups;
  const moe_score_t score = s.score;
  const bool renormalize = s.renormalize;
  const float scale = s.routed_scaling_factor;
  Kokkos::parallel_for(
      "moe::topk_gating::host", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, s.num_tokens),
      KOKKOS_LAMBDA(const std::int64_t t) {
        const storage* row = logits + t * E;
        // 1. the softmax's max and sum
        float m = 0.0f, sum = 0.0f;
        if (score == MOE_SCORE_SOFTMAX) {
          std::uint32_t mk = 0;
          for (std::int32_t e = 0; e < E; ++e) {
            const std::uint32_t k = score_key(Traits::load(row[e]));
            mk = k > mk ? k : mk;
          }
          m = gating::softmax_max(mk);
          float terms[kHostChunkExperts];
          for (std::int32_t c0 = 0; c0 < E; c0 += kHostChunkExperts) {
            const std::int32_t n = E - c0 < kHostChunkExperts ? E - c0 : kHostChunkExperts;
            for (std::int32_t i = 0; i < n; ++i) terms[i] = gating::softmax_term(Traits::load(row[c0 + i]), m);
            for (std::int32_t i = 0; i < n; ++i) sum = numeric::add_f32(sum, terms[i]);
          }
        }
        const auto compute_key = [&](std::int32_t e) {
          const float sc = gating::score_of(score, Traits::load(row[e]), m, sum);
          return order_key(gating::selection_of(sc, bias, e), e);
        };
        // up to kHostKeyExperts experts: every key computed once, in a loop of its own (the group and expert
        // passes read them); more: each pass computes them again
        std::uint64_t keys[kHostKeyExperts];
        const bool staged = E <= kHostKeyExperts;
        if (staged)
          for (std::int32_t e = 0; e < E; ++e) keys[e] = compute_key(e);
        const auto key_of = [&](std::int32_t e) { return staged ? keys[e] : compute_key(e); };
        // 2. the kept groups, as a list of their keys
        std::uint64_t list[kHostMaxTopk];
        std::int32_t kept[kHostMaxTopk];  // the kept groups (the order of insertion changes no list)
        const bool grouped = groups > 1;
        if (grouped) {
          for (std::int32_t i = 0; i < kept_groups; ++i) list[i] = 0;
          for (std::int32_t g = 0; g < groups; ++g) {
            Top2 top{0, 0};
            for (std::int32_t e = g * G; e < (g + 1) * G; ++e) top = gating::top2_insert(top, key_of(e));
            insert_descending(list, kept_groups, order_key(gating::group_score(top, G), g));
          }
          for (std::int32_t i = 0; i < kept_groups; ++i) kept[i] = gating::index_of_key(list[i]);
        }
        // 3. the chosen experts: the topk largest keys among the experts of kept groups, descending
        for (std::int32_t r = 0; r < K; ++r) list[r] = 0;
        if (grouped) {
          for (std::int32_t i = 0; i < kept_groups; ++i)
            for (std::int32_t e = kept[i] * G; e < (kept[i] + 1) * G; ++e) insert_descending(list, K, key_of(e));
        } else {
          for (std::int32_t e = 0; e < E; ++e) insert_descending(list, K, key_of(e));
        }
        // 4. the weights, in the written order
        std::int32_t* ids = out_ids + t * K;
        float v[kHostMaxTopk];
        for (std::int32_t r = 0; r < K; ++r) {
          ids[r] = gating::index_of_key(list[r]);
          v[r] = gating::score_of(score, Traits::load(row[ids[r]]), m, sum);
        }
        gating::finish_weights(v, K, score, renormalize, scale, reinterpret_cast<std::uint32_t*>(out_w + t * K));
      });
}

template <class Traits>
void gating_run(const detail::TopkGatingShape& s, const detail::TopkGatingArgs& a, const Exec& exec) {
  using storage = typename Traits::storage;
  const storage* logits = static_cast<const storage*>(a.logits);
  const float* bias = a.correction_bias;
  std::int32_t* out_ids = a.topk_ids;
  std::uint32_t* out_w = reinterpret_cast<std::uint32_t*>(a.topk_weights);
  const std::int32_t E = s.num_experts, K = s.topk, G = s.group_size, groups = s.num_groups, kept_groups = s.topk_groups;
  const moe_score_t score = s.score;
  const bool renormalize = s.renormalize;
  const float scale = s.routed_scaling_factor;
  // the league covers the tokens in chunks of at most 2^30 (league sizes are int)
  constexpr std::int64_t kLeague = std::int64_t{1} << 30;
  for (std::int64_t first = 0; first < s.num_tokens; first += kLeague) {
    const std::int64_t count = s.num_tokens - first < kLeague ? s.num_tokens - first : kLeague;
    Kokkos::TeamPolicy<Exec> policy(exec, static_cast<int>(count), team_size());
    Kokkos::parallel_for(
        "moe::topk_gating", policy.set_scratch_size(0, Kokkos::PerTeam(static_cast<int>(sizeof(Scratch)))),
        KOKKOS_LAMBDA(const Team& team) {
          Scratch& sh = *static_cast<Scratch*>(team.team_shmem().get_shmem(sizeof(Scratch)));
          const std::int64_t t = first + team.league_rank();
          const storage* row = logits + t * E;
          std::int32_t* ids = out_ids + t * K;
          std::uint32_t* wts = out_w + t * K;
          // 1. the softmax's max and sum
          float m = 0.0f, sum = 0.0f;
          if (score == MOE_SCORE_SOFTMAX) {
            m = gating::softmax_max(team_max(team, E, [&](int e) { return score_key(Traits::load(row[e])); }, sh));
            for (int c0 = 0; c0 < E; c0 += kChunk) {  // ascending e: terms staged, one thread adds
              const int n = E - c0 < kChunk ? E - c0 : kChunk;
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                                   [&](int i) { sh.chunk[i] = gating::softmax_term(Traits::load(row[c0 + i]), m); });
              team.team_barrier();
              Kokkos::single(Kokkos::PerTeam(team), [&]() {
                float acc = c0 == 0 ? 0.0f : sh.sum;
                for (int i = 0; i < n; ++i) acc = numeric::add_f32(acc, sh.chunk[i]);
                sh.sum = acc;
              });
              team.team_barrier();
            }
            sum = sh.sum;
            team.team_barrier();
          }
          const auto selection_key = [&](int e) {
            const float sc = gating::score_of(score, Traits::load(row[e]), m, sum);
            return order_key(gating::selection_of(sc, bias, e), e);
          };
          // 2. the kept groups
          const bool grouped = groups > 1;
          if (grouped) {
            const auto group_key = [&](int g) {
              Top2 top{0, 0};
              for (int e = g * G; e < (g + 1) * G; ++e) top = gating::top2_insert(top, selection_key(e));
              return order_key(gating::group_score(top, G), g);
            };
            const std::uint64_t threshold = team_select(team, groups, kept_groups, group_key, sh);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (groups + 31) / 32), [&](int w) { sh.kept[w] = 0; });
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](int g) {
              if (group_key(g) >= threshold) Kokkos::atomic_fetch_or(&sh.kept[g / 32], 1u << (g % 32));
            });
            team.team_barrier();
          }
          const auto expert_key = [&](int e) -> std::uint64_t {
            if (grouped) {
              const int g = e / G;
              if (!((sh.kept[g / 32] >> (g % 32)) & 1u)) return 0;
            }
            return selection_key(e);
          };
          // 3. the chosen experts, gathered into the row, then sorted best first
          const std::uint64_t threshold = team_select(team, E, K, expert_key, sh);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { sh.count = 0; });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, E), [&](int e) {
            const std::uint64_t kk = expert_key(e);
            if (kk >= threshold) {
              const std::uint32_t at = Kokkos::atomic_fetch_add(&sh.count, 1u);
              ids[at] = e;
              wts[at] = static_cast<std::uint32_t>(kk >> 16);
            }
          });
          team.team_barrier();
          int np2 = 1;
          while (np2 < K) np2 <<= 1;
          const auto row_key = [&](int i) {
            return (std::uint64_t{wts[i]} << 16) | static_cast<std::uint32_t>(0xFFFF - ids[i]);
          };
          const auto compare_swap = [&](int lo, int hi) {
            if (hi >= K || row_key(hi) <= row_key(lo)) return;
            const std::int32_t id = ids[lo];
            const std::uint32_t w = wts[lo];
            ids[lo] = ids[hi], wts[lo] = wts[hi];
            ids[hi] = id, wts[hi] = w;
          };
          for (int size = 2; size <= np2; size <<= 1) {
            const int half = size / 2;
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, np2 / 2), [&](int i) {
              const int blk = i / half, pos = i % half;
              compare_swap(blk * size + pos, blk * size + size - 1 - pos);
            });
            team.team_barrier();
            for (int stride = half / 2; stride > 0; stride /= 2) {
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, np2 / 2), [&](int i) {
                const int lo = (i / stride) * 2 * stride + i % stride;
                compare_swap(lo, lo + stride);
              });
              team.team_barrier();
            }
          }
          // 4. the weights, in place
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](int r) {
            const float l = Traits::load(row[ids[r]]);
            wts[r] = numeric::f32_bits(score == MOE_SCORE_SOFTMAX_TOPK ? l : gating::score_of(score, l, m, sum));
          });
          team.team_barrier();
          if (score == MOE_SCORE_SOFTMAX_TOPK) {
            const float mt = gating::softmax_max(
                team_max(team, K, [&](int r) { return score_key(numeric::f32_from_bits(wts[r])); }, sh));
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](int r) {
              wts[r] = numeric::f32_bits(gating::softmax_term(numeric::f32_from_bits(wts[r]), mt));
            });
            const float st = team_serial_sum(team, wts, K, sh);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](int r) {
              wts[r] = numeric::f32_bits(numeric::div_f32(numeric::f32_from_bits(wts[r]), st));
            });
          }
          if (renormalize) {
            const float total = team_serial_sum(team, wts, K, sh);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](int r) {
              wts[r] = numeric::f32_bits(numeric::div_f32(numeric::f32_from_bits(wts[r]), total));
            });
          }
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](int r) {
            wts[r] = numeric::f32_out_bits(numeric::mul_f32(numeric::f32_from_bits(wts[r]), scale));
          });
        });
  }
}

}  // namespace

}  // namespace kokkos

namespace backend {

std::size_t topk_gating_workspace_size(const detail::TopkGatingShape&) { return 0; }

void topk_gating(const detail::TopkGatingShape& shape, const detail::TopkGatingArgs& args, void* stream) {
  kokkos::ensure_initialized();
  const kokkos::Exec exec = kokkos::instance_for(stream);
  const bool host = kokkos::kHostSpace && shape.topk <= kokkos::kHostMaxTopk &&
                    (shape.num_groups == 1 || shape.topk_groups <= kokkos::kHostMaxTopk);
  // the team form's scratch: one call at a time per instance; the host form's range: where not re-entrant
  const auto lock = host ? kokkos::lock_for_range_kernels(stream) : kokkos::lock_instance(stream);
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    if constexpr (kokkos::kHostSpace) {
      if (host) return kokkos::gating_host<decltype(traits)>(shape, args, exec);
    }
    kokkos::gating_run<decltype(traits)>(shape, args, exec);
  });
}

}  // namespace backend
}  // namespace moe
