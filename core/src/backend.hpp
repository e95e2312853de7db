// The interface every backend implements, declared once: each operation of MOE_OPERATIONS below is a pair
//   std::size_t <op>_workspace_size(const detail::<Op>Shape&);   bytes of scratch, a function of the shape alone
//   void <op>(const detail::<Op>Shape&, const detail::<Op>Args&, void* stream);
// defined in backends/<name>/. Exactly one backend is linked into a library build, so a backend that lacks an
// operation fails to link. The public API (core/src/ops/<op>.cpp) checks arguments first: these functions
// receive valid shapes and the pointers the contract requires, and are not called for empty work. They throw
// moe::Error (usually MOE_ERROR_BACKEND) on runtime failures.
#pragma once

#include <cstddef>
#include <string>

#include "ops/align.hpp"
#include "ops/align_ep.hpp"
#include "ops/combine.hpp"
#include "ops/permute.hpp"
#include "ops/sum.hpp"
#include "ops/topk_gating.hpp"

// X(op, Op): one line per operation; Op names its detail::<Op>Shape and detail::<Op>Args.
#define MOE_OPERATIONS(X) \
  X(align, Align)         \
  X(align_ep, AlignEp)    \
  X(sum, Sum)             \
  X(permute, Permute)     \
  X(combine, Combine)     \
  X(topk_gating, TopkGating)

namespace moe {
namespace backend {

const char* name() noexcept;
// Empty when the backend can run here; otherwise why not (no GPU, driver too old, ...).
std::string unavailable_reason();

void* allocate(std::size_t bytes);
void deallocate(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void synchronize(void* stream);

#define MOE_DECLARE_BACKEND_OPERATION(op, Op)                           \
  std::size_t op##_workspace_size(const detail::Op##Shape& shape);      \
  void op(const detail::Op##Shape& shape, const detail::Op##Args& args, void* stream);
MOE_OPERATIONS(MOE_DECLARE_BACKEND_OPERATION)
#undef MOE_DECLARE_BACKEND_OPERATION

}  // namespace backend
}  // namespace moe
