// Test driver: runs the doctest suite against the configured backend, or reports the whole binary skipped
// (exit code 77, ctest's SKIP_RETURN_CODE) with the reason when the backend cannot run on this machine,
// e.g. a CUDA build on a machine without a GPU.
//   moe_tests [--caps=portable] [doctest options]
// --caps=portable: the whole suite plans as on a device without thread-block clusters and dependent launch
// (what HIP on AMD has: core/src/paths.hpp, CapsLimits::portable), so that on an NVIDIA GPU it runs, and
// checks, the plan AMD takes.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "moe/routing.h"
#include "paths.hpp"

int main(int argc, char** argv) {
  if (moe_backend_check() != MOE_SUCCESS) {
    std::printf("SKIPPED: %s\n", moe_last_error());
    return 77;
  }
  std::vector<char*> args;
  std::unique_ptr<moe::detail::ScopedForcedCaps> caps;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--caps=portable") == 0) {
      caps = std::make_unique<moe::detail::ScopedForcedCaps>(moe::detail::CapsLimits::portable());
    } else {
      args.push_back(argv[i]);
    }
  }
  std::printf("moe-routing tests on backend '%s'%s\n", moe_backend_name(),
              caps ? ", planning without clusters and dependent launch (--caps=portable)" : "");
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run();
}
