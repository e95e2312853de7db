// Test driver: runs the doctest suite against the configured backend, or reports the whole binary skipped
// (exit code 77, ctest's SKIP_RETURN_CODE) with the reason when the backend cannot run on this machine,
// e.g. a CUDA build on a machine without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "moe/routing.h"

int main(int argc, char** argv) {
  if (moe_backend_check() != MOE_SUCCESS) {
    std::printf("SKIPPED: %s\n", moe_last_error());
    return 77;
  }
  std::printf("moe-routing tests on backend '%s'\n", moe_backend_name());
  doctest::Context context(argc, argv);
  return context.run();
}
