// The runtime calls that only the tests and the benchmark make (the library itself creates no stream, event or
// graph): streams, events, graphs, device copies and a few device queries, for CUDA and HIP alike. The test- and
// perf-side twin of backends/cuda_hip/gpu_runtime.hpp, whose error type, check() and memory calls it reuses.
// Compiled like the library (moe_gpu_helper_sources, cmake/MoEGpuSources.cmake).
#pragma once

#include <string>

#include "gpu_runtime.hpp"

namespace moe_gpu_test {

using moe::gpu::check;
using moe::gpu::copy_to_device;
using moe::gpu::copy_to_host;
using moe::gpu::current_device;
using moe::gpu::error_t;
using moe::gpu::free;
using moe::gpu::kSuccess;
using moe::gpu::malloc;
using moe::gpu::memset_async;
using moe::gpu::stream_synchronize;
using moe::gpu::stream_t;

#if defined(MOE_GPU_HIP)
using event_t = hipEvent_t;
using graph_t = hipGraph_t;
using graph_exec_t = hipGraphExec_t;
inline error_t stream_create(stream_t* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline error_t stream_destroy(stream_t s) { return hipStreamDestroy(s); }
inline error_t event_create(event_t* e) { return hipEventCreate(e); }
inline error_t event_destroy(event_t e) { return hipEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return hipEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return hipEventSynchronize(e); }
inline error_t event_elapsed_ms(float* ms, event_t a, event_t b) { return hipEventElapsedTime(ms, a, b); }
inline error_t begin_capture(stream_t s) { return hipStreamBeginCapture(s, hipStreamCaptureModeGlobal); }
inline error_t end_capture(stream_t s, graph_t* g) { return hipStreamEndCapture(s, g); }
inline error_t graph_instantiate(graph_exec_t* e, graph_t g) { return hipGraphInstantiate(e, g, nullptr, nullptr, 0); }
inline error_t graph_launch(graph_exec_t e, stream_t s) { return hipGraphLaunch(e, s); }
inline error_t graph_destroy(graph_t g) { return hipGraphDestroy(g); }
inline error_t graph_exec_destroy(graph_exec_t e) { return hipGraphExecDestroy(e); }
inline error_t copy_async(void* d, const void* s, std::size_t n, stream_t st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyDeviceToDevice, st);
}
inline error_t l2_cache_bytes(int* v, int dev) { return hipDeviceGetAttribute(v, hipDeviceAttributeL2CacheSize, dev); }
inline error_t device_name(std::string* name, int dev) {
  hipDeviceProp_t p;
  const error_t e = hipGetDeviceProperties(&p, dev);
  if (e == kSuccess) *name = p.name;
  return e;
}
#else
using event_t = cudaEvent_t;
using graph_t = cudaGraph_t;
using graph_exec_t = cudaGraphExec_t;
inline error_t stream_create(stream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline error_t stream_destroy(stream_t s) { return cudaStreamDestroy(s); }
inline error_t event_create(event_t* e) { return cudaEventCreate(e); }
inline error_t event_destroy(event_t e) { return cudaEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return cudaEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return cudaEventSynchronize(e); }
inline error_t event_elapsed_ms(float* ms, event_t a, event_t b) { return cudaEventElapsedTime(ms, a, b); }
inline error_t begin_capture(stream_t s) { return cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); }
inline error_t end_capture(stream_t s, graph_t* g) { return cudaStreamEndCapture(s, g); }
inline error_t graph_instantiate(graph_exec_t* e, graph_t g) { return cudaGraphInstantiate(e, g, 0); }
inline error_t graph_launch(graph_exec_t e, stream_t s) { return cudaGraphLaunch(e, s); }
inline error_t graph_destroy(graph_t g) { return cudaGraphDestroy(g); }
inline error_t graph_exec_destroy(graph_exec_t e) { return cudaGraphExecDestroy(e); }
inline error_t copy_async(void* d, const void* s, std::size_t n, stream_t st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, st);
}
inline error_t l2_cache_bytes(int* v, int dev) { return cudaDeviceGetAttribute(v, cudaDevAttrL2CacheSize, dev); }
inline error_t device_name(std::string* name, int dev) {
  cudaDeviceProp p;
  const error_t e = cudaGetDeviceProperties(&p, dev);
  if (e == kSuccess) *name = p.name;
  return e;
}
#endif

}  // namespace moe_gpu_test
