// Benchmark rows of moe_permute and moe_combine (bench_datapath.cpp), as a function the main benchmark can call:
// each case is checked against the reference first, then timed as every row of moe_bench is (Measure: a graph of
// 16 calls rotating input sets, and a device copy of the same bytes replayed the same way, in the same run).
#pragma once

#include <string>
#include <vector>

#include "measure.hpp"

namespace moe_perf {

struct DatapathCase {
  const char* op;  // "permute" | "combine"
  std::int64_t tokens;
  std::int32_t topk;
  std::int64_t hidden;
  moe_dtype_t dtype;
  std::int32_t experts = 256, block_size = 64;  // the align layout the rows follow (issue-5 shapes)
};

struct DatapathRow {
  std::string op, shape;
  double graph_us = 0, cold_us = 0;
  double bytes = 0;    // read + written by the call (rows, ids, positions, weights)
  double copy_us = 0;  // a device copy of the same bytes, replayed as the call is
  std::int64_t rows = 0;  // permute: rows written (num_tokens_post_pad)
};

// tokens 1, 4096, 16384 x hidden 2048, 4096, 7168 x topk 2, 8; bf16 (permute: and fp8). quick: no 16384.
std::vector<DatapathCase> datapath_cases(bool quick);
// Checks, then times one case; exits the process (status 1) on a wrong result, as moe_bench does.
DatapathRow run_datapath(Measure& m, const DatapathCase& c);
// The table (op, shape, us, GB/s, copy us, copy / call): the target is copy / call >= 0.9 at >= 4096
// tokens, and graph_us <= 1.5 for one token.
void print_datapath(const std::vector<DatapathRow>& rows);
// CSV rows: device,backend,op,shape,graph_us,cold_us,bytes,effective_gbs,same_bytes_copy_us,copy_fraction,rows
void write_datapath_csv(const std::vector<DatapathRow>& rows, const std::string& device, const std::string& path);

}  // namespace moe_perf
