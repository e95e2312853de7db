// The MPI transport: a duplicate of the caller's communicator (our messages never mix with the caller's), with
// MPI_ERRORS_RETURN so that a failure becomes a moe::Error instead of an abort. Rows move with MPI_Ialltoallv
// in units of a contiguous datatype of one row, so counts stay rows (int) however wide a row is. Buffers are
// handed to MPI as they are: host memory for the CPU and host Kokkos backends, device memory for GPU backends
// (which needs a GPU-aware MPI).
#include <mpi.h>

#include <climits>
#include <string>
#include <vector>

#include "contract.hpp"
#include "ep/transport.hpp"

namespace moe {
namespace ep {
namespace detail {

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  moe::detail::throw_backend(std::string("MPI error in ") + what + ": " + std::string(text, static_cast<std::size_t>(len)));
}

int to_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    moe::detail::throw_backend(std::string(what) + " = " + std::to_string(v) + " does not fit MPI's int counts");
  return static_cast<int>(v);
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm user) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
      throw Error(MOE_ERROR_INVALID_ARGUMENT, "mpi_comm: MPI is not initialised (or already finalised)");
    if (user == MPI_COMM_NULL) throw Error(MOE_ERROR_INVALID_ARGUMENT, "mpi_comm is MPI_COMM_NULL");
    check_mpi(MPI_Comm_dup(user, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int r = 0, w = 0;
    check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &w), "MPI_Comm_size");
    rank_ = r, world_ = w;
  }
  ~MpiTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  const char* name() const override { return "MPI"; }
  bool device_side() const override { return false; }

  void allgather_host(const std::int64_t* in, std::int64_t* out, std::int64_t words) override {
    const int n = to_int(words, "allgather words");
    check_mpi(MPI_Allgather(in, n, MPI_INT64_T, out, n, MPI_INT64_T, comm_), "MPI_Allgather");
  }
  void allreduce_max_host(std::int64_t* values, int n) override {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce");
  }
  void allgather_device(const std::int64_t*, std::int64_t*, std::int64_t, void*) override {
    moe::detail::throw_backend("internal: the MPI transport has no device-side allgather");
  }

  void alltoallv(const Part* parts, int num_parts, const std::int64_t* send_count, const std::int64_t* send_off,
                 const std::int64_t* recv_count, const std::int64_t* recv_off, void*) override {
    const auto w = static_cast<std::size_t>(world_);
    std::vector<int> sc(w), sd(w), rc(w), rd(w);
    for (std::size_t i = 0; i < w; ++i) {
      sc[i] = to_int(send_count[i], "rows sent to one rank");
      sd[i] = to_int(send_off[i], "send offset (rows)");
      rc[i] = to_int(recv_count[i], "rows received from one rank");
      rd[i] = to_int(recv_off[i], "receive offset (rows)");
    }
    std::vector<MPI_Request> requests;
    std::vector<MPI_Datatype> types;
    requests.reserve(static_cast<std::size_t>(num_parts));
    types.reserve(static_cast<std::size_t>(num_parts));
    int rc_all = MPI_SUCCESS;
    for (int p = 0; p < num_parts && rc_all == MPI_SUCCESS; ++p) {
      if (parts[p].unit_bytes <= 0) continue;
      MPI_Datatype unit;
      rc_all = MPI_Type_contiguous(to_int(parts[p].unit_bytes, "row bytes"), MPI_BYTE, &unit);
      if (rc_all != MPI_SUCCESS) break;
      MPI_Type_commit(&unit);
      types.push_back(unit);
      MPI_Request req;
      rc_all = MPI_Ialltoallv(parts[p].send, sc.data(), sd.data(), unit, parts[p].recv, rc.data(), rd.data(), unit,
                              comm_, &req);
      if (rc_all == MPI_SUCCESS) requests.push_back(req);
    }
    int wait_rc = MPI_SUCCESS;
    if (!requests.empty())
      wait_rc = MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    for (MPI_Datatype& t : types) MPI_Type_free(&t);
    check_mpi(rc_all, "MPI_Ialltoallv");
    check_mpi(wait_rc, "MPI_Waitall (alltoallv)");
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(const void* mpi_comm) {
  if (mpi_comm == nullptr) throw Error(MOE_ERROR_INVALID_ARGUMENT, "mpi_comm is NULL (pass the address of an MPI_Comm)");
  return std::make_unique<MpiTransport>(*static_cast<const MPI_Comm*>(mpi_comm));
}
bool mpi_available() noexcept { return true; }

}  // namespace detail
}  // namespace ep
}  // namespace moe
