// moe_bench: times align_block_size and moe_sum on the configured backend over the suite's catalogue of shapes
// (tests/catalogue.hpp: the shapes timed are shapes the suite checks), checks each result against the reference
// first, prints a table and writes CSV.
//   moe_bench [--suite targets|sweep|sum|large|all|none] [--align TOKENSxTOPK:EXPERTS:BLOCK]...
//             [--sum TOKENSxTOPKxHIDDEN:bf16|fp16|fp32]... [--csv FILE] [--quick] [--filter TEXT] [--timing device|host]
//             [--path NAME|all] [--caps=portable]
// --align adds one uniform-random align shape (repeatable), e.g. --suite none --align 131072x8:256:64; --sum one
// moe_sum shape, e.g. --sum 16x8x7168:bf16. --path: each align shape on that path (where it applies; others are
// skipped), or on every path that applies ("all"); the default is the backend's choice. --caps=portable: plan as
// a device without clusters and dependent launch does (HIP on AMD), on this one. The CSV's path column is the
// path that ran (core/src/paths.hpp).
// Each row: median us per call replayed in a graph of 16 calls rotating input sets ("graph"), median us of a
// single call with a cold L2 ("cold"), the floor (max of an empty graph node, launched as the library launches,
// and the bytes the call must move at the copy bandwidth measured in this run) and graph / floor.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "catalogue.hpp"
#include "measure.hpp"
#include "moe/reference.hpp"
#include "paths.hpp"

