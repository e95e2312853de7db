// The expert-parallel data path, written once as per-index bodies (MOE_HD) that every backend runs: plain loops
// on the CPU backend, parallel_for on Kokkos, kernels on CUDA/HIP (backends/*/ep_*). Each body is a pure
// function of its index and the view it is given, so the results never depend on the backend or the schedule.
//
// Names. W ranks; this rank `me`; T tokens of this rank, topk slots each; d a destination rank, s a source rank.
//   send row:  (token t, destination d): t is sent once to every rank holding one of its experts. Send rows are
//              ordered by d, then t; rows_to[d] of them go to d, starting at send_off[d] of the send staging.
//   slot:      (t, k), the k-th expert of t. slots_to[d]: the slots of this rank's tokens whose expert is on d.
//              Their output rows come back from d in (t, k) order, landing at crecv_off[d] + (t's slot base on d)
//              + (rank of k among t's slots on d): combine_src[t * topk + k].
//   recv row r, from s: ordered by s, then the source's token order; recv_off[s] is where s's rows start.
//   cgather[q]: for the q-th combine send row (ordered by s, then recv row, then k), the flat recv slot r*topk+k.
// Capacity mode replaces every prefix offset by a fixed slab: send_off[d] = d * capacity, recv_off[s] =
// s * capacity, crecv_off[d] = d * slot_capacity, csend_off[s] = s * slot_capacity.
#pragma once

#include <cstdint>

#include "ep/weighted_sum.hpp"
#include "host_device.hpp"
#include "numeric.hpp"

