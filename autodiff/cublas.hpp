#pragma once
// cuBLAS for the device side of gemm.hpp, loaded at run time. Row-major
// operands like the rest of remat; the column-major swap happens inside.
// In a build without CUDA every call throws (the front door never makes one
// there: no View lives in device memory).
#include <cstdint>
#include <string>

#include "autodiff/gemm.hpp"

namespace remat::cublas {

// Loads cuBLAS and creates its handle on the default execution space's
// stream, once; throws UserError naming the libraries it looked for if none
// loads. Called at start-up on a CUDA build, so a machine without cuBLAS is
// told so before any work (and before any file is opened).
void require();

// "libcublas.so.13 (cuBLAS 13.0.2)", or "" before require().
std::string describe();

// On `stream` (a cudaStream_t; null: the default instance's). Inputs T,
// product C (T, or float for bfloat16 inputs: cublasGemmEx with float
// compute).
template <class T, class C>
void gemm(void* stream, gemm::Op op_a, gemm::Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
          compute_t<T> alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, compute_t<T> beta, C* c,
          std::int64_t ldc);

template <class T, class C>
void gemm_strided_batched(void* stream, gemm::Op op_a, gemm::Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          compute_t<T> alpha, const T* a, std::int64_t lda, std::int64_t stride_a, const T* b,
                          std::int64_t ldb, std::int64_t stride_b, compute_t<T> beta, C* c, std::int64_t ldc,
                          std::int64_t stride_c, std::int64_t count);

}  // namespace remat::cublas
