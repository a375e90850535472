#include "autodiff/gemm.hpp"

#include <chrono>

#include "autodiff/cublas.hpp"
#include "autodiff/gemm_dnnl.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/stats.hpp"

#include <Kokkos_Core.hpp>
#include <cblas.h>
#include <type_traits>

namespace remat::gemm {
namespace detail {
namespace {

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::N ? CblasNoTrans : CblasTrans; }

// Elements a strided batch of matrices spans: `count` of them `stride`
// apart, each `rows` rows `ld` apart, the last `cols` long.
std::int64_t span(std::int64_t count, std::int64_t stride, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return (count - 1) * stride + (rows - 1) * ld + cols;
}

// Where the float copies of 16-bit operands live for one call: the
// tracker's pool of their own (not activations: nothing outlives the call).
constexpr const char* kWorkspaceLabel = "gemm_16bit_workspace";

// The float copy of n elements of p (exact), or p's values into it.
template <class S, class D>
void convert(const S* src, D* dst, std::int64_t n) {
  Kokkos::parallel_for(
      "gemm_16bit_convert", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, n),
      [=](std::int64_t i) { dst[i] = D(compute_t<S>(src[i])); });
  Kokkos::DefaultHostExecutionSpace().fence();
}

// A product of 16-bit inputs (bfloat16 or float16) on a CPU with no 16-bit
// GEMM in its BLAS (Debian's OpenBLAS 0.3.21 declares cblas_sbgemm but is
// built without it, and has no half-precision GEMM): the inputs are widened
// to float (exactly), multiplied by sgemm (float accumulation, as a 16-bit
// GEMM with float accumulation does), and a 16-bit product is rounded once at
// the end. Correct to the policy of
// docs/precision.md; its speed is float32's plus the conversions.
template <class H, class C>
void host_gemm_16bit(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const H* a,
                     std::int64_t lda, const H* b, std::int64_t ldb, float beta, C* c, std::int64_t ldc,
                    std::int64_t count, std::int64_t stride_a, std::int64_t stride_b, std::int64_t stride_c) {
  MemoryTracker::instance().pool_for_label(kWorkspaceLabel, kWorkspacePool);
  const auto [a_rows, a_cols] = shape_of(op_a, m, k);
  const auto [b_rows, b_cols] = shape_of(op_b, k, n);
  (void)a_cols, (void)b_cols;
  const std::int64_t na = span(count, stride_a, a_rows, op_a == Op::N ? k : m, lda);
  const std::int64_t nb = span(count, stride_b, b_rows, op_b == Op::N ? n : k, ldb);
  const std::int64_t nc = span(count, stride_c, m, n, ldc);
  constexpr bool wide_c = std::is_same_v<C, float>;  // a float product is written in place
  Kokkos::View<float*, Kokkos::HostSpace> work(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(kWorkspaceLabel)),
                                               std::size_t(na + nb + (wide_c ? 0 : nc)));
  float *fa = work.data(), *fb = fa + na, *fc = wide_c ? reinterpret_cast<float*>(c) : fb + nb;
  convert(a, fa, na);
  convert(b, fb, nb);
  if constexpr (!wide_c) {
    if (beta != 0.0f) convert(c, fc, nc);
  }
  if (count == 1) {
    cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc);
  } else {
    Kokkos::parallel_for(
        "gemm_batched", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, count), [=](std::int64_t i) {
          cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, fa + i * stride_a, lda,
                      fb + i * stride_b, ldb, beta, fc + i * stride_c, ldc);
        });
    Kokkos::DefaultHostExecutionSpace().fence();
  }
  if constexpr (!wide_c) {
    // Only the product's own elements: rows may be padded (ldc > n) with
    // what others own.
    Kokkos::parallel_for(
        "gemm_16bit_round", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, count * m), [=](std::int64_t r) {
          const std::int64_t i = r / m, row = r % m, at = i * stride_c + row * ldc;
          for (std::int64_t j = 0; j < n; ++j) c[at + j] = C(fc[at + j]);
        });
    Kokkos::DefaultHostExecutionSpace().fence();
  }
}

}  // namespace

void count_flops(double flops) { stats::count_flops(flops); }
bool logging() { return stats::gemm_log() != nullptr; }
double clock_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void log_call(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count, double started) {
  if (auto* log = stats::gemm_log()) log->push_back({op_a == Op::T, op_b == Op::T, m, n, k, count, clock_now() - started});
}

