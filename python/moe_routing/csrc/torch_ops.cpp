// moe_routing's PyTorch operators in C++ (torch.ops.moe_routing.align_block_size and moe_sum, the allocating
// forms): the dispatcher calls them without entering Python, as vLLM's operators, so an eager call costs one
// dispatch, the output allocations and the launch (issue 29 asks such a call within 1.3x of an empty torch.ops
// call). The _out forms stay Python-registered (moe_routing/torch.py): as C++ operators with mutable arguments,
// a failed check crashed the process on the GPU machine (torch 2.11, CUDA tensors; CPU tensors and torch 2.15
// were fine). Those checks streamed integers into their texts, as the crashes found since did (Num): the likely
// cause, not confirmed for the _out forms.
// Compiled against the user's torch by moe_routing/_torch_cpp.py (torch.utils.cpp_extension, at the first import
// of moe_routing.torch, cached); the library is reached through the table moe_routing._ext hands over
// (api_table.h), so this file needs torch's headers only: no CUDA headers, no link to the library.
// The checks here keep the library from seeing a wrong tensor (device, dtype, contiguity, shape); the
// library checks the rest. The Python wrappers in moe_routing/torch.py re-run a failed call on their Python
// path, which raises moe_routing's own exception classes with the same texts.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "api_table.h"

namespace {

const moe_torch_api_t* g_api = nullptr;

// An integer in a failed check's text, formatted here, not streamed by c10::str: on the GPU machine (torch 2.11,
// this file built there at first import) every check whose text streamed an integer crashed the process with a
// segmentation fault (num_experts = 2^31, x.dim(); before, x.sizes() and the _out forms' element counts), while
// texts made of strings, devices and dtypes raised cleanly (a probe of each failing call in its own interpreter,
// perf/NOTES.md step 72).
struct Num {
  char text[24];
  explicit Num(long long v) { std::snprintf(text, sizeof text, "%lld", v); }
};

void check_status(std::int32_t status) {
  TORCH_CHECK(status == 0, "moe_routing: ", g_api->last_error());
}

const moe_torch_api_t& api() {
  TORCH_CHECK(g_api != nullptr, "moe_routing: the C++ operators were loaded but not bound to the library "
                                "(import moe_routing.torch)");
  return *g_api;
}

// A tensor the library may take: this build's memory space (host; or the current GPU), C-contiguous.
void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), what, " must be a tensor");
  const c10::Device dev = t.device();
  if (api().memory_host) {
    TORCH_CHECK(dev.is_cpu(), what, " must be a CPU tensor, got ", dev);
  } else {
    TORCH_CHECK(dev.is_cuda(), what, " must be a CUDA tensor, got ", dev);
    const c10::Device current = c10::impl::getDeviceGuardImpl(dev.type())->getDevice();
    TORCH_CHECK(dev.index() == current.index(), what, " is on ", dev, " but the current device is ", current);
  }
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

// The current stream of the tensor's device (torch.cuda.current_stream()): through c10's device-generic
// interface, so no CUDA header is needed here. Host backends take no stream.
void* stream_of(const at::Tensor& t) {
  if (api().memory_host) return nullptr;
  const c10::Device dev = t.device();
  return c10::impl::getDeviceGuardImpl(dev.type())->getStream(dev).native_handle();
}

std::int32_t id_code(at::ScalarType s) {
  const auto& a = api();
  switch (s) {
    case at::kChar: return a.code_int8;
    case at::kByte: return a.code_uint8;
    case at::kShort: return a.code_int16;
    case at::kInt: return a.code_int32;
    case at::kLong: return a.code_int64;
    default: TORCH_CHECK(false, "topk_ids must have an integer dtype (int8, uint8, int16, int32, int64), got ", s);
  }
}

std::int32_t value_code(at::ScalarType s) {
  const auto& a = api();
  switch (s) {
    case at::kFloat: return a.code_float32;
    case at::kHalf: return a.code_float16;
    case at::kBFloat16: return a.code_bfloat16;
    default: TORCH_CHECK(false, "x must be float32, float16 or bfloat16, got ", s);
  }
}

std::int32_t to_i32(std::int64_t v, const char* what) {
  TORCH_CHECK(v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max(), what,
              " = ", Num(v).text, " does not fit int32");
  return static_cast<std::int32_t>(v);
}

struct AlignCaps {
  std::int64_t padded = 0, blocks = 0;
  std::size_t workspace = 0;
};

AlignCaps align_caps(const at::Tensor& ids, std::int32_t num_experts, std::int32_t block_size) {
  AlignCaps c;
  check_status(api().align_caps(ids.numel(), num_experts, block_size, &c.padded, &c.blocks, &c.workspace));
  return c;
}

