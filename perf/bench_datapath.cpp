// moe_permute and moe_combine rows of the benchmark (see bench_datapath.hpp). The rows follow a real align of
// router ids (each token picks topk distinct experts of 256, block 64), made by the reference on the host;
// combine reads the permuted layout (MOE_ROWS_PERMUTED, token positions, fp32 weights), as an MoE layer does
// after its grouped GEMM.
#include "bench_datapath.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "moe/reference.hpp"

namespace moe_perf {
namespace {

const char* dtype_name(moe_dtype_t t) {
  switch (t) {
    case MOE_FLOAT32: return "fp32";
    case MOE_FLOAT16: return "fp16";
    case MOE_BFLOAT16: return "bf16";
    case MOE_FLOAT8_E4M3: return "fp8e4m3";
    case MOE_FLOAT8_E5M2: return "fp8e5m2";
    default: return "int";
  }
}

std::vector<std::int32_t> router_ids(std::int64_t tokens, std::int32_t topk, std::int32_t experts,
                                     std::mt19937_64& rng) {
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(tokens * topk));
  std::uniform_int_distribution<std::int32_t> e(0, experts - 1);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::size_t first = ids.size();
    while (static_cast<std::int32_t>(ids.size() - first) < topk) {
      const std::int32_t x = e(rng);
      if (std::find(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end(), x) == ids.end()) ids.push_back(x);
    }
  }
  return ids;
}

// `bytes` of data of the dtype: finite values of modest size (fp8: any byte), a pattern of a prime number of
// elements repeated (cheap for gigabytes; rows still differ from each other).
std::vector<unsigned char> make_values(std::size_t bytes, moe_dtype_t dtype) {
  const std::size_t esize = moe::dtype_size(dtype);
  const std::size_t period = 262147;  // elements, prime
  std::vector<unsigned char> pattern(period * esize);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::size_t i = 0; i < period; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float f = static_cast<float>(static_cast<std::int64_t>(x % 2001) - 1000) / 256.0f;
    if (dtype == MOE_FLOAT32) std::memcpy(&pattern[i * 4], &f, 4);
    else if (dtype == MOE_FLOAT16) {
      const auto h = moe::reference::float_to_half(f);
      std::memcpy(&pattern[i * 2], &h, 2);
    } else if (dtype == MOE_BFLOAT16) {
      const auto b = moe::reference::float_to_bfloat16(f);
      std::memcpy(&pattern[i * 2], &b, 2);
    } else {
      for (std::size_t b = 0; b < esize; ++b) pattern[i * esize + b] = static_cast<unsigned char>(x >> (8 * b));
    }
  }
  std::vector<unsigned char> v(bytes);
  for (std::size_t at = 0; at < bytes; at += pattern.size())
    std::memcpy(v.data() + at, pattern.data(), std::min(pattern.size(), bytes - at));
  return v;
}

[[noreturn]] void wrong(const char* op, const std::string& shape) {
  std::fprintf(stderr, "WRONG RESULT for %s %s\n", op, shape.c_str());
  std::exit(1);
}

}  // namespace

std::vector<DatapathCase> datapath_cases(bool quick) {
  std::vector<DatapathCase> v;
  for (const char* op : {"permute", "combine"})
    for (moe_dtype_t d : {MOE_BFLOAT16, MOE_FLOAT8_E4M3}) {
      if (d == MOE_FLOAT8_E4M3 && std::strcmp(op, "combine") == 0) continue;  // fp8: permute only
      for (std::int32_t k : {2, 8})
        for (std::int64_t h : {2048, 4096, 7168})
          for (std::int64_t t : {1, 4096, 16384}) {
            if (quick && t == 16384) continue;
            v.push_back({op, t, k, h, d});
          }
    }
  return v;
}

