// ep_bench over MPI: one process per rank; the baseline is MPI_Alltoallv of the same bytes per pair. The body and
// its options: ep_bench.cpp.
//   mpirun -np 4 perf/ep_bench [--tokens 4096] [--hidden 2048] [--experts 64] [--topk 8] [--dtype bf16|f16|f32]
//                              [--mode exact|capacity] [--iters 20] [--warmup 3] [--untimed-phases]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "ep_bench.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct MpiWorld final : ep_bench::World {
  int me = 0, world = 1;
  MpiWorld() {
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  }
  int rank() const override { return me; }
  int size() const override { return world; }
  void max(std::int64_t* v, int n) override { MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD); }
  void sum(std::int64_t* v, int n) override { MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD); }
  void max(double* v, int n) override { MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void alltoall_pairs(const std::int64_t* to, std::int64_t* from) override {
    MPI_Alltoall(to, 2, MPI_INT64_T, from, 2, MPI_INT64_T, MPI_COMM_WORLD);
  }
  moe::ep::Comm make_comm(std::int32_t num_experts) override {
    return moe::ep::Comm::from_mpi(MPI_COMM_WORLD, num_experts);
  }
  const char* baseline_name() const override { return "MPI_Alltoallv x2"; }

  // MPI_Alltoallv counts and displacements are int: more than 2 GiB per rank is refused rather than wrapped.
  struct Plan {
    std::vector<int> sc, sd, rc, rd;
    std::vector<unsigned char> sb, rb;
    explicit Plan(const ep_bench::PairBytes& p) {
      std::int64_t so = 0, ro = 0;
      for (std::size_t d = 0; d < p.send.size(); ++d) {
        sc.push_back(to_int(p.send[d])), sd.push_back(to_int(so)), so += p.send[d];
        rc.push_back(to_int(p.recv[d])), rd.push_back(to_int(ro)), ro += p.recv[d];
      }
      sb.resize(static_cast<std::size_t>(so) + 1), rb.resize(static_cast<std::size_t>(ro) + 1);
    }
    static int to_int(std::int64_t v) { return static_cast<int>(std::min<std::int64_t>(v, 2147483647)); }
    void run() {
      MPI_Alltoallv(sb.data(), sc.data(), sd.data(), MPI_BYTE, rb.data(), rc.data(), rd.data(), MPI_BYTE,
                    MPI_COMM_WORLD);
    }
  };
  double baseline_seconds(const ep_bench::PairBytes& dispatch, const ep_bench::PairBytes& combine, int warmup,
                          int iters) override {
    std::int64_t most = 0;  // agreed on by every rank, so that all refuse together (none waits in a collective)
    for (const auto* p : {&dispatch, &combine}) {
      std::int64_t s = 0, r = 0;
      for (std::size_t d = 0; d < p->send.size(); ++d) s += p->send[d], r += p->recv[d];
      most = std::max({most, s, r});
    }
    max(&most, 1);
    if (most > 2147483647)
      throw std::runtime_error("MPI_Alltoallv baseline: a rank sends or receives over INT_MAX bytes");
    Plan a(dispatch), b(combine);
    for (int i = 0; i < warmup; ++i) a.run(), b.run();
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    for (int i = 0; i < iters; ++i) a.run(), b.run();
    return (now() - t0) / iters;
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  {
    MpiWorld w;
    rc = ep_bench::run_ep_bench(w, argc, argv);
  }
  MPI_Finalize();
  return rc;
}
