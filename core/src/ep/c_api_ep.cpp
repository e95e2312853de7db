// The C boundary of moe/ep.h: thin wrappers over moe/ep.hpp; exceptions become a status and moe_last_error().
#include <new>
#include <utility>

#include "c_boundary.hpp"
#include "moe/ep.h"
#include "moe/ep.hpp"

struct moe_ep_comm_s {
  moe::ep::Comm comm;
};
struct moe_ep_handle_s {
  moe::ep::Handle handle;
};

namespace {

using moe::detail::guarded;

void require(const void* p, const char* name) {
  if (p == nullptr) throw moe::Error(MOE_ERROR_INVALID_ARGUMENT, std::string(name) + " is NULL");
}

}  // namespace

extern "C" {

int moe_ep_transport_available(moe_ep_transport_t transport) { return moe::ep::transport_available(transport) ? 1 : 0; }

moe_status_t moe_ep_comm_create_mpi(const void* mpi_comm, int32_t num_experts, const int32_t* expert_rank,
                                    const int32_t* expert_local, moe_ep_comm_t* comm) {
  return guarded([&] {
    require(comm, "comm");
    *comm = nullptr;
    *comm = new moe_ep_comm_s{moe::ep::Comm::mpi(mpi_comm, num_experts, expert_rank, expert_local)};
  });
}
moe_status_t moe_ep_comm_create_nccl(void* nccl_comm, int32_t num_experts, const int32_t* expert_rank,
                                     const int32_t* expert_local, moe_ep_comm_t* comm) {
  return guarded([&] {
    require(comm, "comm");
    *comm = nullptr;
    *comm = new moe_ep_comm_s{moe::ep::Comm::nccl(nccl_comm, num_experts, expert_rank, expert_local)};
  });
}
moe_status_t moe_ep_comm_destroy(moe_ep_comm_t comm) {
  return guarded([&] { delete comm; });
}
moe_status_t moe_ep_comm_info(moe_ep_comm_t comm, int32_t* rank, int32_t* world_size, int32_t* num_local_experts) {
  return guarded([&] {
    require(comm, "comm");
    if (rank != nullptr) *rank = comm->comm.rank();
    if (world_size != nullptr) *world_size = comm->comm.world_size();
    if (num_local_experts != nullptr) *num_local_experts = comm->comm.num_local_experts();
  });
}
moe_status_t moe_ep_comm_expert_map(moe_ep_comm_t comm, int32_t* expert_map) {
  return guarded([&] {
    require(comm, "comm");
    require(expert_map, "expert_map");
    const auto m = comm->comm.expert_map();
    std::copy(m.begin(), m.end(), expert_map);
  });
}
moe_status_t moe_ep_comm_local_experts(moe_ep_comm_t comm, int32_t* global_ids) {
  return guarded([&] {
    require(comm, "comm");
    const auto m = comm->comm.local_experts();
    if (!m.empty()) require(global_ids, "global_ids");
    std::copy(m.begin(), m.end(), global_ids);
  });
}

moe_status_t moe_ep_handle_create(moe_ep_comm_t comm, const moe_ep_config_t* config, moe_ep_handle_t* handle) {
  return guarded([&] {
    require(handle, "handle");
    *handle = nullptr;
    require(comm, "comm");
    require(config, "config");
    *handle = new moe_ep_handle_s{moe::ep::Handle(comm->comm, *config)};
  });
}
moe_status_t moe_ep_handle_destroy(moe_ep_handle_t handle) {
  return guarded([&] { delete handle; });
}
moe_status_t moe_ep_handle_info(moe_ep_handle_t handle, int64_t* recv_rows, int64_t* staging_bytes) {
  return guarded([&] {
    require(handle, "handle");
    if (recv_rows != nullptr) *recv_rows = handle->handle.recv_buffer_rows();
    if (staging_bytes != nullptr) *staging_bytes = static_cast<int64_t>(handle->handle.staging_bytes());
  });
}
moe_status_t moe_ep_dispatch_layout(moe_ep_handle_t handle, const int32_t* topk_ids, int64_t num_tokens,
                                    int64_t* num_recv_rows, int64_t* num_recv_slots, void* stream) {
  return guarded([&] {
    require(handle, "handle");
    const auto c = handle->handle.dispatch_layout(topk_ids, num_tokens, stream);
    if (num_recv_rows != nullptr) *num_recv_rows = c.recv_rows;
    if (num_recv_slots != nullptr) *num_recv_slots = c.recv_slots;
  });
}
moe_status_t moe_ep_dispatch(moe_ep_handle_t handle, const void* hidden, const float* scales,
                             const float* topk_weights, void* recv_hidden, float* recv_scales,
                             int32_t* recv_topk_ids, float* recv_topk_weights, int64_t recv_rows, void* stream) {
  return guarded([&] {
    require(handle, "handle");
    handle->handle.dispatch(hidden, scales, topk_weights, recv_hidden, recv_scales, recv_topk_ids, recv_topk_weights,
                            recv_rows, stream);
  });
}
moe_status_t moe_ep_combine(moe_ep_handle_t handle, const void* expert_out, const int32_t* token_positions,
                            const float* topk_weights, float scale, void* output, void* stream) {
  return guarded([&] {
    require(handle, "handle");
    handle->handle.combine(expert_out, token_positions, topk_weights, scale, output, stream);
  });
}
moe_status_t moe_ep_check_status(moe_ep_handle_t handle, void* stream) {
  return guarded([&] {
    require(handle, "handle");
    handle->handle.check_status(stream);
  });
}

}  // extern "C"