namespace {

using moe_catalogue::AlignCase;
using moe_catalogue::SumCase;
using moe_catalogue::dtype_name;
using moe_perf::Measure;

struct Row {
  std::string op, shape, path;
  double graph_us, cold_us, floor_us, bytes;
  double copy_us = 0;  // moe_sum: a device copy of the same bytes, replayed the same way (0: not measured)
};

std::vector<Row> rows;
std::string filter;  // --filter: only shapes whose text contains it

bool selected(const std::string& shape) { return filter.empty() || shape.find(filter) != std::string::npos; }

double floor_us(double bytes, double node_us, double bw_gbs) {
  return std::max(node_us, bytes / (bw_gbs * 1e9) * 1e6);
}

std::string path_option;  // --path: "" (the backend's choice), a path name, or "all"

void run_align_on(Measure& m, const AlignCase& c, double node_us, double bw) {
  const std::string shape = moe_catalogue::name(c);
  const std::int64_t numel = c.numel();
  const auto max_padded = moe::align_max_padded(numel, c.experts, c.block_size);
  const auto max_blocks = moe::align_max_blocks(numel, c.experts, c.block_size);
  const std::size_t ws_bytes = moe::align_workspace_size(numel, c.experts, c.block_size);
  const int sets = 8;
  std::mt19937_64 rng(static_cast<unsigned long>(numel * 31 + c.experts));
  std::vector<moe::device_buffer<std::int32_t>> ids, sorted, experts, post;
  std::vector<std::vector<std::int32_t>> host_ids;
  for (int s = 0; s < sets; ++s) {
    host_ids.push_back(moe_catalogue::make_ids<std::int32_t>(c, rng));
    ids.emplace_back(static_cast<std::size_t>(numel));
    moe::copy_to_device(ids.back().data(), host_ids.back().data(), ids.back().bytes());
    sorted.emplace_back(static_cast<std::size_t>(max_padded));
    experts.emplace_back(static_cast<std::size_t>(max_blocks));
    post.emplace_back(1);
  }
  moe::device_buffer<unsigned char> ws(ws_bytes);
  auto call = [&](int s, void* stream) {
    moe::align_block_size(ids[s].data(), numel, c.experts, c.block_size, sorted[s].data(), experts[s].data(),
                          post[s].data(), ws.data(), ws_bytes, stream);
  };
  // correctness first: set 0 against the reference
  call(0, nullptr);
  moe::synchronize();
  std::vector<std::int32_t> got(static_cast<std::size_t>(max_padded)), want(got.size());
  std::vector<std::int32_t> got_e(static_cast<std::size_t>(max_blocks)), want_e(got_e.size());
  std::int32_t got_post = 0, want_post = 0;
  std::vector<unsigned char> rws(moe::reference::align_workspace_size(numel, c.experts, c.block_size));
  moe::reference::align_block_size(host_ids[0].data(), numel, c.experts, c.block_size, want.data(), want_e.data(),
                                   &want_post, rws.data(), rws.size());
  moe::copy_to_host(got.data(), sorted[0].data(), sorted[0].bytes());
  moe::copy_to_host(got_e.data(), experts[0].data(), experts[0].bytes());
  moe::copy_to_host(&got_post, post[0].data(), sizeof got_post);
  const std::string path =
      moe::detail::align_path(moe::detail::make_align_shape(numel, c.experts, c.block_size), MOE_INT32);
  if (got != want || got_e != want_e || got_post != want_post) {
    std::fprintf(stderr, "WRONG RESULT for align %s on path %s\n", shape.c_str(), path.c_str());
    std::exit(1);
  }
  const double bytes = static_cast<double>(numel) * 4 + static_cast<double>(max_padded + max_blocks + 1) * 4;
  rows.push_back({"align", shape, path, m.replay_us(call, sets), m.cold_us(call), floor_us(bytes, node_us, bw), bytes});
}

// The case on the paths --path asks for.
void run_align(Measure& m, const AlignCase& c, double node_us, double bw) {
  if (!selected(moe_catalogue::name(c))) return;
  if (path_option.empty()) return run_align_on(m, c, node_us, bw);
  const auto shape = moe::detail::make_align_shape(c.numel(), c.experts, c.block_size);
  for (const std::string& path : moe::backend::align_paths(shape, MOE_INT32)) {
    if (path_option != "all" && path != path_option) continue;
    const moe::detail::ScopedForcedPath force(moe::detail::kAlignOperation, path);
    run_align_on(m, c, node_us, bw);
  }
}

void run_sum(Measure& m, const SumCase& c, double node_us, double bw) {
  const std::string shape = moe_catalogue::name(c);
  if (!selected(shape)) return;
  const std::size_t esize = moe::dtype_size(c.dtype);
  const std::size_t in_elems = static_cast<std::size_t>(c.tokens * c.topk * c.hidden);
  const std::size_t out_elems = static_cast<std::size_t>(c.tokens * c.hidden);
  const double bytes = static_cast<double>((in_elems + out_elems) * esize);
  const int sets = std::clamp(static_cast<int>(240e6 / bytes), 1, 8);  // rotate while the data fits in L2 x4
  std::vector<unsigned char> host(in_elems * esize);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::size_t i = 0; i < in_elems; ++i) {  // finite values of modest size, cheap to make
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float f = static_cast<float>(static_cast<std::int64_t>(x % 2001) - 1000) / 256.0f;
    if (c.dtype == MOE_FLOAT32) std::memcpy(&host[i * 4], &f, 4);
    if (c.dtype == MOE_FLOAT16) {
      const auto h = moe::reference::float_to_half(f);
      std::memcpy(&host[i * 2], &h, 2);
    }
    if (c.dtype == MOE_BFLOAT16) {
      const auto b = moe::reference::float_to_bfloat16(f);
      std::memcpy(&host[i * 2], &b, 2);
    }
  }
  std::vector<moe::device_buffer<unsigned char>> in, out;
  for (int s = 0; s < sets; ++s) {
    in.emplace_back(host.size());
    moe::copy_to_device(in.back().data(), host.data(), host.size());
    out.emplace_back(out_elems * esize);
  }
  auto call = [&](int s, void* stream) {
    moe::sum(in[s].data(), c.dtype, c.tokens, c.topk, c.hidden, out[s].data(), stream);
  };
  call(0, nullptr);
  moe::synchronize();
  std::vector<unsigned char> got(out_elems * esize), want(got.size());
  moe::copy_to_host(got.data(), out[0].data(), got.size());
  moe::reference::sum(host.data(), c.dtype, c.tokens, c.topk, c.hidden, want.data());
  if (got != want) {
    std::fprintf(stderr, "WRONG RESULT for sum %s\n", shape.c_str());
    std::exit(1);
  }
  rows.push_back({"sum", shape, "", m.replay_us(call, sets), m.cold_us(call), floor_us(bytes, node_us, bw), bytes,
                  m.same_bytes_copy_us(bytes, sets)});
}

constexpr const char* kUsage =
    "usage: moe_bench [--suite targets|sweep|sum|large|all|none] [--align TOKENSxTOPK:EXPERTS:BLOCK]... "
    "[--sum TOKENSxTOPKxHIDDEN:bf16|fp16|fp32]... [--csv FILE] [--quick] [--filter TEXT] [--timing device|host] "
    "[--path NAME|all] [--caps=portable]";

bool parse_align(const char* text, std::vector<AlignCase>* out) {
  long long tokens = 0;
  int topk = 0, experts = 0, block = 0;
  char tail = 0;
  if (std::sscanf(text, "%lldx%d:%d:%d%c", &tokens, &topk, &experts, &block, &tail) != 4) return false;
  out->push_back({tokens, topk, experts, block});
  return true;
}

bool parse_sum(const char* text, std::vector<SumCase>* out) {
  long long tokens = 0, hidden = 0;
  int topk = 0;
  char dtype[8] = {};
  if (std::sscanf(text, "%lldx%dx%lld:%7s", &tokens, &topk, &hidden, dtype) != 4) return false;
  const std::string d = dtype;
  if (d != "bf16" && d != "fp16" && d != "fp32") return false;
  if (tokens < 1 || topk < 1 || hidden < 1) {  // the benchmark sizes its buffers from them before any call
    std::fprintf(stderr, "moe_bench: --sum %s: tokens, topk and hidden must be >= 1\n", text);
    return false;
  }
  out->push_back({tokens, topk, hidden, d == "bf16" ? MOE_BFLOAT16 : d == "fp16" ? MOE_FLOAT16 : MOE_FLOAT32});
  return true;
}

}  // namespace

