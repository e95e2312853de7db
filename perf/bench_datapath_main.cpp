// moe_bench_datapath: the moe_permute / moe_combine rows of bench_datapath.cpp on their own, until moe_bench
// calls them from its catalogue.
//   moe_bench_datapath [--quick] [--filter TEXT] [--csv FILE] [--timing device|host]
#include <cstdio>
#include <string>

#include "bench_datapath.hpp"

int main(int argc, char** argv) {
  bool quick = false;
  std::string filter, csv = "moe_bench_datapath.csv", timing = "device";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--csv" && i + 1 < argc) csv = argv[++i];
    else if (a == "--timing" && i + 1 < argc) timing = argv[++i];
    else {
      std::fprintf(stderr, "usage: moe_bench_datapath [--quick] [--filter TEXT] [--csv FILE] [--timing device|host]\n");
      return 2;
    }
  }
  try {
    moe::check_backend();
  } catch (const moe::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  try {
    auto m = timing == "host" ? moe_perf::make_host_measure() : moe_perf::make_measure();
    const double mhz = m->warm_up_mhz(1500);
    const double node = m->empty_library_node_us(), bw = m->copy_bandwidth_gbs();
    std::printf("device: %s, backend %s, SM clock after warm-up %.0f MHz\n"
                "floors: empty graph node %.3f us as the library launches, device copy %.0f GB/s (read+write)\n",
                m->device().c_str(), moe::backend_name(), mhz, node, bw);
    std::vector<moe_perf::DatapathRow> rows;
    for (const auto& c : moe_perf::datapath_cases(quick)) {
      const std::string name = std::string(c.op) + " " + std::to_string(c.tokens) + "x" + std::to_string(c.topk) + "x" +
                               std::to_string(c.hidden) + (c.dtype == MOE_BFLOAT16 ? " bf16" : " fp8e4m3");
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      rows.push_back(moe_perf::run_datapath(*m, c));
      std::fflush(stdout);
    }
    moe_perf::print_datapath(rows);
    moe_perf::write_datapath_csv(rows, m->device(), csv);
    std::printf("\nSM clock at the end: %.0f MHz\nCSV: %s\n", m->warm_up_mhz(20), csv.c_str());
  } catch (const moe::Error& e) {
    std::fprintf(stderr, "moe_bench_datapath: %s\n", e.what());
    return 1;
  }
  return 0;
}
