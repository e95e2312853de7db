// moe_topk_gating on the GPU, one source for CUDA and HIP. The arithmetic is gating_rules.hpp's (shared with the
// reference), in the reference's order; only the ranking is organised differently, and the order keys make any
// organisation give the same result (a unique 48-bit key per expert: a max is a max).
//
// Two paths, chosen per call from the shape alone:
//   kSubwarp  num_experts <= 1024, topk <= 32, groups that fall on lane boundaries (below): W lanes per token
//             (W = 1, 2, 4, ... 32, so 32 / W tokens per warp), each lane holding V = 8, 16 or 32 consecutive
//             experts in registers (logits loaded as 16-byte vectors where the rows allow). Softmax: the max by a
//             shuffle reduction of score keys (exact in any order), the sum in ascending e as one chain of adds
//             that every lane runs over shuffled values. Groups: each group's top two by shuffles within its lanes,
//             then topk_groups rounds of argmax over group keys. Experts: topk rounds of a subwarp argmax over the
//             lanes' keys, each round removing its winner; round r's expert stays on lane r % W. Weights: the
//             written-order sums again as chains over shuffled values. No shared memory, no barrier.
//   kBlock    everything else (up to 65536 experts, any topk, any grouping): a block per token. Nothing is kept per
//             expert: the keys are recomputed from the logits in each pass (exp included; deterministic). The k-th
//             largest key is found by a radix select (6 passes of 8 bits over the 48-bit keys, counts in shared
//             memory; the kept groups likewise, first), the chosen experts are gathered into the output row and
//             sorted there (a bitonic network in its one-direction form, which tolerates any length), and the
//             weights computed in place; the softmax sum and the written-order sums are serial in one thread.
// Groups on lane boundaries: G = num_experts / num_groups either a multiple of V with G / V a power of two (a
// group spans G / V whole lanes: DeepSeek-V3's 32 with V = 8), or a divisor of V with at most 8 groups per lane.
#include <algorithm>

#include "backend.hpp"
#include "dispatch.hpp"
#include "gating_rules.hpp"
#include "gpu_runtime.hpp"
#include "numeric.hpp"
#include "numeric_exp.hpp"

