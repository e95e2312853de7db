// The expert-parallel steps every backend implements (backends/cpu/ep_ops.cpp, backends/kokkos/ep_ops.cpp,
// backends/cuda_hip/ep_*.cu), each by running the per-index bodies of ep_kernels.hpp over its range. All are
// asynchronous on `stream` (host backends finish before returning), never allocate, never synchronise.
#pragma once

#include <cstdint>

#include "ep/ep_kernels.hpp"
#include "moe/routing.h"

namespace moe {
namespace ep {
namespace ops {

// Count, scan, finish (offsets + descriptor) and place, in that order. v.num_tokens may be 0.
void layout(const kernels::LayoutView& v, void* stream);
// The verdict on the device (NCCL capacity path): derived = derive_offsets(gathered, key = min derive_check).
void derive(const std::int64_t* gathered, std::int32_t world, std::int32_t me, std::int64_t* derived, void* stream);
// Send rows p in [0, rows): hidden row, scales and weights of pack_token(v, p) (skipped when -1).
void pack_dispatch(const kernels::PackView& v, std::int64_t rows, void* stream);
// Received rows r in [0, rows).
void unpack_dispatch(const kernels::UnpackView& v, std::int64_t rows, void* stream);
// Combine send rows q in [0, slots): csend[q] = expert_out[combine_source_row(v, q)], or canonical NaN for -2
// (then *missing = 1), nothing for -1. row_bytes = hidden * size of dtype.
void pack_combine(const kernels::CombinePackView& v, std::int64_t slots, const void* expert_out, moe_dtype_t dtype,
                  std::int64_t hidden, void* csend, std::int32_t* missing, void* stream);
// Output rows t in [0, num_tokens), every element, by reduce_element.
struct ReduceArgs {
  moe_dtype_t dtype;
  std::int64_t num_tokens, hidden;
  std::int32_t topk;
  const std::int64_t* derived;
  const std::int32_t* combine_src;
  const void* crecv;
  const float* weights;
  float scale;
  void* output;
};
void reduce(const ReduceArgs& a, void* stream);

}  // namespace ops
}  // namespace ep
}  // namespace moe
