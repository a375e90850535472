#pragma once
// Which kernels the host's BLAS runs. OpenBLAS (Debian's is built for every
// x86 generation at once) picks its kernels by the CPU's model number when
// the library loads, and a CPU newer than the library gets its generic
// Prescott kernels: Debian's 0.3.21 on an Intel Xeon of model 207 (Emerald
// Rapids) ran sgemm at 55 GFLOP/s on 2 cores where its AVX-512 kernels run
// 309, and every fp32 step 4x slower. The choice can only be changed before
// the library loads (OPENBLAS_CORETYPE), so a program that finds the
// fallback on a CPU with AVX2 or AVX-512 starts itself again with the
// kernels the CPU has.
#include <string>

namespace remat::blas {

// Call first in main, before MPI, Kokkos or any thread starts: where
// OpenBLAS fell back to Prescott on a CPU with AVX-512 (or AVX2 and FMA),
// sets OPENBLAS_CORETYPE to SkylakeX (or Haswell) and executes the same
// program again with the same arguments. A user's own OPENBLAS_CORETYPE is
// kept as it is (and so is the restarted program's: it restarts once).
void use_native_kernels(char** argv);

// The kernels OpenBLAS runs ("SkylakeX"), and those use_native_kernels
// chooses for this CPU where OpenBLAS falls back (null: Prescott's are all
// it has).
std::string kernels();
const char* native_kernels();

// "OpenBLAS 0.3.21, SkylakeX kernels", for --version and the benchmarks'
// context.
std::string describe();

}  // namespace remat::blas