namespace moe {
namespace backend {

namespace {

using gating::order_key;
using gating::score_key;
using gating::Top2;

struct GateParams {
  const float* bias;
  std::int32_t* ids;
  std::uint32_t* weights;  // fp32 bits
  std::int64_t num_tokens;
  std::int32_t num_experts, topk, num_groups, topk_groups, group_size;
  moe_score_t score;
  std::int32_t renormalize;
  float scale;
};

// Max over the W lanes of a subwarp (aligned groups of W lanes), in every lane of it. A whole warp on NVIDIA sm_80+:
// one redux instruction.
template <int W>
MOE_DEVICE std::uint32_t subwarp_max(std::uint32_t v) {
#if !defined(__HIP_PLATFORM_AMD__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (W == 32) return __reduce_max_sync(0xFFFFFFFFu, v);
#endif
  if (W > 1) {
#pragma unroll
    for (int o = W / 2; o >= 1; o /= 2) v = max(v, gpu::shfl_xor(v, o));
  }
  return v;
}
// The lowest lane (0..W-1) of my subwarp whose `mine` is set.
template <int W>
MOE_DEVICE int subwarp_first(bool mine, int base) {
  const gpu::lane_mask_t all = gpu::ballot(mine);
  const gpu::lane_mask_t sub = W == gpu::kWarpSize ? all : (all >> base) & ((gpu::lane_mask_t{1} << W) - 1);
  return gpu::lowest_lane(sub);
}
// Argmax over the subwarp of 32-bit keys v[0..V) per lane (0: never chosen), ties to the lowest lane and slot:
// the order of gating::order_key, whose index part grows with lane then slot. Returns the winning lane; *slot its
// slot, *key its key.
template <int W, int N>
MOE_DEVICE int subwarp_argmax(const std::uint32_t (&v)[N], int base, int* slot, std::uint32_t* key) {
  std::uint32_t best = 0;
  int at = 0;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (v[j] > best) best = v[j], at = j;  // strict: the lowest slot of equals
  const std::uint32_t win = subwarp_max<W>(best);
  const int owner = W == 1 ? 0 : subwarp_first<W>(best == win, base);
  *slot = W == 1 ? at : gpu::shfl(at, base + owner);
  *key = win;
  return owner;
}

// ---- kSubwarp ----------------------------------------------------------------------------------------------------
constexpr int kSubwarpThreads = 128;
constexpr int kMaxFastTopk = 32;
constexpr int kMaxGroupSlots = 8;

// a[j] of lane q of the subwarp, for q = 0..W-1 and j = 0..V-1, added in that order (ascending e) while
// q * V + j < n: the same chain of IEEE adds in every lane.
template <int W, int V>
MOE_DEVICE float ordered_sum(const float (&a)[V], int base, int n) {
  float acc = 0.0f;
  constexpr int kUnrollLanes = W * V <= 256 ? W : 1;
#pragma unroll kUnrollLanes
  for (int q = 0; q < W; ++q) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = W == 1 ? a[j] : gpu::shfl(a[j], base + q);
      if (q * V + j < n) acc = numeric::add_f32(acc, v);
    }
  }
  return acc;
}

template <class Traits, int V>
MOE_DEVICE void load_row(const typename Traits::storage* row, int e0, int n, bool active, bool vec, float (&x)[V]) {
  using storage = typename Traits::storage;
  constexpr int P = 16 / static_cast<int>(sizeof(storage));  // values per 16 bytes
  struct alignas(16) Pack {
    storage v[P];
  };
  static_assert(V % P == 0, "a lane's run is whole 16-byte vectors");
  if (vec) {  // the row and the lane's run start on 16 bytes, and n is a multiple of P
#pragma unroll
    for (int c = 0; c < V; c += P) {
      Pack p{};
      if (active && e0 + c < n) p = *reinterpret_cast<const Pack*>(row + e0 + c);
#pragma unroll
      for (int i = 0; i < P; ++i) x[c + i] = Traits::load(p.v[i]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = active && e0 + j < n ? Traits::load(row[e0 + j]) : 0.0f;
  }
}

// One token per W lanes; blocks walk chunks of kSubwarpThreads / W tokens (the loop is uniform per block).
template <class Traits, int W, int V>
__global__ void __launch_bounds__(kSubwarpThreads)
    gating_subwarp_kernel(const typename Traits::storage* __restrict__ logits, GateParams p, bool vec) {
  gpu::begin_after_prior_grid();
  constexpr int kTokensPerBlock = kSubwarpThreads / W;
  // result slots per lane: topk <= num_experts <= W * V, so at most V (W = 1: 8 slots, not 32)
  constexpr int kSlots = (kMaxFastTopk + W - 1) / W < V ? (kMaxFastTopk + W - 1) / W : V;
  const int lane = gpu::lane_id();
  const int sl = lane % W, base = lane - sl;
  const int e0 = sl * V;
  const std::int32_t E = p.num_experts, K = p.topk, G = p.group_size;
#pragma unroll 1
  for (std::int64_t chunk = blockIdx.x; chunk * kTokensPerBlock < p.num_tokens; chunk += gridDim.x) {
    const std::int64_t t = chunk * kTokensPerBlock + static_cast<int>(threadIdx.x) / W;
    const bool active = t < p.num_tokens;
    float x[V];
    load_row<Traits, V>(logits + (active ? t : 0) * E, e0, E, active, vec, x);

    // 1. scores (val: what the weight is made of: s_e, or l_e for SOFTMAX_TOPK)
    float val[V];
    if (p.score == MOE_SCORE_SOFTMAX) {
      std::uint32_t mk = 0;
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (e0 + j < E) mk = max(mk, score_key(x[j]));
      const float m = gating::softmax_max(subwarp_max<W>(mk));
#pragma unroll
      for (int j = 0; j < V; ++j) val[j] = gating::softmax_term(x[j], m);
      const float sum = ordered_sum<W, V>(val, base, E);
#pragma unroll
      for (int j = 0; j < V; ++j) val[j] = numeric::div_f32(val[j], sum);
    } else if (p.score == MOE_SCORE_SIGMOID) {
#pragma unroll
      for (int j = 0; j < V; ++j) val[j] = numeric::sigmoid_f32(x[j]);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) val[j] = x[j];
    }
    // 2. selection keys: score_key of b_e (0: never chosen); with the index as tie-break they are order_key
    std::uint32_t key[V];
#pragma unroll
    for (int j = 0; j < V; ++j) key[j] = active && e0 + j < E ? score_key(gating::selection_of(val[j], p.bias, e0 + j)) : 0;

    // 3a. groups: each lane's group slots, then topk_groups rounds of argmax; experts of other groups -> key 0
    if (p.num_groups > 1) {
      std::uint32_t gk[kMaxGroupSlots];
#pragma unroll
      for (int i = 0; i < kMaxGroupSlots; ++i) gk[i] = 0;
      const bool spans = G >= V;
      if (spans) {  // a group spans P = G / V lanes (a power of two), aligned
        gating::Top2Keys top{0, 0};
#pragma unroll
        for (int j = 0; j < V; ++j) top = gating::top2_insert(top, key[j]);
        for (int o = 1; o < G / V; o <<= 1)
          top = gating::top2_merge(top, gating::Top2Keys{gpu::shfl_xor(top.first, o), gpu::shfl_xor(top.second, o)});
        gk[0] = active && e0 < E ? score_key(gating::group_score(top, G)) : 0;
      } else {  // V / G whole groups per lane
#pragma unroll
        for (int i = 0; i < kMaxGroupSlots; ++i) {
          gating::Top2Keys top{0, 0};
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (j >= i * G && j < (i + 1) * G) top = gating::top2_insert(top, key[j]);
          gk[i] = i < V / G && active && e0 + i * G < E ? score_key(gating::group_score(top, G)) : 0;
        }
      }
      // group numbers without a division per round: a group spans 2^span_log lanes, or a lane holds per_lane
      const int span_log = spans ? __ffs(G / V) - 1 : 0;  // G / V is a power of two
      const int per_lane = spans ? 1 : V / G;
      std::uint32_t kept = 0;
#pragma unroll 1
      for (int r = 0; r < p.topk_groups; ++r) {
        int at = 0;
        std::uint32_t win = 0;
        const int owner = subwarp_argmax<W>(gk, base, &at, &win);
        const int won = spans ? owner >> span_log : owner * per_lane + at;  // the winning group
#pragma unroll
        for (int i = 0; i < kMaxGroupSlots; ++i)
          if (gk[i] != 0 && (spans ? sl >> span_log : sl * per_lane + i) == won) gk[i] = 0, kept |= 1u << i;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int slot = spans ? 0 : j / G;
        if (!((kept >> slot) & 1u)) key[j] = 0;
      }
    }

    // 3b. topk rounds: the subwarp's best key wins, its owner drops it; round r's result stays on lane r % W
    std::int32_t my_id[kSlots];
    float my_v[kSlots];
#pragma unroll
    for (int q = 0; q < kSlots; ++q) {
      my_id[q] = 0;
      my_v[q] = 0.0f;
      const int rounds = min(W, K - q * W);
#pragma unroll 1
      for (int pp = 0; pp < rounds; ++pp) {
        int at = 0;
        std::uint32_t win = 0;
        const int owner = subwarp_argmax<W>(key, base, &at, &win);
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (sl == owner && j == at) v = val[j], key[j] = 0;
        if (W > 1) v = gpu::shfl(v, base + owner);
        if (sl == pp) my_id[q] = owner * V + at, my_v[q] = v;
      }
    }

    // 4. weights in the written order r = q * W + lane
    float u[kSlots];
    if (p.score == MOE_SCORE_SOFTMAX_TOPK) {
      std::uint32_t mk = 0;
#pragma unroll
      for (int q = 0; q < kSlots; ++q)
        if (q * W + sl < K) mk = max(mk, score_key(my_v[q]));
      const float m = gating::softmax_max(subwarp_max<W>(mk));
#pragma unroll
      for (int q = 0; q < kSlots; ++q) u[q] = gating::softmax_term(my_v[q], m);
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < kSlots; ++q)
#pragma unroll
        for (int pp = 0; pp < W; ++pp)
          if (q * W + pp < K) sum = numeric::add_f32(sum, W == 1 ? u[q] : gpu::shfl(u[q], base + pp));
#pragma unroll
      for (int q = 0; q < kSlots; ++q) u[q] = numeric::div_f32(u[q], sum);
    } else {
#pragma unroll
      for (int q = 0; q < kSlots; ++q) u[q] = my_v[q];
    }
    if (p.renormalize) {
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < kSlots; ++q)
#pragma unroll
        for (int pp = 0; pp < W; ++pp)
          if (q * W + pp < K) sum = numeric::add_f32(sum, W == 1 ? u[q] : gpu::shfl(u[q], base + pp));
#pragma unroll
      for (int q = 0; q < kSlots; ++q) u[q] = numeric::div_f32(u[q], sum);
    }
#pragma unroll
    for (int q = 0; q < kSlots; ++q) {
      const int r = q * W + sl;
      if (active && r < K) {
        p.ids[t * K + r] = my_id[q];
        p.weights[t * K + r] = numeric::f32_out_bits(numeric::mul_f32(u[q], p.scale));
      }
    }
  }
}

