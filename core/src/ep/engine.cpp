// Expert parallelism: the communicator, the handle, and the order of every step of dispatch and combine.
// What moves: ep_kernels.hpp (the per-index bodies, run by each backend's ops); how: transport.hpp (MPI or NCCL).
//
// Every collective call starts the same way on every rank, so that ranks never wait on each other for an error
// only some of them saw:
//   host paths (MPI; and NCCL in exact mode for the layout): local checks -> agreement (MPI: one allreduce of
//     the call, the call count and "my arguments are bad") -> work; errors found in the exchanged descriptors
//     are judged by every rank from the same data (derive_check), so all raise the same error.
//   NCCL capacity mode: the descriptors are gathered on the device and judged there (ops::derive); kernels skip
//     their work after an error and combine writes NaN; check_status brings the verdict to the host.
#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "contract.hpp"
#include "ep/ep_kernels.hpp"
#include "ep/ops.hpp"
#include "ep/transport.hpp"
#include "moe/ep.hpp"

namespace moe {
namespace ep {

namespace k = kernels;

namespace detail {

#if !defined(MOE_WITH_MPI)
std::unique_ptr<Transport> make_mpi_transport(const void*) {
  throw Error(MOE_ERROR_UNSUPPORTED, "this moe-routing build has no MPI transport (configure with -DMOE_WITH_MPI=ON)");
}
bool mpi_available() noexcept { return false; }
#endif
#if !defined(MOE_WITH_NCCL)
std::unique_ptr<Transport> make_nccl_transport(void*) {
  throw Error(MOE_ERROR_UNSUPPORTED,
              "this moe-routing build has no NCCL transport (configure the CUDA backend with -DMOE_WITH_NCCL=ON)");
}
bool nccl_available() noexcept { return false; }
#endif

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }
[[noreturn]] void invalid(const std::string& what) { throw Error(MOE_ERROR_INVALID_ARGUMENT, what); }

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kOpDispatch = 3, kOpCombine = 4, kOpCombineRows = 5;

const char* field_name(int f) {
  switch (f) {
    case k::kMagic: return "the library version (descriptor magic)";
    case k::kOp: return "the call";
    case k::kSeq: return "the call count";
    case k::kWorld: return "the world size";
    case k::kNumExperts: return "num_experts";
    case k::kPlacementHash: return "the expert placement";
    case k::kHidden: return "hidden";
    case k::kDispatchDtype: return "dispatch_dtype";
    case k::kCombineDtype: return "combine_dtype";
    case k::kTopk: return "topk";
    case k::kScales: return "scales_per_token";
    case k::kMode: return "mode";
    case k::kCapacity: return "capacity";
    case k::kSlotCapacity: return "slot_capacity";
  }
  return "a descriptor field";
}
const char* op_name(std::int64_t op) {
  switch (op) {
    case k::kOpCreate: return "moe_ep_handle_create";
    case k::kOpLayout: return "moe_ep_dispatch_layout";
    case kOpDispatch: return "moe_ep_dispatch";
    case kOpCombine:
    case kOpCombineRows: return "moe_ep_combine";
  }
  return "an unknown call";
}

// Size of one element of a dispatched row: any moe_dtype_t, plus the fp8 values issue 27 appends to routing.h
// (MOE_FLOAT8_E4M3 = 8, MOE_FLOAT8_E5M2 = 9), taken as 1-byte types.
std::int64_t dispatch_elem_bytes(moe_dtype_t t) {
  const int v = static_cast<int>(t);
  if (v == 8 || v == 9) return 1;
  if (!moe::detail::is_known_dtype(t)) return 0;
  return static_cast<std::int64_t>(moe::dtype_size(t));
}

std::int64_t placement_hash(const std::vector<std::int32_t>& rank, const std::vector<std::int32_t>& local) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](std::int64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((static_cast<std::uint64_t>(v) >> (8 * b)) & 0xFF)) * 1099511628211ull;
  };
  mix(static_cast<std::int64_t>(rank.size()));
  for (std::size_t e = 0; e < rank.size(); ++e) mix(rank[e]), mix(local[e]);
  return static_cast<std::int64_t>(h >> 2);
}

std::uint64_t host_verdict(const std::vector<std::int64_t>& g, std::int32_t world) {
  std::uint64_t key = k::kOk;
  for (std::int32_t s = 0; s < world; ++s)
    for (std::int32_t d = 0; d < world; ++d) key = k::key_min(key, k::derive_check(g.data(), world, s, d));
  return key;
}

