#pragma once
// The one front door for matrix products, in the shape of KokkosBlas::gemm:
// an execution space instance and Views, C = alpha op(A) op(B) + beta C.
// Where the Views live decides: host memory goes to the tuned BLAS (cblas)
// on the host space, device memory to cuBLAS (cublas.hpp) on the instance's
// stream, whatever the build's default space. Every product of tensors goes
// through here; gemm_serial and gemm_reference take host pointers only.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "autodiff/bfloat16.hpp"
#include "autodiff/float16.hpp"
#include "autodiff/shape_only.hpp"

namespace remat::gemm {

enum class Op { N, T };

// Where a 16-bit product runs in this build, in words, for commands to say
// at bf16 and fp16 (docs/precision.md): on the host, widened to float for
// sgemm (correct, not faster: the BLAS has no 16-bit GEMM); on a GPU,
// cublasGemmEx.
const char* sixteen_bit_path();

// A row-major matrix: rows x cols, each row `ld` elements after the last,
// in memory space M; and `count` of them `stride` elements apart. Unmanaged:
// a window on a tensor's storage, made per call at no cost.
template <class T, class M>
using Matrix = Kokkos::View<T**, Kokkos::LayoutStride, M, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T, class M>
using Matrices = Kokkos::View<T***, Kokkos::LayoutStride, M, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class M, class T>
Matrix<T, M> matrix(T* data, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return Matrix<T, M>(data, Kokkos::LayoutStride(std::size_t(rows), std::size_t(ld), std::size_t(cols), 1));
}
template <class M, class T>
Matrices<T, M> matrices(T* data, std::int64_t count, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                        std::int64_t ld) {
  return Matrices<T, M>(data, Kokkos::LayoutStride(std::size_t(count), std::size_t(stride), std::size_t(rows),
                                                   std::size_t(ld), std::size_t(cols), 1));
}

namespace detail {

// The calls behind the front door, on raw operands (m, n, k as BLAS has them):
// inputs of type T, the product C of type T or compute_t<T> (a bfloat16
// product accumulates in float and is stored in either), alpha and beta of
// type compute_t<T>.
template <class T, class C>
void host_gemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, compute_t<T> alpha, const T* a,
               std::int64_t lda, const T* b, std::int64_t ldb, compute_t<T> beta, C* c, std::int64_t ldc);
// The batch spread over the host space's threads, one product each.
template <class T, class C>
void host_gemm_batched(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, compute_t<T> alpha,
                       const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                       std::int64_t stride_b, compute_t<T> beta, C* c, std::int64_t ldc, std::int64_t stride_c,
                       std::int64_t count);
// cuBLAS on `stream` (a cudaStream_t); a build without CUDA throws.
template <class T, class C>
void device_gemm(void* stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, compute_t<T> alpha,
                 const T* a, std::int64_t lda, const T* b, std::int64_t ldb, compute_t<T> beta, C* c,
                 std::int64_t ldc);
template <class T, class C>
void device_gemm_batched(void* stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                         compute_t<T> alpha, const T* a, std::int64_t lda, std::int64_t stride_a, const T* b,
                         std::int64_t ldb, std::int64_t stride_b, compute_t<T> beta, C* c, std::int64_t ldc,
                         std::int64_t stride_c, std::int64_t count);
void count_flops(double flops);
// While a stats::GemmLogScope is open: a clock before the call, and the
// call's shape and fenced time after it.
bool logging();
double clock_now();
void log_call(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count, double started);

template <class Exec>
void* stream_of(const Exec& space) {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same_v<Exec, Kokkos::Cuda>) return space.cuda_stream();
#endif
  (void)space;
  return nullptr;
}

// (rows, cols) of op(x) for a matrix stored rows x cols.
inline std::pair<std::int64_t, std::int64_t> shape_of(Op op, std::int64_t rows, std::int64_t cols) {
  return op == Op::N ? std::pair{rows, cols} : std::pair{cols, rows};
}

// m, n, k of the product, checked against every operand (last index dense).
template <class A, class B, class C>
void dimensions(Op op_a, Op op_b, const A& a, const B& b, const C& c, int first, std::int64_t& m, std::int64_t& n,
                std::int64_t& k) {
  const auto [am, ak] = shape_of(op_a, std::int64_t(a.extent(first)), std::int64_t(a.extent(first + 1)));
  const auto [bk, bn] = shape_of(op_b, std::int64_t(b.extent(first)), std::int64_t(b.extent(first + 1)));
  m = std::int64_t(c.extent(first)), n = std::int64_t(c.extent(first + 1)), k = ak;
  if (am != m || bn != n || bk != k || a.stride(first + 1) != 1 || b.stride(first + 1) != 1 || c.stride(first + 1) != 1)
    throw std::logic_error("gemm: operands of " + std::to_string(am) + "x" + std::to_string(ak) + ", " +
                           std::to_string(bk) + "x" + std::to_string(bn) + " into " + std::to_string(m) + "x" +
                           std::to_string(n) + " (or a row not dense)");
}