// ---- kBlock ------------------------------------------------------------------------------------------------------
constexpr int kBlockThreads = 256;
constexpr int kMaxGroupWords = 65536 / 32;  // kept-group bits
constexpr int kChunk = 2048;                // softmax terms staged per step of the serial sum

struct BlockShared {
  std::uint32_t hist[256];
  std::uint32_t kept[kMaxGroupWords];
  float chunk[kChunk];
  std::uint32_t reduce[kBlockThreads / 32 + 1];
  std::uint64_t prefix;
  std::uint32_t remaining, count;
  float m, sum;
};

MOE_DEVICE std::uint32_t block_max(std::uint32_t v, BlockShared& sh) {
  for (int o = gpu::kWarpSize / 2; o >= 1; o /= 2) v = max(v, gpu::shfl_xor(v, o));
  const int warps = kBlockThreads / gpu::kWarpSize;
  __syncthreads();
  if (gpu::lane_id() == 0) sh.reduce[gpu::warp_id()] = v;
  __syncthreads();
  std::uint32_t r = 0;
  for (int w = 0; w < warps; ++w) r = max(r, sh.reduce[w]);
  __syncthreads();
  return r;
}

// The k-th largest of n distinct non-zero keys (zeros allowed besides, never counted as chosen: k never exceeds
// the non-zero keys), most significant byte first over the 48 bits.
template <class KeyOf>
__device__ std::uint64_t block_select(int n, int k, KeyOf&& key_of, BlockShared& sh) {
  std::uint64_t prefix = 0;
  std::uint32_t remaining = static_cast<std::uint32_t>(k);
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll 1
  for (int shift = 40; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kBlockThreads) sh.hist[i] = 0;
    __syncthreads();
#pragma unroll 1
    for (int i = tid; i < n; i += kBlockThreads) {
      const std::uint64_t kk = key_of(i);
      if ((kk >> (shift + 8)) == prefix) atomicAdd(&sh.hist[(kk >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      std::uint32_t above = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (above + sh.hist[b] >= remaining) break;
        above += sh.hist[b];
      }
      sh.prefix = (prefix << 8) | static_cast<std::uint32_t>(b);
      sh.remaining = remaining - above;
    }
    __syncthreads();
    prefix = sh.prefix;
    remaining = sh.remaining;
  }
  return prefix;
}

// Thread 0 adds v[0..n) in order; every thread gets the sum.
MOE_DEVICE float block_serial_sum(const std::uint32_t* v, int n, BlockShared& sh) {
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc = numeric::add_f32(acc, numeric::f32_from_bits(v[i]));
    sh.sum = acc;
  }
  __syncthreads();
  const float s = sh.sum;
  __syncthreads();
  return s;
}

