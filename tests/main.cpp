// The test main: Kokkos (with the memory tracker) for the whole run, and
// invalid floating-point operations trapped so that a NaN fails loudly.
#include <cfenv>
#include <cstdio>
#include <optional>

#include "autodiff/runtime.hpp"
#include "core/error.hpp"
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
  feenableexcept(FE_INVALID);  // before Kokkos starts its threads, which inherit it
  std::optional<remat::Runtime> runtime;
  try {
    runtime.emplace(argc, argv);
  } catch (const remat::UserError& e) {  // e.g. a CUDA build on a machine without a GPU
    std::fprintf(stderr, "remat_tests: error: %s\n", e.what());
    return 2;
  }
  return Catch::Session().run(argc, argv);
}
