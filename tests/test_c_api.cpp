#include "support.hpp"

extern "C" int moe_c_api_smoke(void);

TEST_CASE("C API from a C translation unit") { CHECK(moe_c_api_smoke() == 0); }

TEST_CASE("backend name is one of the four") {
  const std::string name = moe_backend_name();
  CHECK((name == "cpu" || name == "cuda" || name == "hip" || name == "kokkos"));
  CHECK(name == moe::backend_name());
}