template <class Traits>
__global__ void __launch_bounds__(kBlockThreads)
    gating_block_kernel(const typename Traits::storage* __restrict__ logits, GateParams p) {
  gpu::begin_after_prior_grid();
  __shared__ BlockShared sh;
  const int tid = static_cast<int>(threadIdx.x);
  const std::int32_t E = p.num_experts, K = p.topk, G = p.group_size;
#pragma unroll 1
  for (std::int64_t t = blockIdx.x; t < p.num_tokens; t += gridDim.x) {
    const typename Traits::storage* row = logits + t * E;
    std::int32_t* ids = p.ids + t * K;
    std::uint32_t* wts = p.weights + t * K;
    float m = 0.0f, sum = 0.0f;
    if (p.score == MOE_SCORE_SOFTMAX) {
      std::uint32_t mk = 0;
      for (int e = tid; e < E; e += kBlockThreads) mk = max(mk, score_key(Traits::load(row[e])));
      m = gating::softmax_max(block_max(mk, sh));
      for (int c0 = 0; c0 < E; c0 += kChunk) {  // the sum in ascending e: terms staged, one thread adds
        const int n = min(kChunk, E - c0);
        for (int i = tid; i < n; i += kBlockThreads) sh.chunk[i] = gating::softmax_term(Traits::load(row[c0 + i]), m);
        __syncthreads();
        if (tid == 0)
          for (int i = 0; i < n; ++i) sum = numeric::add_f32(sum, sh.chunk[i]);
        __syncthreads();
      }
      if (tid == 0) sh.sum = sum;
      __syncthreads();
      sum = sh.sum;
    }
    const auto selection_key = [&](int e) {
      const float s = gating::score_of(p.score, Traits::load(row[e]), m, sum);
      return order_key(gating::selection_of(s, p.bias, e), e);
    };
    const bool grouped = p.num_groups > 1;
    if (grouped) {
      const auto group_key = [&](int g) {
        Top2 top{0, 0};
        for (int e = g * G; e < (g + 1) * G; ++e) top = gating::top2_insert(top, selection_key(e));
        return order_key(gating::group_score(top, G), g);
      };
      const std::uint64_t threshold = block_select(p.num_groups, p.topk_groups, group_key, sh);
      const int words = (p.num_groups + 31) / 32;
      for (int w = tid; w < words; w += kBlockThreads) sh.kept[w] = 0;
      __syncthreads();
      for (int g = tid; g < p.num_groups; g += kBlockThreads)
        if (group_key(g) >= threshold) atomicOr(&sh.kept[g / 32], 1u << (g % 32));
      __syncthreads();
    }
    const auto expert_key = [&](int e) -> std::uint64_t {
      if (grouped) {
        const int g = e / G;
        if (!((sh.kept[g / 32] >> (g % 32)) & 1u)) return 0;
      }
      return selection_key(e);
    };
    const std::uint64_t threshold = block_select(E, K, expert_key, sh);
    // gather the chosen into the row (any order): id, and the score key for the sort
    if (tid == 0) sh.count = 0;
    __syncthreads();
    for (int e = tid; e < E; e += kBlockThreads) {
      const std::uint64_t kk = expert_key(e);
      if (kk >= threshold) {
        const std::uint32_t at = atomicAdd(&sh.count, 1u);
        ids[at] = e;
        wts[at] = static_cast<std::uint32_t>(kk >> 16);
      }
    }
    __syncthreads();
    // sort the row by key, best first: bitonic, every comparator putting the larger first, so that the virtual
    // elements past K (smaller than all) never move
    int np2 = 1;
    while (np2 < K) np2 <<= 1;
    const auto row_key = [&](int i) {
      return (std::uint64_t{wts[i]} << 16) | static_cast<std::uint32_t>(0xFFFF - ids[i]);
    };
    const auto compare_swap = [&](int a, int b) {
      if (b >= K) return;
      if (row_key(b) > row_key(a)) {
        const std::int32_t id = ids[a];
        const std::uint32_t w = wts[a];
        ids[a] = ids[b], wts[a] = wts[b];
        ids[b] = id, wts[b] = w;
      }
    };
#pragma unroll 1
    for (int size = 2; size <= np2; size <<= 1) {
      const int half = size / 2;
      for (int i = tid; i < np2 / 2; i += kBlockThreads) {
        const int blk = i / half, pos = i % half;
        compare_swap(blk * size + pos, blk * size + size - 1 - pos);
      }
      __syncthreads();
#pragma unroll 1
      for (int stride = half / 2; stride > 0; stride /= 2) {
        for (int i = tid; i < np2 / 2; i += kBlockThreads) {
          const int a = (i / stride) * 2 * stride + i % stride;
          compare_swap(a, a + stride);
        }
        __syncthreads();
      }
    }
    // weights in place
    for (int r = tid; r < K; r += kBlockThreads) {
      const float l = Traits::load(row[ids[r]]);
      wts[r] = numeric::f32_bits(p.score == MOE_SCORE_SOFTMAX_TOPK ? l : gating::score_of(p.score, l, m, sum));
    }
    if (p.score == MOE_SCORE_SOFTMAX_TOPK) {
      std::uint32_t mk = 0;
      __syncthreads();
      for (int r = tid; r < K; r += kBlockThreads) mk = max(mk, score_key(numeric::f32_from_bits(wts[r])));
      const float mt = gating::softmax_max(block_max(mk, sh));
      for (int r = tid; r < K; r += kBlockThreads)
        wts[r] = numeric::f32_bits(gating::softmax_term(numeric::f32_from_bits(wts[r]), mt));
      const float st = block_serial_sum(wts, K, sh);
      for (int r = tid; r < K; r += kBlockThreads)
        wts[r] = numeric::f32_bits(numeric::div_f32(numeric::f32_from_bits(wts[r]), st));
    }
    if (p.renormalize) {
      const float total = block_serial_sum(wts, K, sh);
      for (int r = tid; r < K; r += kBlockThreads)
        wts[r] = numeric::f32_bits(numeric::div_f32(numeric::f32_from_bits(wts[r]), total));
    }
    __syncthreads();
    for (int r = tid; r < K; r += kBlockThreads)
      wts[r] = numeric::f32_out_bits(numeric::mul_f32(numeric::f32_from_bits(wts[r]), p.scale));
    __syncthreads();  // shared memory is reused by the next token
  }
}

