#include "autodiff/gemm.hpp"

#include <chrono>

#include "autodiff/cublas.hpp"
#include "autodiff/stats.hpp"

#include <Kokkos_Core.hpp>
#include <cblas.h>
#include <type_traits>

namespace remat::gemm {
namespace detail {
namespace {

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::N ? CblasNoTrans : CblasTrans; }

}  // namespace

void count_flops(double flops) { stats::count_flops(flops); }
bool logging() { return stats::gemm_log() != nullptr; }
double clock_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void log_call(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count, double started) {
  if (auto* log = stats::gemm_log()) log->push_back({op_a == Op::T, op_b == Op::T, m, n, k, count, clock_now() - started});
}

template <class T>
void host_gemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
               std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void host_gemm_batched(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                       std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb, std::int64_t stride_b,
                       T beta, T* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t count) {
  // Inside a parallel region OpenBLAS (OpenMP flavour) runs each call on the
  // calling thread, so the batch is spread over the cores without nesting.
  Kokkos::parallel_for(
      "gemm_batched", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, count), [=](std::int64_t i) {
        host_gemm(op_a, op_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c,
                  ldc);
      });
  Kokkos::DefaultHostExecutionSpace().fence();
}

template <class T>
void device_gemm(void* stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                 std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  cublas::gemm(stream, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void device_gemm_batched(void* stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                         const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                         std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c,
                         std::int64_t count) {
  cublas::gemm_strided_batched(stream, op_a, op_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                               stride_c, count);
}

#define REMAT_GEMM_DETAIL(T)                                                                                        \
  template void host_gemm<T>(Op, Op, std::int64_t, std::int64_t, std::int64_t, T, const T*, std::int64_t, const T*, \
                             std::int64_t, T, T*, std::int64_t);                                                    \
  template void host_gemm_batched<T>(Op, Op, std::int64_t, std::int64_t, std::int64_t, T, const T*, std::int64_t,   \
                                     std::int64_t, const T*, std::int64_t, std::int64_t, T, T*, std::int64_t,      \
                                     std::int64_t, std::int64_t);                                                  \
  template void device_gemm<T>(void*, Op, Op, std::int64_t, std::int64_t, std::int64_t, T, const T*, std::int64_t, \
                               const T*, std::int64_t, T, T*, std::int64_t);                                       \
  template void device_gemm_batched<T>(void*, Op, Op, std::int64_t, std::int64_t, std::int64_t, T, const T*,       \
                                       std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t, T, T*,    \
                                       std::int64_t, std::int64_t, std::int64_t);
REMAT_GEMM_DETAIL(float)
REMAT_GEMM_DETAIL(double)

}  // namespace detail

template <class T>
void gemm_serial(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                 std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  detail::host_gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_reference(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const T av = op_a == Op::N ? a[i * lda + p] : a[p * lda + i];
        const T bv = op_b == Op::N ? b[p * ldb + j] : b[j * ldb + p];
        acc += double(av) * double(bv);
      }
      c[i * ldc + j] = T(alpha * acc + (beta == T(0) ? 0.0 : double(beta) * c[i * ldc + j]));
    }
}

#define REMAT_GEMM_INSTANTIATE(T)                                                                                  \
  template void gemm_serial<T>(Op, Op, std::int64_t, std::int64_t, std::int64_t, T, const T*, std::int64_t,       \
                               const T*, std::int64_t, T, T*, std::int64_t);                                     \
  template void gemm_reference<T>(Op, Op, std::int64_t, std::int64_t, std::int64_t, T, const T*, std::int64_t,     \
                                  const T*, std::int64_t, T, T*, std::int64_t);
REMAT_GEMM_INSTANTIATE(float)
REMAT_GEMM_INSTANTIATE(double)

}  // namespace remat::gemm
