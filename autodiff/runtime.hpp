#pragma once
// The process-wide set-up every entry point (CLI, tests, benchmarks) shares:
// Kokkos initialised with the --kokkos-* arguments, the memory tracker
// installed; Kokkos finalised when the Runtime goes out of scope.
#include <string>
#include <vector>

namespace remat {

class Runtime {
 public:
  // Takes the --kokkos-* arguments out of argv (they are Kokkos'); the rest
  // stay for the caller. `--kokkos-num-threads` works on every Kokkos version.
  // A malformed or absurd Kokkos argument is a UserError.
  Runtime(int& argc, char** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  static std::string describe();  // "Kokkos 3.4.1, OpenMP, 2 threads"
  // "remat <version>, Kokkos 3.4.1, backends: OpenMP Serial" without touching
  // Kokkos' runtime (safe on a CUDA build without a GPU).
  static std::string version();
};

}  // namespace remat