// The text of a verdict, the same on every rank except that the faulty rank gives its own argument error.
std::string verdict_text(std::uint64_t key, const std::vector<std::int64_t>& g, std::int32_t world, std::int32_t me,
                         const std::string& local_error) {
  const std::int64_t stride = k::desc_words(world);
  auto at = [&](std::int64_t rank, std::int64_t field) { return g[static_cast<std::size_t>(rank * stride + field)]; };
  const std::int64_t a = k::key_a(key), b = k::key_b(key);
  switch (k::key_verdict(key)) {
    case k::kMismatch: {
      const int f = static_cast<int>(a);
      if (f == k::kOp)
        return "ranks are not in the same call: rank 0 is in " + std::string(op_name(at(0, f))) + ", rank " + str(b) +
               " in " + op_name(at(b, f));
      if (f == k::kSeq)
        return "ranks are at different calls of this handle (rank 0 at call " + str(at(0, f)) + ", rank " + str(b) +
               " at call " + str(at(b, f)) + "): a rank skipped or repeated a call";
      return "ranks disagree on " + std::string(field_name(f)) + ": rank 0 has " + str(at(0, f)) + ", rank " + str(b) +
             " has " + str(at(b, f));
    }
    case k::kRankFlags: {
      if (a == me && !local_error.empty()) return local_error;
      const std::int64_t flags = at(a, k::kFlags);
      if (flags & k::kFlagBadId) {
        const std::int64_t i = at(a, k::kBadIndex), topk = at(0, k::kTopk);
        return "rank " + str(a) + ": topk_ids[" + str(i) + "] (token " + str(i / topk) + ", slot " + str(i % topk) +
               ") = " + str(at(a, k::kBadValue)) + " is outside [0, num_experts = " + str(at(0, k::kNumExperts)) + ")";
      }
      if (flags & k::kFlagTooManyTokens) return "rank " + str(a) + ": num_tokens = " + str(at(a, k::kNumTokens)) +
                                                " exceeds that rank's max_tokens";
      return "rank " + str(a) + " reported invalid arguments (its error names them); nothing was exchanged";
    }
    case k::kRowsOverflow:
      return "capacity exceeded: rank " + str(a) + " has " + str(at(a, k::kHeader + b)) + " rows for rank " + str(b) +
             ", capacity is " + str(at(0, k::kCapacity)) + " rows per pair of ranks (nothing was exchanged)";
    case k::kSlotsOverflow:
      return "slot_capacity exceeded: rank " + str(a) + " holds the experts of " +
             str(at(b, k::kHeader + world + a)) + " slots of rank " + str(b) + "'s tokens, slot_capacity is " +
             str(at(0, k::kSlotCapacity)) + " (nothing was exchanged)";
    case k::kRecvRows: {
      std::int64_t rows = 0;
      for (std::int32_t s = 0; s < world; ++s) rows += at(s, k::kHeader + a);
      return "rank " + str(a) + " would receive " + str(rows) + " rows, more than its max_recv_rows = " +
             str(at(a, k::kMaxRecvRows)) + " (nothing was exchanged)";
    }
    case k::kRecvSlots: {
      std::int64_t slots = 0;
      for (std::int32_t s = 0; s < world; ++s) slots += at(s, k::kHeader + world + a);
      return "rank " + str(a) + " would receive " + str(slots) + " slots of its experts, more than its " +
             "max_recv_slots = " + str(at(a, k::kMaxRecvSlots)) + " (nothing was exchanged)";
    }
  }
  return "unknown verdict";
}

template <class T>
void upload(moe::device_buffer<T>& dst, const std::vector<T>& src) {
  moe::copy_to_device(dst.data(), src.data(), src.size() * sizeof(T));
}
template <class T>
void download(std::vector<T>& dst, const moe::device_buffer<T>& src, std::size_t count) {
  dst.resize(count);
  moe::copy_to_host(dst.data(), src.data(), count * sizeof(T));
}

}  // namespace

// ---- communicator -------------------------------------------------------------------------------------------------
struct CommImpl {
  std::unique_ptr<Transport> transport;
  std::int32_t rank = 0, world = 1, num_experts = 0, num_local = 0, max_local = 0;
  std::vector<std::int32_t> expert_rank, expert_local, local_experts;
  std::int64_t hash = 0;
  moe::device_buffer<std::int32_t> d_expert_rank, d_expert_local;
};

