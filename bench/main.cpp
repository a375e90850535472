// Benchmark main: Kokkos for the whole run (--kokkos-* flags pass through),
// then Google Benchmark's own flags. On the console, a closing summary of the
// target figures (summary_reporter.hpp); --benchmark_format=json|csv as usual.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "autodiff/blas_kernels.hpp"
#include "autodiff/runtime.hpp"
#include "summary_reporter.hpp"

int main(int argc, char** argv) {
  remat::blas::use_native_kernels(argv);  // may start the program again: first
  remat::Runtime runtime(argc, argv);
  bool console = true;  // read before Initialize, which consumes the flag
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--benchmark_format=", 0) == 0)
      console = std::string(argv[i]) == "--benchmark_format=console";
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("backend", remat::Runtime::describe());
  if (console) {
    remat::bench::SummaryReporter reporter(isatty(fileno(stdout)) ? benchmark::ConsoleReporter::OO_Color
                                                                  : benchmark::ConsoleReporter::OO_None);
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}