DatapathRow run_datapath(Measure& m, const DatapathCase& c) {
  DatapathRow row;
  row.op = c.op;
  char shape[96];
  std::snprintf(shape, sizeof shape, "%lldx%dx%lld %s", static_cast<long long>(c.tokens), c.topk,
                static_cast<long long>(c.hidden), dtype_name(c.dtype));
  row.shape = shape;
  const bool permute = std::strcmp(c.op, "permute") == 0;
  const std::int64_t numel = c.tokens * c.topk;
  const std::size_t row_bytes = static_cast<std::size_t>(c.hidden) * moe::dtype_size(c.dtype);

  // the layout: a reference align on the host, token positions from it
  std::mt19937_64 rng(static_cast<unsigned long>(numel * 131 + c.hidden));
  const auto ids = router_ids(c.tokens, c.topk, c.experts, rng);
  const std::int64_t cap = moe::align_max_padded(numel, c.experts, c.block_size);
  std::vector<std::int32_t> sorted(static_cast<std::size_t>(cap)),
      experts(static_cast<std::size_t>(moe::align_max_blocks(numel, c.experts, c.block_size)));
  std::int32_t post_pad = 0;
  std::vector<unsigned char> ws(moe::reference::align_workspace_size(numel, c.experts, c.block_size));
  moe::reference::align_block_size(ids.data(), numel, c.experts, c.block_size, sorted.data(), experts.data(), &post_pad,
                                   ws.data(), ws.size());
  std::vector<std::int32_t> positions(static_cast<std::size_t>(numel), -1);
  for (std::int32_t p = 0; p < post_pad; ++p) {
    const std::int32_t id = sorted[static_cast<std::size_t>(p)];
    if (id < numel) positions[static_cast<std::size_t>(id)] = p;
  }
  std::vector<float> weights(static_cast<std::size_t>(numel));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& w : weights) w = u(rng);
  row.rows = post_pad;

  moe::device_buffer<std::int32_t> d_sorted(sorted.size()), d_post(1), d_pos(positions.size());
  moe::device_buffer<float> d_w(weights.size());
  moe::copy_to_device(d_sorted.data(), sorted.data(), d_sorted.bytes());
  moe::copy_to_device(d_post.data(), &post_pad, sizeof post_pad);
  moe::copy_to_device(d_pos.data(), positions.data(), d_pos.bytes());
  moe::copy_to_device(d_w.data(), weights.data(), d_w.bytes());

  // bytes each call moves; input sets rotate while they fit in 4x the L2 (as moe_bench's moe_sum rows)
  if (permute)  // rows read once per present slot, rows written (padding: zeros), ids read
    row.bytes = static_cast<double>(numel + post_pad) * static_cast<double>(row_bytes) + (post_pad + 1) * 4.0;
  else  // rows of present slots read, token rows written, positions and weights read
    row.bytes = static_cast<double>(numel + c.tokens) * static_cast<double>(row_bytes) + static_cast<double>(numel) * 8;
  const int sets = std::clamp(static_cast<int>(240e6 / row.bytes), 1, 8);
  const std::size_t in_bytes = permute ? static_cast<std::size_t>(c.tokens) * row_bytes
                                       : static_cast<std::size_t>(std::max(post_pad, 1)) * row_bytes;
  const std::size_t out_bytes = static_cast<std::size_t>(permute ? cap : c.tokens) * row_bytes;
  const auto host_in = make_values(in_bytes, c.dtype);
  std::vector<moe::device_buffer<unsigned char>> in, out;
  for (int s = 0; s < sets; ++s) {
    in.emplace_back(in_bytes);
    moe::copy_to_device(in.back().data(), host_in.data(), in_bytes);
    out.emplace_back(out_bytes);
  }
  Call call;
  if (permute)
    call = [&](int s, void* stream) {
      moe::permute(in[s].data(), c.dtype, c.tokens, c.hidden, c.topk, d_sorted.data(), d_post.data(), cap,
                   out[s].data(), stream);
    };
  else
    call = [&](int s, void* stream) {
      moe::combine(in[s].data(), c.dtype, MOE_ROWS_PERMUTED, c.tokens, c.topk, c.hidden, d_pos.data(), d_w.data(),
                   1.0f, out[s].data(), stream);
    };

  // correctness first: set 0 against the reference
  call(0, nullptr);
  moe::synchronize();
  std::vector<unsigned char> got(out_bytes), want(out_bytes);
  moe::copy_to_host(got.data(), out[0].data(), out_bytes);
  std::size_t compared = out_bytes;
  if (permute) {
    moe::reference::permute(host_in.data(), c.dtype, c.tokens, c.hidden, c.topk, sorted.data(), &post_pad, cap,
                            want.data());
    compared = static_cast<std::size_t>(post_pad) * row_bytes;  // rows past post_pad are not written
  } else {
    moe::reference::combine(host_in.data(), c.dtype, MOE_ROWS_PERMUTED, c.tokens, c.topk, c.hidden,
                            positions.data(), weights.data(), 1.0f, want.data());
  }
  if (std::memcmp(got.data(), want.data(), compared) != 0) wrong(c.op, row.shape);

  row.graph_us = m.replay_us(call, sets);
  row.cold_us = m.cold_us(call);
  row.copy_us = m.same_bytes_copy_us(row.bytes, sets);
  return row;
}

void print_datapath(const std::vector<DatapathRow>& rows) {
  std::printf("\n%-8s %-24s %8s %10s %10s %9s %10s %10s\n", "op", "shape", "rows", "graph_us", "cold_us", "GB/s",
              "copy_us", "copy/call");
  for (const auto& r : rows)
    std::printf("%-8s %-24s %8lld %10.3f %10.3f %9.1f %10.3f %10.3f\n", r.op.c_str(), r.shape.c_str(),
                static_cast<long long>(r.rows), r.graph_us, r.cold_us, r.bytes / (r.graph_us * 1e-6) / 1e9, r.copy_us,
                r.copy_us > 0 ? r.copy_us / r.graph_us : 0.0);
}

void write_datapath_csv(const std::vector<DatapathRow>& rows, const std::string& device, const std::string& path) {
  std::ofstream out(path);
  out << "device,backend,op,shape,graph_us,cold_us,bytes,effective_gbs,same_bytes_copy_us,copy_fraction,rows\n";
  for (const auto& r : rows)
    out << '"' << device << "\"," << moe::backend_name() << ',' << r.op << ",\"" << r.shape << "\","
        << r.graph_us << ',' << r.cold_us << ',' << r.bytes << ',' << r.bytes / (r.graph_us * 1e-6) / 1e9 << ','
        << r.copy_us << ',' << (r.copy_us > 0 ? r.copy_us / r.graph_us : 0.0) << ',' << r.rows << '\n';
}

}  // namespace moe_perf
