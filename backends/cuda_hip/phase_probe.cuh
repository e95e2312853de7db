// PERF-ONLY hook: the phase probe of the block-resident align kernels (cooperative_grid, one_cluster,
// cluster_grid). CMake -DMOE_PHASE_PROBE=ON (CUDA only) defines MOE_PROBE for the library and builds
// perf/moe_probe, the reader (perf/phase_probe.cu). Thread 0 of each block records the SM clock at each point
// below as it passes it (the global timer at the two *Time points); the library only exports where the records
// are (moe_probe_records, align.cu). In every other build the hooks are empty and generate no code.
// Why: ncu cannot profile cluster_grid as launched (its replay drops the cluster dimension, perf/NOTES.md step
// 37), and ablations cut more than one phase at a time.
#pragma once

#include "gpu_runtime.hpp"

namespace moe {
namespace gpu {

enum ProbePoint : int {
  kProbeEntryTime, kProbeEntry, kProbeWaited, kProbeFilled, kProbeCleared, kProbeRanked, kProbePrefixed,
  kProbeClusterSynced, kProbeClusterCounted, kProbeGridSynced, kProbeTableRead, kProbeScanBegin, kProbeScanned,
  kProbeExpertIds, kProbePlaced, kProbeExit, kProbeExitTime, kProbePoints
};
constexpr const char* kProbeNames[kProbePoints] = {
    "entry(gt)", "entry", "waited", "filled", "barrier", "ranked", "prefixed", "cl.sync", "cl.counts",
    "grid.sync", "table", "scan0", "scanned", "eids", "placed", "exit", "exit(gt)"};
constexpr int kProbeMaxBlocks = 512;

#if defined(MOE_PROBE) && defined(MOE_DEVICE)  // CUDA (CMake refuses the probe elsewhere)
__device__ unsigned long long probe_record[kProbeMaxBlocks][kProbePoints];
inline const void* probe_records() {  // the device address of the records
  void* p = nullptr;
  return cudaGetSymbolAddress(&p, probe_record) == cudaSuccess ? p : nullptr;
}
MOE_DEVICE void probe_at(ProbePoint k) {
  if (threadIdx.x == 0 && blockIdx.x < kProbeMaxBlocks) probe_record[blockIdx.x][k] = clock64();
}
MOE_DEVICE void probe_time(ProbePoint k) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (threadIdx.x == 0 && blockIdx.x < kProbeMaxBlocks) probe_record[blockIdx.x][k] = t;
}
#elif defined(MOE_DEVICE)
MOE_DEVICE void probe_at(ProbePoint) {}
MOE_DEVICE void probe_time(ProbePoint) {}
#endif

}  // namespace gpu
}  // namespace moe
