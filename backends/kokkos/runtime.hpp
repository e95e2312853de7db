// The Kokkos backend's runtime: which execution space, how the `stream` argument maps to an instance of it,
// and who initialises Kokkos. Shared by align.cpp, sum.cpp and runtime.cpp.
#pragma once

#include <Kokkos_Core.hpp>

namespace moe {
namespace kokkos {

using Exec = Kokkos::DefaultExecutionSpace;
using Memory = Exec::memory_space;
template <class T>
using DeviceView = Kokkos::View<T*, Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;  // over caller pointers

// Initialises Kokkos on first use if the application has not (and then finalises it at exit); never touches
// a Kokkos the application initialised itself.
void ensure_initialized();

// The execution space instance for a caller's stream: the default instance for NULL; for Kokkos-CUDA/HIP an
// instance on that cudaStream_t / hipStream_t (created once per stream, then reused); host spaces ignore it.
Exec instance_for(void* stream);

// Work of a team walking ids in order: one team per segment. On GPUs a team is a warp's worth of threads;
// on host spaces a team is one thread.
constexpr int kGpuTeamSize = 32;
inline int team_size() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible ? 1 : kGpuTeamSize;
}

}  // namespace kokkos
}  // namespace moe
