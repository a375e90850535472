#include "autodiff/blas_kernels.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>

namespace remat::blas {

const char* native_kernels() {
  __builtin_cpu_init();  // main may run before libgcc's own initializer saw the CPU
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

std::string kernels() { return openblas_get_corename(); }

void use_native_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  if (kernels() != "Prescott") return;
  const char* core = native_kernels();
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  // Only a failed exec returns: the run goes on, slower (describe() says which kernels).
}

std::string describe() {
  const std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const auto version_end = config.find(' ', config.find(' ') + 1);
  return config.substr(0, version_end) + ", " + kernels() + " kernels";
}

}  // namespace remat::blas
