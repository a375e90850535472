#include "autodiff/runtime.hpp"

#include <Kokkos_Core.hpp>
#include <malloc.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "autodiff/blas_kernels.hpp"
#include "autodiff/cublas.hpp"
#include "autodiff/gemm_dnnl.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/pinned_cache.hpp"
#include "autodiff/tape.hpp"
#include "autodiff/transfer.hpp"
#include "core/error.hpp"
#include "core/version.hpp"

namespace remat {
namespace {

// Kokkos aborts (or its OpenMP runtime crashes) on a malformed or absurd
// value; these are checked first and refused in one line.
void check_kokkos_argument(const std::string& a) {
  const auto eq = a.find('=');
  const std::string name = a.substr(0, eq);
  auto number = [&](long lo, long hi, const char* what) {
    const std::string text = eq == std::string::npos ? "" : a.substr(eq + 1);
    char* end = nullptr;
    const long v = text.empty() ? -1 : std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < lo || v > hi)
      throw UserError(name + ": expected " + name + "=N with N " + what + " from " + std::to_string(lo) + " to " +
                      std::to_string(hi) + ", got '" + a + "'");
  };
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  if (name == "--kokkos-threads" || name == "--kokkos-num-threads") number(1, 4 * cores, "threads");
  else if (name == "--kokkos-numa") number(1, 64, "NUMA regions");
  else if (name == "--kokkos-device-id" || name == "--kokkos-device") number(0, 1023, "a device id");
  else if (name == "--kokkos-num-devices" || name == "--kokkos-ndevices") number(1, 1024, "devices");
}

// A CUDA build asks the CUDA runtime for a device before Kokkos does:
// Kokkos would abort the process without one.
void require_device() {
#ifdef KOKKOS_ENABLE_CUDA
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    throw UserError(std::string("this is a CUDA build of remat and no GPU is visible (") +
                    (e != cudaSuccess ? cudaGetErrorString(e) : "no devices") +
                    "): run it on a machine with an NVIDIA GPU, or use the host build (scripts/setup.sh)");
#endif
}

}  // namespace

Runtime::Runtime(int& argc, char** argv) {
  // A step allocates and frees hundreds of MB of activations. By default
  // glibc maps large blocks fresh and unmaps them on free, so every step
  // page-faults them in again (about 8 us per page here). Keep freed memory
  // in the heap for reuse instead. The tracker still counts every byte
  // handed out: it sees Kokkos' allocations, not the heap's.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc allows: bigger blocks are still mapped
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  // Kokkos would also act on un-prefixed flags such as --help, so it only
  // ever sees the --kokkos-* ones.
  std::vector<std::string> kokkos_args{argc > 0 ? argv[0] : "remat"};
  int kept = argc > 0 ? 1 : 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--kokkos-", 0) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    check_kokkos_argument(a);
#if KOKKOS_VERSION < 40000
    if (a.rfind("--kokkos-num-threads", 0) == 0) a = "--kokkos-threads" + a.substr(std::strlen("--kokkos-num-threads"));
#endif
    kokkos_args.push_back(a);
  }
  argc = kept;
  // The OpenMP runtime read its environment at load time: with no
  // OMP_PROC_BIND it does not bind threads, which is what "false" says.
  // Saying so keeps Kokkos from warning about it on every start.
  setenv("OMP_PROC_BIND", "false", 0);
  std::vector<char*> ptrs;
  for (auto& a : kokkos_args) ptrs.push_back(a.data());
  int n = int(ptrs.size());
  require_device();
  Kokkos::initialize(n, ptrs.data());
  MemoryTracker::instance().install();
  // A device build loads cuBLAS now, so a machine without it is told before
  // any work is done or any file opened.
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, Kokkos::DefaultExecutionSpace::memory_space>::accessible)
    cublas::require();
}

Runtime::~Runtime() {
  // A tape left by an interrupted forward pass holds tensors: free them
  // while Kokkos can still deallocate.
  current_tape().clear();
  backend::pinned::release();
  transfer::release();
  Kokkos::finalize();
}

std::string Runtime::version() {
  const int v = KOKKOS_VERSION;
  std::string s = std::string("remat ") + remat::version() + ", Kokkos " + std::to_string(v / 10000) + "." +
                  std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) + ", backends:";
#ifdef KOKKOS_ENABLE_CUDA
  s += " CUDA";
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  s += " OpenMP";
#endif
#ifdef KOKKOS_ENABLE_THREADS
  s += " Threads";
#endif
#ifdef KOKKOS_ENABLE_SERIAL
  s += " Serial";
#endif
  s += ", host fp32 GEMMs: " + blas::describe();
  // The host's bfloat16 GEMMs (autodiff/gemm_dnnl.hpp, docs/precision.md).
  const std::string isa = gemm::onednn_isa();
  s += ", host bf16 GEMMs: " + std::string(gemm::bf16_by_onednn() ? "oneDNN" : "widened to sgemm") +
       (isa == "none" ? " (no oneDNN)" : " (oneDNN sees " + isa + ")");
  return s;
}

std::string Runtime::describe() {
  using Exec = Kokkos::DefaultExecutionSpace;
  const int v = KOKKOS_VERSION;
  std::string s = "Kokkos " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                  std::to_string(v % 100) + ", " + Exec::name();
  s += ", " + std::to_string(Exec().concurrency()) + " threads";  // static in 3.x, a member in 4.x
  s += ", " + blas::describe();
  const std::string device_blas = cublas::describe();
  if (!device_blas.empty()) s += ", " + device_blas;
  return s;
}

}  // namespace remat
