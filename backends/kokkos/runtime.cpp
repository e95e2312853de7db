// Kokkos backend: initialisation, memory helpers, streams.
#include "runtime.hpp"

#include <cstdlib>
#include <map>
#include <mutex>

#include "backend.hpp"

namespace moe {
namespace kokkos {

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      std::atexit([] {
        if (Kokkos::is_initialized()) Kokkos::finalize();
      });
    }
  });
}

Exec instance_for(void* stream) {
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  if (stream != nullptr) {
    // Constructing an instance allocates Kokkos' per-instance scratch: once per stream, not per call.
    static std::mutex lock;
    static std::map<void*, Exec> instances;
    std::lock_guard<std::mutex> guard(lock);
    auto it = instances.find(stream);
#if defined(KOKKOS_ENABLE_CUDA)
    if (it == instances.end()) it = instances.emplace(stream, Exec(static_cast<cudaStream_t>(stream))).first;
#else
    if (it == instances.end()) it = instances.emplace(stream, Exec(static_cast<hipStream_t>(stream))).first;
#endif
    return it->second;
  }
#else
  (void)stream;
#endif
  return Exec();
}

}  // namespace kokkos

namespace backend {

const char* name() noexcept { return "kokkos"; }

std::string unavailable_reason() {
  try {
    kokkos::ensure_initialized();
  } catch (const std::exception& e) {
    return std::string("Kokkos failed to initialise: ") + e.what();
  }
  return {};
}

void* allocate(std::size_t bytes) {
  kokkos::ensure_initialized();
  try {
    return Kokkos::kokkos_malloc<kokkos::Memory>("moe_malloc", bytes);
  } catch (const std::exception& e) {
    throw Error(MOE_ERROR_BACKEND, std::string("Kokkos allocation failed: ") + e.what());
  }
}
void deallocate(void* ptr) noexcept { Kokkos::kokkos_free<kokkos::Memory>(ptr); }

namespace {
using Bytes = Kokkos::View<char*, kokkos::Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  kokkos::ensure_initialized();
  Kokkos::deep_copy(Bytes(static_cast<char*>(dst), bytes), HostBytes(static_cast<char*>(const_cast<void*>(src)), bytes));
  Kokkos::fence();
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  kokkos::ensure_initialized();
  Kokkos::fence();  // work queued on any instance that wrote src
  Kokkos::deep_copy(HostBytes(static_cast<char*>(dst), bytes), Bytes(static_cast<char*>(const_cast<void*>(src)), bytes));
}
void synchronize(void* stream) {
  kokkos::ensure_initialized();
  kokkos::instance_for(stream).fence();
}

}  // namespace backend
}  // namespace moe