int run(int argc, char** argv) {
  std::vector<AlignCase> extra;  // --align
  std::vector<SumCase> extra_sum;  // --sum
  std::string suite = "targets", csv = "moe_bench.csv", timing = "device";
  bool quick = false;
  std::unique_ptr<moe::detail::ScopedForcedCaps> caps;  // --caps=portable
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--suite" && i + 1 < argc) suite = argv[++i];
    else if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--timing" && i + 1 < argc) timing = argv[++i];
    else if (a == "--path" && i + 1 < argc) path_option = argv[++i];
    else if (a == "--caps=portable")
      caps = std::make_unique<moe::detail::ScopedForcedCaps>(moe::detail::CapsLimits::portable());
    else if (a == "--align" && i + 1 < argc && parse_align(argv[++i], &extra)) {
    } else if (a == "--sum" && i + 1 < argc && parse_sum(argv[++i], &extra_sum)) {
    } else {
      std::fprintf(stderr, "%s\n", kUsage);
      return 2;
    }
  }
  const char* suites[] = {"targets", "sweep", "sum", "large", "all", "none"};
  if (std::none_of(std::begin(suites), std::end(suites), [&](const char* n) { return suite == n; })) {
    std::fprintf(stderr, "unknown --suite '%s'\n%s\n", suite.c_str(), kUsage);
    return 2;
  }
  try {
    moe::check_backend();
  } catch (const moe::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  // --timing host: host clock around back-to-back calls, for comparing backends that cannot be graph-captured
  auto m = timing == "host" ? moe_perf::make_host_measure() : moe_perf::make_measure();
  const double mhz_start = m->warm_up_mhz(1500);
  const double plain_node = m->empty_node_us(), node = m->empty_library_node_us(), bw = m->copy_bandwidth_gbs();
  std::printf("device: %s, backend %s, SM clock after warm-up %.0f MHz\n"
              "floors: empty graph node %.3f us as the library launches (plain launch %.3f us), "
              "device copy %.0f GB/s (read+write)\n",
              m->device().c_str(), moe::backend_name(), mhz_start, node, plain_node, bw);
  auto want = [&](const char* s) { return suite == s || suite == "all"; };
  if (want("targets")) {
    for (const auto& c : moe_catalogue::align_targets()) run_align(*m, c, node, bw);
    for (const auto& c : moe_catalogue::sum_targets()) run_sum(*m, c, node, bw);
  }
  if (want("sweep"))
    for (const auto& c : moe_catalogue::align_sweep()) run_align(*m, c, node, bw);
  if (want("large"))
    for (const auto& c : moe_catalogue::align_large()) run_align(*m, c, node, bw);
  if (want("sum"))
    for (const auto& c : moe_catalogue::sum_suite(quick)) run_sum(*m, c, node, bw);
  for (const auto& c : extra) run_align(*m, c, node, bw);
  for (const auto& c : extra_sum) run_sum(*m, c, node, bw);

  std::printf("\nSM clock at the end: %.0f MHz\n", m->warm_up_mhz(20));
  std::printf("\n%-6s %-34s %-16s %10s %10s %10s %7s %9s %10s\n", "op", "shape", "path", "graph_us", "cold_us",
              "floor_us", "ratio", "GB/s", "copy_us");  // copy_us: a copy of the same bytes (moe_sum)
  std::ofstream out(csv);
  out << "device,backend,op,shape,path,graph_us,cold_us,floor_us,ratio,bytes,effective_gbs,empty_node_us,copy_gbs,plain_empty_node_us,same_bytes_copy_us\n";
  for (const auto& r : rows) {
    const double gbs = r.bytes / (r.graph_us * 1e-6) / 1e9;
    std::printf("%-6s %-34s %-16s %10.3f %10.3f %10.3f %7.2f %9.1f %10.3f\n", r.op.c_str(), r.shape.c_str(),
                r.path.c_str(), r.graph_us, r.cold_us, r.floor_us, r.graph_us / r.floor_us, gbs, r.copy_us);
    out << '"' << m->device() << "\"," << moe::backend_name() << ',' << r.op << ",\"" << r.shape << "\"," << r.path
        << ',' << r.graph_us << ',' << r.cold_us << ',' << r.floor_us << ',' << r.graph_us / r.floor_us << ','
        << r.bytes << ',' << gbs << ',' << node << ',' << bw << ',' << plain_node << ',' << r.copy_us << '\n';
  }
  std::printf("\nCSV: %s\n", csv.c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const moe::Error& e) {  // e.g. an --align shape the library rejects
    std::fprintf(stderr, "moe_bench: %s\n", e.what());
    return 1;
  }
}
