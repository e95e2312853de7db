// Overlap checks of moe_permute and moe_combine: an output may share no byte with any buffer the call reads.
// TODO(merge): switch to check_disjoint of core/src/buffers.hpp (the reliability work) and delete this file.
#pragma once

#include <cstdint>
#include <string>

#include "contract.hpp"

namespace moe {
namespace detail {

struct Extent {
  const void* ptr;
  std::int64_t bytes;
  const char* name;
};

// Throws MOE_ERROR_INVALID_ARGUMENT "<out> overlaps <in>" when both extents are non-empty and share a byte.
inline void check_disjoint(const Extent& out, const Extent& in) {
  if (out.ptr == nullptr || in.ptr == nullptr || out.bytes <= 0 || in.bytes <= 0) return;
  const auto o0 = reinterpret_cast<std::uintptr_t>(out.ptr), i0 = reinterpret_cast<std::uintptr_t>(in.ptr);
  const auto o1 = o0 + static_cast<std::uintptr_t>(out.bytes), i1 = i0 + static_cast<std::uintptr_t>(in.bytes);
  if (o0 < i1 && i0 < o1) throw_invalid(std::string(out.name) + " overlaps " + in.name + " (not in place)");
}

}  // namespace detail
}  // namespace moe
