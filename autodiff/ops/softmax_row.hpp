#pragma once
// One row of a masked softmax, shared by the plain and the fused attention.
// The max and the sum run in eight interleaved lanes combined in a fixed
// order (lane_sum): the loops vectorise, and the result does not depend on
// the thread count.
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "autodiff/fast_math.hpp"
#include "autodiff/kmath.hpp"
#include "autodiff/ops/kernel.hpp"

namespace remat::ops::detail {

// softmax of row[0, valid) in place, zeros in row[valid, len); returns the
// row's log-sum-exp. valid >= 1.
template <class T>
KOKKOS_INLINE_FUNCTION T softmax_row(T* row, std::int64_t valid, std::int64_t len) {
  constexpr int kLanes = 8;
  T lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = row[0];
  std::int64_t j = 0;
  for (; j + kLanes <= valid; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = row[j + l] > lane[l] ? row[j + l] : lane[l];
  for (; j < valid; ++j) lane[0] = row[j] > lane[0] ? row[j] : lane[0];
  T m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;

  for (j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - m);
  const T sum = lane_sum<T>(valid, [&](std::int64_t i) { return row[i]; });

  const T inv = T(1) / sum;
  for (j = 0; j < valid; ++j) row[j] *= inv;
  for (j = valid; j < len; ++j) row[j] = T(0);
  return m + kmath::log(sum);
}

// Masked softmax of `rows` rows of length `len` in place (row r keeps
// valid(r) >= 1 entries), a team per row: the maximum, the sum and the
// scaling spread over the team's threads (the reductions run in the team's
// fixed order: the same result on every run with the same team size). What a
// device runs: a thread per row leaves most of a GPU idle and reads rows
// apart. Runs on any backend; the tests run it on the host.
template <class T, class Valid>
void softmax_rows_team(const char* name, T* p, std::int64_t rows, std::int64_t len, const Valid& valid) {
  if (shape_only()) return;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  Kokkos::parallel_for(name, Policy(int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const Policy::member_type& team) {
    T* row = p + std::int64_t(team.league_rank()) * len;
    const std::int64_t n = valid(std::int64_t(team.league_rank()));
    T m = row[0], sum = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](std::int64_t j, T& mx) { mx = row[j] > mx ? row[j] : mx; },
        Kokkos::Max<T>(m));
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n),
        [&](std::int64_t j, T& acc) {
          row[j] = fast_exp(row[j] - m);
          acc += row[j];
        },
        sum);
    const T inv = T(1) / sum;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len), [&](std::int64_t j) { row[j] = j < n ? row[j] * inv : T(0); });
  });
}

// Softmax backward of rows in place: d[j] = p[j] (d[j] - <d, p>) scale, a
// team per row (see softmax_rows_team).
template <class T>
void softmax_backward_rows_team(const char* name, const T* p, T* d, std::int64_t rows, std::int64_t len, T scale) {
  if (shape_only()) return;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  Kokkos::parallel_for(name, Policy(int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const Policy::member_type& team) {
    const std::int64_t at = std::int64_t(team.league_rank()) * len;
    T dot = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, len), [&](std::int64_t j, T& acc) { acc += d[at + j] * p[at + j]; }, dot);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len),
                         [&](std::int64_t j) { d[at + j] = p[at + j] * (d[at + j] - dot) * scale; });
  });
}

}  // namespace remat::ops::detail
