// hip/hip_runtime.h for the HIP-on-NVIDIA build of moe-routing: maps the hip* runtime names that
// backends/cuda_hip/gpu_runtime.hpp uses (and nothing else) onto the CUDA runtime, as plain inline functions
// and aliases (no global macro renames). It exists because the HIP headers' own nvidia_detail layer does not
// compile with CUDA 13 (see README). Only this build puts this folder on the include path.
#pragma once

#include <cuda_runtime.h>

#define __HIP_PLATFORM_NVIDIA__ 1

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
using hipGraphNode_t = cudaGraphNode_t;
using hipMemcpyKind = cudaMemcpyKind;
using hipDeviceAttribute_t = cudaDeviceAttr;
using hipStreamCaptureMode = cudaStreamCaptureMode;
using hipDeviceProp_t = cudaDeviceProp;

constexpr hipError_t hipSuccess = cudaSuccess;
constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
constexpr hipDeviceAttribute_t hipDeviceAttributeWarpSize = cudaDevAttrWarpSize;
constexpr hipDeviceAttribute_t hipDeviceAttributeL2CacheSize = cudaDevAttrL2CacheSize;
constexpr hipDeviceAttribute_t hipDeviceAttributeMultiprocessorCount = cudaDevAttrMultiProcessorCount;
constexpr hipDeviceAttribute_t hipDeviceAttributeCooperativeLaunch = cudaDevAttrCooperativeLaunch;
constexpr hipStreamCaptureMode hipStreamCaptureModeGlobal = cudaStreamCaptureModeGlobal;
constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;

inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipGetDevice(int* d) { return cudaGetDevice(d); }
inline hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t a, int d) { return cudaDeviceGetAttribute(v, a, d); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) { return cudaGetDeviceProperties(p, d); }
inline hipError_t hipMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline hipError_t hipFree(void* p) { return cudaFree(p); }
inline hipError_t hipMemcpy(void* d, const void* s, size_t n, hipMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
inline hipError_t hipMemcpyAsync(void* d, const void* s, size_t n, hipMemcpyKind k, hipStream_t st) {
  return cudaMemcpyAsync(d, s, n, k, st);
}
inline hipError_t hipMemsetAsync(void* p, int v, size_t n, hipStream_t s) { return cudaMemsetAsync(p, v, n, s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned f) { return cudaStreamCreateWithFlags(s, f); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
inline hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode m) { return cudaStreamBeginCapture(s, m); }
inline hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t* g) { return cudaStreamEndCapture(s, g); }
inline hipError_t hipGraphInstantiate(hipGraphExec_t* e, hipGraph_t g, hipGraphNode_t*, char*, size_t) {
  return cudaGraphInstantiate(e, g, 0);
}
inline hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) { return cudaGraphLaunch(e, s); }
inline hipError_t hipGraphDestroy(hipGraph_t g) { return cudaGraphDestroy(g); }
inline hipError_t hipGraphExecDestroy(hipGraphExec_t e) { return cudaGraphExecDestroy(e); }
inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* f, int threads, size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, smem);
}
inline hipError_t hipLaunchCooperativeKernel(const void* f, dim3 grid, dim3 block, void** args, unsigned smem,
                                             hipStream_t s) {
  return cudaLaunchCooperativeKernel(f, grid, block, args, smem, s);
}
