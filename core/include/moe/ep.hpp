// moe-routing: expert parallelism across ranks, C++ API. Semantics, collectives, modes, errors and what callers
// must keep consistent across ranks are documented once, in moe/ep.h, next to the C declarations these mirror.
// Every failure throws moe::Error (the same status and text on every rank where ep.h says so).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "moe/ep.h"
#include "moe/routing.hpp"

namespace moe {
namespace ep {

namespace detail {
struct CommImpl;
struct HandleImpl;
}  // namespace detail

using Config = moe_ep_config_t;

bool transport_available(moe_ep_transport_t transport) noexcept;

// A caller's communicator plus the expert placement. Copies share one communicator.
class Comm {
 public:
  // mpi_comm: the address of the caller's MPI_Comm (see ep.h). COLLECTIVE.
  static Comm mpi(const void* mpi_comm, std::int32_t num_experts, const std::int32_t* expert_rank = nullptr,
                  const std::int32_t* expert_local = nullptr);
  // The same, given the MPI_Comm itself (any type: ep.hpp does not include mpi.h), e.g. from_mpi(MPI_COMM_WORLD, E).
  template <class MpiComm>
  static Comm from_mpi(const MpiComm& comm, std::int32_t num_experts, const std::int32_t* expert_rank = nullptr,
                       const std::int32_t* expert_local = nullptr) {
    return mpi(static_cast<const void*>(&comm), num_experts, expert_rank, expert_local);
  }
  // nccl_comm: the caller's ncclComm_t. COLLECTIVE.
  static Comm nccl(void* nccl_comm, std::int32_t num_experts, const std::int32_t* expert_rank = nullptr,
                   const std::int32_t* expert_local = nullptr);

  std::int32_t rank() const;
  std::int32_t world_size() const;
  std::int32_t num_experts() const;
  std::int32_t num_local_experts() const;
  std::vector<std::int32_t> expert_map() const;     // [num_experts]: local index, or -1 on another rank
  std::vector<std::int32_t> local_experts() const;  // [num_local_experts]: global ids
  const std::shared_ptr<detail::CommImpl>& impl() const noexcept { return impl_; }

 private:
  explicit Comm(std::shared_ptr<detail::CommImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::CommImpl> impl_;
};

// One layer's exchange: staging in the backend's memory, the layout of the last dispatch_layout.
class Handle {
 public:
  Handle(const Comm& comm, const Config& config);  // COLLECTIVE
  Handle(Handle&&) noexcept;
  Handle& operator=(Handle&&) noexcept;
  ~Handle();

  struct Counts {
    std::int64_t recv_rows;   // exact: R; capacity: world * capacity
    std::int64_t recv_slots;  // exact: present local slots; capacity: world * slot_capacity
  };
  Counts dispatch_layout(const std::int32_t* topk_ids, std::int64_t num_tokens, void* stream = nullptr);
  void dispatch(const void* hidden, const float* scales, const float* topk_weights, void* recv_hidden,
                float* recv_scales, std::int32_t* recv_topk_ids, float* recv_topk_weights, std::int64_t recv_rows,
                void* stream = nullptr);
  void combine(const void* expert_out, const std::int32_t* token_positions, const float* topk_weights, float scale,
               void* output, void* stream = nullptr);
  void check_status(void* stream = nullptr);

  // Benchmarking (perf/ep_bench): with timing on, every phase boundary waits for the stream and the wall-clock
  // time of each phase is summed (seconds, this rank). Off by default: the calls then never wait for timing.
  // Bytes are always counted: what this rank handed to the transport (every row, this rank's own included).
  struct Phases {
    double layout = 0;           // which rows go where (ops::layout) and the descriptor exchange + verdict
    double pack = 0;             // local gathers: rows into the send staging, expert outputs into the combine staging
    double exchange = 0;         // the all-to-alls of dispatch and combine
    double unpack = 0;           // received ids / weights / gather lists
    double reduce = 0;           // the weighted sums at the tokens' home
    std::int64_t bytes_sent = 0, bytes_received = 0;
  };
  void set_timing(bool on);
  Phases phases() const;
  void reset_phases();

  const Config& config() const;            // with the defaults (0 fields) resolved
  std::int64_t recv_buffer_rows() const;   // rows the receive buffers of dispatch need at most
  std::size_t staging_bytes() const;       // the handle's memory in the backend's space

 private:
  std::unique_ptr<detail::HandleImpl> impl_;
};

}  // namespace ep
}  // namespace moe