namespace {

std::shared_ptr<CommImpl> make_comm(std::unique_ptr<Transport> t, std::int32_t num_experts, const std::int32_t* er,
                                    const std::int32_t* el) {
  auto c = std::make_shared<CommImpl>();
  c->rank = t->rank();
  c->world = t->world();
  c->num_experts = num_experts;
  const std::int32_t W = c->world;
  std::string err;
  if (num_experts < 1 || num_experts > 65536) {
    err = "num_experts must be in [1, 65536], got " + str(num_experts);
  } else if (er == nullptr) {
    if (el != nullptr) err = "expert_local is given without expert_rank";
    else if (num_experts % W != 0)
      err = "num_experts = " + str(num_experts) + " is not a multiple of the world size " + str(W) +
            " (contiguous placement; pass an explicit expert_rank to place experts unevenly)";
    else {
      const std::int32_t per = num_experts / W;
      for (std::int32_t e = 0; e < num_experts; ++e) c->expert_rank.push_back(e / per), c->expert_local.push_back(e % per);
    }
  } else {
    std::vector<std::int32_t> count(static_cast<std::size_t>(W), 0);
    for (std::int32_t e = 0; e < num_experts && err.empty(); ++e) {
      if (er[e] < 0 || er[e] >= W) err = "expert_rank[" + str(e) + "] = " + str(er[e]) + " is outside [0, world = " + str(W) + ")";
      else c->expert_rank.push_back(er[e]), c->expert_local.push_back(count[static_cast<std::size_t>(er[e])]++);
    }
    if (err.empty() && el != nullptr) {
      std::vector<std::vector<char>> seen(static_cast<std::size_t>(W));
      for (std::int32_t r = 0; r < W; ++r) seen[static_cast<std::size_t>(r)].assign(static_cast<std::size_t>(count[static_cast<std::size_t>(r)]), 0);
      for (std::int32_t e = 0; e < num_experts && err.empty(); ++e) {
        const auto r = static_cast<std::size_t>(er[e]);
        if (el[e] < 0 || el[e] >= count[r] || seen[r][static_cast<std::size_t>(el[e])])
          err = "expert_local[" + str(e) + "] = " + str(el[e]) + ": the local indices of rank " + str(er[e]) +
                " must be 0 .. " + str(count[r] - 1) + ", each once";
        else seen[r][static_cast<std::size_t>(el[e])] = 1, c->expert_local[static_cast<std::size_t>(e)] = el[e];
      }
    }
  }
  if (err.empty()) {
    for (std::int32_t e = 0; e < num_experts; ++e) {
      if (c->expert_rank[static_cast<std::size_t>(e)] == c->rank) ++c->num_local;
    }
    std::vector<std::int32_t> per_rank(static_cast<std::size_t>(W), 0);
    for (std::int32_t r : c->expert_rank) ++per_rank[static_cast<std::size_t>(r)];
    c->max_local = *std::max_element(per_rank.begin(), per_rank.end());
    c->local_experts.assign(static_cast<std::size_t>(c->num_local), -1);
    for (std::int32_t e = 0; e < num_experts; ++e)
      if (c->expert_rank[static_cast<std::size_t>(e)] == c->rank)
        c->local_experts[static_cast<std::size_t>(c->expert_local[static_cast<std::size_t>(e)])] = e;
    c->hash = placement_hash(c->expert_rank, c->expert_local);
  }
  // Agreement: every rank learns every rank's view, so all raise the same error.
  const std::int64_t mine[4] = {k::kMagicValue, num_experts, c->hash, err.empty() ? 0 : 1};
  std::vector<std::int64_t> all(4 * static_cast<std::size_t>(W));
  t->allgather_host(mine, all.data(), 4);
  if (!err.empty()) invalid(err);
  for (std::int32_t s = 0; s < W; ++s) {
    const std::int64_t* o = all.data() + 4 * s;
    if (o[3] != 0) invalid("rank " + str(s) + " passed an invalid placement (its error names the argument)");
    if (o[0] != k::kMagicValue) invalid("rank " + str(s) + " runs another version of moe-routing's EP protocol");
    if (o[1] != num_experts)
      invalid("ranks disagree on num_experts: this rank has " + str(num_experts) + ", rank " + str(s) + " has " + str(o[1]));
    if (o[2] != c->hash) invalid("ranks disagree on the expert placement (this rank and rank " + str(s) + ")");
  }
  c->d_expert_rank = moe::device_buffer<std::int32_t>(static_cast<std::size_t>(num_experts));
  c->d_expert_local = moe::device_buffer<std::int32_t>(static_cast<std::size_t>(num_experts));
  upload(c->d_expert_rank, c->expert_rank);
  upload(c->d_expert_local, c->expert_local);
  c->transport = std::move(t);
  return c;
}

}  // namespace

// ---- handle -------------------------------------------------------------------------------------------------------
struct HandleImpl {
  std::shared_ptr<CommImpl> comm;
  Config cfg{};
  bool device_path = false, capacity = false;
  std::int32_t W = 1, me = 0, topk = 1;
  std::int64_t row_bytes = 0, out_row_bytes = 0, meta_w = 0, spt = 0;
  std::int64_t send_cap = 0, recv_cap = 0, recv_slot_cap = 0, home_cap = 0, max_chunks = 0;
  moe::device_buffer<std::int32_t> chunk_rows, chunk_slots, send_tok, send_meta, combine_src, recv_meta, cgather, missing;
  moe::device_buffer<std::int64_t> chunk_bad, own, desc, desc_template, gathered, derived;
  moe::device_buffer<unsigned char> send_rows, csend, crecv;
  moe::device_buffer<float> send_scales;
  std::vector<std::int64_t> h_template, h_desc, h_gathered, h_derived;
  std::vector<std::int64_t> send_count, send_off, recv_count, recv_off, csend_count, csend_off, crecv_count, crecv_off;
  std::int64_t seq = 0;
  int state = 0;  // 0: no layout, 1: laid out, 2: dispatched
  std::int64_t num_tokens = 0, total_send_rows = 0, total_recv_rows = 0, total_recv_slots = 0;
  std::string pending_error;  // device path: this rank's refused arguments, for check_status
  std::size_t staging = 0;
  bool timing = false;
  Handle::Phases phases;
  std::chrono::steady_clock::time_point last;

  // Timing: start(stream) at a call's beginning, then mark(&phases.x, stream) after each phase.
  void start(void* stream) {
    if (!timing) return;
    moe::synchronize(stream);
    last = std::chrono::steady_clock::now();
  }
  void mark(double* phase, void* stream) {
    if (!timing) return;
    moe::synchronize(stream);
    const auto now = std::chrono::steady_clock::now();
    *phase += std::chrono::duration<double>(now - last).count();
    last = now;
  }
  void count_bytes(const std::vector<std::int64_t>& sent, const std::vector<std::int64_t>& received, std::int64_t unit) {
    for (std::int32_t r = 0; r < W; ++r) {
      phases.bytes_sent += sent[static_cast<std::size_t>(r)] * unit;
      phases.bytes_received += received[static_cast<std::size_t>(r)] * unit;
    }
  }

  Transport& tr() const { return *comm->transport; }
  std::int64_t stride() const { return k::desc_words(W); }

