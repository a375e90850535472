// The test main: Kokkos (with the memory tracker) for the whole run, and,
// where the kernels run on the host, invalid floating-point operations
// trapped so that a NaN fails loudly. A GPU build's kernels raise no trap, and
// its host code is mostly the CUDA driver's and cuBLAS', whose own
// floating-point operations are none of ours to trap (a device run of the
// suite ended in SIGFPE, 2026-11-26, its cause not found).
#include <cfenv>
#include <cstdio>
#include <optional>

#include "autodiff/backend.hpp"
#include "autodiff/blas_kernels.hpp"
#include "autodiff/runtime.hpp"
#include "core/error.hpp"
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
  remat::blas::use_native_kernels(argv);  // may start the program again: first
  if (remat::backend::kHostMemory) feenableexcept(FE_INVALID);  // before Kokkos starts its threads, which inherit it
  std::optional<remat::Runtime> runtime;
  try {
    runtime.emplace(argc, argv);
  } catch (const remat::UserError& e) {  // e.g. a CUDA build on a machine without a GPU
    std::fprintf(stderr, "remat_tests: error: %s\n", e.what());
    return 2;
  }
  return Catch::Session().run(argc, argv);
}
