#pragma once
// The parallel loops every kernel is written with (part of the backend seam,
// autodiff/backend.hpp): a loop over indices, an elementwise loop that
// vectorises on the host, gradient writes that add or overwrite without a
// branch, fixed-order sums (the same result whatever the thread count), and
// the deterministic column sums every bias and gain gradient needs. Usable
// by any module (the optimizers' updates, the ops' kernels).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>
#include <type_traits>

#include "autodiff/kmath.hpp"
#include "autodiff/scratch.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/tensor.hpp"

namespace remat::backend {

template <class F>
void for_each(const char* name, std::int64_t n, const F& f) {
  if (shape_only()) return;
  Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(0, n), f);
}

// for_each for independent elementwise work on big arrays. On the host it
// hands each thread blocks of elements and runs each block as an explicit
// SIMD loop: the compiler does not vectorise Kokkos's generic range loop
// (unknown trip count, OpenMP calls in its body). On a device it is for_each.
template <class F>
void for_each_element(const char* name, std::int64_t n, const F& f) {
  if (shape_only()) return;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, ExecSpace::memory_space>::accessible) {
    constexpr std::int64_t kBlock = 2048;
    Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(0, (n + kBlock - 1) / kBlock), [=](std::int64_t b) {
      const std::int64_t lo = b * kBlock, hi = lo + kBlock < n ? lo + kBlock : n;
#pragma omp simd
      for (std::int64_t i = lo; i < hi; ++i) f(i);
    });
  } else {
    for_each(name, n, f);
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

// for_each_element over a rows x cols array whose elements also need their
// column (a row vector broadcast over the rows): f(i, j) for the flat index i
// and its column j. The host runs blocks of a row's columns as SIMD loops (no
// division per element); a device, a thread per element (a thread per row
// would leave it nearly idle when the rows are a batch of a few).
template <class F>
void for_each_row_element(const char* name, std::int64_t rows, std::int64_t cols, const F& f) {
  if (shape_only()) return;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, ExecSpace::memory_space>::accessible) {
    constexpr std::int64_t kBlock = 2048;
    const std::int64_t blocks = (cols + kBlock - 1) / kBlock;
    Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(0, rows * blocks), [=](std::int64_t k) {
      const std::int64_t r = k / blocks, lo = (k % blocks) * kBlock, hi = lo + kBlock < cols ? lo + kBlock : cols;
#pragma omp simd
      for (std::int64_t j = lo; j < hi; ++j) f(r * cols + j, j);
    });
  } else {
    for_each(name, rows * cols, KOKKOS_LAMBDA(std::int64_t i) { f(i, i % cols); });
  }
}

// g[i] = value(i) into a fresh gradient buffer, g[i] += value(i) otherwise:
// two loops, so neither carries a per-element branch and both vectorise.
// value(i) is of the compute type; a 16-bit g is rounded once per write.
template <class T, class V>
void write_gradient(const char* name, std::int64_t n, T* g, bool fresh, const V& value) {
  using A = compute_t<T>;
  if (fresh)
    for_each_element(name, n, KOKKOS_LAMBDA(std::int64_t i) { g[i] = T(A(value(i))); });
  else
    for_each_element(name, n, KOKKOS_LAMBDA(std::int64_t i) { g[i] = T(A(g[i]) + A(value(i))); });
}