  HandleImpl(std::shared_ptr<CommImpl> c, const Config& in);
  Handle::Counts layout(const std::int32_t* ids, std::int64_t T, void* stream);
  void dispatch(const void* hidden, const float* scales, const float* weights, void* recv_hidden, float* recv_scales,
                std::int32_t* recv_ids, float* recv_weights, std::int64_t recv_rows, void* stream);
  void combine(const void* expert_out, const std::int32_t* token_positions, const float* weights, float scale,
               void* output, void* stream);
  void check_status(void* stream);

 private:
  void agree(std::int64_t op, const std::string& local_error);
  void judge_on_host(const std::string& local_error);
  void set_counts_from_host();
  void set_counts_capacity();
  template <class T>
  moe::device_buffer<T> alloc(std::int64_t count) {
    staging += static_cast<std::size_t>(count) * sizeof(T);
    return moe::device_buffer<T>(static_cast<std::size_t>(count));
  }
};

HandleImpl::HandleImpl(std::shared_ptr<CommImpl> c, const Config& in) : comm(std::move(c)), cfg(in) {
  W = comm->world;
  me = comm->rank;
  device_path = tr().device_side();
  std::string err;
  const std::int64_t elem = dispatch_elem_bytes(cfg.dispatch_dtype);
  capacity = cfg.mode == MOE_EP_CAPACITY;
  if (cfg.max_tokens < 0) err = "max_tokens must be >= 0, got " + str(cfg.max_tokens);
  else if (cfg.hidden < 1) err = "hidden must be >= 1, got " + str(cfg.hidden);
  else if (elem == 0) err = "dispatch_dtype is not a moe_dtype_t value (got " + str(cfg.dispatch_dtype) + ")";
  else if (!moe::detail::is_value_type(cfg.combine_dtype))
    err = "combine_dtype must be MOE_FLOAT32, MOE_FLOAT16 or MOE_BFLOAT16 (got " + str(cfg.combine_dtype) + ")";
  else if (cfg.topk < 1 || cfg.topk > 64) err = "topk must be in [1, 64], got " + str(cfg.topk);
  else if (cfg.scales_per_token < 0) err = "scales_per_token must be >= 0, got " + str(cfg.scales_per_token);
  else if (cfg.mode != MOE_EP_EXACT && cfg.mode != MOE_EP_CAPACITY) err = "mode is not a moe_ep_mode_t value";
  else if (capacity && cfg.capacity < 1) err = "capacity must be >= 1 in MOE_EP_CAPACITY mode, got " + str(cfg.capacity);
  else if (capacity && cfg.slot_capacity < 0) err = "slot_capacity must be >= 0, got " + str(cfg.slot_capacity);
  else if (!capacity && (cfg.max_recv_rows < 0 || cfg.max_recv_slots < 0)) err = "max_recv_rows and max_recv_slots must be >= 0";
  else if (cfg.hidden * elem > kInt32Max || cfg.hidden * 4 > kInt32Max) err = "hidden = " + str(cfg.hidden) + " is too large (a row must be < 2^31 bytes)";
  else if (cfg.max_tokens * cfg.topk > kInt32Max) err = "max_tokens * topk must be < 2^31";
  else if (capacity && cfg.capacity > kInt32Max / cfg.topk / W)
    err = "world * capacity * topk must be < 2^31 (capacity = " + str(cfg.capacity) + ")";
  if (err.empty()) {
    topk = cfg.topk;
    spt = cfg.scales_per_token;
    row_bytes = cfg.hidden * elem;
    out_row_bytes = cfg.hidden * static_cast<std::int64_t>(moe::dtype_size(cfg.combine_dtype));
    meta_w = k::meta_words(topk);
    if (capacity) {
      if (cfg.slot_capacity == 0) cfg.slot_capacity = cfg.capacity * std::min<std::int64_t>(topk, std::max(comm->max_local, 1));
      if (cfg.slot_capacity > kInt32Max / W) err = "world * slot_capacity must be < 2^31";
      cfg.max_recv_rows = cfg.max_recv_slots = 0;
    } else {
      cfg.capacity = cfg.slot_capacity = 0;
    }
  }
  // Gather every rank's view of the shape; judge it alike everywhere.
  h_template.assign(static_cast<std::size_t>(stride()), 0);
  std::int64_t* t = h_template.data();
  t[k::kMagic] = k::kMagicValue;
  t[k::kOp] = k::kOpCreate;
  t[k::kWorld] = W;
  t[k::kNumExperts] = comm->num_experts;
  t[k::kPlacementHash] = comm->hash;
  t[k::kHidden] = cfg.hidden;
  t[k::kDispatchDtype] = cfg.dispatch_dtype;
  t[k::kCombineDtype] = cfg.combine_dtype;
  t[k::kTopk] = cfg.topk;
  t[k::kScales] = cfg.scales_per_token;
  t[k::kMode] = cfg.mode;
  t[k::kCapacity] = cfg.capacity;
  t[k::kSlotCapacity] = cfg.slot_capacity;
  t[k::kFlags] = err.empty() ? 0 : k::kFlagLocalArg;
  t[k::kNumTokens] = cfg.max_tokens;
  h_gathered.assign(static_cast<std::size_t>(W * stride()), 0);
  tr().allgather_host(h_template.data(), h_gathered.data(), stride());
  std::uint64_t key = k::kOk;
  for (std::int32_t s = 0; s < W; ++s) key = k::key_min(key, k::derive_check(h_gathered.data(), W, s, 0));
  if (!err.empty()) invalid(err);  // this rank's own argument, named; the others name this rank
  if (key != k::kOk) invalid(verdict_text(key, h_gathered, W, me, err));

  // Per-rank bounds, then the staging. An allocation failure on one rank is agreed on like any error.
  std::string alloc_err;
  try {
    if (!capacity) {
      if (cfg.max_recv_rows == 0)
        for (std::int32_t s = 0; s < W; ++s) cfg.max_recv_rows += h_gathered[static_cast<std::size_t>(s * stride() + k::kNumTokens)];
      if (cfg.max_recv_slots == 0) cfg.max_recv_slots = cfg.max_recv_rows * std::min(topk, comm->num_local);
      if (cfg.max_recv_rows > kInt32Max / topk || cfg.max_recv_slots > kInt32Max)
        throw Error(MOE_ERROR_INVALID_ARGUMENT, "max_recv_rows * topk and max_recv_slots must be < 2^31 (max_recv_rows = " +
                                                    str(cfg.max_recv_rows) + ")");
    }
    send_cap = capacity ? W * cfg.capacity : cfg.max_tokens * std::min(topk, W);
    recv_cap = capacity ? W * cfg.capacity : cfg.max_recv_rows;
    recv_slot_cap = capacity ? W * cfg.slot_capacity : cfg.max_recv_slots;
    home_cap = capacity ? W * cfg.slot_capacity : cfg.max_tokens * topk;
    max_chunks = (cfg.max_tokens + k::kChunk - 1) / k::kChunk;
    chunk_rows = alloc<std::int32_t>(max_chunks * W);
    chunk_slots = alloc<std::int32_t>(max_chunks * W);
    chunk_bad = alloc<std::int64_t>(max_chunks);
    own = alloc<std::int64_t>(4 * W);
    send_tok = alloc<std::int32_t>(send_cap);
    send_meta = alloc<std::int32_t>(send_cap * meta_w);
    combine_src = alloc<std::int32_t>(cfg.max_tokens * topk);
    desc = alloc<std::int64_t>(stride());
    desc_template = alloc<std::int64_t>(k::kHeader);
    gathered = alloc<std::int64_t>(device_path ? W * stride() : 0);
    derived = alloc<std::int64_t>(k::derived_words(W));
    send_rows = alloc<unsigned char>(send_cap * row_bytes);
    send_scales = alloc<float>(send_cap * spt);
    recv_meta = alloc<std::int32_t>(recv_cap * meta_w);
    cgather = alloc<std::int32_t>(recv_slot_cap);
    csend = alloc<unsigned char>(recv_slot_cap * out_row_bytes);
    crecv = alloc<unsigned char>(home_cap * out_row_bytes);
    missing = alloc<std::int32_t>(1);
    t[k::kMaxRecvRows] = cfg.max_recv_rows;
    t[k::kMaxRecvSlots] = cfg.max_recv_slots;
    upload(desc_template, std::vector<std::int64_t>(h_template.begin(), h_template.begin() + k::kHeader));
    upload(missing, std::vector<std::int32_t>{0});
  } catch (const std::exception& e) {
    alloc_err = e.what();
  }
  const std::int64_t flag = alloc_err.empty() ? 0 : 1;
  std::vector<std::int64_t> flags(static_cast<std::size_t>(W));
  tr().allgather_host(&flag, flags.data(), 1);
  if (!alloc_err.empty()) throw Error(MOE_ERROR_BACKEND, "moe_ep_handle_create: " + alloc_err);
  for (std::int32_t s = 0; s < W; ++s)
    if (flags[static_cast<std::size_t>(s)] != 0)
      throw Error(MOE_ERROR_BACKEND, "moe_ep_handle_create failed on rank " + str(s) + " (its error says why)");
  for (auto* v : {&send_count, &send_off, &recv_count, &recv_off, &csend_count, &csend_off, &crecv_count, &crecv_off})
    v->assign(static_cast<std::size_t>(W), 0);
}

