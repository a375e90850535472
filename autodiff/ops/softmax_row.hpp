#pragma once
// One row of a masked softmax, shared by the plain and the fused attention.
// The max and the sum run in eight interleaved lanes combined in a fixed
// order (lane_sum): the loops vectorise, and the result does not depend on
// the thread count.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "autodiff/fast_math.hpp"
#include "autodiff/kmath.hpp"
#include "autodiff/ops/kernel.hpp"

namespace remat::ops::detail {

// softmax of row[0, valid) in place, zeros in row[valid, len); returns the
// row's log-sum-exp. valid >= 1. Computed in compute_t<T>: a 16-bit row is
// read as float, its exponentials recomputed rather than stored rounded,
// and each probability rounded once.
template <class T>
KOKKOS_INLINE_FUNCTION compute_t<T> softmax_row(T* row, std::int64_t valid, std::int64_t len) {
  using A = compute_t<T>;
  constexpr int kLanes = 8;
  A lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = A(row[0]);
  std::int64_t j = 0;
  for (; j + kLanes <= valid; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = A(row[j + l]) > lane[l] ? A(row[j + l]) : lane[l];
  for (; j < valid; ++j) lane[0] = A(row[j]) > lane[0] ? A(row[j]) : lane[0];
  A m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;

  A sum;
  if constexpr (std::is_same_v<T, A>) {
    for (j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - m);
    sum = lane_sum<A>(valid, [&](std::int64_t i) { return row[i]; });
  } else {
    sum = lane_sum<A>(valid, [&](std::int64_t i) { return fast_exp(A(row[i]) - m); });
  }
  const A inv = A(1) / sum;
  if constexpr (std::is_same_v<T, A>) {
    for (j = 0; j < valid; ++j) row[j] *= inv;
  } else {
    for (j = 0; j < valid; ++j) row[j] = T(fast_exp(A(row[j]) - m) * inv);
  }
  for (j = valid; j < len; ++j) row[j] = T(0);
  return m + kmath::log(sum);
}

// Internal linkage (an unnamed namespace) for each function here that holds
// a KOKKOS_LAMBDA: nvcc keeps a device lambda's host-side copy helpers in a
// per-file unnamed namespace, set where the lambda is made. An inline or
// template function with external linkage compiled in two files lets the
// linker keep one file's kernel launch and another file's lambda, whose
// helpers in the first file were never set: the launch jumps to address 0
// (seen on an H100). With internal linkage each file keeps its own pair.
namespace {

// Masked softmax of `rows` rows of length `len` in place (row r keeps
// valid(r) >= 1 entries), a team per row: the maximum, the sum and the
// scaling spread over the team's threads (the reductions run in the team's
// fixed order: the same result on every run with the same team size). What a
// device runs: a thread per row leaves most of a GPU idle and reads rows
// apart. Runs on any backend; the tests run it on the host.
template <class T, class Valid>
void softmax_rows_team(const char* name, T* p, std::int64_t rows, std::int64_t len, const Valid& valid) {
  if (shape_only()) return;
  using A = compute_t<T>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  Kokkos::parallel_for(name, Policy(int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const Policy::member_type& team) {
    T* row = p + std::int64_t(team.league_rank()) * len;
    const std::int64_t n = valid(std::int64_t(team.league_rank()));
    A m = A(row[0]), sum = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](std::int64_t j, A& mx) { mx = A(row[j]) > mx ? A(row[j]) : mx; },
        Kokkos::Max<A>(m));
    // A full-precision row keeps its exponentials for the last pass; a 16-bit
    // one recomputes them there (stored, they would round before the sum).
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n),
        [&](std::int64_t j, A& acc) {
          const A e = fast_exp(A(row[j]) - m);
          if constexpr (std::is_same_v<T, A>) row[j] = e;
          acc += e;
        },
        sum);
    const A inv = A(1) / sum;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len), [&](std::int64_t j) {
      if constexpr (std::is_same_v<T, A>)
        row[j] = j < n ? row[j] * inv : T(0);
      else
        row[j] = T(j < n ? fast_exp(A(row[j]) - m) * inv : A(0));
    });
  });
}

// Softmax backward of rows in place: d[j] = p[j] (d[j] - <d, p>) scale, a
// team per row (see softmax_rows_team).
template <class T>
void softmax_backward_rows_team(const char* name, const T* p, T* d, std::int64_t rows, std::int64_t len,
                                compute_t<T> scale) {
  if (shape_only()) return;
  using A = compute_t<T>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  Kokkos::parallel_for(name, Policy(int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const Policy::member_type& team) {
    const std::int64_t at = std::int64_t(team.league_rank()) * len;
    A dot = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, len), [&](std::int64_t j, A& acc) { acc += A(d[at + j]) * A(p[at + j]); }, dot);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len),
                         [&](std::int64_t j) { d[at + j] = T(A(p[at + j]) * (A(d[at + j]) - dot) * scale); });
  });
}

}  // namespace

}  // namespace remat::ops::detail
