// The test main: Kokkos (with the memory tracker) for the whole run, and
// invalid floating-point operations trapped so that a NaN fails loudly.
#include <cfenv>

#include "autodiff/runtime.hpp"
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
  feenableexcept(FE_INVALID);  // before Kokkos starts its threads, which inherit it
  remat::Runtime runtime(argc, argv);
  return Catch::Session().run(argc, argv);
}