// MPI: one allreduce saying whether every rank is in the same call, at the same count, with good arguments.
// NCCL: the caller's own arguments only (no host agreement without a synchronisation).
void HandleImpl::agree(std::int64_t op, const std::string& local_error) {
  if (device_path) {
    if (!local_error.empty()) invalid(std::string(op_name(op)) + ": " + local_error);
    return;
  }
  std::int64_t v[5] = {op, -op, seq, -seq, local_error.empty() ? 0 : W - me};
  tr().allreduce_max_host(v, 5);
  if (v[0] != -v[1]) invalid(std::string(op_name(op)) + ": ranks are not in the same call of this handle (" +
                             op_name(v[0]) + " and " + op_name(-v[1]) + " met)");
  if (v[2] != -v[3]) {
    seq = v[2];  // realign: the next call starts from the same count everywhere
    invalid(std::string(op_name(op)) + ": ranks are at different calls of this handle (call counts " + str(-v[3]) +
            " .. " + str(v[2]) + "): a rank skipped or repeated a call");
  }
  if (!local_error.empty()) invalid(std::string(op_name(op)) + ": " + local_error);
  if (v[4] > 0 && op == kOpCombineRows)
    invalid(std::string(op_name(op)) + ": rank " + str(W - v[4]) + " had a slot of its experts with a negative "
            "token_positions entry (no row): that token's output is NaN on its home rank");
  if (v[4] > 0)
    invalid(std::string(op_name(op)) + ": rank " + str(W - v[4]) +
            " reported invalid arguments (its error names them); nothing was exchanged");
}

