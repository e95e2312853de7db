// How ranks talk: a caller-owned MPI communicator or NCCL communicator behind one small interface. The engine
// (engine.cpp) decides what to exchange; a transport only moves bytes. Nothing here creates a world.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace moe {
namespace ep {
namespace detail {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  std::int32_t rank() const { return rank_; }
  std::int32_t world() const { return world_; }
  // True for NCCL: data buffers are device memory and every transfer is enqueued on a stream; false for MPI:
  // transfers are host calls that return when done (the engine waits for the stream before each).
  virtual bool device_side() const = 0;

  // Gathers `words` int64 from every rank into out[world * words], host memory, blocking. For rare calls
  // (creation, agreement); NCCL stages through device memory and waits.
  virtual void allgather_host(const std::int64_t* in, std::int64_t* out, std::int64_t words) = 0;
  // Elementwise maximum over ranks of host values, blocking (MPI: the per-call agreement).
  virtual void allreduce_max_host(std::int64_t* values, int n) = 0;
  // Device form of allgather (NCCL only; enqueued on stream). in/out in device memory.
  virtual void allgather_device(const std::int64_t* in, std::int64_t* out, std::int64_t words, void* stream) = 0;

  // One array of an all-to-all exchange: units of unit_bytes (a row, its scales, its metadata).
  struct Part {
    const void* send;
    void* recv;
    std::int64_t unit_bytes;
  };
  // To rank d: send_count[d] units from send + send_off[d] units; from rank s: recv_count[s] units into
  // recv + recv_off[s] units; for every part with unit_bytes > 0. Counts and offsets: host arrays [world].
  virtual void alltoallv(const Part* parts, int num_parts, const std::int64_t* send_count,
                         const std::int64_t* send_off, const std::int64_t* recv_count, const std::int64_t* recv_off,
                         void* stream) = 0;

 protected:
  std::int32_t rank_ = 0, world_ = 1;
};

// Defined in transport_mpi.cpp / transport_nccl.cpp when built, else they throw MOE_ERROR_UNSUPPORTED.
std::unique_ptr<Transport> make_mpi_transport(const void* mpi_comm);
std::unique_ptr<Transport> make_nccl_transport(void* nccl_comm);
bool mpi_available() noexcept;
bool nccl_available() noexcept;

}  // namespace detail
}  // namespace ep
}  // namespace moe
