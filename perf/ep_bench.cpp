// ep_bench's body: expert-parallel dispatch + combine, timed by phase, for any transport (ep_bench.hpp). Every rank
// routes `tokens` random tokens to topk of `experts` experts (contiguous placement), then runs layout -> dispatch
// -> (identity experts: each present slot's output row is its received row, outside the timed calls) -> combine,
// `iters` times after `warmup`. The result is checked first (the combine of identity experts is computed
// independently here). Reported (rank 0; times are the maximum over ranks, per iteration):
//   layout    which rows go where, the descriptor exchange and verdict   (moe_ep_dispatch_layout)
//   pack      local gathers into the send staging (rows, expert outputs)
//   exchange  the all-to-alls of dispatch and combine, with the bytes they move and the GB/s achieved
//   unpack    received ids / weights / gather lists
//   reduce    the weighted sums at the tokens' home
// and, in the same run on the same byte counts per pair of ranks, two plain all-to-alls (the transport's floor).
// A last line, EP_BYTES, gives those byte counts (rank-major matrices, sender x receiver) so that another baseline
// (perf/ep_torch_baseline.py) can move exactly the same bytes.
//   [--tokens 4096] [--hidden 2048] [--experts 64] [--topk 8] [--dtype bf16|f16|f32] [--mode exact|capacity]
//   [--iters 20] [--warmup 3] [--untimed-phases]
#include "ep_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "moe/reference.hpp"

namespace ep_bench {
namespace {

using std::size_t;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

float load(moe_dtype_t t, const unsigned char* p) {
  if (t == MOE_FLOAT32) { float f; std::memcpy(&f, p, 4); return f; }
  if (t == MOE_FLOAT16) { moe::half_t h; std::memcpy(&h.bits, p, 2); return moe::reference::half_to_float(h); }
  moe::bfloat16_t b;
  std::memcpy(&b.bits, p, 2);
  return moe::reference::bfloat16_to_float(b);
}
void store(moe_dtype_t t, unsigned char* p, float v) {
  if (t == MOE_FLOAT32) {
    std::uint32_t u = 0x7FC00000u;  // one NaN, so that the comparison is of bits
    if (!std::isnan(v)) std::memcpy(&u, &v, 4);
    std::memcpy(p, &u, 4);
  } else if (t == MOE_FLOAT16) {
    const auto h = moe::reference::float_to_half(v).bits;
    std::memcpy(p, &h, 2);
  } else {
    const auto b = moe::reference::float_to_bfloat16(v).bits;
    std::memcpy(p, &b, 2);
  }
}

struct Options {
  std::int64_t tokens = 4096, hidden = 2048;
  std::int32_t experts = 64, topk = 8;
  int iters = 20, warmup = 3;
  bool phase_timing = true;
  std::string dtype = "bf16", mode = "exact";
};
Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--tokens") o.tokens = std::atoll(next().c_str());
    else if (a == "--hidden") o.hidden = std::atoll(next().c_str());
    else if (a == "--experts") o.experts = std::atoi(next().c_str());
    else if (a == "--topk") o.topk = std::atoi(next().c_str());
    else if (a == "--dtype") o.dtype = next();
    else if (a == "--mode") o.mode = next();
    else if (a == "--iters") o.iters = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--untimed-phases") o.phase_timing = false;
  }
  return o;
}

// The whole sender x receiver matrix on every rank: each rank fills its own row, the sum gathers them.
std::string matrix_text(World& w, const std::vector<std::int64_t>& row) {
  const auto W = static_cast<size_t>(w.size());
  std::vector<std::int64_t> m(W * W, 0);
  std::copy(row.begin(), row.end(), m.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(w.rank()) * W));
  w.sum(m.data(), static_cast<int>(m.size()));
  std::string s;
  for (size_t i = 0; i < m.size(); ++i) s += (i ? "," : "") + std::to_string(m[i]);
  return s;
}

}  // namespace