void HandleImpl::set_counts_from_host() {
  const std::int64_t* mine = h_gathered.data() + me * stride();
  std::int64_t r = 0, q = 0;
  total_send_rows = 0;
  for (std::int32_t d = 0; d < W; ++d) {
    const auto i = static_cast<std::size_t>(d);
    send_count[i] = mine[k::kHeader + d];
    crecv_count[i] = mine[k::kHeader + W + d];
    send_off[i] = capacity ? d * cfg.capacity : r;
    crecv_off[i] = capacity ? d * cfg.slot_capacity : q;
    r += send_count[i];
    q += crecv_count[i];
  }
  total_send_rows = r;
  const k::DerivedView dv{h_derived.data(), W};
  for (std::int32_t s = 0; s < W; ++s) {
    const auto i = static_cast<std::size_t>(s);
    recv_count[i] = dv.rows_from()[s];
    recv_off[i] = dv.recv_off()[s];
    csend_count[i] = dv.slots_from()[s];
    csend_off[i] = dv.csend_off()[s];
  }
  total_recv_rows = h_derived[k::kTotalRecvRows];
  total_recv_slots = h_derived[k::kTotalRecvSlots];
}

void HandleImpl::set_counts_capacity() {  // NCCL capacity mode: whole slabs both ways, nothing known on the host
  for (std::int32_t d = 0; d < W; ++d) {
    const auto i = static_cast<std::size_t>(d);
    send_count[i] = recv_count[i] = cfg.capacity;
    send_off[i] = recv_off[i] = d * cfg.capacity;
    csend_count[i] = crecv_count[i] = cfg.slot_capacity;
    csend_off[i] = crecv_off[i] = d * cfg.slot_capacity;
  }
  total_send_rows = total_recv_rows = W * cfg.capacity;
  total_recv_slots = W * cfg.slot_capacity;
}

void HandleImpl::judge_on_host(const std::string& local_error) {
  const std::uint64_t key = host_verdict(h_gathered, W);
  if (!local_error.empty()) invalid("moe_ep_dispatch_layout: " + local_error);  // this rank's own, named
  if (key != k::kOk) invalid("moe_ep_dispatch_layout: " + verdict_text(key, h_gathered, W, me, local_error));
  h_derived.assign(static_cast<std::size_t>(k::derived_words(W)), 0);
  k::derive_offsets(h_gathered.data(), W, me, key, h_derived.data());
  upload(derived, h_derived);
  set_counts_from_host();
}

Handle::Counts HandleImpl::layout(const std::int32_t* ids, std::int64_t T, void* stream) {
  ++seq;
  state = 0;
  pending_error.clear();
  std::string err;
  std::int64_t flags = 0;
  if (T < 0) err = "num_tokens must be >= 0, got " + str(T), flags = k::kFlagLocalArg;
  else if (T > cfg.max_tokens)
    err = "num_tokens = " + str(T) + " exceeds this handle's max_tokens = " + str(cfg.max_tokens), flags = k::kFlagTooManyTokens;
  else if (T > 0 && ids == nullptr) err = "topk_ids is NULL while num_tokens = " + str(T), flags = k::kFlagLocalArg;
  start(stream);
  if (!device_path) agree(k::kOpLayout, "");  // the arguments' errors travel in the descriptor
  const std::int64_t T_eff = err.empty() ? T : 0;
  k::LayoutView v{};
  v.ids = ids;
  v.num_tokens = T_eff;
  v.topk = topk;
  v.world = W;
  v.num_experts = comm->num_experts;
  v.expert_rank = comm->d_expert_rank.data();
  v.expert_local = comm->d_expert_local.data();
  v.capacity_mode = capacity;
  v.capacity = cfg.capacity;
  v.slot_capacity = cfg.slot_capacity;
  v.num_chunks = (T_eff + k::kChunk - 1) / k::kChunk;
  v.chunk_rows = chunk_rows.data();
  v.chunk_slots = chunk_slots.data();
  v.chunk_bad = chunk_bad.data();
  v.rows_to = own.data();
  v.slots_to = own.data() + W;
  v.send_off = own.data() + 2 * W;
  v.crecv_off = own.data() + 3 * W;
  v.send_tok = send_tok.data();
  v.send_meta = send_meta.data();
  v.combine_src = combine_src.data();
  v.desc = desc.data();
  v.desc_template = desc_template.data();
  v.seq = seq;
  v.host_flags = flags;
  v.requested_tokens = T;
  ops::layout(v, stream);
  if (!device_path) {
    moe::synchronize(stream);
    download(h_desc, desc, static_cast<std::size_t>(stride()));
    tr().allgather_host(h_desc.data(), h_gathered.data(), stride());
    judge_on_host(err);
  } else {
    tr().allgather_device(desc.data(), gathered.data(), stride(), stream);
    if (!capacity) {  // the one host synchronisation of exact mode
      moe::synchronize(stream);
      download(h_gathered, gathered, static_cast<std::size_t>(W * stride()));
      judge_on_host(err);
    } else {
      ops::derive(gathered.data(), W, me, derived.data(), stream);
      set_counts_capacity();
      pending_error = err.empty() ? err : "moe_ep_dispatch_layout: " + err;
    }
  }
  mark(&phases.layout, stream);
  // NCCL capacity mode never raises what the device judges: a refused layout still runs the layer (so that no
  // rank waits for this one), every rank's verdict is an error, nothing moves and combine writes NaN over all
  // the tokens the caller passed; check_status names the argument.
  num_tokens = (device_path && capacity && !err.empty()) ? std::max<std::int64_t>(T, 0) : T_eff;
  state = 1;
  if (capacity) return {W * cfg.capacity, W * cfg.slot_capacity};
  return {total_recv_rows, total_recv_slots};
}