// sum of term(j) for j in [0, n), in eight interleaved lanes combined in a
// fixed order: the loop vectorises (one running sum is a chain of dependent
// adds, four cycles each), and the result depends on n alone, never on the
// thread count.
template <class T, class Term>
KOKKOS_INLINE_FUNCTION T lane_sum(std::int64_t n, const Term& term) {
  constexpr int kLanes = 8;
  T lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += term(j + l);
  for (; j < n; ++j) lane[0] += term(j);
  T sum = T(0);
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

// A gradient write: the first contribution to a fresh buffer overwrites it
// (whatever it held), later ones add. Written as an unconditional load and a
// select, not a branch, so the loops around it vectorise.
// v is of dst's compute type (a 16-bit dst is rounded once).
template <class T>
KOKKOS_INLINE_FUNCTION void accumulate(T& dst, compute_t<T> v, bool fresh) {
  using A = compute_t<T>;
  const A old = A(dst);
  dst = T(v + (fresh ? A(0) : old));
}

// column_sums for a device: a thread per column has too little parallelism
// there when the columns are few (a bias's D threads for M x D terms). The
// rows are cut into chunks, enough for about 2^18 threads in all (none when
// the columns alone are that many: a position embedding's S x D), at most 64
// and at most a chunk per row; a thread per (chunk, column) sums its chunk's
// rows in order into a workspace, then a thread per column sums the chunks
// in order: still one fixed order for every sum (deterministic; the chunks
// depend on the shape alone), with the threads reading consecutive columns
// (coalesced). The workspace is at most 2^18 numbers. Runs on any backend
// (the tests run it on the host).
template <class T, class Term>
void column_sums_chunked(const char* name, std::int64_t M, std::int64_t D, T* out, bool fresh, const Term& term) {
  constexpr std::int64_t kThreads = std::int64_t(1) << 18, kMaxChunks = 64;
  using A = compute_t<T>;
  const std::int64_t chunks =
      std::max<std::int64_t>(1, std::min({kThreads / std::max<std::int64_t>(D, 1), kMaxChunks, M}));
  if (chunks == 1) {
    for_each(name, D, KOKKOS_LAMBDA(std::int64_t j) {
      A acc = 0;
      for (std::int64_t r = 0; r < M; ++r) acc += term(r, j);
      accumulate(out[j], acc, fresh);
    });
    return;
  }
  const Scratch<A, MemSpace> partial(std::string(name) + "_partial", std::size_t(chunks * D));
  A* pp = partial.data();
  for_each(name, chunks * D, KOKKOS_LAMBDA(std::int64_t x) {
    const std::int64_t c = x / D, j = x % D, hi = M * (c + 1) / chunks;
    A acc = 0;
    for (std::int64_t r = M * c / chunks; r < hi; ++r) acc += term(r, j);
    pp[x] = acc;
  });
  for_each(name, D, KOKKOS_LAMBDA(std::int64_t j) {
    A acc = 0;
    for (std::int64_t c = 0; c < chunks; ++c) acc += pp[c * D + j];
    accumulate(out[j], acc, fresh);
  });
}

// out[j] = sum over rows r of term(r, j) for j in [0, D), or += where the
// buffer is not fresh: blocks of columns in parallel, rows in order within
// each (deterministic sums, whatever the thread count), each row's run of
// columns contiguous (the inner loop vectorises). A norm's weight and bias
// gradients. On a device: column_sums_chunked.
template <class T, class Term>
void column_sums(const char* name, std::int64_t M, std::int64_t D, T* out, bool fresh, const Term& term) {
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    column_sums_chunked<T>(name, M, D, out, fresh, term);
    return;
  }
  constexpr std::int64_t kBlock = 32;
  for_each(name, (D + kBlock - 1) / kBlock, KOKKOS_LAMBDA(std::int64_t blk) {
    const std::int64_t j0 = blk * kBlock, n = D - j0 < kBlock ? D - j0 : kBlock;
    compute_t<T> acc[kBlock] = {};
    for (std::int64_t r = 0; r < M; ++r)
      for (std::int64_t j = 0; j < n; ++j) acc[j] += term(r, j0 + j);
    for (std::int64_t j = 0; j < n; ++j) accumulate(out[j0 + j], acc[j], fresh);
  });
}

// dst[j] (+)= sum over rows of src[r, j], rows summed in order, so the result
// does not depend on the thread count. Summed in src's compute type; dst is
// of it (a bias's float32 gradient from a bfloat16 dy) or of src's type.
template <class S, class D>
void column_sums(const S* src, std::int64_t rows, std::int64_t cols, D* dst, bool accumulate) {
  using A = compute_t<S>;
  static_assert(std::is_same_v<D, A> || std::is_same_v<D, S>, "column_sums: into src's type or its compute type");
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    column_sums_chunked<D>("column_sums", rows, cols, dst, !accumulate,
                           KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) { return A(src[r * cols + j]); });
    return;
  }
  constexpr std::int64_t block = 32;
  const std::int64_t blocks = (cols + block - 1) / block;
  for_each("column_sums", blocks, KOKKOS_LAMBDA(std::int64_t b) {
    const std::int64_t j0 = b * block;
    const std::int64_t n = (cols - j0) < block ? (cols - j0) : block;
    A acc[block];
    for (std::int64_t j = 0; j < n; ++j) acc[j] = accumulate ? A(dst[j0 + j]) : A(0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < n; ++j) acc[j] += A(src[r * cols + j0 + j]);
    for (std::int64_t j = 0; j < n; ++j) dst[j0 + j] = D(acc[j]);
  });
}

}  // namespace

}  // namespace remat::backend