// ---- host ----------------------------------------------------------------------------------------------------
template <class Traits, int W, int V>
bool try_subwarp(const detail::TopkGatingShape& s, const void* logits, const GateParams& p, gpu::stream_t stream) {
  const std::int32_t G = s.group_size;
  if (s.num_experts > W * V) return false;
  if (s.num_groups > 1) {
    const bool spans = G >= V && G % V == 0 && ((G / V) & (G / V - 1)) == 0;
    const bool packs = G < V && V % G == 0 && V / G <= kMaxGroupSlots;
    if (!spans && !packs) return false;
  }
  using storage = typename Traits::storage;
  const bool vec = reinterpret_cast<std::uintptr_t>(logits) % 16 == 0 &&
                   (static_cast<std::size_t>(s.num_experts) * sizeof(storage)) % 16 == 0;
  constexpr std::int64_t kTokensPerBlock = kSubwarpThreads / W;
  const std::int64_t blocks = std::min<std::int64_t>((s.num_tokens + kTokensPerBlock - 1) / kTokensPerBlock, 1 << 20);
  gpu::launch<gating_subwarp_kernel<Traits, W, V>>("moe_topk_gating kernel", static_cast<unsigned>(blocks),
                                                  kSubwarpThreads, 0, stream, static_cast<const storage*>(logits),
                                                  p, vec);
  return true;
}

