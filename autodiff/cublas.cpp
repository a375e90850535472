// cuBLAS found by soname at run time, not linked.
//
// Why: the CUDA build is made with Debian's CUDA 11.8 (what Kokkos 3.4 can
// use), but the GPU machines it runs on carry their own driver and cuBLAS
// (CUDA 13: libcublas.so.13) and nothing of 11.8. Linking would pin
// libcublas.so.11, hundreds of MB that a bundle cannot carry. The entry
// points used here (handle, stream, S/D gemm and strided-batched gemm, 32-bit
// sizes) have kept their signatures from cuBLAS 11 to 13, and
// libcublas.so.12 and later do not depend on libcudart, so one binary uses
// whichever cuBLAS the machine has. Kokkos Kernels would be the other way;
// its GEMM on CUDA calls cuBLAS anyway when it is good, so we go direct.
#include "autodiff/cublas.hpp"

#include <Kokkos_Core.hpp>

#include "core/error.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cublas_v2.h>
#include <dlfcn.h>

#include <climits>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#endif

namespace remat::cublas {

#ifdef KOKKOS_ENABLE_CUDA
namespace {

struct Library {
  std::string soname;
  int version = 0;
  cublasHandle_t handle = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasDgemm_v2) dgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_batched = nullptr;
  decltype(&cublasDgemmStridedBatched) dgemm_batched = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // bfloat16 products (mixed precision): 16-bit inputs, float compute.
  // Declared by hand: CUDA 11's header overloads cublasGemmEx in C++.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const void*, const void*, cudaDataType, int, long long, const void*,
                                                  cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                  long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  GemmStridedBatchedEx gemm_batched_ex = nullptr;
  void* stream = nullptr;  // the handle's stream now
};

// Newest first: a machine with several takes the one matching its driver.
constexpr const char* kSonames[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};

template <class F>
F symbol(void* lib, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* p = dlsym(lib, n)) return reinterpret_cast<F>(p);
  throw EnvironmentError(std::string("cuBLAS: the loaded library has no ") + *names.begin());
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw EnvironmentError(std::string("cuBLAS: ") + what + " failed (status " + std::to_string(int(s)) + ")");
}

Library load() {
  Library l;
  void* lib = nullptr;
  for (const char* name : kSonames)
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
      l.soname = name;
      break;
    }
  if (!lib) {
    std::string tried;
    for (const char* name : kSonames) tried += std::string(tried.empty() ? "" : ", ") + name;
    throw EnvironmentError("this is a CUDA build of remat and no cuBLAS could be loaded (tried " + tried +
                    "): install the CUDA toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH");
  }
  using Create = decltype(&cublasCreate_v2);
  using SetStream = decltype(&cublasSetStream_v2);
  using GetVersion = decltype(&cublasGetVersion_v2);
  const auto create = symbol<Create>(lib, {"cublasCreate_v2", "cublasCreate"});
  l.set_stream = symbol<SetStream>(lib, {"cublasSetStream_v2", "cublasSetStream"});
  l.sgemm = symbol<decltype(l.sgemm)>(lib, {"cublasSgemm_v2", "cublasSgemm"});
  l.dgemm = symbol<decltype(l.dgemm)>(lib, {"cublasDgemm_v2", "cublasDgemm"});
  l.sgemm_batched = symbol<decltype(l.sgemm_batched)>(lib, {"cublasSgemmStridedBatched"});
  l.dgemm_batched = symbol<decltype(l.dgemm_batched)>(lib, {"cublasDgemmStridedBatched"});
  l.gemm_ex = symbol<Library::GemmEx>(lib, {"cublasGemmEx"});
  l.gemm_batched_ex = symbol<Library::GemmStridedBatchedEx>(lib, {"cublasGemmStridedBatchedEx"});
  check(create(&l.handle), "cublasCreate");
  // Kokkos' kernels run in order on the default instance's stream: GEMMs
  // given no other join that stream, so no fence is needed between a kernel
  // and a GEMM.
  l.stream = Kokkos::DefaultExecutionSpace().cuda_stream();
  check(l.set_stream(l.handle, cudaStream_t(l.stream)), "cublasSetStream");
  if (const auto get_version = reinterpret_cast<GetVersion>(dlsym(lib, "cublasGetVersion_v2")))
    get_version(l.handle, &l.version);
  // The default math mode: plain fp32/fp64 (no TF32 tensor cores), so device
  // results stay within the host's tolerance.
  return l;
}

