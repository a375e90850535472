#pragma once
// Shared pieces of the op kernels: the parallel loop, argument checks and the
// deterministic column reduction every bias/gain gradient needs.
#include <Kokkos_Core.hpp>
#include <stdexcept>
#include <string>

#include "autodiff/kmath.hpp"
#include "autodiff/tensor.hpp"

namespace remat::ops::detail {

template <class F>
void for_each(const char* name, std::int64_t n, const F& f) {
  Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(0, n), f);
}

// Rows of a tensor seen as a matrix [rows, last dim].
inline std::int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.dim(-1); }

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

inline void require_float(const char* op, const Tensor& t, const char* name) {
  require(t.defined(), std::string(op) + ": " + name + " is undefined");
  require(t.dtype() != DType::i32, std::string(op) + ": " + name + " must be a float tensor, got int32");
}

// dst[j] (+)= sum over rows of src[r, j], rows summed in order, so the result
// does not depend on the thread count.
template <class T>
void column_sums(const T* src, std::int64_t rows, std::int64_t cols, T* dst, bool accumulate) {
  constexpr std::int64_t block = 32;
  const std::int64_t blocks = (cols + block - 1) / block;
  for_each("column_sums", blocks, KOKKOS_LAMBDA(std::int64_t b) {
    const std::int64_t j0 = b * block;
    const std::int64_t n = (cols - j0) < block ? (cols - j0) : block;
    T acc[block];
    for (std::int64_t j = 0; j < n; ++j) acc[j] = accumulate ? dst[j0 + j] : T(0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < n; ++j) acc[j] += src[r * cols + j0 + j];
    for (std::int64_t j = 0; j < n; ++j) dst[j0 + j] = acc[j];
  });
}

// Number of ids outside [0, limit).
inline std::int64_t count_out_of_range(const Tensor& ids, std::int64_t limit) {
  const std::int32_t* p = ids.data<std::int32_t>();
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "count_out_of_range", Kokkos::RangePolicy<ExecSpace>(0, ids.numel()),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t & acc) { acc += (p[i] < 0 || p[i] >= limit) ? 1 : 0; }, bad);
  return bad;
}

}  // namespace remat::ops::detail
