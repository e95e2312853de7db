#include "buffers.hpp"

#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "contract.hpp"

namespace moe {
namespace detail {

namespace {

constexpr std::uintptr_t kMaxAddress = std::numeric_limits<std::uintptr_t>::max();

struct Range {
  std::uintptr_t begin, end;  // [begin, end), end saturated at kMaxAddress
  const BufferRef* ref;
};

Range range_of(const BufferRef& b) {
  const auto begin = reinterpret_cast<std::uintptr_t>(b.ptr);
  const std::uintptr_t room = kMaxAddress - begin;
  const std::uintptr_t end = b.bytes > room ? kMaxAddress : begin + static_cast<std::uintptr_t>(b.bytes);
  return {begin, end, &b};
}

std::string describe(const Range& r) {
  char text[96];
  std::snprintf(text, sizeof text, " [%p, +%" PRIu64 " bytes)", r.ref->ptr, static_cast<std::uint64_t>(r.ref->bytes));
  return std::string(r.ref->name) + text;
}

std::vector<Range> non_empty(std::initializer_list<BufferRef> buffers) {
  std::vector<Range> ranges;
  ranges.reserve(buffers.size());
  for (const BufferRef& b : buffers)
    if (b.ptr != nullptr && b.bytes > 0) ranges.push_back(range_of(b));
  return ranges;
}

void check_pair(const Range& a, const Range& b) {
  if (a.begin < b.end && b.begin < a.end)
    throw_invalid(describe(a) + " overlaps " + describe(b) + ": the buffers of one call must not overlap");
}

}  // namespace

std::size_t span_bytes(std::int64_t count, std::size_t elem_bytes) noexcept {
  if (count <= 0 || elem_bytes == 0) return 0;
  const auto n = static_cast<std::uint64_t>(count);
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  if (n > max / elem_bytes) return max;
  return static_cast<std::size_t>(n) * elem_bytes;
}

void check_disjoint(std::initializer_list<BufferRef> buffers) {
  const std::vector<Range> ranges = non_empty(buffers);
  for (std::size_t i = 0; i < ranges.size(); ++i)
    for (std::size_t j = i + 1; j < ranges.size(); ++j) check_pair(ranges[i], ranges[j]);
}

void check_outputs_apart(std::initializer_list<BufferRef> outputs, std::initializer_list<BufferRef> inputs) {
  const std::vector<Range> outs = non_empty(outputs), ins = non_empty(inputs);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) check_pair(outs[i], outs[j]);
    for (const Range& in : ins) check_pair(outs[i], in);
  }
}

void check_workspace_alignment(const void* workspace, const char* op, std::size_t alignment) {
  if (workspace == nullptr || alignment <= 1) return;
  const auto at = reinterpret_cast<std::uintptr_t>(workspace);
  if (at % alignment != 0) {
    char text[64];
    std::snprintf(text, sizeof text, "%p", workspace);
    throw_invalid(std::string("workspace of ") + op + " (" + text + ") is not aligned to " +
                  std::to_string(alignment) + " bytes" +
                  (alignment == kWorkspaceAlignment ? " (MOE_WORKSPACE_ALIGNMENT, what moe_malloc gives)" : ""));
  }
}

}  // namespace detail
}  // namespace moe