template <class T, class C>
void host_gemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, compute_t<T> alpha, const T* a,
               std::int64_t lda, const T* b, std::int64_t ldb, compute_t<T> beta, C* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, bf16>) {
    if (bf16_by_onednn() && onednn_takes(k, 0, 0, 0, 1, beta))
      return onednn_gemm(op_a, op_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
  }
  if constexpr (is_16bit<T>)
    host_gemm_16bit(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1, 0, 0, 0);
  else if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T, class C>
void host_gemm_batched(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, compute_t<T> alpha,
                       const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                       std::int64_t stride_b, compute_t<T> beta, C* c, std::int64_t ldc, std::int64_t stride_c,
                       std::int64_t count) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (m > 0 && n > 0 && count > 0 && bf16_by_onednn() && onednn_takes(k, stride_a, stride_b, stride_c, count, beta))
      return onednn_gemm(op_a, op_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, count);
  }
  if constexpr (is_16bit<T>) {
    if (m > 0 && n > 0 && count > 0)
      host_gemm_16bit(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, count, stride_a, stride_b, stride_c);
  } else {
    // Inside a parallel region OpenBLAS (OpenMP flavour) runs each call on the
    // calling thread, so the batch is spread over the cores without nesting.
    Kokkos::parallel_for(
        "gemm_batched", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, count), [=](std::int64_t i) {
          host_gemm<T, C>(op_a, op_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                          c + i * stride_c, ldc);
        });
    Kokkos::DefaultHostExecutionSpace().fence();
  }
}

template <class T, class C>
void device_gemm(void* stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, compute_t<T> alpha,
                 const T* a, std::int64_t lda, const T* b, std::int64_t ldb, compute_t<T> beta, C* c,
                 std::int64_t ldc) {
  // A region, so that a Kokkos tool (bench/kernel_timer.cpp) can time cuBLAS, which is no Kokkos kernel.
  Kokkos::Profiling::pushRegion("remat::gemm");
  cublas::gemm<T, C>(stream, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  Kokkos::Profiling::popRegion();
}

template <class T, class C>
void device_gemm_batched(void* stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                         compute_t<T> alpha, const T* a, std::int64_t lda, std::int64_t stride_a, const T* b,
                         std::int64_t ldb, std::int64_t stride_b, compute_t<T> beta, C* c, std::int64_t ldc,
                         std::int64_t stride_c, std::int64_t count) {
  Kokkos::Profiling::pushRegion("remat::gemm_batched");
  cublas::gemm_strided_batched<T, C>(stream, op_a, op_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                                     ldc, stride_c, count);
  Kokkos::Profiling::popRegion();
}

#define REMAT_GEMM_DETAIL(T, C)                                                                                     \
  template void host_gemm<T, C>(Op, Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>, const T*,         \
                                std::int64_t, const T*, std::int64_t, compute_t<T>, C*, std::int64_t);            \
  template void host_gemm_batched<T, C>(Op, Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>, const T*, \
                                        std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t,         \
                                        compute_t<T>, C*, std::int64_t, std::int64_t, std::int64_t);              \
  template void device_gemm<T, C>(void*, Op, Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>, const T*, \
                                  std::int64_t, const T*, std::int64_t, compute_t<T>, C*, std::int64_t);          \
  template void device_gemm_batched<T, C>(void*, Op, Op, std::int64_t, std::int64_t, std::int64_t, compute_t<T>,  \
                                          const T*, std::int64_t, std::int64_t, const T*, std::int64_t,           \
                                          std::int64_t, compute_t<T>, C*, std::int64_t, std::int64_t,             \
                                          std::int64_t);
REMAT_GEMM_DETAIL(float, float)
REMAT_GEMM_DETAIL(double, double)
REMAT_GEMM_DETAIL(bf16, bf16)
REMAT_GEMM_DETAIL(bf16, float)
REMAT_GEMM_DETAIL(f16, f16)
REMAT_GEMM_DETAIL(f16, float)

}  // namespace detail

const char* sixteen_bit_path() {
  using Default = Kokkos::DefaultExecutionSpace;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Default::memory_space>::accessible) {
    if (bf16_by_onednn())
      return "bf16 GEMMs by oneDNN's matmul (this CPU's native bf16, float32 accumulation); fp16 widened to float32 "
             "for sgemm";
    return "16-bit GEMMs widened to float32 for the host BLAS's sgemm (this CPU has no native bf16, or oneDNN is "
           "missing): half the activation bytes, not faster than fp32";
  } else
    return "16-bit GEMMs by cublasGemmEx (16-bit inputs, float32 accumulation)";
}

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
