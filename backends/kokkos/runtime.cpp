// Kokkos backend: initialisation, memory helpers, streams.
#include "runtime.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

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

namespace {
std::mutex& default_instance_mutex() {  // the default instance's (every call on host spaces)
  static std::mutex m;
  return m;
}

#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
struct StreamInstance {
  explicit StreamInstance(void* stream)
#if defined(KOKKOS_ENABLE_CUDA)
      : exec(static_cast<cudaStream_t>(stream)) {}
#else
      : exec(static_cast<hipStream_t>(stream)) {}
#endif
  Exec exec;
  std::mutex mutex;  // lock_instance's, for this instance
};

// Constructing an instance allocates Kokkos' per-instance scratch: once per stream, not per call. Map nodes
// never move, so the references handed out stay valid.
StreamInstance& stream_instance(void* stream) {
  static std::mutex lock;
  static std::map<void*, StreamInstance> instances;
  std::lock_guard<std::mutex> guard(lock);
  auto it = instances.find(stream);
  if (it == instances.end())
    it = instances.emplace(std::piecewise_construct, std::forward_as_tuple(stream), std::forward_as_tuple(stream))
             .first;
  return it->second;
}
#endif
}  // namespace

Exec instance_for(void* stream) {
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  if (stream != nullptr) return stream_instance(stream).exec;
#else
  (void)stream;
#endif
  return Exec();
}

std::unique_lock<std::mutex> lock_instance(void* stream) {
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
  if (stream != nullptr) return std::unique_lock<std::mutex>(stream_instance(stream).mutex);
#else
  (void)stream;
#endif
  return std::unique_lock<std::mutex>(default_instance_mutex());
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

namespace {
// kokkos_malloc's pointers follow Kokkos' 128-byte allocation header (64- or 128-byte aligned): each block is
// MOE_WORKSPACE_ALIGNMENT bytes longer, and the pointer handed out is its first 256-byte boundary. The header
// may sit in device memory, so the way back to kokkos_malloc's pointer is kept here, on the host.
std::mutex& allocation_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<void*, void*>& allocations() {  // aligned -> kokkos_malloc's; never destroyed (moe_free at exit)
  static auto* m = new std::unordered_map<void*, void*>;
  return *m;
}
}  // namespace

void* allocate(std::size_t bytes) {
  kokkos::ensure_initialized();
  constexpr std::size_t kAlign = MOE_WORKSPACE_ALIGNMENT;
  void* raw = nullptr;
  try {
    raw = Kokkos::kokkos_malloc<kokkos::Memory>("moe_malloc", bytes + kAlign);  // bytes <= PTRDIFF_MAX: no wrap
  } catch (const std::exception& e) {
    throw Error(MOE_ERROR_BACKEND, std::string("Kokkos allocation failed: ") + e.what());
  }
  const auto at = (reinterpret_cast<std::uintptr_t>(raw) + kAlign - 1) / kAlign * kAlign;
  void* aligned = reinterpret_cast<void*>(at);
  try {
    const std::lock_guard<std::mutex> lock(allocation_mutex());
    allocations().emplace(aligned, raw);
  } catch (...) {
    Kokkos::kokkos_free<kokkos::Memory>(raw);
    throw;
  }
  return aligned;
}
void deallocate(void* ptr) noexcept {
  void* raw = nullptr;
  {
    const std::lock_guard<std::mutex> lock(allocation_mutex());
    const auto it = allocations().find(ptr);
    if (it == allocations().end()) return;  // not from moe_malloc: nothing of ours to free
    raw = it->second;
    allocations().erase(it);
  }
  Kokkos::kokkos_free<kokkos::Memory>(raw);
}

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