Library& library() {
  static std::once_flag once;
  static Library lib;
  static std::string failure;
  std::call_once(once, [] {
    try {
      lib = load();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw EnvironmentError(failure);
  return lib;
}

// The library with its handle on `stream` (null: the default instance's).
Library& on_stream(void* stream) {
  Library& l = library();
  if (!stream) stream = Kokkos::DefaultExecutionSpace().cuda_stream();
  if (stream != l.stream) {
    check(l.set_stream(l.handle, cudaStream_t(stream)), "cublasSetStream");
    l.stream = stream;
  }
  return l;
}

cublasOperation_t op(gemm::Op o) { return o == gemm::Op::N ? CUBLAS_OP_N : CUBLAS_OP_T; }

int narrow(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) throw UserError(std::string("cuBLAS: ") + what + " exceeds 32-bit range");
  return int(v);
}

}  // namespace

void require() { library(); }

std::string describe() {
  const Library& l = library();
  return l.soname + (l.version ? " (cuBLAS " + std::to_string(l.version / 10000 % 100) + "." +
                                     std::to_string(l.version / 100 % 100) + ")"
                               : "");
}

template <class T>
constexpr cudaDataType data_type() {
  if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, f16>) return CUDA_R_16F;
  else if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else return CUDA_R_64F;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
// buffers with the operands swapped, m and n swapped.
template <class T, class C>
void gemm(void* stream, gemm::Op op_a, gemm::Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
          compute_t<T> alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, compute_t<T> beta, C* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  Library& l = on_stream(stream);
  if constexpr (is_16bit<T>) {
    check(l.gemm_ex(l.handle, op(op_b), op(op_a), narrow(n, "n"), narrow(m, "m"), narrow(k, "k"), &alpha, b,
                    data_type<T>(), narrow(ldb, "ldb"), a, data_type<T>(), narrow(lda, "lda"), &beta, c,
                    data_type<C>(), narrow(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "gemm (16-bit)");
  } else {
    const auto f = [&] {
      if constexpr (std::is_same_v<T, float>) return l.sgemm;
      else return l.dgemm;
    }();
    check(f(l.handle, op(op_b), op(op_a), narrow(n, "n"), narrow(m, "m"), narrow(k, "k"), &alpha, b,
            narrow(ldb, "ldb"), a, narrow(lda, "lda"), &beta, c, narrow(ldc, "ldc")),
          "gemm");
  }
}

template <class T, class C>
void gemm_strided_batched(void* stream, gemm::Op op_a, gemm::Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          compute_t<T> alpha, const T* a, std::int64_t lda, std::int64_t stride_a, const T* b,
                          std::int64_t ldb, std::int64_t stride_b, compute_t<T> beta, C* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t count) {
  if (m == 0 || n == 0 || count == 0) return;
  Library& l = on_stream(stream);
  if constexpr (is_16bit<T>) {
    check(l.gemm_batched_ex(l.handle, op(op_b), op(op_a), narrow(n, "n"), narrow(m, "m"), narrow(k, "k"), &alpha, b,
                            data_type<T>(), narrow(ldb, "ldb"), stride_b, a, data_type<T>(), narrow(lda, "lda"),
                            stride_a, &beta, c, data_type<C>(), narrow(ldc, "ldc"), stride_c, narrow(count, "count"),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "strided batched gemm (16-bit)");
  } else {
    const auto f = [&] {
      if constexpr (std::is_same_v<T, float>) return l.sgemm_batched;
      else return l.dgemm_batched;
    }();
    check(f(l.handle, op(op_b), op(op_a), narrow(n, "n"), narrow(m, "m"), narrow(k, "k"), &alpha, b,
            narrow(ldb, "ldb"), stride_b, a, narrow(lda, "lda"), stride_a, &beta, c, narrow(ldc, "ldc"), stride_c,
            narrow(count, "count")),
          "strided batched gemm");
  }
}

#else  // a build without CUDA: no device, no cuBLAS

namespace {
[[noreturn]] void no_device() { throw std::logic_error("cuBLAS called in a build without CUDA"); }
}  // namespace

void require() {}
std::string describe() { return ""; }

template <class T, class C>
void gemm(void*, gemm::Op, gemm::Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>, const T*, std::int64_t,
          const T*, std::int64_t, compute_t<T>, C*, std::int64_t) {
  no_device();
}

template <class T, class C>
void gemm_strided_batched(void*, gemm::Op, gemm::Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>, const T*,
                          std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t, compute_t<T>, C*,
                          std::int64_t, std::int64_t, std::int64_t) {
  no_device();
}

#endif

#define REMAT_CUBLAS_INSTANTIATE(T, C)                                                                             \
  template void gemm<T, C>(void*, gemm::Op, gemm::Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>, const T*, \
                           std::int64_t, const T*, std::int64_t, compute_t<T>, C*, std::int64_t);                     \
  template void gemm_strided_batched<T, C>(void*, gemm::Op, gemm::Op, std::int64_t, std::int64_t, std::int64_t,       \
                                           compute_t<T>, const T*, std::int64_t, std::int64_t, const T*, std::int64_t, \
                                           std::int64_t, compute_t<T>, C*, std::int64_t, std::int64_t, std::int64_t);
REMAT_CUBLAS_INSTANTIATE(float, float)
REMAT_CUBLAS_INSTANTIATE(double, double)
REMAT_CUBLAS_INSTANTIATE(bf16, bf16)
REMAT_CUBLAS_INSTANTIATE(bf16, float)
REMAT_CUBLAS_INSTANTIATE(f16, f16)
REMAT_CUBLAS_INSTANTIATE(f16, float)

}  // namespace remat::cublas
