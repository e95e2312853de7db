// moe/ep.h and ep.hpp in every build, with or without a transport: the API exists, unbuilt transports answer
// UNSUPPORTED naming the build option, and NULL arguments are named. (Transfers are tested by tests/ep/.)
#include <string>

#include "moe/ep.h"
#include "moe/ep.hpp"
#include "support.hpp"

TEST_CASE("ep: unbuilt transports say which build option they need") {
  if (!moe::ep::transport_available(MOE_EP_TRANSPORT_MPI)) {
    int fake_comm = 0;
    moe_ep_comm_t comm = nullptr;
    CHECK(moe_ep_comm_create_mpi(&fake_comm, 8, nullptr, nullptr, &comm) == MOE_ERROR_UNSUPPORTED);
    CHECK(std::string(moe_last_error()).find("-DMOE_WITH_MPI=ON") != std::string::npos);
    CHECK(comm == nullptr);
  }
  if (!moe::ep::transport_available(MOE_EP_TRANSPORT_NCCL)) {
    int fake_comm = 0;
    CHECK_THROWS_WITH_AS(moe::ep::Comm::nccl(&fake_comm, 8), doctest::Contains("-DMOE_WITH_NCCL=ON"), moe::Error);
  }
}

TEST_CASE("ep: NULL arguments are named") {
  moe_ep_handle_t h = nullptr;
  moe_ep_config_t cfg{};
  CHECK(moe_ep_handle_create(nullptr, &cfg, &h) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(moe_last_error()) == "comm is NULL");
  CHECK(moe_ep_handle_create(nullptr, &cfg, nullptr) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(moe_last_error()) == "handle is NULL");
  CHECK(moe_ep_comm_create_mpi(nullptr, 8, nullptr, nullptr, nullptr) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(moe_last_error()) == "comm is NULL");
  CHECK(moe_ep_dispatch_layout(nullptr, nullptr, 0, nullptr, nullptr, nullptr) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(moe_ep_dispatch(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr) ==
        MOE_ERROR_INVALID_ARGUMENT);
  CHECK(moe_ep_combine(nullptr, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(moe_ep_check_status(nullptr, nullptr) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(moe_last_error()) == "handle is NULL");
  CHECK(moe_ep_comm_destroy(nullptr) == MOE_SUCCESS);
  CHECK(moe_ep_handle_destroy(nullptr) == MOE_SUCCESS);
  int32_t map[4];
  CHECK(moe_ep_comm_expert_map(nullptr, map) == MOE_ERROR_INVALID_ARGUMENT);
}
