// Benchmark main: Kokkos for the whole run (--kokkos-* flags pass through),
// then Google Benchmark's own flags.
#include <benchmark/benchmark.h>

#include "autodiff/runtime.hpp"

int main(int argc, char** argv) {
  remat::Runtime runtime(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("backend", remat::Runtime::describe());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
