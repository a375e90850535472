#pragma once
// What the op kernels share beyond the backend's loops (autodiff/loops.hpp,
// brought in here): argument checks, rows of a tensor, id range checks.
#include <Kokkos_Core.hpp>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "autodiff/elementwise.hpp"
#include "autodiff/gemm.hpp"
#include "autodiff/loops.hpp"
#include "autodiff/tape.hpp"
#include "autodiff/tensor.hpp"

namespace remat::ops::detail {

using namespace remat::backend;

// Where a weight's gradient goes: into compute_t<T> (a 16-bit copy of a
// parameter shares its float32 master's gradient slot, docs/precision.md).
template <class T>
compute_t<T>* weight_grad(const GradTarget& g, const char* op) {
  if (g.t.dtype() != DTypeOf<compute_t<T>>::value)
    throw std::logic_error(std::string(op) + ": the weight's gradient is " + dtype_name(g.t.dtype()) +
                           ", not the compute type: a 16-bit weight must be a parameter's per-step copy");
  return g.t.data<compute_t<T>>();
}

// Rows of a tensor seen as a matrix [rows, last dim].
inline std::int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.dim(-1); }

inline void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}
// The message made only on a failure: `what` returns it. Ops check their
// inputs on every call, and messages built every time (shapes printed
// through a stream) were a quarter of a shape-only plan's time.
template <class Message, class = std::enable_if_t<std::is_invocable_v<Message&>>>
void require(bool ok, Message&& what) {
  if (!ok) throw std::invalid_argument(what());
}

inline void require_float(const char* op, const Tensor& t, const char* name) {
  require(t.defined(), [&] { return std::string(op) + ": " + name + " is undefined"; });
  require(t.dtype() != DType::i32 && t.dtype() != DType::u8,
          [&] { return std::string(op) + ": " + name + " must be a float tensor, got " + dtype_name(t.dtype()); });
}

// A window on tensor memory for the GEMM front door: rows x cols, rows `ld`
// apart (dense by default); and `count` of them `stride` apart.
template <class T>
gemm::Matrix<T, MemSpace> mat(T* p, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return gemm::matrix<MemSpace>(p, rows, cols, ld);
}
template <class T>
gemm::Matrix<T, MemSpace> mat(T* p, std::int64_t rows, std::int64_t cols) {
  return gemm::matrix<MemSpace>(p, rows, cols, cols);
}
template <class T>
gemm::Matrices<T, MemSpace> mats(T* p, std::int64_t count, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                                 std::int64_t ld) {
  return gemm::matrices<MemSpace>(p, count, stride, rows, cols, ld);
}

// Zeroes the fresh gradient buffers among `targets`, once each (they may be
// one buffer: packed q, k and v), so kernels can always add.
inline void zero_fresh(std::initializer_list<GradTarget*> targets) {
  for (GradTarget* t : targets)
    if (*t && t->fresh) {
      fill(t->t, 0.0);
      for (GradTarget* u : targets)
        if (u->t.id() == t->t.id()) u->fresh = false;
    }
}

// Internal linkage (an unnamed namespace) for each function here that holds
// a KOKKOS_LAMBDA: nvcc keeps a device lambda's host-side copy helpers in a
// per-file unnamed namespace, set where the lambda is made. An inline or
// template function with external linkage compiled in two files lets the
// linker keep one file's kernel launch and another file's lambda, whose
// helpers in the first file were never set: the launch jumps to address 0
// (seen on an H100). With internal linkage each file keeps its own pair.
namespace {

// Every row of y [rows, cols] set to bias [cols]: a linear's output before
// the GEMM adds x W^T to it.
template <class T>
void broadcast_rows(T* y, const T* bias, std::int64_t rows, std::int64_t cols) {
  for_each("linear_bias", rows, KOKKOS_LAMBDA(std::int64_t r) {
    for (std::int64_t j = 0; j < cols; ++j) y[r * cols + j] = bias[j];
  });
}

// Number of ids outside [0, limit).
inline std::int64_t count_out_of_range(const Tensor& ids, std::int64_t limit) {
  const std::int32_t* p = ids.data<std::int32_t>();
  std::int64_t bad = 0;
  if (shape_only()) return 0;  // ids unknown: none is out of range
  Kokkos::parallel_reduce(
      "count_out_of_range", Kokkos::RangePolicy<ExecSpace>(0, ids.numel()),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t & acc) { acc += (p[i] < 0 || p[i] >= limit) ? 1 : 0; }, bad);
  return bad;
}

}  // namespace

}  // namespace remat::ops::detail