void HandleImpl::dispatch(const void* hidden, const float* scales, const float* weights, void* recv_hidden,
                          float* recv_scales, std::int32_t* recv_ids, float* recv_weights, std::int64_t recv_rows,
                          void* stream) {
  ++seq;
  std::string err;
  const std::int64_t needed = capacity ? W * cfg.capacity : total_recv_rows;
  if (state == 0) err = "no layout: call moe_ep_dispatch_layout first (or the last one failed)";
  else if (num_tokens > 0 && hidden == nullptr) err = "hidden is NULL while num_tokens = " + str(num_tokens);
  else if (spt > 0 && num_tokens > 0 && scales == nullptr) err = "scales is NULL but the handle has scales_per_token = " + str(spt);
  else if (spt == 0 && (scales != nullptr || recv_scales != nullptr)) err = "scales / recv_scales given but the handle has scales_per_token = 0";
  else if (recv_rows < needed) err = "recv_rows = " + str(recv_rows) + " is smaller than the " + str(needed) + " rows this rank receives";
  else if (needed > 0 && recv_hidden == nullptr) err = "recv_hidden is NULL while this rank receives " + str(needed) + " rows";
  else if (needed > 0 && recv_ids == nullptr) err = "recv_topk_ids is NULL while this rank receives " + str(needed) + " rows";
  else if (needed > 0 && spt > 0 && recv_scales == nullptr) err = "recv_scales is NULL but the handle has scales_per_token = " + str(spt);
  start(stream);
  agree(kOpDispatch, err);

  k::PackView p{};
  p.capacity_mode = capacity;
  p.capacity = cfg.capacity;
  p.topk = topk;
  p.rows_to = own.data();
  p.derived = derived.data();
  p.send_tok = send_tok.data();
  p.weights = weights;
  p.hidden = static_cast<const unsigned char*>(hidden);
  p.scales = scales;
  p.row_bytes = row_bytes;
  p.scales_per_token = spt;
  p.send_rows = send_rows.data();
  p.send_scales = send_scales.data();
  p.send_meta = send_meta.data();
  ops::pack_dispatch(p, capacity ? W * cfg.capacity : total_send_rows, stream);
  if (!device_path) moe::synchronize(stream);
  mark(&phases.pack, stream);
  const Transport::Part parts[3] = {{send_rows.data(), recv_hidden, row_bytes},
                                    {send_scales.data(), recv_scales, spt * 4},
                                    {send_meta.data(), recv_meta.data(), meta_w * 4}};
  tr().alltoallv(parts, 3, send_count.data(), send_off.data(), recv_count.data(), recv_off.data(), stream);
  count_bytes(send_count, recv_count, row_bytes + spt * 4 + meta_w * 4);
  mark(&phases.exchange, stream);

  k::UnpackView u{};
  u.capacity_mode = capacity;
  u.capacity = cfg.capacity;
  u.world = W;
  u.topk = topk;
  u.derived = derived.data();
  u.recv_meta = recv_meta.data();
  u.recv_ids = recv_ids;
  u.recv_weights = recv_weights;
  u.cgather = cgather.data();
  u.cgather_capacity = recv_slot_cap;
  ops::unpack_dispatch(u, capacity ? W * cfg.capacity : total_recv_rows, stream);
  mark(&phases.unpack, stream);
  state = 2;
}

void HandleImpl::combine(const void* expert_out, const std::int32_t* token_positions, const float* weights,
                         float scale, void* output, void* stream) {
  ++seq;
  std::string err;
  const std::int64_t slots = capacity ? W * cfg.slot_capacity : total_recv_slots;
  if (state != 2) err = "no dispatch since the last moe_ep_dispatch_layout (call moe_ep_dispatch first)";
  else if (slots > 0 && expert_out == nullptr) err = "expert_out is NULL while this rank holds experts of " + str(slots) + " slots";
  else if (num_tokens > 0 && output == nullptr) err = "output is NULL while num_tokens = " + str(num_tokens);
  start(stream);
  agree(kOpCombine, err);

  k::CombinePackView c{};
  c.capacity_mode = capacity;
  c.slot_capacity = cfg.slot_capacity;
  c.world = W;
  c.derived = derived.data();
  c.cgather = cgather.data();
  c.token_positions = token_positions;
  ops::pack_combine(c, slots, expert_out, cfg.combine_dtype, cfg.hidden, csend.data(), missing.data(), stream);
  std::string missing_err;
  if (!device_path) {
    moe::synchronize(stream);
    std::vector<std::int32_t> m;
    download(m, missing, 1);
    if (m[0] != 0) {
      missing_err = "a slot whose expert is on this rank has a negative token_positions entry (no row): its row was "
                    "sent as NaN";
      upload(missing, std::vector<std::int32_t>{0});
    }
  }
  mark(&phases.pack, stream);
  const Transport::Part part{csend.data(), crecv.data(), out_row_bytes};
  tr().alltoallv(&part, 1, csend_count.data(), csend_off.data(), crecv_count.data(), crecv_off.data(), stream);
  count_bytes(csend_count, crecv_count, out_row_bytes);
  mark(&phases.exchange, stream);

  ops::ReduceArgs r{};
  r.dtype = cfg.combine_dtype;
  r.num_tokens = num_tokens;
  r.hidden = cfg.hidden;
  r.topk = topk;
  r.derived = derived.data();
  r.combine_src = combine_src.data();
  r.crecv = crecv.data();
  r.weights = weights;
  r.scale = scale;
  r.output = output;
  ops::reduce(r, stream);
  mark(&phases.reduce, stream);
  if (!device_path) {  // the output is written (NaN where rows were missing); now every rank learns of it
    moe::synchronize(stream);
    agree(kOpCombineRows, missing_err);
  }
}