// Workspaces cached per (device, stream, operation, shape), as the Python path caches them (moe_routing/torch.py):
// a steady-state call allocates nothing, and a captured graph keeps a valid address until
// moe_routing.clear_workspace_cache() (which calls _clear_workspace_cache). Aligned in place.
using WorkspaceKey = std::tuple<int, int, std::uintptr_t, int, std::int64_t, std::int64_t, std::int64_t>;
std::mutex g_workspace_mutex;
std::map<WorkspaceKey, at::Tensor> g_workspaces;
enum WorkspaceOp { kAlignWorkspace = 0 };

void* workspace(const at::Tensor& like, void* stream, WorkspaceOp op, std::int64_t a, std::int64_t b, std::int64_t c,
                std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const auto align = static_cast<std::size_t>(api().workspace_alignment);
  const c10::Device dev = like.device();
  const WorkspaceKey key{static_cast<int>(dev.type()), dev.index(), reinterpret_cast<std::uintptr_t>(stream), op, a, b,
                         c};
  std::lock_guard<std::mutex> lock(g_workspace_mutex);
  auto it = g_workspaces.find(key);
  if (it == g_workspaces.end())
    it = g_workspaces
             .emplace(key, at::empty({static_cast<std::int64_t>(bytes + align)}, like.options().dtype(at::kByte)))
             .first;
  const auto p = reinterpret_cast<std::uintptr_t>(it->second.data_ptr());
  return reinterpret_cast<void*>((p + align - 1) / align * align);
}

std::int64_t workspace_cache_size() {
  std::lock_guard<std::mutex> lock(g_workspace_mutex);
  return static_cast<std::int64_t>(g_workspaces.size());
}

void clear_workspace_cache() {
  std::lock_guard<std::mutex> lock(g_workspace_mutex);
  g_workspaces.clear();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> align_block_size(const at::Tensor& topk_ids, std::int64_t num_experts,
                                                                std::int64_t block_size) {
  check_tensor(topk_ids, "topk_ids");
  const std::int32_t e = to_i32(num_experts, "num_experts"), b = to_i32(block_size, "block_size");
  const std::int32_t id_type = id_code(topk_ids.scalar_type());
  const AlignCaps caps = align_caps(topk_ids, e, b);
  const auto opts = topk_ids.options().dtype(at::kInt);
  at::Tensor sorted = at::empty({caps.padded}, opts), experts = at::empty({caps.blocks}, opts),
             post = at::empty({1}, opts);
  void* stream = stream_of(topk_ids);
  void* ws = workspace(topk_ids, stream, kAlignWorkspace, topk_ids.numel(), e, b, caps.workspace);
  check_status(api().align_block_size(topk_ids.data_ptr(), id_type, topk_ids.numel(), e, b,
                                      sorted.data_ptr<std::int32_t>(), experts.data_ptr<std::int32_t>(),
                                      post.data_ptr<std::int32_t>(), ws, caps.workspace, stream));
  return {sorted, experts, post};
}

at::Tensor moe_sum(const at::Tensor& x) {
  check_tensor(x, "x");
  const std::int32_t dtype = value_code(x.scalar_type());
  // the dimension count (as Num), not x.sizes(); the Python wrapper re-raises with the full text anyway
  TORCH_CHECK(x.dim() == 3, "x must have shape (num_tokens, topk, hidden), got ", Num(x.dim()).text, " dimensions");
  at::Tensor out = at::empty({x.size(0), x.size(2)}, x.options());
  check_status(api().moe_sum(x.data_ptr(), dtype, x.size(0), to_i32(x.size(1), "topk"), x.size(2), out.data_ptr(),
                             stream_of(x)));
  return out;
}

// Called once by moe_routing/_torch_cpp.py as torch.ops.moe_routing._bind(moe_routing._ext.torch_api_table()):
// false for a table of another version (a stale cached build), then not bound.
bool bind(std::int64_t table) {
  const auto* t = reinterpret_cast<const moe_torch_api_t*>(static_cast<std::uintptr_t>(table));
  if (t == nullptr || t->version != MOE_TORCH_API_VERSION) return false;
  g_api = t;
  return true;
}

}  // namespace

// A fragment: moe_routing/torch.py registers the other operations of the namespace from Python.
TORCH_LIBRARY_FRAGMENT(moe_routing, m) {
  m.def("align_block_size(Tensor topk_ids, int num_experts, int block_size) -> (Tensor, Tensor, Tensor)");
  m.def("moe_sum(Tensor x) -> Tensor");
  m.def("_bind(int table) -> bool", &bind);  // no tensor: one kernel for every dispatch key
  m.def("_workspace_cache_size() -> int", &workspace_cache_size);
  m.def("_clear_workspace_cache() -> ()", &clear_workspace_cache);
}

TORCH_LIBRARY_IMPL(moe_routing, CPU, m) {
  m.impl("align_block_size", &align_block_size);
  m.impl("moe_sum", &moe_sum);
}

TORCH_LIBRARY_IMPL(moe_routing, CUDA, m) {
  m.impl("align_block_size", &align_block_size);
  m.impl("moe_sum", &moe_sum);
}