int run_ep_bench(World& w, int argc, char** argv) {
  Options o = parse(argc, argv);
  const int me = w.rank(), W = w.size();
  const auto uW = static_cast<size_t>(W);
  const std::int64_t tokens = o.tokens, hidden = o.hidden;
  const std::int32_t topk = o.topk;
  const moe_dtype_t dt = o.dtype == "f32" ? MOE_FLOAT32 : o.dtype == "f16" ? MOE_FLOAT16 : MOE_BFLOAT16;
  const std::int64_t esize = static_cast<std::int64_t>(moe::dtype_size(dt)), row_bytes = hidden * esize;
  void* st = w.stream();
  try {
    if (o.experts % W != 0) o.experts = (o.experts / W + 1) * W;
    const std::int32_t experts = o.experts;
    const moe::ep::Comm comm = w.make_comm(experts);
    // routing: distinct experts per token, uniform
    std::mt19937_64 rng(1234 + static_cast<std::uint64_t>(me));
    std::vector<std::int32_t> ids(static_cast<size_t>(tokens * topk));
    std::vector<float> weights(ids.size());
    std::vector<std::int32_t> pool(static_cast<size_t>(experts));
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int32_t e = 0; e < experts; ++e) pool[static_cast<size_t>(e)] = e;
      for (std::int32_t k = 0; k < topk; ++k) {
        const auto uk = static_cast<size_t>(k);
        std::swap(pool[uk], pool[uk + rng() % static_cast<size_t>(experts - k)]);
        ids[static_cast<size_t>(t * topk + k)] = pool[uk];
        weights[static_cast<size_t>(t * topk + k)] = static_cast<float>(rng() % 1000) / 1000.0f;
      }
    }
    std::vector<unsigned char> hid(static_cast<size_t>(tokens * row_bytes));
    for (std::int64_t i = 0; i < tokens * hidden; ++i)
      store(dt, hid.data() + i * esize, static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 256.0f);
    // per-pair rows and slots (for capacity mode and the baseline)
    const std::int32_t per = experts / W;
    std::vector<std::int64_t> rows_to(uW, 0), slots_to(uW, 0);
    std::vector<char> hit(uW);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::fill(hit.begin(), hit.end(), 0);
      for (std::int32_t k = 0; k < topk; ++k) {
        const auto d = static_cast<size_t>(ids[static_cast<size_t>(t * topk + k)] / per);
        ++slots_to[d];
        if (!hit[d]) hit[d] = 1, ++rows_to[d];
      }
    }
    std::int64_t max_pair[2] = {*std::max_element(rows_to.begin(), rows_to.end()),
                                *std::max_element(slots_to.begin(), slots_to.end())};
    w.max(max_pair, 2);

    moe::ep::Config cfg{};
    cfg.max_tokens = tokens;
    cfg.hidden = hidden;
    cfg.dispatch_dtype = dt;
    cfg.combine_dtype = dt;
    cfg.topk = topk;
    cfg.mode = o.mode == "capacity" ? MOE_EP_CAPACITY : MOE_EP_EXACT;
    cfg.capacity = max_pair[0];
    cfg.slot_capacity = max_pair[1];
    moe::ep::Handle h(comm, cfg);
    moe::device_buffer<std::int32_t> d_ids(ids.size());
    moe::device_buffer<float> d_w(weights.size());
    moe::device_buffer<unsigned char> d_hid(hid.size()), d_out(hid.size());
    moe::copy_to_device(d_ids.data(), ids.data(), ids.size() * 4);
    moe::copy_to_device(d_w.data(), weights.data(), weights.size() * 4);
    moe::copy_to_device(d_hid.data(), hid.data(), hid.size());
    const std::int64_t rows = h.recv_buffer_rows();
    moe::device_buffer<unsigned char> d_recv(static_cast<size_t>(rows * row_bytes));
    moe::device_buffer<std::int32_t> d_rids(static_cast<size_t>(rows * topk));
    moe::device_buffer<unsigned char> d_expert(static_cast<size_t>(rows * topk * row_bytes));

    auto layer = [&](bool fill_experts) {
      const auto c = h.dispatch_layout(d_ids.data(), tokens, st);
      h.dispatch(d_hid.data(), nullptr, d_w.data(), d_recv.data(), nullptr, d_rids.data(), nullptr, rows, st);
      if (fill_experts) {  // identity experts, flat layout (host copies: outside the timed phases)
        const std::int64_t R = c.recv_rows;
        std::vector<unsigned char> recv(static_cast<size_t>(R * row_bytes));
        std::vector<std::int32_t> rid(static_cast<size_t>(R * topk));
        moe::synchronize(st);  // the copies below are on the default stream: the dispatch must have landed
        moe::copy_to_host(recv.data(), d_recv.data(), recv.size());
        moe::copy_to_host(rid.data(), d_rids.data(), rid.size() * 4);
        std::vector<unsigned char> ex(static_cast<size_t>(std::max<std::int64_t>(R * topk, 1) * row_bytes), 0xFF);
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int32_t k = 0; k < topk; ++k)
            if (rid[static_cast<size_t>(r * topk + k)] >= 0)
              std::memcpy(ex.data() + (r * topk + k) * row_bytes, recv.data() + r * row_bytes,
                          static_cast<size_t>(row_bytes));
        moe::copy_to_device(d_expert.data(), ex.data(), static_cast<size_t>(R * topk * row_bytes));
      }
      h.combine(d_expert.data(), nullptr, d_w.data(), 1.0f, d_out.data(), st);
    };
    // check: output[t] = sum_k fl(w * x_t), in k order
    layer(true);
    std::vector<unsigned char> out(hid.size());
    moe::synchronize(st);
    moe::copy_to_host(out.data(), d_out.data(), out.size());
    std::int64_t bad = 0;
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t j = 0; j < hidden; ++j) {
        float acc = 0.0f;
        const float x = load(dt, hid.data() + (t * hidden + j) * esize);
        for (std::int32_t k = 0; k < topk; ++k) {
          const float p = weights[static_cast<size_t>(t * topk + k)] * x;
          acc = acc + p;
        }
        unsigned char want[4];
        store(dt, want, acc);
        bad += std::memcmp(want, out.data() + (t * hidden + j) * esize, static_cast<size_t>(esize)) != 0;
      }
    w.sum(&bad, 1);
    if (bad != 0) {
      if (me == 0)
        std::printf("CHECK FAILED: %lld output elements differ from the reference\n", static_cast<long long>(bad));
      return 1;
    }

    // timed: the calls (experts not refilled: the expert rows of the checked run are reused)
    for (int i = 0; i < o.warmup; ++i) layer(false);
    h.set_timing(o.phase_timing);
    h.reset_phases();
    moe::synchronize(st);
    w.barrier();
    const double t0 = now();
    for (int i = 0; i < o.iters; ++i) layer(false);
    moe::synchronize(st);  // the clock stops when the work is done, not when it is queued
    const double total = (now() - t0) / o.iters;
    const auto ph = h.phases();

    // baseline: plain all-to-alls of the same bytes per pair (dispatch rows with their metadata, then outputs)
    const std::int64_t meta = (2 * topk + 1) * 4;
    std::vector<std::int64_t> to(2 * uW), from(2 * uW);
    for (size_t d = 0; d < uW; ++d) to[2 * d] = rows_to[d], to[2 * d + 1] = slots_to[d];
    w.alltoall_pairs(to.data(), from.data());
    PairBytes disp{std::vector<std::int64_t>(uW), std::vector<std::int64_t>(uW)};
    PairBytes comb{std::vector<std::int64_t>(uW), std::vector<std::int64_t>(uW)};
    for (size_t d = 0; d < uW; ++d) {
      disp.send[d] = rows_to[d] * (row_bytes + meta), disp.recv[d] = from[2 * d] * (row_bytes + meta);
      comb.send[d] = from[2 * d + 1] * row_bytes, comb.recv[d] = slots_to[d] * row_bytes;  // outputs go back
    }
    const double base = w.baseline_seconds(disp, comb, o.warmup, o.iters);

    double v[7] = {total, ph.layout / o.iters, ph.pack / o.iters, ph.exchange / o.iters, ph.unpack / o.iters,
                   ph.reduce / o.iters, base};
    w.max(v, 7);
    std::int64_t bytes = ph.bytes_sent / o.iters;
    w.sum(&bytes, 1);
    const std::string disp_m = matrix_text(w, disp.send), comb_m = matrix_text(w, comb.send);
    const double mb = static_cast<double>(bytes);
    if (me == 0) {
      std::printf("ep_bench: %s backend, %d ranks, %lld tokens/rank, hidden %lld %s, %d experts, topk %d, %s mode "
                  "(checked: output bit-exact)\n", moe::backend_name(), W, static_cast<long long>(tokens),
                  static_cast<long long>(hidden), o.dtype.c_str(), experts, topk, o.mode.c_str());
      std::printf("  per layer (max over ranks): total %.3f ms%s\n", v[0] * 1e3,
                  o.phase_timing ? " (phase timing on: a wait at each boundary)" : "");
      if (o.phase_timing)
        std::printf("  layout %.3f ms | pack %.3f ms | exchange %.3f ms | unpack %.3f ms | reduce %.3f ms\n",
                    v[1] * 1e3, v[2] * 1e3, v[3] * 1e3, v[4] * 1e3, v[5] * 1e3);
      std::printf("  bytes moved by the exchanges (all ranks, own rank's rows included): %.3f MB per layer\n",
                  mb / 1e6);
      if (o.phase_timing) std::printf("  exchange: %.2f GB/s aggregate\n", mb / v[3] / 1e9);
      std::printf("  baseline: %s of the same bytes per pair: %.3f ms, %.2f GB/s aggregate; "
                  "exchange / baseline = %.2f\n", w.baseline_name(), v[6] * 1e3, mb / v[6] / 1e9,
                  o.phase_timing ? v[3] / v[6] : 0.0);
      std::printf("EP_BYTES ranks=%d dispatch=%s combine=%s layer_ms=%.4f exchange_ms=%.4f baseline_ms=%.4f\n", W,
                  disp_m.c_str(), comb_m.c_str(), v[0] * 1e3, o.phase_timing ? v[3] * 1e3 : 0.0, v[6] * 1e3);
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", me, e.what());
    return 1;
  }
  return 0;
}

}  // namespace ep_bench