void HandleImpl::check_status(void* stream) {
  if (!device_path) return;
  moe::synchronize(stream);
  std::vector<std::int64_t> d;
  download(d, derived, static_cast<std::size_t>(k::derived_words(W)));
  std::vector<std::int32_t> m;
  download(m, missing, 1);
  std::string msg;
  const auto key = static_cast<std::uint64_t>(d[k::kStatusKey]);
  if (state != 0 && key != k::kOk) {
    download(h_gathered, gathered, static_cast<std::size_t>(W * stride()));
    msg = pending_error.empty() ? "moe_ep_dispatch_layout: " + verdict_text(key, h_gathered, W, me, "") : pending_error;
  }
  if (m[0] != 0) {
    if (!msg.empty()) msg += "; ";
    msg += "moe_ep_combine: a slot whose expert is on this rank had a negative token_positions entry: its row was "
           "sent as NaN";
    upload(missing, std::vector<std::int32_t>{0});
  }
  if (!msg.empty()) invalid(msg);
}

}  // namespace detail

// ---- public C++ API -----------------------------------------------------------------------------------------------
bool transport_available(moe_ep_transport_t t) noexcept {
  return t == MOE_EP_TRANSPORT_MPI ? detail::mpi_available() : t == MOE_EP_TRANSPORT_NCCL ? detail::nccl_available() : false;
}

Comm Comm::mpi(const void* mpi_comm, std::int32_t num_experts, const std::int32_t* expert_rank,
               const std::int32_t* expert_local) {
  return Comm(detail::make_comm(detail::make_mpi_transport(mpi_comm), num_experts, expert_rank, expert_local));
}
Comm Comm::nccl(void* nccl_comm, std::int32_t num_experts, const std::int32_t* expert_rank,
                const std::int32_t* expert_local) {
  return Comm(detail::make_comm(detail::make_nccl_transport(nccl_comm), num_experts, expert_rank, expert_local));
}
std::int32_t Comm::rank() const { return impl_->rank; }
std::int32_t Comm::world_size() const { return impl_->world; }
std::int32_t Comm::num_experts() const { return impl_->num_experts; }
std::int32_t Comm::num_local_experts() const { return impl_->num_local; }
std::vector<std::int32_t> Comm::expert_map() const {
  std::vector<std::int32_t> m(static_cast<std::size_t>(impl_->num_experts), -1);
  for (std::size_t e = 0; e < m.size(); ++e)
    if (impl_->expert_rank[e] == impl_->rank) m[e] = impl_->expert_local[e];
  return m;
}
std::vector<std::int32_t> Comm::local_experts() const { return impl_->local_experts; }

Handle::Handle(const Comm& comm, const Config& config) {
  if (!comm.impl()) throw Error(MOE_ERROR_INVALID_ARGUMENT, "comm is empty");
  impl_ = std::make_unique<detail::HandleImpl>(comm.impl(), config);
}
Handle::Handle(Handle&&) noexcept = default;
Handle& Handle::operator=(Handle&&) noexcept = default;
Handle::~Handle() = default;

Handle::Counts Handle::dispatch_layout(const std::int32_t* topk_ids, std::int64_t num_tokens, void* stream) {
  return impl_->layout(topk_ids, num_tokens, stream);
}
void Handle::dispatch(const void* hidden, const float* scales, const float* topk_weights, void* recv_hidden,
                      float* recv_scales, std::int32_t* recv_topk_ids, float* recv_topk_weights, std::int64_t recv_rows,
                      void* stream) {
  impl_->dispatch(hidden, scales, topk_weights, recv_hidden, recv_scales, recv_topk_ids, recv_topk_weights, recv_rows,
                  stream);
}
void Handle::combine(const void* expert_out, const std::int32_t* token_positions, const float* topk_weights,
                     float scale, void* output, void* stream) {
  impl_->combine(expert_out, token_positions, topk_weights, scale, output, stream);
}
void Handle::check_status(void* stream) { impl_->check_status(stream); }
void Handle::set_timing(bool on) { impl_->timing = on; }
Handle::Phases Handle::phases() const { return impl_->phases; }
void Handle::reset_phases() { impl_->phases = Phases{}; }
const Config& Handle::config() const { return impl_->cfg; }
std::int64_t Handle::recv_buffer_rows() const { return impl_->recv_cap; }
std::size_t Handle::staging_bytes() const { return impl_->staging; }

}  // namespace ep
}  // namespace moe
