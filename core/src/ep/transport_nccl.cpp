// The NCCL transport: the caller's ncclComm_t as is (its device is the current device), every transfer enqueued
// on the caller's stream: all-to-all as one group of ncclSend/ncclRecv per peer and array, the descriptor
// exchange as ncclAllGather. Nothing here synchronises with the host except the rare *_host calls (creation).
// RCCL has the same API on AMD; this file is built for the CUDA backend here.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "contract.hpp"
#include "ep/transport.hpp"

namespace moe {
namespace ep {
namespace detail {

namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) moe::detail::throw_backend(std::string("NCCL error in ") + what + ": " + ncclGetErrorString(rc));
}
void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) moe::detail::throw_backend(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(rc));
}

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(ncclComm_t comm) : comm_(comm) {
    int r = 0, w = 0;
    check_nccl(ncclCommUserRank(comm_, &r), "ncclCommUserRank");
    check_nccl(ncclCommCount(comm_, &w), "ncclCommCount");
    rank_ = r, world_ = w;
  }
  const char* name() const override { return "NCCL"; }
  bool device_side() const override { return true; }

  void allgather_host(const std::int64_t* in, std::int64_t* out, std::int64_t words) override {
    Staging s(static_cast<std::size_t>(words) * (1 + static_cast<std::size_t>(world_)));
    check_cuda(cudaMemcpy(s.p, in, static_cast<std::size_t>(words) * 8, cudaMemcpyHostToDevice), "allgather staging");
    check_nccl(ncclAllGather(s.p, s.p + words, static_cast<std::size_t>(words), ncclInt64, comm_, nullptr),
               "ncclAllGather");
    check_cuda(cudaStreamSynchronize(nullptr), "allgather");
    check_cuda(cudaMemcpy(out, s.p + words, static_cast<std::size_t>(words * world_) * 8, cudaMemcpyDeviceToHost),
               "allgather staging");
  }
  void allreduce_max_host(std::int64_t* values, int n) override {
    Staging s(static_cast<std::size_t>(n));
    check_cuda(cudaMemcpy(s.p, values, static_cast<std::size_t>(n) * 8, cudaMemcpyHostToDevice), "allreduce staging");
    check_nccl(ncclAllReduce(s.p, s.p, static_cast<std::size_t>(n), ncclInt64, ncclMax, comm_, nullptr), "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(nullptr), "allreduce");
    check_cuda(cudaMemcpy(values, s.p, static_cast<std::size_t>(n) * 8, cudaMemcpyDeviceToHost), "allreduce staging");
  }
  void allgather_device(const std::int64_t* in, std::int64_t* out, std::int64_t words, void* stream) override {
    check_nccl(ncclAllGather(in, out, static_cast<std::size_t>(words), ncclInt64, comm_, static_cast<cudaStream_t>(stream)),
               "ncclAllGather");
  }

  void alltoallv(const Part* parts, int num_parts, const std::int64_t* send_count, const std::int64_t* send_off,
                 const std::int64_t* recv_count, const std::int64_t* recv_off, void* stream) override {
    const auto st = static_cast<cudaStream_t>(stream);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t rc = ncclSuccess;
    for (int peer = 0; peer < world_ && rc == ncclSuccess; ++peer)
      for (int p = 0; p < num_parts && rc == ncclSuccess; ++p) {
        const std::int64_t u = parts[p].unit_bytes;
        if (u <= 0) continue;
        if (send_count[peer] > 0)
          rc = ncclSend(static_cast<const char*>(parts[p].send) + send_off[peer] * u,
                        static_cast<std::size_t>(send_count[peer] * u), ncclUint8, peer, comm_, st);
        if (rc == ncclSuccess && recv_count[peer] > 0)
          rc = ncclRecv(static_cast<char*>(parts[p].recv) + recv_off[peer] * u,
                        static_cast<std::size_t>(recv_count[peer] * u), ncclUint8, peer, comm_, st);
      }
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(rc, "ncclSend/ncclRecv");
    check_nccl(end, "ncclGroupEnd");
  }

 private:
  struct Staging {  // device int64 scratch of the *_host calls
    std::int64_t* p = nullptr;
    explicit Staging(std::size_t words) { check_cuda(cudaMalloc(&p, words * 8), "cudaMalloc (NCCL staging)"); }
    ~Staging() { cudaFree(p); }
  };
  ncclComm_t comm_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(void* nccl_comm) {
  if (nccl_comm == nullptr) throw Error(MOE_ERROR_INVALID_ARGUMENT, "nccl_comm is NULL");
  return std::make_unique<NcclTransport>(static_cast<ncclComm_t>(nccl_comm));
}
bool nccl_available() noexcept { return true; }

}  // namespace detail
}  // namespace ep
}  // namespace moe
