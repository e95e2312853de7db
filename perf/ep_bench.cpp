// ep_bench: expert-parallel dispatch + combine over MPI, timed by phase. Every rank routes `tokens` random tokens
// to topk of `experts` experts (contiguous placement), then runs layout -> dispatch -> (identity experts: each
// present slot's output row is its received row, outside the timed calls) -> combine, `iters` times after
// `warmup`. The result is checked first (the combine of identity experts is computed independently here).
// Reported (rank 0; times are the maximum over ranks, per iteration):
//   layout    which rows go where, the descriptor exchange and verdict   (moe_ep_dispatch_layout)
//   pack      local gathers into the send staging (rows, expert outputs)
//   exchange  the all-to-alls of dispatch and combine, with the bytes they move and the GB/s achieved
//   unpack    received ids / weights / gather lists
//   reduce    the weighted sums at the tokens' home
// and, in the same run on the same byte counts per pair of ranks, two plain MPI_Alltoallv (the transport's floor).
//   mpirun -np 4 perf/ep_bench [--tokens 4096] [--hidden 2048] [--experts 64] [--topk 8] [--dtype bf16|f16|f32|u8]
//                              [--mode exact|capacity] [--iters 20] [--warmup 3] [--untimed-phases]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moe/ep.hpp"
#include "moe/reference.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