template <class Exec, class C>
constexpr bool in_host_memory() {
  static_assert(Kokkos::SpaceAccessibility<Exec, typename C::memory_space>::accessible,
                "gemm: the execution space cannot reach the operands' memory");
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename C::memory_space>::accessible;
}

}  // namespace detail

// Whether a product of T inputs may be stored as C: as T, or (16-bit
// inputs) as the float it accumulated in (a weight's float32 gradient).
template <class T, class C>
constexpr bool product_type_ok = std::is_same_v<C, T> || std::is_same_v<C, compute_t<T>>;

// C = alpha op(A) op(B) + beta C on `space`; A, B, C rank-2 Views in one
// memory space, A and B of one value type T, C of T or compute_t<T>.
template <class Exec, class A, class B, class C>
void gemm(const Exec& space, Op op_a, Op op_b, compute_t<typename A::non_const_value_type> alpha, const A& a,
          const B& b, compute_t<typename A::non_const_value_type> beta, const C& c) {
  using T = typename A::non_const_value_type;
  using Out = typename C::non_const_value_type;
  static_assert(std::is_same_v<typename B::non_const_value_type, T> && product_type_ok<T, Out>,
                "gemm: A and B of one value type, C of it or of its compute type");
  static_assert(A::rank == 2 && B::rank == 2 && C::rank == 2, "gemm: matrices (a batch is gemm_batched)");
  std::int64_t m, n, k;
  detail::dimensions(op_a, op_b, a, b, c, 0, m, n, k);
  detail::count_flops(2.0 * double(m) * double(n) * double(k));
  if (shape_only()) return;  // counted, not run
  const double started = detail::logging() ? (space.fence(), detail::clock_now()) : 0;
  if constexpr (detail::in_host_memory<Exec, C>())
    detail::host_gemm<T, Out>(op_a, op_b, m, n, k, alpha, a.data(), a.stride(0), b.data(), b.stride(0), beta,
                              c.data(), c.stride(0));
  else
    detail::device_gemm<T, Out>(detail::stream_of(space), op_a, op_b, m, n, k, alpha, a.data(), a.stride(0), b.data(),
                           b.stride(0), beta, c.data(), c.stride(0));
  if (detail::logging()) space.fence(), detail::log_call(op_a, op_b, m, n, k, 1, started);
}

// The same for each of a batch: rank-3 Views, the first index the product.
template <class Exec, class A, class B, class C>
void gemm_batched(const Exec& space, Op op_a, Op op_b, compute_t<typename A::non_const_value_type> alpha, const A& a,
                  const B& b, compute_t<typename A::non_const_value_type> beta, const C& c) {
  using T = typename A::non_const_value_type;
  using Out = typename C::non_const_value_type;
  static_assert(std::is_same_v<typename B::non_const_value_type, T> && product_type_ok<T, Out>,
                "gemm_batched: A and B of one value type, C of it or of its compute type");
  static_assert(A::rank == 3 && B::rank == 3 && C::rank == 3, "gemm_batched: batches of matrices");
  const std::int64_t count = std::int64_t(c.extent(0));
  if (std::int64_t(a.extent(0)) != count || std::int64_t(b.extent(0)) != count)
    throw std::logic_error("gemm_batched: batches of " + std::to_string(a.extent(0)) + ", " +
                           std::to_string(b.extent(0)) + " and " + std::to_string(count));
  std::int64_t m, n, k;
  detail::dimensions(op_a, op_b, a, b, c, 1, m, n, k);
  detail::count_flops(2.0 * double(m) * double(n) * double(k) * double(count));
  if (shape_only()) return;
  const double started = detail::logging() ? (space.fence(), detail::clock_now()) : 0;
  if constexpr (detail::in_host_memory<Exec, C>())
    detail::host_gemm_batched<T, Out>(op_a, op_b, m, n, k, alpha, a.data(), a.stride(1), a.stride(0), b.data(), b.stride(1),
                                 b.stride(0), beta, c.data(), c.stride(1), c.stride(0), count);
  else
    detail::device_gemm_batched<T, Out>(detail::stream_of(space), op_a, op_b, m, n, k, alpha, a.data(), a.stride(1),
                                   a.stride(0), b.data(), b.stride(1), b.stride(0), beta, c.data(), c.stride(1),
                                   c.stride(0), count);
  if (detail::logging()) space.fence(), detail::log_call(op_a, op_b, m, n, k, count, started);
}

// One product on the calling thread, for use inside a parallel region over
// host memory; not counted in stats (the caller counts its FLOPs once).
template <class T>
void gemm_serial(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                 std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

// Naive triple loop on the host: the reference the tests check against.
template <class T>
void gemm_reference(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

}  // namespace remat::gemm
