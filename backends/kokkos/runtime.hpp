// The Kokkos backend's runtime: which execution space, how the `stream` argument maps to an instance of it,
// who initialises Kokkos, and what the operations' host-space forms share. Included by every file here.
#pragma once

#include <Kokkos_Core.hpp>

#include <mutex>
#include <type_traits>

namespace moe {
namespace kokkos {

using Exec = Kokkos::DefaultExecutionSpace;
using Memory = Exec::memory_space;
// The execution space's memory is the host's (Serial, OpenMP, Threads): the operations take their host forms.
constexpr bool kHostSpace = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible;
template <class T>
using DeviceView = Kokkos::View<T*, Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;  // over caller pointers

// Initialises Kokkos on first use if the application has not (and then finalises it at exit); never touches
// a Kokkos the application initialised itself.
void ensure_initialized();

// The execution space instance for a caller's stream: the default instance for NULL; for Kokkos-CUDA/HIP an
// instance on that cudaStream_t / hipStream_t (created once per stream, then reused); host spaces ignore it.
Exec instance_for(void* stream);

// Serialises the calls that share the execution space instance of `stream` (instance_for's): Kokkos keeps one
// team scratch pool per instance (Kokkos::Serial: one per process), and team-policy launches on one instance
// from several host threads at once race on it (wrong results, use-after-free). A call holds the lock across
// all its kernels that use team scratch or team reductions and scans; kernels with only range policies need
// it where the space's range launches are not re-entrant either (kRangeLaunchReentrant).
std::unique_lock<std::mutex> lock_instance(void* stream);

// Kokkos::Serial runs a RangePolicy parallel_for as a plain loop, touching no shared state: calls from several
// threads may run such kernels at once. Other spaces (OpenMP's thread pool, the GPU spaces' launch staging)
// are not assumed to be.
#if defined(KOKKOS_ENABLE_SERIAL)
constexpr bool kRangeLaunchReentrant = std::is_same<Exec, Kokkos::Serial>::value;
#else
constexpr bool kRangeLaunchReentrant = false;
#endif

// The lock of a call (or of a part of one) whose kernels use range policies only: lock_instance's where range
// launches are not re-entrant, none where they are. Not held across a call of another operation that locks (the
// mutex is not recursive).
inline std::unique_lock<std::mutex> lock_for_range_kernels(void* stream) {
  return kRangeLaunchReentrant ? std::unique_lock<std::mutex>{} : lock_instance(stream);
}

// Host spaces: a hint that the line at `p` will be written soon (a no-op where the compiler has no builtin).
KOKKOS_INLINE_FUNCTION void prefetch_for_write(const void* p) {
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
  __builtin_prefetch(p, 1);
#else
  (void)p;
#endif
}

// Host spaces, moe_sum and moe_combine: one index per (token, chunk of this many outputs), the chunk's fp32
// accumulators on the thread's stack (16 KiB, half an L1), each of the token's topk rows read in runs of a chunk
// (8 KiB of bf16) the prefetcher follows; 512 read 1 KiB runs and reached 0.76 of a parallel copy at 4096x8x4096
// bf16 on 2 threads, 4096 0.97 (perf/NOTES.md step 66).
constexpr std::int64_t kHostChunk = 4096;

// Host spaces: f(t, h0, len) for every token t < num_tokens and chunk [h0, h0 + len) of its hidden outputs, one
// parallel index each (moe_sum and moe_combine).
template <class F>
void for_each_host_chunk(const char* name, const Exec& exec, std::int64_t num_tokens, std::int64_t hidden, const F& f) {
  const std::int64_t chunks = (hidden + kHostChunk - 1) / kHostChunk;
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, num_tokens * chunks),
      KOKKOS_LAMBDA(const std::int64_t j) {
        const std::int64_t t = j / chunks, h0 = (j - t * chunks) * kHostChunk;
        f(t, h0, hidden - h0 < kHostChunk ? hidden - h0 : kHostChunk);
      });
}

// Work of a team walking ids in order: one team per segment. On GPUs a team is a warp's worth of threads;
// on host spaces a team is one thread.
constexpr int kGpuTeamSize = 32;
inline int team_size() { return kHostSpace ? 1 : kGpuTeamSize; }

}  // namespace kokkos
}  // namespace moe
