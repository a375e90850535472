#pragma once
// The one front door for matrix products. Row-major C = alpha op(A) op(B) +
// beta C. Where tensors live decides: host memory goes to the tuned BLAS
// (cblas), device memory to cuBLAS (cublas.hpp). Everything that multiplies
// tensors calls these; gemm_serial and gemm_reference take host memory only.
#include <cstdint>

namespace remat::gemm {

enum class Op { N, T };

template <class T>
void gemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

// `count` independent products whose operands start `stride_*` elements apart,
// run in parallel (each product on one thread).
template <class T>
void gemm_strided_batched(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                          const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                          std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c,
                          std::int64_t count);

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
