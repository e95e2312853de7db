// Expert-parallel dispatch/combine over MPI, run by ctest under mpirun with 1..4 ranks. Every rank runs the same
// random layers (a shared seed), checks what it receives and what combine gives against the single-process run
// of the whole layer, and the error cases (the same error on every rank, never a hang). Buffers are in the
// backend's memory (moe::malloc): host for CPU and Kokkos; device for GPU backends, which needs a GPU-aware MPI.
// Prints "N passed, M failed" (totals over ranks) on rank 0; exits 1 if any check failed anywhere.
//   test_ep_mpi [--layers N] [--seed S] [--max-tokens T]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ep_cases.hpp"

extern "C" int moe_ep_c_smoke(const void* mpi_comm);  // ep_c_smoke.c

namespace {

struct MpiWorld final : ep_test::World {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank() const override {
    int r = 0;
    MPI_Comm_rank(comm, &r);
    return r;
  }
  int size() const override {
    int s = 0;
    MPI_Comm_size(comm, &s);
    return s;
  }
  std::int64_t sum(std::int64_t v) override {
    std::int64_t out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, comm);
    return out;
  }
  moe::ep::Comm make_comm(std::int32_t num_experts, const std::int32_t* expert_rank,
                          const std::int32_t* expert_local) override {
    return moe::ep::Comm::from_mpi(comm, num_experts, expert_rank, expert_local);
  }
  bool device_path() const override { return false; }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int layers = 32;
  std::uint64_t seed = 20261206;
  std::int64_t max_tokens = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--max-tokens")) max_tokens = std::atoll(argv[i + 1]);
  }
  MpiWorld world;
  const int me = world.rank();
  int rc = 0;
  if (moe_backend_check() != MOE_SUCCESS) {
    if (me == 0) std::printf("SKIPPED: %s\n", moe_last_error());
    rc = 77;
  } else {
    ep_test::Tally tally;
    const int c_rc = moe_ep_c_smoke(&world.comm);
    tally.check(c_rc == 0, "the C API smoke (ep_c_smoke.c) returned " + std::to_string(c_rc));
    ep_test::run_error_cases(world, tally);
    ep_test::run_random_layers(world, tally, seed + static_cast<std::uint64_t>(world.size()) * 1000003u, layers, max_tokens);
    for (const auto& n : tally.notes) std::printf("rank %d FAILED: %s\n", me, n.c_str());
    const std::int64_t passed = world.sum(tally.passed), failed = world.sum(tally.failed);
    if (me == 0)
      std::printf("test_ep_mpi (%s backend, %d ranks): %lld passed, %lld failed\n", moe_backend_name(), world.size(),
                  static_cast<long long>(passed), static_cast<long long>(failed));
    rc = failed == 0 ? 0 : 1;
  }
  MPI_Finalize();
  return rc;
}