template <class Traits>
void gating_typed(const detail::TopkGatingShape& s, const void* logits, const GateParams& p, gpu::stream_t stream) {
  const std::int32_t E = s.num_experts;
  bool done = false;
  if (s.topk <= kMaxFastTopk) {
    if (E <= 8) done = try_subwarp<Traits, 1, 8>(s, logits, p, stream);
    else if (E <= 16) done = try_subwarp<Traits, 2, 8>(s, logits, p, stream);
    else if (E <= 32) done = try_subwarp<Traits, 4, 8>(s, logits, p, stream);
    else if (E <= 64) done = try_subwarp<Traits, 8, 8>(s, logits, p, stream);
    else if (E <= 128) done = try_subwarp<Traits, 16, 8>(s, logits, p, stream);
    else if (E <= 256) done = try_subwarp<Traits, 32, 8>(s, logits, p, stream);
    else if (E <= 512) done = try_subwarp<Traits, 32, 16>(s, logits, p, stream);
    else if (E <= 1024) done = try_subwarp<Traits, 32, 32>(s, logits, p, stream);
  }
  if (done) return;
  const std::int64_t blocks = std::min<std::int64_t>(s.num_tokens, 1 << 20);
  gpu::launch<gating_block_kernel<Traits>>("moe_topk_gating kernel", static_cast<unsigned>(blocks), kBlockThreads,
                                           0, stream, static_cast<const typename Traits::storage*>(logits), p);
}

}  // namespace

std::size_t topk_gating_workspace_size(const detail::TopkGatingShape&) { return 0; }

void topk_gating(const detail::TopkGatingShape& shape, const detail::TopkGatingArgs& args, void* stream) {
  GateParams p{};
  p.bias = args.correction_bias;
  p.ids = args.topk_ids;
  p.weights = reinterpret_cast<std::uint32_t*>(args.topk_weights);
  p.num_tokens = shape.num_tokens;
  p.num_experts = shape.num_experts;
  p.topk = shape.topk;
  p.num_groups = shape.num_groups;
  p.topk_groups = shape.topk_groups;
  p.group_size = shape.group_size;
  p.score = shape.score;
  p.renormalize = shape.renormalize ? 1 : 0;
  p.scale = shape.routed_scaling_factor;
  detail::dispatch_value_traits(args.dtype, [&](auto traits) {
    gating_typed<decltype(traits)>(shape, args.logits, p, gpu::to_stream(stream));
  });
}

}  // namespace backend
}  // namespace moe
