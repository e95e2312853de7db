// moe_topk_gating's benchmark rows (issue 28's shapes), a function bench.cpp can call; perf/bench_gating_main.cpp
// runs it alone (moe_bench_gating).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "measure.hpp"

namespace moe_perf {

struct GatingRow {
  std::string shape;     // e.g. "4096 E=256 k=8 sigmoid+bias g8/4 fp32"
  double graph_us = 0;   // median us per call replayed in a graph of 16 calls rotating input sets
  double cold_us = 0;    // one call, cold L2
  double copy_us = 0;    // a device copy of the logits' bytes (reads and writes them once), replayed the same way
  double logits_bytes = 0;
};

// Issue 28's table: tokens 1, 16, 256, 4096, 16384 x (E 8 topk 2 softmax; E 128 topk 8 softmax; E 256 topk 8
// grouped sigmoid + bias 8/4, renormalized, x 2.5; E 384 topk 8 sigmoid + bias, renormalized), for each dtype in
// `dtypes` (MOE_FLOAT32 / MOE_BFLOAT16 / MOE_FLOAT16). Each shape's result is checked against the reference first
// (exits 1 on a difference). `filter`: only shapes whose text contains it.
std::vector<GatingRow> bench_gating(Measure& m, const std::vector<moe_dtype_t>& dtypes, const std::string& filter);

// The table (graph / copy is the "within 1.2x of the time to read the logits once" for >= 4096 tokens).
void print_gating(const std::vector<GatingRow>& rows, std::FILE* out);
// CSV rows: device,backend,op,shape,graph_us,cold_us,copy_us,ratio_to_copy,logits_bytes (with a header).
void write_gating_csv(const std::vector<GatingRow>& rows, const std::string& device, const std::string& path);

}  // namespace moe_perf