namespace moe {
namespace ep {
namespace kernels {

constexpr std::int64_t kChunk = 32;  // tokens one layout step walks in order (one thread on GPUs)

// ---- the descriptor every rank publishes per collective call (int64 words) -----------------------------------
// Fields [0, kNumEqual) must be equal on every rank; then per-rank fields; then rows_to[W], slots_to[W].
enum Field : int {
  kMagic = 0,
  kOp,             // which call: kOpCreate, kOpLayout
  kSeq,            // the handle's call sequence number (ranks one call behind disagree here)
  kWorld,
  kNumExperts,
  kPlacementHash,
  kHidden,
  kDispatchDtype,
  kCombineDtype,
  kTopk,
  kScales,
  kMode,
  kCapacity,
  kSlotCapacity,
  kNumEqual,       // = 14: fields above must match
  kFlags = kNumEqual,
  kNumTokens,
  kMaxRecvRows,
  kMaxRecvSlots,
  kBadIndex,       // first flat index of an id outside [0, num_experts), or -1
  kBadValue,
  kHeader = 24     // words before the counts
};
constexpr std::int64_t kMagicValue = 0x4D6F4545507631;  // "MoEEPv1"
constexpr std::int64_t kOpCreate = 1, kOpLayout = 2;
constexpr std::int64_t kFlagBadId = 1, kFlagTooManyTokens = 2, kFlagLocalArg = 4;

MOE_HD std::int64_t desc_words(std::int32_t world) { return kHeader + 2 * static_cast<std::int64_t>(world); }

// ---- the verdict every rank derives from the gathered descriptors -----------------------------------------------
// An error is a 64-bit key; smaller keys win, so every rank reports the same error first. kOk: none.
constexpr std::uint64_t kOk = ~std::uint64_t{0};
enum Verdict : int {
  kMismatch = 0,      // a: field, b: rank disagreeing with rank 0
  kRankFlags = 1,     // a: rank whose flags are set
  kRowsOverflow = 2,  // capacity: a sends b more rows than capacity
  kSlotsOverflow = 3, // capacity: b sends a more expert rows than slot_capacity
  kRecvRows = 4,      // exact: a receives more rows than its max_recv_rows
  kRecvSlots = 5      // exact: a receives more slots than its max_recv_slots
};
MOE_HD std::uint64_t error_key(int verdict, std::int64_t a, std::int64_t b) {
  return (static_cast<std::uint64_t>(verdict) << 56) | (static_cast<std::uint64_t>(a) << 28) |
         static_cast<std::uint64_t>(b);
}
MOE_HD int key_verdict(std::uint64_t key) { return static_cast<int>(key >> 56); }
MOE_HD std::int64_t key_a(std::uint64_t key) { return static_cast<std::int64_t>((key >> 28) & 0xFFFFFFFu); }
MOE_HD std::int64_t key_b(std::uint64_t key) { return static_cast<std::int64_t>(key & 0xFFFFFFFu); }
MOE_HD std::uint64_t key_min(std::uint64_t a, std::uint64_t b) { return a < b ? a : b; }

// Every check that involves source s and destination d (the caller takes the minimum over all (s, d)).
MOE_HD std::uint64_t derive_check(const std::int64_t* g, std::int32_t world, std::int32_t s, std::int32_t d) {
  const std::int64_t stride = desc_words(world);
  const std::int64_t* g0 = g;
  const std::int64_t* gs = g + s * stride;
  std::uint64_t key = kOk;
  if (d == 0) {
    for (int f = 0; f < kNumEqual; ++f)
      if (gs[f] != g0[f]) {
        key = key_min(key, error_key(kMismatch, f, s));
        break;
      }
    if (gs[kFlags] != 0) key = key_min(key, error_key(kRankFlags, s, 0));
  }
  if (g0[kMode] == 1) {  // MOE_EP_CAPACITY
    if (gs[kHeader + d] > g0[kCapacity]) key = key_min(key, error_key(kRowsOverflow, s, d));
    if (gs[kHeader + world + d] > g0[kSlotCapacity]) key = key_min(key, error_key(kSlotsOverflow, d, s));
  } else if (s == 0) {
    std::int64_t rows = 0, slots = 0;
    for (std::int32_t x = 0; x < world; ++x) {
      rows += g[x * stride + kHeader + d];
      slots += g[x * stride + kHeader + world + d];
    }
    if (rows > g[d * stride + kMaxRecvRows]) key = key_min(key, error_key(kRecvRows, d, 0));
    if (slots > g[d * stride + kMaxRecvSlots]) key = key_min(key, error_key(kRecvSlots, d, 0));
  }
  return key;
}

// The per-rank results of the verdict: int64 words, derived[kDerivedHeader + ...].
enum DerivedField : int { kStatusKey = 0, kTotalRecvRows, kTotalRecvSlots, kDerivedHeader = 4 };
MOE_HD std::int64_t derived_words(std::int32_t world) { return kDerivedHeader + 4 * static_cast<std::int64_t>(world); }
struct DerivedView {  // pointers into one derived array
  std::int64_t* base;
  std::int32_t world;
  MOE_HD std::int64_t* rows_from() const { return base + kDerivedHeader; }
  MOE_HD std::int64_t* slots_from() const { return base + kDerivedHeader + world; }
  MOE_HD std::int64_t* recv_off() const { return base + kDerivedHeader + 2 * world; }
  MOE_HD std::int64_t* csend_off() const { return base + kDerivedHeader + 3 * world; }
};

// Fills the derived array of rank `me` (one thread), given the verdict key.
MOE_HD void derive_offsets(const std::int64_t* g, std::int32_t world, std::int32_t me, std::uint64_t key,
                           std::int64_t* derived) {
  const std::int64_t stride = desc_words(world);
  const DerivedView v{derived, world};
  const bool capacity = g[kMode] == 1;
  std::int64_t rows = 0, slots = 0;
  for (std::int32_t s = 0; s < world; ++s) {
    const std::int64_t r = g[s * stride + kHeader + me], q = g[s * stride + kHeader + world + me];
    v.rows_from()[s] = r;
    v.slots_from()[s] = q;
    v.recv_off()[s] = capacity ? s * g[kCapacity] : rows;
    v.csend_off()[s] = capacity ? s * g[kSlotCapacity] : slots;
    rows += r;
    slots += q;
  }
  derived[kStatusKey] = static_cast<std::int64_t>(key);
  derived[kTotalRecvRows] = rows;
  derived[kTotalRecvSlots] = slots;
}

MOE_HD bool derived_ok(const std::int64_t* derived) { return static_cast<std::uint64_t>(derived[kStatusKey]) == kOk; }

// Per sent row, metadata travels as int32 words: topk local ids (-1: not on the destination), topk weights (fp32
// bits), then the token's slot base in the combine stream back (where its first slot's output row lands).
MOE_HD std::int64_t meta_words(std::int32_t topk) { return 2 * static_cast<std::int64_t>(topk) + 1; }

// ---- layout ---------------------------------------------------------------------------------------------------
struct LayoutView {
  const std::int32_t* ids;  // [T, topk] global expert ids
  std::int64_t num_tokens;
  std::int32_t topk, world, num_experts;
  const std::int32_t* expert_rank;   // [num_experts] (backend memory)
  const std::int32_t* expert_local;  // [num_experts]
  bool capacity_mode;
  std::int64_t capacity, slot_capacity;
  std::int64_t num_chunks;
  std::int32_t* chunk_rows;   // [num_chunks * world]: counts, then exclusive bases (in place), then running
  std::int32_t* chunk_slots;  // same, for slots
  std::int64_t* chunk_bad;    // [num_chunks]: first bad flat index of the chunk, or -1
  std::int64_t* rows_to;      // [world]
  std::int64_t* slots_to;     // [world]
  std::int64_t* send_off;     // [world]
  std::int64_t* crecv_off;    // [world]
  std::int32_t* send_tok;       // [send rows]: token of each send row
  std::int32_t* send_meta;      // [send rows, meta_words]: local ids and slot base written here, weights by dispatch
  std::int32_t* combine_src;    // [T * topk]: combine receive row of each slot, -1 for a bad id
  std::int64_t* desc;           // [desc_words(world)] out: this rank's descriptor
  const std::int64_t* desc_template;  // [kHeader]: the equal fields and max_recv_* (kOp, kSeq filled here)
  std::int64_t seq;
  std::int64_t host_flags;
  std::int64_t requested_tokens;  // what the caller passed (num_tokens is 0 when that was refused)
};

MOE_HD bool valid_id(std::int32_t e, std::int32_t num_experts) { return e >= 0 && e < num_experts; }

// Is slot k the first of token `row`'s slots whose expert is on rank d?
MOE_HD bool first_on_rank(const LayoutView& v, const std::int32_t* row, std::int32_t k, std::int32_t d) {
  for (std::int32_t j = 0; j < k; ++j)
    if (valid_id(row[j], v.num_experts) && v.expert_rank[row[j]] == d) return false;
  return true;
}

// Step 1, per chunk: counts of rows and slots per destination; the first bad id.
MOE_HD void layout_count_chunk(const LayoutView& v, std::int64_t c) {
  std::int32_t* rows = v.chunk_rows + c * v.world;
  std::int32_t* slots = v.chunk_slots + c * v.world;
  for (std::int32_t d = 0; d < v.world; ++d) rows[d] = 0, slots[d] = 0;
  std::int64_t bad = -1;
  const std::int64_t t1 = (c + 1) * kChunk < v.num_tokens ? (c + 1) * kChunk : v.num_tokens;
  for (std::int64_t t = c * kChunk; t < t1; ++t) {
    const std::int32_t* row = v.ids + t * v.topk;
    for (std::int32_t k = 0; k < v.topk; ++k) {
      const std::int32_t e = row[k];
      if (!valid_id(e, v.num_experts)) {
        if (bad < 0) bad = t * v.topk + k;
        continue;
      }
      const std::int32_t d = v.expert_rank[e];
      ++slots[d];
      if (first_on_rank(v, row, k, d)) ++rows[d];
    }
  }
  v.chunk_bad[c] = bad;
}

// Step 2, per destination: exclusive scan over chunks, in place; totals.
MOE_HD void layout_scan_dest(const LayoutView& v, std::int32_t d) {
  std::int64_t r = 0, s = 0;
  for (std::int64_t c = 0; c < v.num_chunks; ++c) {
    const std::int32_t cr = v.chunk_rows[c * v.world + d], cs = v.chunk_slots[c * v.world + d];
    v.chunk_rows[c * v.world + d] = static_cast<std::int32_t>(r);
    v.chunk_slots[c * v.world + d] = static_cast<std::int32_t>(s);
    r += cr;
    s += cs;
  }
  v.rows_to[d] = r;
  v.slots_to[d] = s;
}

// Step 3, one thread: offsets over destinations and this rank's descriptor.
MOE_HD void layout_finish(const LayoutView& v) {
  std::int64_t r = 0, s = 0;
  for (std::int32_t d = 0; d < v.world; ++d) {
    v.send_off[d] = v.capacity_mode ? d * v.capacity : r;
    v.crecv_off[d] = v.capacity_mode ? d * v.slot_capacity : s;
    r += v.rows_to[d];
    s += v.slots_to[d];
  }
  std::int64_t bad = -1;
  for (std::int64_t c = 0; c < v.num_chunks && bad < 0; ++c) bad = v.chunk_bad[c];
  for (int f = 0; f < kHeader; ++f) v.desc[f] = v.desc_template[f];
  v.desc[kOp] = kOpLayout;
  v.desc[kSeq] = v.seq;
  v.desc[kFlags] = v.host_flags | (bad >= 0 ? kFlagBadId : 0);
  v.desc[kNumTokens] = v.requested_tokens;
  v.desc[kBadIndex] = bad;
  v.desc[kBadValue] = bad >= 0 ? v.ids[bad] : 0;
  for (std::int32_t d = 0; d < v.world; ++d) {
    v.desc[kHeader + d] = v.rows_to[d];
    v.desc[kHeader + v.world + d] = v.slots_to[d];
  }
}

// Step 4, per chunk: every send row's place, and every slot's combine receive row. In capacity mode rows and
// slots past the capacities are not placed (the verdict reports the overflow; nothing is written out of bounds).
MOE_HD void layout_place_chunk(const LayoutView& v, std::int64_t c) {
  std::int32_t* rows = v.chunk_rows + c * v.world;
  std::int32_t* slots = v.chunk_slots + c * v.world;
  const std::int32_t topk = v.topk, E = v.num_experts;
  const std::int32_t* rank = v.expert_rank;
  // in capacity mode, rows and slots past these are not placed; 2^31 - 1 otherwise (never reached)
  const std::int32_t row_cap = v.capacity_mode ? static_cast<std::int32_t>(v.capacity) : 0x7FFFFFFF;
  const std::int32_t slot_cap = v.capacity_mode ? static_cast<std::int32_t>(v.slot_capacity) : 0x7FFFFFFF;
  const std::int64_t t1 = (c + 1) * kChunk < v.num_tokens ? (c + 1) * kChunk : v.num_tokens;
  for (std::int64_t t = c * kChunk; t < t1; ++t) {
    const std::int32_t* row = v.ids + t * topk;
    std::int32_t* src = v.combine_src + t * topk;
    for (std::int32_t k = 0; k < topk; ++k) {
      const std::int32_t e = row[k];
      if (!valid_id(e, E)) {
        src[k] = -1;
        continue;
      }
      const std::int32_t d = rank[e];
      if (!first_on_rank(v, row, k, d)) continue;  // placed with its token's first slot on d
      const std::int32_t j = rows[d]++;
      const std::int32_t base = slots[d];
      const auto crecv = static_cast<std::int32_t>(v.crecv_off[d]);  // < 2^31: checked at creation
      std::int32_t q = base;
      for (std::int32_t k2 = k; k2 < topk; ++k2) {
        const std::int32_t e2 = row[k2];
        if (!valid_id(e2, E) || rank[e2] != d) continue;
        src[k2] = q < slot_cap ? crecv + q : -1;
        ++q;
      }
      slots[d] = q;
      if (j < row_cap) {
        const std::int64_t p = v.send_off[d] + j;
        v.send_tok[p] = static_cast<std::int32_t>(t);
        std::int32_t* m = v.send_meta + p * meta_words(topk);
        for (std::int32_t k2 = 0; k2 < topk; ++k2) {
          const std::int32_t e2 = row[k2];
          m[k2] = valid_id(e2, E) && rank[e2] == d ? v.expert_local[e2] : -1;
        }
        m[2 * topk] = base;
      }
    }
  }
}

// ---- dispatch: pack (sender) and unpack (receiver) ---------------------------------------------------------------

struct PackView {
  bool capacity_mode;
  std::int64_t capacity;
  std::int32_t topk;
  const std::int64_t* rows_to;    // [world]
  const std::int64_t* derived;    // status (capacity mode: nothing is packed after an error)
  const std::int32_t* send_tok;
  const float* weights;           // [T, topk] or nullptr (1)
  const unsigned char* hidden;    // [T, row_bytes]
  const float* scales;            // [T, scales_per_token] or nullptr
  std::int64_t row_bytes, scales_per_token;
  unsigned char* send_rows;       // [send rows, row_bytes]
  float* send_scales;             // [send rows, scales_per_token]
  std::int32_t* send_meta;        // [send rows, meta_words]: the weights are written here
};

// The token of send row p, or -1 when p carries nothing (capacity mode: past what goes to its destination, or
// after an error). Exact mode: p < the host's total.
MOE_HD std::int64_t pack_token(const PackView& v, std::int64_t p) {
  if (v.capacity_mode) {
    const std::int64_t d = p / v.capacity, j = p - d * v.capacity;
    if (!derived_ok(v.derived) || j >= v.rows_to[d]) return -1;
  }
  return v.send_tok[p];
}

// The weights of send row p of token t (the ids and slot base were written by the layout).
MOE_HD void pack_weights(const PackView& v, std::int64_t p, std::int64_t t) {
  std::int32_t* m = v.send_meta + p * meta_words(v.topk) + v.topk;
  for (std::int32_t k = 0; k < v.topk; ++k)
    m[k] = static_cast<std::int32_t>(numeric::f32_bits(v.weights != nullptr ? v.weights[t * v.topk + k] : 1.0f));
}

struct UnpackView {
  bool capacity_mode;
  std::int64_t capacity;
  std::int32_t world, topk;
  const std::int64_t* derived;       // rows_from, slots_from, recv_off, csend_off, status
  const std::int32_t* recv_meta;     // [recv rows, meta_words]
  std::int32_t* recv_ids;            // [recv rows, topk]
  float* recv_weights;               // [recv rows, topk] or nullptr
  std::int32_t* cgather;             // [recv slots]
  std::int64_t cgather_capacity;     // entries of cgather (never written past)
};

// Received row r: its ids and weights for the caller, and the combine gather list of its present local slots.
MOE_HD void unpack_row(const UnpackView& v, std::int64_t r) {
  DerivedView dv{const_cast<std::int64_t*>(v.derived), v.world};
  std::int64_t s, j;
  if (v.capacity_mode) {
    s = r / v.capacity;
    j = r - s * v.capacity;
  } else {  // the last source whose rows start at or before r (sources with no rows share the next one's start)
    std::int64_t lo = 0, hi = v.world;
    while (hi - lo > 1) {
      const std::int64_t mid = (lo + hi) / 2;
      if (dv.recv_off()[mid] <= r) lo = mid;
      else hi = mid;
    }
    s = lo;
    j = r - dv.recv_off()[s];
  }
  std::int32_t* ids = v.recv_ids + r * v.topk;
  if (!derived_ok(v.derived) || j >= dv.rows_from()[s]) {
    for (std::int32_t k = 0; k < v.topk; ++k) {
      ids[k] = -1;
      if (v.recv_weights != nullptr) v.recv_weights[r * v.topk + k] = 0.0f;
    }
    return;
  }
  const std::int32_t* m = v.recv_meta + r * meta_words(v.topk);
  std::int64_t q = dv.csend_off()[s] + m[2 * v.topk];
  for (std::int32_t k = 0; k < v.topk; ++k) {
    ids[k] = m[k];
    if (v.recv_weights != nullptr) v.recv_weights[r * v.topk + k] = numeric::f32_from_bits(static_cast<std::uint32_t>(m[v.topk + k]));
    if (m[k] >= 0) {
      if (q < v.cgather_capacity) v.cgather[q] = static_cast<std::int32_t>(r * v.topk + k);
      ++q;
    }
  }
}

// ---- combine: pack (expert side) and reduce (home side) ---------------------------------------------------------
struct CombinePackView {
  bool capacity_mode;
  std::int64_t slot_capacity;
  std::int32_t world;
  const std::int64_t* derived;
  const std::int32_t* cgather;
  const std::int32_t* token_positions;  // nullptr: flat
};

// The expert_out row that combine send row q carries: >= 0 a row; -1 nothing to send (capacity padding or an
// error); -2 a present slot whose token_positions entry is negative (sent as NaN, reported).
MOE_HD std::int64_t combine_source_row(const CombinePackView& v, std::int64_t q) {
  if (v.capacity_mode) {
    const DerivedView dv{const_cast<std::int64_t*>(v.derived), v.world};
    const std::int64_t s = q / v.slot_capacity, i = q - s * v.slot_capacity;
    if (!derived_ok(v.derived) || i >= dv.slots_from()[s]) return -1;
  }
  const std::int32_t flat = v.cgather[q];
  const std::int64_t row = v.token_positions != nullptr ? v.token_positions[flat] : flat;
  return row >= 0 ? row : -2;
}

template <class Traits>
struct ReduceView {
  using storage = typename Traits::storage;
  std::int32_t topk;
  std::int64_t hidden;
  const std::int64_t* derived;       // status: NaN out after an error
  const std::int32_t* combine_src;   // [T * topk]
  const storage* crecv;              // [home slots, hidden]
  const float* weights;              // [T, topk] or nullptr
  float scale;
  storage* output;                   // [T, hidden]
};

// Is every slot of token t's output present (and the verdict good)? Else its output is canonical NaN.
template <class Traits>
MOE_HD bool reduce_token_ok(const ReduceView<Traits>& v, std::int64_t t) {
  const std::int32_t* src = v.combine_src + t * v.topk;
  bool ok = derived_ok(v.derived);
  for (std::int32_t k = 0; k < v.topk && ok; ++k) ok = src[k] >= 0;
  return ok;
}

// Token t's whole row, k outermost (host backends: one pass over each slot's row). acc: [hidden] scratch. Each
// element sees the same operations in the same order as reduce_element.
template <class Traits>
MOE_HD void reduce_token_row(const ReduceView<Traits>& v, std::int64_t t, WeightedSum* acc) {
  using storage = typename Traits::storage;
  storage* out = v.output + t * v.hidden;
  if (!reduce_token_ok(v, t)) {
    for (std::int64_t h = 0; h < v.hidden; ++h) out[h] = Traits::store(numeric::f32_from_bits(numeric::kCanonicalNanF32));
    return;
  }
  for (std::int64_t h = 0; h < v.hidden; ++h) acc[h] = WeightedSum{};
  for (std::int32_t k = 0; k < v.topk; ++k) {
    const storage* row = v.crecv + static_cast<std::int64_t>(v.combine_src[t * v.topk + k]) * v.hidden;
    const float w = v.weights != nullptr ? v.weights[t * v.topk + k] : 1.0f;
    for (std::int64_t h = 0; h < v.hidden; ++h) acc[h].add(w, Traits::load(row[h]));
  }
  for (std::int64_t h = 0; h < v.hidden; ++h) out[h] = Traits::store(acc[h].finish(v.scale));
}

// Output element (t, h).
template <class Traits>
MOE_HD void reduce_element(const ReduceView<Traits>& v, std::int64_t t, std::int64_t h) {
  using storage = typename Traits::storage;
  const std::int32_t* src = v.combine_src + t * v.topk;
  if (!reduce_token_ok(v, t)) {  // never a silently wrong number: canonical NaN (the status says why)
    v.output[t * v.hidden + h] = Traits::store(numeric::f32_from_bits(numeric::kCanonicalNanF32));
    return;
  }
  auto row_of = [&](std::int32_t k) -> const storage* { return v.crecv + static_cast<std::int64_t>(src[k]) * v.hidden; };
  v.output[t * v.hidden + h] =
      weighted_sum_element<Traits>(v.topk, v.weights != nullptr ? v.weights + t * v.topk : nullptr, row_of, h, v.scale);
}

}  // namespace kernels
}  // namespace ep
}  // namespace moe
