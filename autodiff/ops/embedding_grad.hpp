#pragma once
// The embedding table's gradient: g[v, :] (+)= the sum of gy[n, :] over the
// positions n holding token first + v (a table holding rows [first, first + V)
// of a vocabulary split over ranks; other tokens add nothing), always added in increasing n (no atomics on
// floats: the same sums on every run and every backend). Two schedules of
// that one sum; the tests check they agree bitwise.
#include <Kokkos_Core.hpp>
#include <Kokkos_Sort.hpp>
#include <cstdint>

#include "autodiff/ops/kernel.hpp"
#include "autodiff/scratch.hpp"

namespace remat::ops::detail {

// Internal linkage (an unnamed namespace) for each function here that holds
// a KOKKOS_LAMBDA: nvcc keeps a device lambda's host-side copy helpers in a
// per-file unnamed namespace, set where the lambda is made. An inline or
// template function with external linkage compiled in two files lets the
// linker keep one file's kernel launch and another file's lambda, whose
// helpers in the first file were never set: the launch jumps to address 0
// (seen on an H100). With internal linkage each file keeps its own pair.
namespace {

// A thread per column, every position in order: what the host runs (D
// columns are plenty for its cores, and each thread streams through gy).
// The table's gradient g is of gy's compute type (float32 for bfloat16).
template <class T>
void embedding_grad_by_column(const std::int32_t* id, const T* gy, std::int64_t N, std::int64_t V, std::int64_t D,
                              std::int64_t first, compute_t<T>* g, bool fresh) {
  using A = compute_t<T>;
  for_each("embedding_backward", D, KOKKOS_LAMBDA(std::int64_t d) {
    if (fresh)
      for (std::int64_t v = 0; v < V; ++v) g[v * D + d] = A(0);
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t v = std::int64_t(id[n]) - first;
      if (v >= 0 && v < V) g[v * D + d] += A(gy[n * D + d]);
    }
  });
}

// What a device runs: a thread per column leaves a GPU nearly idle. The
// positions are sorted by (token, position) (Kokkos::sort of unique keys, so
// the order is the same whatever the sort does with ties), each token's run
// of positions is found from counts and a prefix sum, then a thread per
// (token, column) adds its token's rows in increasing n: V x D threads, the
// columns of a row consecutive (coalesced). Runs on any backend.
template <class T>
void embedding_grad_by_token(const std::int32_t* id, const T* gy, std::int64_t N, std::int64_t V, std::int64_t D,
                             std::int64_t first, compute_t<T>* g, bool fresh) {
  using A = compute_t<T>;
  Kokkos::View<std::int64_t*, MemSpace> start("embedding_backward_start", std::size_t(V + 1));
  const Scratch<std::int64_t, MemSpace> keys("embedding_backward_keys", std::size_t(N));
  std::int64_t *ps = start.data(), *pk = keys.data();
  if (shape_only()) return;  // the workspaces counted, nothing sorted
  // Counts are integers: atomics give the same counts in any order.
  // A token outside the table sorts after every row's positions and is counted nowhere.
  for_each("embedding_backward_keys", N, KOKKOS_LAMBDA(std::int64_t n) {
    const std::int64_t v = std::int64_t(id[n]) - first;
    const bool here = v >= 0 && v < V;
    pk[n] = (here ? v : V) * N + n;
    if (here) Kokkos::atomic_add(&ps[v + 1], std::int64_t(1));
  });
  Kokkos::parallel_scan(
      "embedding_backward_starts", Kokkos::RangePolicy<ExecSpace>(0, V + 1),
      KOKKOS_LAMBDA(std::int64_t v, std::int64_t & sum, bool last) {
        sum += ps[v];
        if (last) ps[v] = sum;
      });
  Kokkos::sort(keys.view());
  for_each("embedding_backward", V * D, KOKKOS_LAMBDA(std::int64_t i) {
    const std::int64_t v = i / D, d = i % D;
    A acc = fresh ? A(0) : g[i];
    for (std::int64_t k = ps[v]; k < ps[v + 1]; ++k) acc += A(gy[(pk[k] - v * N) * D + d]);
    g[i] = acc;
  });
}

}  // namespace

}  // namespace remat::ops::detail