float load(moe_dtype_t t, const unsigned char* p) {
  if (t == MOE_FLOAT32) { float f; std::memcpy(&f, p, 4); return f; }
  if (t == MOE_FLOAT16) { moe::half_t h; std::memcpy(&h.bits, p, 2); return moe::reference::half_to_float(h); }
  moe::bfloat16_t b;
  std::memcpy(&b.bits, p, 2);
  return moe::reference::bfloat16_to_float(b);
}
void store(moe_dtype_t t, unsigned char* p, float v) {
  if (t == MOE_FLOAT32) { const std::uint32_t u = std::isnan(v) ? 0x7FC00000u : [&] { std::uint32_t x; std::memcpy(&x, &v, 4); return x; }(); std::memcpy(p, &u, 4); }
  else if (t == MOE_FLOAT16) { const auto h = moe::reference::float_to_half(v).bits; std::memcpy(p, &h, 2); }
  else { const auto b = moe::reference::float_to_bfloat16(v).bits; std::memcpy(p, &b, 2); }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0, W = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  std::int64_t tokens = 4096, hidden = 2048;
  std::int32_t experts = 64, topk = 8;
  int iters = 20, warmup = 3;
  bool phase_timing = true;
  std::string dtype = "bf16", mode = "exact";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--tokens") tokens = std::atoll(next().c_str());
    else if (a == "--hidden") hidden = std::atoll(next().c_str());
    else if (a == "--experts") experts = std::atoi(next().c_str());
    else if (a == "--topk") topk = std::atoi(next().c_str());
    else if (a == "--dtype") dtype = next();
    else if (a == "--mode") mode = next();
    else if (a == "--iters") iters = std::atoi(next().c_str());
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else if (a == "--untimed-phases") phase_timing = false;
  }
  const moe_dtype_t dt = dtype == "f32" ? MOE_FLOAT32 : dtype == "f16" ? MOE_FLOAT16 : MOE_BFLOAT16;
  const std::int64_t esize = static_cast<std::int64_t>(moe::dtype_size(dt)), row_bytes = hidden * esize;
  int rc = 0;
  try {
    if (experts % W != 0) experts = (experts / W + 1) * W;
    const moe::ep::Comm comm = moe::ep::Comm::from_mpi(MPI_COMM_WORLD, experts);
    // routing: distinct experts per token, uniform
    std::mt19937_64 rng(1234 + static_cast<std::uint64_t>(me));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * topk));
    std::vector<float> weights(ids.size());
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<std::int32_t> pool(static_cast<std::size_t>(experts));
      for (std::int32_t e = 0; e < experts; ++e) pool[static_cast<std::size_t>(e)] = e;
      for (std::int32_t k = 0; k < topk; ++k) {
        std::swap(pool[static_cast<std::size_t>(k)], pool[static_cast<std::size_t>(k) + rng() % static_cast<std::size_t>(experts - k)]);
        ids[static_cast<std::size_t>(t * topk + k)] = pool[static_cast<std::size_t>(k)];
        weights[static_cast<std::size_t>(t * topk + k)] = static_cast<float>(rng() % 1000) / 1000.0f;
      }
    }
    std::vector<unsigned char> hid(static_cast<std::size_t>(tokens * row_bytes));
    for (std::int64_t i = 0; i < tokens * hidden; ++i)
      store(dt, hid.data() + i * esize, static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 256.0f);
    // per-pair rows and slots (for capacity mode and the baseline)
    const std::int32_t per = experts / W;
    std::vector<std::int64_t> rows_to(static_cast<std::size_t>(W), 0), slots_to(static_cast<std::size_t>(W), 0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<char> hit(static_cast<std::size_t>(W), 0);
      for (std::int32_t k = 0; k < topk; ++k) {
        const auto d = static_cast<std::size_t>(ids[static_cast<std::size_t>(t * topk + k)] / per);
        ++slots_to[d];
        if (!hit[d]) hit[d] = 1, ++rows_to[d];
      }
    }
    std::int64_t max_pair[2] = {*std::max_element(rows_to.begin(), rows_to.end()), *std::max_element(slots_to.begin(), slots_to.end())};
    MPI_Allreduce(MPI_IN_PLACE, max_pair, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);

    moe::ep::Config cfg{};
    cfg.max_tokens = tokens;
    cfg.hidden = hidden;
    cfg.dispatch_dtype = dt;
    cfg.combine_dtype = dt;
    cfg.topk = topk;
    cfg.mode = mode == "capacity" ? MOE_EP_CAPACITY : MOE_EP_EXACT;
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
    moe::device_buffer<unsigned char> d_recv(static_cast<std::size_t>(rows * row_bytes));
    moe::device_buffer<std::int32_t> d_rids(static_cast<std::size_t>(rows * topk));
    moe::device_buffer<unsigned char> d_expert(static_cast<std::size_t>(rows * topk * row_bytes));

    auto layer = [&](bool fill_experts) {
      const auto c = h.dispatch_layout(d_ids.data(), tokens);
      h.dispatch(d_hid.data(), nullptr, d_w.data(), d_recv.data(), nullptr, d_rids.data(), nullptr, rows);
      if (fill_experts) {  // identity experts, flat layout (host copies: outside the timed phases)
        const std::int64_t R = c.recv_rows;
        std::vector<unsigned char> recv(static_cast<std::size_t>(R * row_bytes));
        std::vector<std::int32_t> rid(static_cast<std::size_t>(R * topk));
        moe::copy_to_host(recv.data(), d_recv.data(), recv.size());
        moe::copy_to_host(rid.data(), d_rids.data(), rid.size() * 4);
        std::vector<unsigned char> ex(static_cast<std::size_t>(std::max<std::int64_t>(R * topk, 1) * row_bytes), 0xFF);
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int32_t k = 0; k < topk; ++k)
            if (rid[static_cast<std::size_t>(r * topk + k)] >= 0)
              std::memcpy(ex.data() + (r * topk + k) * row_bytes, recv.data() + r * row_bytes, static_cast<std::size_t>(row_bytes));
        moe::copy_to_device(d_expert.data(), ex.data(), static_cast<std::size_t>(R * topk * row_bytes));
      }
      h.combine(d_expert.data(), nullptr, d_w.data(), 1.0f, d_out.data());
    };
    // check: output[t] = sum_k fl(w * x_t), in k order
    layer(true);
    std::vector<unsigned char> out(hid.size());
    moe::copy_to_host(out.data(), d_out.data(), out.size());
    std::int64_t bad = 0;
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t j = 0; j < hidden; ++j) {
        float acc = 0.0f;
        const float x = load(dt, hid.data() + (t * hidden + j) * esize);
        for (std::int32_t k = 0; k < topk; ++k) {
          const float p = weights[static_cast<std::size_t>(t * topk + k)] * x;
          acc = acc + p;
        }
        unsigned char want[4];
        store(dt, want, acc);
        bad += std::memcmp(want, out.data() + (t * hidden + j) * esize, static_cast<std::size_t>(esize)) != 0;
      }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (bad != 0) {
      if (me == 0) std::printf("CHECK FAILED: %lld output elements differ from the reference\n", static_cast<long long>(bad));
      MPI_Finalize();
      return 1;
    }

    // timed: the calls (experts not refilled: the expert rows of the checked run are reused)
    for (int i = 0; i < warmup; ++i) layer(false);
    h.set_timing(phase_timing);
    h.reset_phases();
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < iters; ++i) layer(false);
    double total = (now() - t0) / iters;
    const auto ph = h.phases();

    // baseline: plain MPI_Alltoallv of the same bytes per pair (dispatch rows with their metadata, then outputs)
    const std::int64_t meta = (2 * topk + 1) * 4;
    std::vector<int> sd(static_cast<std::size_t>(W)), sc(static_cast<std::size_t>(W)), rd(static_cast<std::size_t>(W)),
        rc2(static_cast<std::size_t>(W)), csd(static_cast<std::size_t>(W)), csc(static_cast<std::size_t>(W)),
        crd(static_cast<std::size_t>(W)), crc(static_cast<std::size_t>(W));
    std::vector<std::int64_t> from(static_cast<std::size_t>(2 * W));
    std::vector<std::int64_t> to(static_cast<std::size_t>(2 * W));
    for (int d = 0; d < W; ++d) to[static_cast<std::size_t>(2 * d)] = rows_to[static_cast<std::size_t>(d)], to[static_cast<std::size_t>(2 * d + 1)] = slots_to[static_cast<std::size_t>(d)];
    MPI_Alltoall(to.data(), 2, MPI_INT64_T, from.data(), 2, MPI_INT64_T, MPI_COMM_WORLD);
    std::int64_t so = 0, ro = 0, cso = 0, cro = 0;
    for (int d = 0; d < W; ++d) {
      const auto i = static_cast<std::size_t>(d);
      sc[i] = static_cast<int>(rows_to[i] * (row_bytes + meta)), sd[i] = static_cast<int>(so), so += sc[i];
      rc2[i] = static_cast<int>(from[2 * i] * (row_bytes + meta)), rd[i] = static_cast<int>(ro), ro += rc2[i];
      crc[i] = static_cast<int>(slots_to[i] * row_bytes), crd[i] = static_cast<int>(cro), cro += crc[i];  // back to me
      csc[i] = static_cast<int>(from[2 * i + 1] * row_bytes), csd[i] = static_cast<int>(cso), cso += csc[i];
    }
    std::vector<unsigned char> sb(static_cast<std::size_t>(so) + 1), rb(static_cast<std::size_t>(ro) + 1),
        csb(static_cast<std::size_t>(cso) + 1), crb(static_cast<std::size_t>(cro) + 1);
    auto base_once = [&] {
      MPI_Alltoallv(sb.data(), sc.data(), sd.data(), MPI_BYTE, rb.data(), rc2.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD);
      MPI_Alltoallv(csb.data(), csc.data(), csd.data(), MPI_BYTE, crb.data(), crc.data(), crd.data(), MPI_BYTE, MPI_COMM_WORLD);
    };
    for (int i = 0; i < warmup; ++i) base_once();
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    for (int i = 0; i < iters; ++i) base_once();
    double base = (now() - t0) / iters;

    double v[7] = {total, ph.layout / iters, ph.pack / iters, ph.exchange / iters, ph.unpack / iters, ph.reduce / iters, base};
    MPI_Allreduce(MPI_IN_PLACE, v, 7, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    std::int64_t bytes = ph.bytes_sent / iters;
    MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    const double mb = static_cast<double>(bytes);
    if (me == 0) {
      std::printf("ep_bench: %s backend, %d ranks, %lld tokens/rank, hidden %lld %s, %d experts, topk %d, %s mode "
                  "(checked: output bit-exact)\n", moe::backend_name(), W, static_cast<long long>(tokens),
                  static_cast<long long>(hidden), dtype.c_str(), experts, topk, mode.c_str());
      std::printf("  per layer (max over ranks): total %.3f ms%s\n", v[0] * 1e3,
                  phase_timing ? " (phase timing on: a wait at each boundary)" : "");
      if (phase_timing)
        std::printf("  layout %.3f ms | pack %.3f ms | exchange %.3f ms | unpack %.3f ms | reduce %.3f ms\n", v[1] * 1e3,
                    v[2] * 1e3, v[3] * 1e3, v[4] * 1e3, v[5] * 1e3);
      std::printf("  bytes moved by the exchanges (all ranks, own rank's rows included): %.3f MB per layer\n", mb / 1e6);
      if (phase_timing) std::printf("  exchange: %.2f GB/s aggregate\n", mb / v[3] / 1e9);
      std::printf("  baseline: MPI_Alltoallv x2 of the same bytes per pair: %.3f ms, %.2f GB/s aggregate; "
                  "exchange / baseline = %.2f\n", v[6] * 1e3, mb / v[6] / 1e9, phase_timing ? v[3] / v[6] : 0.0);
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", me, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
