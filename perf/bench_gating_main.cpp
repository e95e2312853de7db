// moe_bench_gating: moe_topk_gating's rows alone (bench_gating.hpp), until bench.cpp calls bench_gating itself.
//   moe_bench_gating [--dtype fp32|bf16|fp16|all] [--filter TEXT] [--csv FILE] [--timing device|host]
#include <cstdio>
#include <string>

#include "bench_gating.hpp"

int main(int argc, char** argv) {
  std::string dtype = "all", filter, csv = "moe_bench_gating.csv", timing = "device";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--timing" && i + 1 < argc) timing = argv[++i];
    else {
      std::fprintf(stderr, "usage: moe_bench_gating [--dtype fp32|bf16|fp16|all] [--filter TEXT] [--csv FILE] "
                           "[--timing device|host]\n");
      return 2;
    }
  }
  std::vector<moe_dtype_t> dtypes;
  if (dtype == "fp32" || dtype == "all") dtypes.push_back(MOE_FLOAT32);
  if (dtype == "bf16" || dtype == "all") dtypes.push_back(MOE_BFLOAT16);
  if (dtype == "fp16") dtypes.push_back(MOE_FLOAT16);
  try {
    moe::check_backend();
  } catch (const moe::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  try {
    auto m = timing == "host" ? moe_perf::make_host_measure() : moe_perf::make_measure();
    const double mhz = m->warm_up_mhz(1500);
    std::printf("device: %s, backend %s, SM clock after warm-up %.0f MHz, empty node %.3f us\n", m->device().c_str(),
                moe::backend_name(), mhz, m->empty_library_node_us());
    const auto rows = moe_perf::bench_gating(*m, dtypes, filter);
    moe_perf::print_gating(rows, stdout);
    moe_perf::write_gating_csv(rows, m->device(), csv);
    std::printf("\nCSV: %s\n", csv.c_str());
  } catch (const moe::Error& e) {
    std::fprintf(stderr, "moe_bench_gating: %s\n", e.what());
    return 1;
  }
  return 0;
}
