// ep_bench's transport-neutral body (ep_bench.cpp) and what each transport's main provides (ep_bench_mpi.cpp: MPI
// ranks; ep_bench_nccl.cpp: one thread per GPU): the bench's own bookkeeping collectives, the communicator of the
// handle, and the plain all-to-all of the same bytes that the handle's exchange is measured against.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/ep.hpp"

namespace ep_bench {

// Bytes one rank moves in one plain all-to-all: send[d] to rank d, recv[s] from rank s (its own entry included).
struct PairBytes {
  std::vector<std::int64_t> send, recv;
};

struct World {
  virtual ~World() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place over ranks; each is also a barrier.
  virtual void max(std::int64_t* v, int n) = 0;
  virtual void sum(std::int64_t* v, int n) = 0;
  virtual void max(double* v, int n) = 0;
  virtual void barrier() = 0;
  // to[2d], to[2d+1] go to rank d; from[2s], from[2s+1] come from rank s.
  virtual void alltoall_pairs(const std::int64_t* to, std::int64_t* from) = 0;
  virtual moe::ep::Comm make_comm(std::int32_t num_experts) = 0;
  virtual void* stream() const { return nullptr; }  // the handle's stream (nullptr: the backend's default)
  // The transport's floor: seconds per iteration of two plain all-to-alls (dispatch's bytes, then combine's),
  // after `warmup` untimed ones; this rank's wall clock, work finished.
  virtual double baseline_seconds(const PairBytes& dispatch, const PairBytes& combine, int warmup, int iters) = 0;
  virtual const char* baseline_name() const = 0;
};

// Parses the bench's options (the mains' own are ignored), runs, checks, reports on rank 0; 0 or 1.
int run_ep_bench(World& world, int argc, char** argv);

}  // namespace ep_bench
